"""The similarity view: written with RunWriter, read back with TensorBoard's own loader."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator as ea

from model_compression_toolkit.core.calibration.quantizers import symmetric_grid
from model_compression_toolkit.core.config import QuantizationErrorMethod, QuantizationMethod
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import NodeQuantConfig, WeightsQuantConfig
from model_compression_toolkit.core.similarity.analysis import PairHistogram, SimilarityResult
from model_compression_toolkit.core.similarity.causes import QuantizerEntry
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport
from model_compression_toolkit.observers import cosine_plots as cp
from model_compression_toolkit.observers import similarity_view as sim
from model_compression_toolkit.observers.event_file import RunWriter
from model_compression_toolkit.observers.graph_view import graph_attrs
from model_compression_toolkit.observers.protos import png_size

SYM, MSE = QuantizationMethod.SYMMETRIC, QuantizationErrorMethod.MSE
SAMPLES = 20


# ---------------------------------------------------------------- inputs by hand
def kernel_quant(kernel: np.ndarray, axis: int) -> NodeQuantConfig:
    threshold = np.max(np.abs(np.moveaxis(kernel, axis, 0).reshape(kernel.shape[axis], -1)), axis=1)
    grid = symmetric_grid(threshold, 8, signed=True)
    return NodeQuantConfig(
        weights={"kernel": WeightsQuantConfig(8, SYM, MSE, True, (axis,), threshold=threshold, grid=grid)}
    )


def conv_node(name: str, shape: tuple[int, ...], axis: int, seed: int) -> Node:
    kernel = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    return Node(
        name, OpKind.CONV, "Conv2d", weights={"kernel": kernel}, kernel_axes={"kernel": (axis,)},
        quant=kernel_quant(kernel, axis),
    )  # fmt: skip


def make_graph() -> Graph:
    """input -> conv1 -> conv2 -> dense (PyTorch layout kernels)."""
    g = Graph("tiny", "pytorch")
    g.add_node(Node("input", OpKind.INPUT, "Input", output_shapes=[(None, 3, 8, 8)]))
    g.add_node(conv_node("conv1", (8, 3, 3, 3), 0, 1))
    g.add_node(conv_node("conv2", (16, 8, 3, 3), 0, 2))
    dense_w = np.random.default_rng(3).normal(size=(10, 16)).astype(np.float32)
    g.add_node(
        Node("dense", OpKind.DENSE, "Linear", weights={"kernel": dense_w}, kernel_axes={"kernel": (0,)})
    )
    for a, b in (("input", "conv1"), ("conv1", "conv2"), ("conv2", "dense")):
        g.add_edge(a, b)
    g.inputs, g.outputs = ["input"], [("dense", 0)]
    g.validate()
    return g


def layer(
    name: str, position: int, cos: np.ndarray, sqnr: float, local: bool = True, **kw
) -> LayerSimilarity:
    values = dict(
        name=name, layer_type="Conv2d", position=position, is_output=False,
        cosine_mean=float(np.mean(cos)), cosine_min=float(np.min(cos)), worst_sample=int(np.argmin(cos)),
        sqnr_db=sqnr, mse=10 ** (-sqnr / 10), max_abs_error=0.1, weights_bits=8, activation_bits=8,
        weights_threshold_max=0.5, activation_threshold=2.0, clipped_percent=0.25,
        cosine_per_sample=[float(c) for c in cos],
    )  # fmt: skip
    if local:
        values |= dict(local_cosine_mean=float(np.mean(cos)) + 1e-4, local_sqnr_db=sqnr + 3, local_mse=1e-4)
    return LayerSimilarity(**(values | kw))


def make_result() -> SimilarityResult:
    rng = np.random.default_rng(0)
    cos = [1 - np.abs(rng.normal(0, s, SAMPLES)) for s in (1e-4, 1e-3, 2e-2)]
    layers = [
        layer("conv1", 0, cos[0], 40.0),
        layer("conv2", 1, cos[1], 25.0, local=False),  # no local value: ranked by accumulated
        layer("dense", 2, cos[2], 10.0, is_output=True),  # the worst
    ]
    edges = np.linspace(-2, 2, 129)
    f = np.zeros(128, np.int64)
    q = np.zeros(128, np.int64)
    f[30:90] = rng.integers(1, 50, 60)
    q[28:80] = rng.integers(1, 50, 52)  # different non-empty range than the float one
    histograms = {name: PairHistogram(edges, f.copy(), q.copy()) for name in ("conv1", "conv2", "dense")}
    return SimilarityResult(SimilarityReport(samples=SAMPLES, layers=layers), histograms)


RUN = "5_quantized_graph"


def write(tmp_path: Path, result: SimilarityResult, graph: Graph) -> ea.EventAccumulator:
    """The similarity view written into one run, as the quantized graph's stage writes it."""
    writer = RunWriter(tmp_path / RUN)
    try:
        sim.write_similarity(writer, result, graph)
    finally:
        writer.close()
    acc = ea.EventAccumulator(str(tmp_path / RUN), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    return acc


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write(tmp_path_factory.mktemp("similarity"), make_result(), make_graph())


def scalars(acc: ea.EventAccumulator, metric: str, kind: str) -> dict[int, float]:
    return {e.step: e.value for e in acc.Scalars(sim.scalar_tag(metric, kind))}


# ---------------------------------------------------------------- the quantized graph's run
def test_images_are_pngs_of_the_cards_width_summary_first(logs):
    tags = set(logs.Tags()["images"])
    expected = {cp.SUMMARY_TAG, cp.SAMPLES_TAG, "Filters/conv1", "Filters/conv2"}
    assert tags == expected  # two cosine cards, not one per sample
    assert sorted(tags)[0] == cp.SUMMARY_TAG and cp.SUMMARY_TAG.startswith("Cosine similarity/")
    steps = [image.step for image in logs.Images(cp.SAMPLES_TAG)]
    assert len(steps) == cp.SAMPLE_STEPS < SAMPLES and steps == sorted(set(steps))  # TensorBoard keeps them all
    for tag in expected:
        image = logs.Images(tag)[-1]
        png = image.encoded_image_string
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = png_size(png)
        assert (image.height, image.width) == (height, width)
        assert width == cp.CARD_PX and 150 <= height <= 1024, (tag, height, width)  # shown unscaled


def test_the_sample_steps_are_the_samples_with_the_lowest_cosine():
    matrix = np.full((3, 6), 0.99)
    matrix[1, 4], matrix[2, 1], matrix[0, 2] = 0.5, 0.7, 0.9
    matrix[:, 5] = np.nan  # nothing known of sample 5: last
    assert cp.worst_samples(matrix, 2) == [1, 4]  # in sample order
    assert cp.worst_samples(matrix, 3) == [1, 2, 4]
    assert cp.worst_samples(matrix, 6)[-1] == 5 and cp.worst_samples(np.empty((0, 0))) == []


def test_every_text_of_the_plots_is_10_px_or_more():
    from matplotlib.text import Text

    plots = cp.CosinePlots(make_result().report)
    plots.summary()
    texts = [t for t in plots.fig.findobj(Text) if t.get_text()]
    assert texts and min(t.get_fontsize() * cp.DPI / 72 for t in texts) >= 10 - 1e-9
    assert plots.fig.get_figwidth() * cp.DPI == cp.CARD_PX


def test_histograms_pair_float_and_quantized_as_two_steps_of_one_tag(logs):
    pair = make_result().histograms["conv2"]
    for name in ("conv1", "conv2", "dense"):
        f, q = logs.Histograms(name)
        assert (f.step, q.step) == (0, 1)
        f, q = f.histogram_value, q.histogram_value
        assert list(f.bucket_limit) == list(q.bucket_limit)
        assert f.num == pair.float_counts.sum() == sum(f.bucket)
        assert q.num == pair.quantized_counts.sum() == sum(q.bucket)
        # union of the non-empty ranges (bins 28..89), right edges
        np.testing.assert_allclose(f.bucket_limit, pair.edges[29:91])
        assert f.bucket[:2] == [0, 0] and q.bucket[-10:] == [0] * 10
        for h in (f, q):
            assert all(math.isfinite(v) for v in (h.min, h.max, h.sum, h.sum_squares))


def test_histogram_titles_give_what_rounds_to_zero_and_is_clipped():
    report = make_result().report
    report.quantizers = [QuantizerEntry("conv2", "activation", "ReLU", 8, 30.0, zero_rounded_percent=87.61,
                                        clipped_percent=0.25)]  # fmt: skip
    titles = sim.histogram_titles(report, ["conv1", "conv2"])
    assert titles["conv2"] == "conv2: rounded to 0: 87.6 %, clipped: 0.25 % (step 0 float model, step 1 quantized)"
    assert titles["conv1"] == "conv1: step 0 float model, step 1 quantized"


def test_report_table_lists_worst_layer_first(logs):
    (event,) = logs.Tensors("similarity/report")
    text = event.tensor_proto.string_val[0].decode()
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[2].strip().split("<br>")[0] for row in rows] == ["`dense`", "`conv2`", "`conv1`"]
    dense, conv2, _ = rows
    header = [sim.header_text(c.strip()) for c in text.splitlines()[2].split("|")]
    cells = dict(zip(header, (c.strip() for c in conv2.split("|"))))
    assert cells["local SQNR dB"] == "n/a" and cells["SQNR dB"] != "n/a"
    assert cells["accum. error"] == "medium"
    assert dict(zip(header, (c.strip() for c in dense.split("|"))))["own error"] == "high"
    assert "8/8" in dense and "0.25" in dense


