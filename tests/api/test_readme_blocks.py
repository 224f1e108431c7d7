"""Every Python block the README and the docs show runs as written, on the digits CNNs.

The blocks are read from the files themselves (README.md's ```python fences, docs/*.rst's
``.. code-block:: python``), so a block that is added or changed is tested as it reads.
How they are run, by rules rather than a list of exceptions:

- **One page, one session**: a page's blocks run in order in one namespace, statement by
  statement, as a reader pasting them one after the other would (a later block uses the
  ``info`` an earlier one made).
- **Names a page leaves undefined are provided** (`Provided`): ``model`` and
  ``keras_model`` (the digits CNNs with their shipped weights, `tests.fixtures.digits`),
  ``representative_data_gen`` / ``data_gen``, ``x_train``, ``x_val``/``y_val``,
  ``accuracy``, ``all_8bit_bytes``, an empty ``bit_cfg`` and ``edit_rules``, token
  ``batches`` and ``ids``/``mask`` for the Hugging Face example, and ``mct`` itself (pages
  after the first leave its import out). A name the page binds
  itself is never replaced.
- **The framework of a statement is the one whose API it calls** (``keras.``/``keras_*``
  or ``torch.``/``pytorch_*``; else the previous statement's, PyTorch first): the
  provided ``model``, ``x_train`` and data are that framework's, channels-first or last.
- **``# or: <code>``** shows an alternative to the statement above it: the page runs as
  written, and its blocks up to that one run again with that statement replaced (the
  Keras call of the quick start).
- **Logging and files go to a tmp folder**: ``mct.set_log_folder``/``mct.log_folder`` are
  redirected under it, and the blocks run with it as the working directory.
- A block that imports a package that is not installed is skipped (as ``importorskip``);
  a page importing a library other than numpy/torch/keras (transformers' BERT-base) is
  marked ``slow``; blocks in other languages (``bash``) are not Python and are not collected.
- A statement that cannot run until its page is changed is listed in `DOCS_TO_FIX` with the
  change; once it runs, the test fails until it is taken off the list.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import model_compression_toolkit as mct
from tests.fixtures import digits

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.rst"))]


@dataclass
class Block:
    page: str
    line: int  # where the block starts in its page, 1-based
    code: str


def blocks_of(path: Path) -> list[Block]:
    """The page's Python blocks, in order."""
    text = path.read_text()
    name = path.relative_to(REPO).as_posix()
    if path.suffix == ".md":
        return [
            Block(name, text[: m.start(1)].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)
        ]
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)\.\. code-block:: python\s*$", lines[i])
        i += 1
        if not m:
            continue
        indent, start, body = len(m.group(1)), i, []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        code = textwrap.dedent("\n".join(body)).strip("\n")
        found.append(Block(name, start + 1 + next((k for k, b in enumerate(body) if b.strip()), 0), code))
    return found


def variants(blocks: list[Block]) -> list[list[Block]]:
    """The page as written, then once per ``# or: <code>`` line: the page's blocks up to
    that one, with the statement above the line replaced by ``<code>``."""
    runs = [blocks]
    for b, block in enumerate(blocks):
        lines = block.code.splitlines()
        for k, line in enumerate(lines):
            m = re.match(r"^(\s*)# or: (.+)$", line)
            if not m:
                continue
            above = [s for s in ast.parse(block.code).body if s.end_lineno <= k]
            if not above:
                continue
            stmt = above[-1]
            new = [*lines[: stmt.lineno - 1], m.group(1) + m.group(2), *lines[stmt.end_lineno : k], *lines[k + 1 :]]
            runs.append([*blocks[:b], Block(block.page, block.line, "\n".join(new))])
    return runs


LIGHT = {"model_compression_toolkit", "numpy", "torch", "keras", "os"}


def heavy(blocks: list[Block]) -> bool:
    """A page whose blocks import another library (transformers: BERT-base) is marked slow."""
    for block in blocks:
        for node in ast.walk(ast.parse(block.code)):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            if roots - LIGHT:
                return True
    return False


