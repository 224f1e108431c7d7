"""The before/after figures of the fixes the similarity report suggests (docs/similarity.rst,
"Fixes an integer target can take"), each from real runs of the library on the shipped
digits CNN (PyTorch) damaged as in ``tests/fixtures/damage.py`` and ``tests/core/test_diagnosis.py``,
or on the joins CNN of ``tests/fixtures/joins.py``::

    .venv/bin/python docs/figures/fixes.py docs/_static/fixes

Every accuracy and SQNR printed on a figure is measured here: the model quantized by the
library's PTQ call as it is, then with the fix (the report's suggestion where it chooses the
bits, the config named in the section otherwise). Tensors are read from the float model
through the library's own backend (``extra_outputs``); the grids drawn are the library's
(`core.calibration.quantizers`) over each tensor's no-clipping range. Takes a minute or
two on a laptop CPU; writes the PNGs named in `FIGURES` and nothing else.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the package and tests.fixtures from the checkout

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

FIGURES = (
    "equalization",
    "equalization_joins",
    "grid",
    "compensated_rounding",
    "activation_bits",
    "weight_bits",
    "keep_float",
)
BEFORE, AFTER = "#c0392b", "#2471a3"
DPI = 80


def _mct():
    import model_compression_toolkit as mct

    return mct


def _data():
    from tests.fixtures.digits import digits_data, representative_dataset

    x_train, _, x_test, y_test = digits_data()
    return x_train, x_test, y_test, representative_dataset(x_train)


def _accuracy(model, x, y) -> float:
    from tests.fixtures.digits import accuracy, torch_predict

    return accuracy(torch_predict(model), x, y)


def _ptq(model, gen, config=None):
    mct = _mct()
    q, info = mct.ptq.pytorch_post_training_quantization(
        model, gen, core_config=config or mct.core.CoreConfig()
    )
    return q, info


def _outputs(model, x, names: list[str], equalized: bool = False) -> list[np.ndarray]:
    """The float outputs of ``names`` in ``model`` (its channels equalized first when asked)."""
    from model_compression_toolkit.core.equalization import equalize
    from model_compression_toolkit.pipeline.backends import get_backend

    backend = get_backend(model)
    graph, _ = backend.read(model, [x[:8]])
    if equalized:
        graph, _ = equalize(graph)
    built = backend.build(graph, quantized=False, extra_outputs=names)
    return backend.forward(built, [x])[len(graph.outputs) :]


def _sqnr(reference: np.ndarray, value: np.ndarray) -> float:
    return float(10 * np.log10((reference**2).sum() / max(((reference - value) ** 2).sum(), 1e-30)))


def _fake_quant(x: np.ndarray, signed: bool, bits: int, uniform: bool = False) -> np.ndarray:
    from model_compression_toolkit.core.calibration.quantizers import fake_quant, symmetric_grid, uniform_grid

    if uniform:
        return fake_quant(x, uniform_grid(float(x.min()), float(x.max()), bits))
    return fake_quant(x, symmetric_grid(float(np.abs(x).max()), bits, signed))


def _save(fig, out: Path, name: str) -> None:
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=DPI)
    plt.close(fig)


def equalization(out: Path) -> None:
    """Case a: one channel of the second block 300x larger; its ReLU's per-channel ranges
    before and after equalization, and the 8-bit accuracy of each."""
    from tests.fixtures.damage import outlier_channel
    from tests.fixtures.trained import load_trained

    mct = _mct()
    x_train, x_test, y_test, gen = _data()
    bad, names = outlier_channel("pytorch", load_trained("pytorch"), x_train[:256])
    plain, _ = _ptq(bad, gen)
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(activation_channel_equalization=True),
        integer_only=True,
    )
    fixed, _ = _ptq(bad, gen, config)
    acc = [_accuracy(m, x_test, y_test) for m in (bad, plain, fixed)]
    relu = names["activation"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.8), sharey=True)
    for ax, equalized, color, acc_q, when in ((axes[0], False, BEFORE, acc[1], "as trained"),
                                              (axes[1], True, AFTER, acc[2], "equalized")):  # fmt: skip
        (values,) = _outputs(bad, x_test, [relu], equalized)
        ranges = values.max(axis=(0, 2, 3))
        ax.bar(np.arange(ranges.size), ranges, color=color)
        ax.set_yscale("log")
        ax.set_xlabel(f"channel of ReLU '{relu}'")
        ax.set_title(f"{when}: 8-bit accuracy {acc_q:.1f} %", fontsize=10)
    axes[0].set_ylabel("largest value")
    fig.suptitle(f"Equalize channels (float {acc[0]:.1f} %, every layer int8)", fontsize=10)
    _save(fig, out, "equalization")


def equalization_joins(out: Path) -> None:
    """The joins CNN, an outlier channel behind its concat or its residual add: the 8-bit
    model output's SQNR without and with equalization."""
    from tests.fixtures.digits import torch_predict
    from tests.fixtures.joins import joins_model

    mct = _mct()
    x_train, x_test, _, gen = _data()
    config = mct.core.CoreConfig(
        quantization_config=mct.core.QuantizationConfig(activation_channel_equalization=True)
    )
    rows = []
    for outlier in ("concat", "add"):
        model, _ = joins_model("pytorch", outlier)
        reference = torch_predict(model)(x_test)
        plain, fixed = _ptq(model, gen)[0], _ptq(model, gen, config)[0]
        rows.append([_sqnr(reference, torch_predict(m)(x_test)) for m in (plain, fixed)])
    fig, ax = plt.subplots(figsize=(6, 2.6))
    at = np.arange(len(rows))
    for i, (label, color) in enumerate((("8 bits", BEFORE), ("8 bits, equalized", AFTER))):
        bars = ax.bar(at + (i - 0.5) * 0.38, [r[i] for r in rows], 0.38, color=color, label=label)
        ax.bar_label(bars, fmt="%.1f dB", fontsize=8)
    ax.set_xticks(at, ["outlier behind a concat", "outlier behind a residual add"])
    ax.set_ylabel("output SQNR (dB)")
    ax.set_ylim(0, max(max(r) for r in rows) * 1.25)
    ax.legend(fontsize=8, loc="upper left")
    _save(fig, out, "equalization_joins")