def test_accumulated_and_local_scalars_sit_side_by_side(logs):
    for metric in ("cosine", "sqnr_db", "mse"):
        assert list(scalars(logs, metric, "accumulated")) == [0, 1, 2]
        assert list(scalars(logs, metric, "local")) == [0, 2]  # conv2 has no local values
    assert scalars(logs, "sqnr_db", "accumulated") == {0: 40.0, 1: 25.0, 2: 10.0}
    assert scalars(logs, "sqnr_db", "local") == {0: 43.0, 2: 13.0}
    tags = sorted(logs.Tags()["scalars"])
    assert tags[:2] == ["similarity/cosine (accumulated)", "similarity/cosine (local)"]


# ---------------------------------------------------------------- nothing non-finite is written
def test_nan_and_inf_are_never_written(tmp_path):
    result = make_result()
    bad = result.report.layers[1]
    bad.cosine_mean, bad.mse, bad.sqnr_db = math.nan, math.inf, math.nan
    bad.clipped_percent, bad.weights_threshold_max = -math.inf, math.nan
    bad.cosine_per_sample[3] = math.nan
    result.report.layers[0].local_mse = math.nan
    result.histograms["conv1"].float_counts = result.histograms["conv1"].float_counts.astype(float)
    result.histograms["conv1"].float_counts[50] = math.nan
    result.histograms["dense"] = PairHistogram(np.full(129, np.nan), np.ones(128), np.ones(128))
    main = write(tmp_path, result, make_graph())

    for tag in main.Tags()["scalars"]:
        assert all(math.isfinite(e.value) for e in main.Scalars(tag))
    assert set(scalars(main, "cosine", "accumulated")) == {0, 2}  # the NaN cosine of conv2 is dropped
    assert set(scalars(main, "mse", "local")) == {2}
    for tag in main.Tags()["histograms"]:
        h = main.Histograms(tag)[0].histogram_value
        assert all(
            math.isfinite(v) for v in (h.min, h.max, h.num, h.sum, h.sum_squares, *h.bucket, *h.bucket_limit)
        )
    assert "dense" not in main.Tags()["histograms"]  # non-finite edges: nothing to show
    text = main.Tensors("similarity/report")[0].tensor_proto.string_val[0].decode().lower()
    assert "nan" not in text and "inf" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert "`conv2`" in rows[-1] and rows[-1].rstrip(" |").endswith("n/a")  # unknown SQNR ranked last
    assert len(main.Tags()["images"]) == 4
    attrs = graph_attrs(make_graph(), {}, result.report)
    assert {k for k in attrs["conv2"] if k.startswith("similarity.") and k.count(".") == 1} == {
        "similarity.cosine_min", "similarity.own_error", "similarity.accumulated_error",
    }  # fmt: skip
    assert all(isinstance(v, (str, bool, list)) or math.isfinite(v) for a in attrs.values() for v in a.values())