PAGE_RUNS = [
    pytest.param(run, id=f"{page.relative_to(REPO).as_posix()}-{n}", marks=[pytest.mark.slow] if heavy(run) else [])
    for page in PAGES
    for n, run in enumerate(variants(blocks_of(page)))
    if run
]


# Statements that cannot run as written, by page and first line, until their page is changed
# as said (reported with issue 34); one that starts to run fails the test, to be removed here.
DOCS_TO_FIX: dict[str, str] = {}


def first_line(block: Block, source: str) -> str:
    return f"{block.page}: " + (source.strip().splitlines()[0].strip() if source.strip() else "")


# --------------------------------------------------------------------------- the names
_MODELS: dict[str, object] = {}


def trained(framework: str):
    if framework not in _MODELS:
        _MODELS[framework] = digits.trained_digits_cnn(framework)
    return _MODELS[framework]


def accuracy(model, x=None, y=None) -> float:
    """Percent correct on the digits test set (or on ``x``, ``y``), for either framework."""
    keras_model = type(model).__module__.startswith("keras")
    _, _, x_test, y_test = digits.digits_data(channels_last=keras_model)
    predict = digits.keras_predict(model) if keras_model else digits.torch_predict(model)
    return digits.accuracy(predict, x_test if x is None else x, y_test if y is None else y)


class Provided:
    """The names the pages assume, given for the framework of the statement being run."""

    FRAMEWORK_NAMES = ("model", "x_train", "y_train", "x_val", "y_val", "all_8bit_bytes")

    def __init__(self, namespace: dict) -> None:
        self.ns = namespace
        self.own: set[str] = set()  # names the page bound itself
        self.data = {fw: digits.digits_data(channels_last=fw == "keras") for fw in ("pytorch", "keras")}
        import torch

        ids = torch.randint(0, 1000, (2, 16))
        mask = torch.ones_like(ids)
        fixed = {
            "keras_model": trained("keras"),
            "accuracy": accuracy,
            "representative_data_gen": self.gen,
            "data_gen": self.gen,
            "bit_cfg": mct.core.BitWidthConfig(),
            "edit_rules": [],
            "batches": [(ids, mask)] * 2,
            "ids": ids,
            "mask": mask,
            "np": np,
            "mct": mct,
        }
        namespace.update(fixed)

    def gen(self):
        """The digits training images of the current framework, 5 batches of 32."""
        x = self.ns["x_train"]
        for i in range(5):
            yield [x[i * 32 : (i + 1) * 32]]

    def use(self, framework: str) -> None:
        x_train, y_train, x_test, y_test = self.data[framework]
        model = trained(framework)
        values = {
            "model": model,
            "x_train": x_train,
            "y_train": y_train,
            "x_val": x_test,
            "y_val": y_test,
            "all_8bit_bytes": sum(int(np.prod(w.shape)) for w in _weights(model)),
        }
        if framework == "keras":
            import keras

            values["keras"] = keras
        self.ns.update({k: v for k, v in values.items() if k not in self.own})

    def bound(self, stmt: ast.stmt) -> None:
        """Remember the names ``stmt`` binds, which are the page's from now on."""
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.own.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                self.own.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.own.update((a.asname or a.name).split(".")[0] for a in node.names)


def _weights(model) -> list:
    if hasattr(model, "get_weights"):
        return model.get_weights()
    return [p.detach() for p in model.parameters()]


def framework_of(source: str, previous: str) -> str:
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    if re.search(r"\bkeras(\.|_(?!model\b))", code):
        return "keras"
    if re.search(r"\b(torch\.|pytorch_)", code):
        return "pytorch"
    return previous


def redirected(tmp: Path):
    """``set_log_folder`` / ``log_folder`` that log under ``tmp`` whatever path a page gives."""
    real_set, real_with = mct.set_log_folder, mct.log_folder

    def inside(folder):
        return None if folder is None else tmp / "logs" / Path(os.fspath(folder)).name

    def set_log_folder(folder, *args, **kwargs):
        return real_set(inside(folder), *args, **kwargs)

    def log_folder(folder):
        return real_with(inside(folder))

    return set_log_folder, log_folder