def grid(out: Path) -> None:
    """A SiLU output of the digits CNN's second block (values from -0.28 up): the signed
    symmetric 8-bit grid, half of whose levels wait for negatives, against a uniform grid
    over [min, max]."""
    from tests.fixtures.trained import load_trained

    _, x_test, _, _ = _data()
    (pre,) = _outputs(load_trained("pytorch"), x_test, ["4"])  # the second batch norm's output
    values = (pre / (1 + np.exp(-pre))).astype(np.float32)  # SiLU of it
    lo, hi = float(values.min()), float(values.max())
    window = (lo - 0.1, 0.6)  # where the levels are told apart: from the smallest value to 0.6
    near = values[(values >= window[0]) & (values <= window[1])]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
    for ax, uniform, color, name in ((axes[0], False, BEFORE, "symmetric, signed"),
                                     (axes[1], True, AFTER, "uniform over [min, max]")):  # fmt: skip
        q = _fake_quant(values, True, 8, uniform)
        levels = np.unique(q)
        used = int(((levels >= lo) & (levels <= hi)).sum())
        ax.hist(near, bins=160, range=window, color="0.6", log=True)
        shown = levels[(levels >= window[0]) & (levels <= window[1])]
        ax.vlines(shown, 0, 0.12, transform=ax.get_xaxis_transform(), color=color, lw=1.2)
        ax.set_xlim(*window)
        ax.set_title(f"{name}: {used} of 256 levels hit (values in [{lo:.2f}, {hi:.1f}])\ntensor SQNR {_sqnr(values, q):.1f} dB",
                     fontsize=9)  # fmt: skip
        ax.set_xlabel("SiLU output near 0, and the grid's levels (ticks)")
    axes[0].set_ylabel("values")
    fig.suptitle("A better grid: the levels where the values are (8 bits, one tensor)", fontsize=10)
    _save(fig, out, "grid")