def test_empty_report_writes_a_summary_and_no_samples(tmp_path):
    logs = write(tmp_path, SimilarityResult(SimilarityReport(samples=0, layers=[])), make_graph())
    assert set(logs.Tags()["images"]) == {cp.SUMMARY_TAG, "Filters/conv1", "Filters/conv2"}
    assert logs.Tags()["scalars"] == []


def test_all_nan_sample_still_plots():
    report = make_result().report
    for lay in report.layers:
        lay.cosine_per_sample[0] = math.nan
    report.layers[0].cosine_per_sample = report.layers[0].cosine_per_sample[:5]  # too short: padded
    pngs = cp.CosinePlots(report).samples()
    assert len(pngs) == SAMPLES and all(p[:4] == b"\x89PNG" for p in pngs)
    assert np.isnan(cp.cosine_matrix(report)[0, 5:]).all()


# ---------------------------------------------------------------- plots and filters
def test_many_layers_make_a_taller_image_never_a_narrower_one():
    rng = np.random.default_rng(1)
    layers = [layer(f"model.block{i}.conv", i, 1 - np.abs(rng.normal(0, 1e-3, 4)), 30.0) for i in range(200)]
    plots = cp.CosinePlots(SimilarityReport(samples=4, layers=layers))
    for png in plots.samples() + [plots.summary()]:
        height, width, _ = png_size(png)
        assert width == cp.CARD_PX and height == cp.HEADER_PX + 200 * cp.ROW_PX + cp.FOOTER_PX