# --------------------------------------------------------------------------- the tests
def test_every_page_has_blocks_and_the_rules_find_them():
    """The extraction sees the blocks (an empty list would pass every page vacuously)."""
    readme = blocks_of(REPO / "README.md")
    assert len(readme) >= 4 and "pytorch_post_training_quantization" in readme[0].code
    assert sum(len(blocks_of(p)) for p in PAGES[1:]) >= 10
    assert any(len(v) > 0 for v in variants(readme)[1:]), "the README's '# or:' Keras call is a variant"


@pytest.mark.parametrize("run", PAGE_RUNS)
def test_every_block_runs_as_written(run, tmp_path, monkeypatch):
    """Each page's blocks, in order, run without an error on the digits CNNs (the Keras
    variant of a ``# or:`` line too); nothing is written outside the tmp folder."""
    for block in run:
        for node in ast.walk(ast.parse(block.code)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    pytest.importorskip((node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0])
    set_log_folder, log_folder = redirected(tmp_path)
    monkeypatch.setattr(mct, "set_log_folder", set_log_folder)
    monkeypatch.setattr(mct, "log_folder", log_folder)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    provided = Provided(namespace)
    framework, failures, known = "pytorch", [], set()
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        for block in run:
            for stmt in ast.parse(block.code).body:
                source = ast.get_source_segment(block.code, stmt) or ""
                framework = framework_of(source, framework)
                provided.use(framework)
                where = f"{block.page}:{block.line + stmt.lineno - 1}"
                try:
                    exec(compile(ast.Module([stmt], []), where, "exec"), namespace)
                except Exception as err:
                    if first_line(block, source) in DOCS_TO_FIX:
                        known.add(first_line(block, source))
                    else:
                        failures.append(f"{where} ({framework}):\n{source}\n{type(err).__name__}: {err}")
                provided.bound(stmt)
    mct.set_log_folder(None)
    assert not failures, "blocks that fail as written:\n\n" + "\n\n".join(failures)
    listed = {first_line(b, ast.get_source_segment(b.code, s) or "") for b in run for s in ast.parse(b.code).body}
    runs_now = (listed & set(DOCS_TO_FIX)) - known
    assert not runs_now, f"these now run as written: remove them from DOCS_TO_FIX: {runs_now}"


def test_make_demo_runs_from_shipped_weights_without_training(tmp_path):
    """`make demo`, a newcomer's first command, quantizes the shipped digits CNN without
    training (it used to spend 2 minutes of CPU training before showing anything) and
    prints the float and quantized accuracy and the TensorBoard line."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TQDM_DISABLE="1")
    done = subprocess.run(
        [sys.executable, "tutorials/demo.py", "--log-folder", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained" not in done.stdout and "shipped weights" in done.stdout, done.stdout
    assert re.search(r"float accuracy:\s+9\d\.\d\d %", done.stdout), done.stdout
    assert re.search(r"quantized accuracy:\s+9\d\.\d\d %", done.stdout), done.stdout
    assert f"tensorboard --logdir {tmp_path}" in done.stdout


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_tests_import_fixtures_and_helpers_never_tutorials_or_other_tests():
    """Shared models, data and readers live in tests/fixtures (the digits CNN and its data
    included); a test module imports no tutorial and no other test module, and a tutorial
    imports the package or the fixtures, never a test."""
    for path in (REPO / "tests").rglob("*.py"):
        for module in _imported_modules(path):
            where = path.relative_to(REPO)
            assert module.split(".")[0] != "tutorials", f"{where} imports {module}"
            assert not module.split(".")[-1].startswith("test_"), f"{where} imports the test module {module}"
    for path in (REPO / "tutorials").glob("*.py"):
        for module in _imported_modules(path):
            if module.split(".")[0] == "tests":
                assert module.startswith("tests.fixtures"), f"{path.name} imports {module}"