def compensated_rounding(out: Path) -> None:
    """Every weight at 4 bits (the user's QuantizationConfig), rounded to nearest, then with
    their errors compensated (the report's suggestion): the second conv's output error on
    the test images, each kernel on the same grid, and the accuracies."""
    import torch

    from model_compression_toolkit.core.calibration.quantizers import QuantizedWeights
    from model_compression_toolkit.pipeline.session import produced_graph
    from tests.fixtures.trained import load_trained

    mct = _mct()
    _, x_test, y_test, gen = _data()
    model = load_trained("pytorch")
    conv, kernels, acc = "3", [], []
    for compensated in (False, True):
        qc = mct.core.QuantizationConfig(weights_n_bits=4, weights_compensated_rounding=compensated)
        q, _ = _ptq(model, gen, mct.core.CoreConfig(quantization_config=qc))
        graph = produced_graph(q)
        kernels.append(np.asarray(QuantizedWeights(graph)[conv]["kernel"], np.float32))
        acc.append(_accuracy(q, x_test, y_test))
    node, layer = graph.node(conv), model[int(conv)]
    w = np.asarray(node.weights["kernel"], np.float32)  # its batch norm folded in, as quantized
    (x,) = _outputs(model, x_test, [graph.in_edges(conv)[0].src])

    def apply(kernel: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            y = torch.nn.functional.conv2d(
                torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(kernel),
                stride=layer.stride, padding=layer.padding,
            )  # fmt: skip
        return y.numpy().ravel()

    reference = apply(w)
    errors = [apply(k - w) for k in kernels]
    top = float(np.abs(np.concatenate(errors)).max())
    fig, ax = plt.subplots(figsize=(9, 2.8))
    labels = ("rounded to nearest", "errors compensated")
    for e, a, color, label in zip(errors, acc, (BEFORE, AFTER), labels):
        ax.hist(
            e, bins=np.linspace(-top, top, 121), histtype="step", color=color, lw=1.5,
            label=f"{label}: conv output SQNR {_sqnr(reference, reference + e):.1f} dB, accuracy {a:.1f} %",
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 100)  # room for the legend above the curves
    ax.set_xlabel(f"output error of conv '{conv}' on the test images, every weight at 4 bits on one grid")
    ax.set_ylabel("values")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(
        f"Compensated rounding: the same 4-bit grids, other roundings (float {_accuracy(model, x_test, y_test):.1f} %)",
        fontsize=10,
    )
    _save(fig, out, "compensated_rounding")


def activation_bits(out: Path) -> None:
    """Case a again: the outlier ReLU's other channels against the first step of its 8-bit
    and 16-bit grids (every value under half a step rounds to zero), and the accuracy."""
    from tests.fixtures.damage import outlier_channel
    from tests.fixtures.trained import load_trained

    mct = _mct()
    x_train, x_test, y_test, gen = _data()
    bad, names = outlier_channel("pytorch", load_trained("pytorch"), x_train[:256])
    relu, k = names["activation"], int(names["channel"])
    bits = mct.core.BitWidthConfig()
    bits.set_manual_activation_bit_width(mct.core.network_editor.NodeNameFilter(relu), 16)
    acc = [
        _accuracy(m, x_test, y_test)
        for m in (_ptq(bad, gen)[0], _ptq(bad, gen, mct.core.CoreConfig(bit_width_config=bits))[0])
    ]
    (values,) = _outputs(bad, x_test, [relu])
    others = np.delete(values, k, axis=1)
    others = others[others > 0]
    top = float(values.max())
    fig, ax = plt.subplots(figsize=(9, 2.8))
    ax.hist(others, bins=np.logspace(-6, np.log10(others.max()), 120), color="0.6", log=True)
    ax.set_xscale("log")
    for n, color, a in ((8, BEFORE, acc[0]), (16, AFTER, acc[1])):
        half = top / 2**n / 2
        zero = 100 * float((others < half).mean())
        ax.axvline(half, color=color, lw=2, label=f"{n} bits: {zero:.0f} % round to 0, accuracy {a:.1f} %")
    ax.set_xlabel(f"values of ReLU '{relu}' outside the outlier channel {k} (log)")
    ax.set_ylabel("values")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("16-bit activations: half a grid step, 8 and 16 bits, over the same range", fontsize=10)
    _save(fig, out, "activation_bits")


def weight_bits(out: Path) -> None:
    """Case c: the second conv's weights at 2 bits (the user's BitWidthConfig), then at the
    fewest of 4, 6, 8 bits that give the accuracy back within a point of float."""
    from tests.fixtures.trained import load_trained

    mct = _mct()
    _, x_test, y_test, gen = _data()
    model = load_trained("pytorch")
    conv = "3"

    def at(b: int) -> float:
        bits = mct.core.BitWidthConfig()
        bits.set_manual_weights_bit_width(mct.core.network_editor.NodeNameFilter(conv), b)
        return _accuracy(_ptq(model, gen, mct.core.CoreConfig(bit_width_config=bits))[0], x_test, y_test)

    float_acc, damaged = _accuracy(model, x_test, y_test), at(2)
    n, fixed = next((b, a) for b in (4, 6, 8) if (a := at(b)) >= float_acc - 1 or b == 8)
    kernel = model[int(conv)].weight.detach().numpy()
    rows = kernel.reshape(len(kernel), -1)
    channel = rows[int(np.abs(rows).max(axis=1).argmax())]
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.8), sharey=True)
    for ax, b, color, a in ((axes[0], 2, BEFORE, damaged), (axes[1], n, AFTER, fixed)):
        whole = np.concatenate([_fake_quant(r, True, b) for r in rows])
        ax.hist(channel, bins=60, color="0.6")
        ax.vlines(
            np.unique(_fake_quant(channel, True, b)),
            0,
            1,
            transform=ax.get_xaxis_transform(),
            color=color,
            lw=1,
        )
        ax.set_title(
            f"{b} bits: weights SQNR {_sqnr(rows.ravel(), whole):.1f} dB, accuracy {a:.1f} %", fontsize=10
        )
        ax.set_xlabel(f"one output channel of conv '{conv}', and its grid")
    axes[0].set_ylabel("weights")
    fig.suptitle(f"More weight bits: {n} bits for conv '{conv}' alone (float {float_acc:.1f} %)", fontsize=10)
    _save(fig, out, "weight_bits")


