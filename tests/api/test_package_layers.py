"""The package's layers point one way, lazy imports included.

    ptq (facades: wiring)  ->  pipeline  ->  core  <-  pytorch, keras
                     \\-->  observers  ->  core, pipeline.events

Every ``import`` statement of every module is read with `ast`, those inside functions too,
so a cycle broken by a lazy import still counts as a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = "model_compression_toolkit"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

# layer -> the layers (or exact modules) it may import
ALLOWED = {
    "errors": set(),
    "core": {"core", "errors"},
    "pipeline": {"pipeline", "core", "errors"},
    "observers": {"observers", "core", "errors", f"{PACKAGE}.pipeline.events"},
    "pytorch": {"pytorch", "core", "errors"},
    "keras": {"keras", "core", "errors"},
    # the facades (ptq, xquant, exporter) wire the pipeline, the observers and the backends;
    # none imports another: what two of them share (choosing the backend, resolving the
    # configuration) lives below them, in pipeline and core
    "ptq": {"ptq", "pipeline", "observers", "core", "errors"},
    "xquant": {"xquant", "pipeline", "observers", "core", "errors"},
    "exporter": {"exporter", "pipeline", "observers", "core", "errors"},
    # the Quantization dashboard (a TensorBoard plugin) reads the files the observers write
    "tensorboard_plugin": {"tensorboard_plugin", "observers"},
    # MCT modules this library does not provide: placeholders whose calls raise NotProvidedError
    "not_provided": {"errors"},
    "gptq": {"not_provided", "errors"},
    "qat": {"not_provided", "errors"},
    "pruning": {"not_provided", "errors"},
    "data_generation": {"not_provided", "errors"},
    # the package's __init__: the public names
    "": {
        "ptq",
        "observers",
        "core",
        "errors",
        "xquant",
        "gptq",
        "qat",
        "pruning",
        "data_generation",
        "exporter",
    },
}
# third-party packages a layer must not import (core and pipeline import no framework)
FORBIDDEN_THIRD_PARTY = {
    "core": {"torch", "tensorflow", "keras", "tensorboard", "matplotlib", "tqdm"},
    "pipeline": {"torch", "tensorflow", "keras", "tensorboard", "matplotlib"},
    "observers": {"torch", "tensorflow", "keras"},
    "tensorboard_plugin": {"torch", "tensorflow", "keras"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports(module: str) -> tuple[set[str], set[str]]:
    """(modules of this package, top-level third-party packages) that ``module`` imports."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    ours, theirs = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            # ``from pkg import sub`` imports the submodule when there is one
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                while name not in MODULES:  # ``import pkg.mod.attr`` style: the module part
                    name = name.rpartition(".")[0]
                ours.add(name)
            else:
                theirs.add(name.split(".")[0])
    return ours - {module}, theirs


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for module in MODULES:
        graph.add_node(module)
        for target in imports(module)[0]:
            graph.add_edge(module, target)
    return graph


def test_every_module_belongs_to_a_known_layer():
    assert {layer(m) for m in MODULES} <= set(ALLOWED), sorted({layer(m) for m in MODULES} - set(ALLOWED))


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(source):
    wrong = []
    for module in MODULES:
        if layer(module) != source:
            continue
        ours, theirs = imports(module)
        for target in ours:
            if layer(target) not in ALLOWED[source] and target not in ALLOWED[source]:
                wrong.append(f"{module} imports {target}")
        for package in theirs & FORBIDDEN_THIRD_PARTY.get(source, set()):
            wrong.append(f"{module} imports {package}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles_lazy_imports_included():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, "\n".join(" -> ".join([*c, c[0]]) for c in cycles)


def test_the_rules_see_lazy_imports():
    """The reader finds an import inside a function (the check above would pass vacuously otherwise)."""
    lazy = [m for m in MODULES if layer(m) == "ptq" and any(layer(t) == "pipeline" for t in imports(m)[0])]
    assert lazy, "ptq wires the pipeline: its imports must be seen"