def _rgb(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def _has_colour(image: np.ndarray, colour: str, tolerance: int = 12) -> bool:
    from matplotlib.colors import to_rgb

    target = np.array(to_rgb(colour)) * 255
    return bool((np.abs(image - target).max(axis=-1) <= tolerance).any())


def test_summary_and_sample_plots_share_axes_but_not_their_lines():
    plots = cp.CosinePlots(make_result().report)
    summary = _rgb(plots.summary())
    samples = [_rgb(png) for png in plots.samples()]
    assert (_rgb(plots.summary()) == summary).all()  # in any order
    assert all(s.shape == summary.shape for s in samples)  # one figure, one scale
    # the summary's local-cosine line and error-class dots are in it, and in no sample plot
    assert _has_colour(summary, "tab:purple") and _has_colour(summary, "tab:orange")
    assert not any(_has_colour(s, "tab:purple") or _has_colour(s, "tab:orange") for s in samples)
    # each sample plot draws its own line and lowest point, over the same background
    assert all(_has_colour(s, "tab:red") for s in samples)
    differs = [(a != b).any(axis=-1).mean() for a, b in zip(samples, samples[1:])]
    assert all(0 < d < 0.05 for d in differs), differs


def test_keras_and_pytorch_layouts_show_the_same_filters(tmp_path):
    torch_node = conv_node("conv_t", (12, 3, 5, 5), 0, 7)
    kernel = torch_node.weights["kernel"]
    keras_kernel = np.transpose(kernel, (2, 3, 1, 0))  # (kh, kw, in, out)
    keras_node = Node(
        "conv_k", OpKind.CONV, "Conv2D", weights={"kernel": keras_kernel}, kernel_axes={"kernel": (3,)},
        quant=kernel_quant(keras_kernel, 3),
    )  # fmt: skip
    np.testing.assert_array_equal(cp.filter_tiles(kernel, (0,)), kernel[:, 0])
    np.testing.assert_array_equal(cp.filter_tiles(keras_kernel, (3,)), cp.filter_tiles(kernel, (0,)))
    # depthwise Keras kernel (kh, kw, in, multiplier): one filter per (in, multiplier)
    assert cp.filter_tiles(np.zeros((3, 3, 4, 2)), (2, 3)).shape == (8, 3, 3)

    g = Graph("keras_tiny", "keras")
    g.add_node(Node("input", OpKind.INPUT, "InputLayer"))
    g.add_node(keras_node)
    g.add_edge("input", "conv_k")
    g.inputs, g.outputs = ["input"], [("conv_k", 0)]
    assert cp.filter_nodes(g) == [keras_node]
    result = SimilarityResult(
        SimilarityReport(samples=2, layers=[layer("conv_k", 0, np.array([0.99, 1.0]), 30.0)])
    )
    logs = write(tmp_path, result, g)
    (image,) = logs.Images("Filters/conv_k")
    height, width, _ = png_size(image.encoded_image_string)
    assert width == cp.CARD_PX and width > height > 150


def test_every_weight_of_a_filter_is_a_square_of_the_same_size():
    """No resampling: filters and the gaps between them keep their proportions, so a 3x3
    filter does not look wider than its neighbour."""
    kernel = np.ones((4, 1, 2, 2), np.float32)  # 2 x 2 filters of 2 x 2: a 5 x 5 grid with a gap cross
    node = Node("c", OpKind.CONV, "Conv2d", weights={"kernel": kernel}, kernel_axes={"kernel": (0,)},
                quant=kernel_quant(kernel, 0))  # fmt: skip
    image = _rgb(cp.filters_png(node))
    gap = np.array(cp._diverging().get_bad()[:3]) * 255
    positive = np.array(cp._diverging()(1.0)[:3]) * 255
    is_gap = (np.abs(image - gap) <= 1).all(axis=2)
    is_positive = (np.abs(image - positive) <= 1).all(axis=2)
    zoom = cp.FILTER_PANEL_PX // 5
    for panel in np.array_split(np.arange(image.shape[1]), 2):  # float | quantized, both all +1
        rows, cols = (np.flatnonzero(is_positive[:, panel].any(axis=a)) for a in (1, 0))
        assert rows.size == cols.size == 4 * zoom  # two filters of two weights each way
        box = np.ix_(np.arange(rows[0], rows[-1] + 1), panel[cols[0] : cols[-1] + 1])
        assert box[0].size == box[1].size == 5 * zoom  # and one gap between them
        assert [int(is_positive[box].sum()), int(is_gap[box].sum())] == [16 * zoom**2, 9 * zoom**2]


def test_filters_without_grid_show_float_only_and_stop_at_two_convs():
    g = make_graph()
    g.add_node(conv_node("conv3", (4, 16, 3, 3), 0, 4))
    g.add_edge("dense", "conv3")
    assert [n.name for n in cp.filter_nodes(g)] == ["conv1", "conv2"]
    node = g.node("conv1")
    assert _panels(cp.filters_png(node)) == 2
    node.quant = NodeQuantConfig()
    assert _panels(cp.filters_png(node)) == 1
    grid = cp.tile_grid(np.ones((64, 3, 3)))
    assert grid.shape == (8 * 4 - 1, 8 * 4 - 1) and np.isnan(grid).sum() == 31 * 31 - 64 * 9


def _panels(png: bytes) -> int:
    """How many filter panels side by side: runs of columns drawn on in the lower half of
    the image (a panel's gap lines cross all its columns; between panels is white)."""
    image = _rgb(png)
    drawn = (image[image.shape[0] // 2 :] < 250).any(axis=(0, 2)).astype(int)
    return int(np.count_nonzero(np.diff(drawn) == 1) + drawn[0])