def keep_float(out: Path) -> None:
    """Case d: the first ReLU's threshold clips (z_threshold=2); the report keeps its output
    float where the target allows it."""
    from tests.fixtures.trained import load_trained

    mct = _mct()
    _, x_test, y_test, gen = _data()
    model = load_trained("pytorch")
    relu = "2"
    editor = mct.core.network_editor
    rule = editor.EditRule(
        filter=editor.NodeNameFilter(relu),
        action=editor.ChangeCandidatesActivationQuantConfigAttr(z_threshold=2),
    )
    config = mct.core.CoreConfig(
        debug_config=mct.core.DebugConfig(analyze_similarity=True, network_editor=[rule])
    )
    damaged, info = _ptq(model, gen, config)
    report = info.similarity
    fixed, _ = _ptq(model, gen, dataclasses.replace(config, keep_float=mct.core.KeepFloat(names=[relu])))
    acc = [_accuracy(m, x_test, y_test) for m in (model, damaged, fixed)]
    entry = report.quantizer(relu, "activation")
    (values,) = _outputs(model, x_test, [relu])
    fig, ax = plt.subplots(figsize=(9, 2.8))
    ax.hist(values[values > 0].ravel(), bins=150, color="0.6", log=True)
    clip = float(np.quantile(values, 1 - entry.clipped_percent / 100))
    ax.axvline(
        clip,
        color=BEFORE,
        lw=2,
        label=f"8-bit grid's top: {entry.clipped_percent:.1f} % clipped, accuracy {acc[1]:.1f} %",
    )
    ax.axvline(
        float(values.max()),
        color=AFTER,
        lw=2,
        ls="--",
        label=f"kept float: accuracy {acc[2]:.1f} %",
    )
    ax.set_xlabel(f"values of ReLU '{relu}'")
    ax.set_ylabel("values")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(f"Keep float: a grid that clips (float {acc[0]:.1f} %)", fontsize=10)
    _save(fig, out, "keep_float")


DRAW: dict[str, Callable[[Path], None]] = {  # one function per name of FIGURES
    "equalization": equalization,
    "equalization_joins": equalization_joins,
    "grid": grid,
    "compensated_rounding": compensated_rounding,
    "activation_bits": activation_bits,
    "weight_bits": weight_bits,
    "keep_float": keep_float,
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or not set(argv[2:]) <= set(FIGURES):
        raise SystemExit(f"usage: {argv[0]} OUTPUT_FOLDER [NAME ...]; names: {', '.join(FIGURES)}")
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[2:]) or set(FIGURES)
    for name in FIGURES:
        if name in only:
            DRAW[name](out)
            print(f"wrote {out / name}.png ({(out / f'{name}.png').stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(sys.argv)
