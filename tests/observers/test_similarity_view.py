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
from model_compression_toolkit.core.similarity.report import LayerSimilarity, SimilarityReport
from model_compression_toolkit.observers import similarity_view as sim
from model_compression_toolkit.observers.event_file import RunWriter
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


def write(tmp_path: Path, result: SimilarityResult, graph: Graph) -> dict[str, ea.EventAccumulator]:
    writers: dict[str, RunWriter] = {}

    def open_writer(run: str) -> RunWriter:
        writers[run] = RunWriter(tmp_path / run)
        return writers[run]

    try:
        sim.write_similarity(open_writer, result, graph)
    finally:
        for w in writers.values():
            w.close()
    assert set(writers) == {"similarity", "similarity/accumulated", "similarity/local"}
    loaded = {}
    for run in writers:
        acc = ea.EventAccumulator(str(tmp_path / run), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
        acc.Reload()
        loaded[run] = acc
    return loaded


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write(tmp_path_factory.mktemp("similarity"), make_result(), make_graph())


# ---------------------------------------------------------------- the similarity run
def test_images_are_pngs_of_sensible_size(logs):
    acc = logs["similarity"]
    tags = set(acc.Tags()["images"])
    expected = {f"cosine_similarity/sample_{i}" for i in range(SAMPLES)}
    expected |= {"cosine_similarity/summary", "filters/conv1", "filters/conv2"}
    assert tags == expected
    for tag in expected:
        (image,) = acc.Images(tag)
        png = image.encoded_image_string
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = png_size(png)
        assert (image.height, image.width) == (height, width)
        assert 150 <= height <= 1200 and 250 <= width <= 2000, (tag, height, width)


def test_histograms_pair_on_identical_buckets(logs):
    acc = logs["similarity"]
    pair = make_result().histograms["conv2"]
    for name in ("conv1", "conv2", "dense"):
        (f,) = acc.Histograms(f"{name}/float")
        (q,) = acc.Histograms(f"{name}/quantized")
        f, q = f.histogram_value, q.histogram_value
        assert list(f.bucket_limit) == list(q.bucket_limit)
        assert f.num == pair.float_counts.sum() == sum(f.bucket)
        assert q.num == pair.quantized_counts.sum() == sum(q.bucket)
        # union of the non-empty ranges (bins 28..89), right edges
        np.testing.assert_allclose(f.bucket_limit, pair.edges[29:91])
        assert f.bucket[:2] == [0, 0] and q.bucket[-10:] == [0] * 10
        for h in (f, q):
            assert all(math.isfinite(v) for v in (h.min, h.max, h.sum, h.sum_squares))


def test_report_table_lists_worst_layer_first(logs):
    (event,) = logs["similarity"].Tensors("similarity/report")
    text = event.tensor_proto.string_val[0].decode()
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[2].strip() for row in rows] == ["`dense`", "`conv2`", "`conv1`"]
    dense, conv2, _ = rows
    assert "high" in dense and "medium" in conv2
    header = [c.strip() for c in text.splitlines()[2].split("|")]
    cells = dict(zip(header, (c.strip() for c in conv2.split("|"))))
    assert cells["local SQNR dB"] == cells["local MSE"] == "n/a" and cells["SQNR dB"] != "n/a"
    assert "8/8" in dense and "0.25" in dense
    assert "cosine mean" in text and "local SQNR dB" in text


def test_scalars_overlay_accumulated_and_local(logs):
    for tag in ("similarity/cosine", "similarity/sqnr_db", "similarity/mse"):
        acc = [(e.step, e.value) for e in logs["similarity/accumulated"].Scalars(tag)]
        local = [(e.step, e.value) for e in logs["similarity/local"].Scalars(tag)]
        assert [s for s, _ in acc] == [0, 1, 2]
        assert [s for s, _ in local] == [0, 2]  # conv2 has no local values
    sqnr = {e.step: e.value for e in logs["similarity/accumulated"].Scalars("similarity/sqnr_db")}
    local_sqnr = {e.step: e.value for e in logs["similarity/local"].Scalars("similarity/sqnr_db")}
    assert sqnr == {0: 40.0, 1: 25.0, 2: 10.0} and local_sqnr == {0: 43.0, 2: 13.0}
    assert set(logs["similarity"].Tags()["scalars"]) == set()


def test_error_devices_and_metric_attrs():
    report = make_result().report
    assert sim.error_devices(report) == {"conv1": "error:low", "conv2": "error:medium", "dense": "error:high"}
    attrs = sim.metric_attrs(report)
    assert attrs["conv2"]["error_class"] == "medium"
    assert "local_sqnr_db" not in attrs["conv2"] and attrs["conv1"]["local_sqnr_db"] == 43.0
    assert set(attrs["conv1"]) == {
        "cosine_mean", "cosine_min", "sqnr_db", "mse", "local_sqnr_db", "local_mse", "clipped_percent", "error_class",
    }  # fmt: skip


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
    logs = write(tmp_path, result, make_graph())

    for run in ("similarity/accumulated", "similarity/local"):
        for tag in logs[run].Tags()["scalars"]:
            assert all(math.isfinite(e.value) for e in logs[run].Scalars(tag))
    acc_cos = {e.step for e in logs["similarity/accumulated"].Scalars("similarity/cosine")}
    assert acc_cos == {0, 2}  # the NaN cosine of conv2 is dropped
    assert {e.step for e in logs["similarity/local"].Scalars("similarity/mse")} == {2}
    main = logs["similarity"]
    for tag in main.Tags()["histograms"]:
        h = main.Histograms(tag)[0].histogram_value
        assert all(
            math.isfinite(v) for v in (h.min, h.max, h.num, h.sum, h.sum_squares, *h.bucket, *h.bucket_limit)
        )
    assert "dense/float" not in main.Tags()["histograms"]  # non-finite edges: nothing to show
    text = main.Tensors("similarity/report")[0].tensor_proto.string_val[0].decode().lower()
    assert "nan" not in text and "inf" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert "`conv2`" in rows[-1] and rows[-1].rstrip(" |").endswith("n/a")  # unknown SQNR ranked last
    assert len(main.Tags()["images"]) == SAMPLES + 3

    devices = sim.error_devices(result.report)
    assert "conv2" not in devices and devices["dense"] == "error:high"
    attrs = sim.metric_attrs(result.report)
    assert set(attrs["conv2"]) == {"cosine_min"}
    assert all(
        isinstance(v, str) or math.isfinite(v) for layer_attrs in attrs.values() for v in layer_attrs.values()
    )


def test_empty_report_writes_a_summary_and_no_samples(tmp_path):
    logs = write(tmp_path, SimilarityResult(SimilarityReport(samples=0, layers=[])), make_graph())
    assert set(logs["similarity"].Tags()["images"]) == {
        "cosine_similarity/summary",
        "filters/conv1",
        "filters/conv2",
    }
    assert logs["similarity/accumulated"].Tags()["scalars"] == []


def test_all_nan_sample_still_plots():
    report = make_result().report
    for lay in report.layers:
        lay.cosine_per_sample[0] = math.nan
    report.layers[0].cosine_per_sample = report.layers[0].cosine_per_sample[:5]  # too short: padded
    pngs = sim.CosinePlots(report).samples()
    assert len(pngs) == SAMPLES and all(p[:4] == b"\x89PNG" for p in pngs)
    assert np.isnan(sim.cosine_matrix(report)[0, 5:]).all()


# ---------------------------------------------------------------- plots and filters
def test_many_layers_fit_one_readable_image():
    rng = np.random.default_rng(1)
    layers = [layer(f"model.block{i}.conv", i, 1 - np.abs(rng.normal(0, 1e-3, 4)), 30.0) for i in range(200)]
    report = SimilarityReport(samples=4, layers=layers)
    plots = sim.CosinePlots(report)
    pngs = plots.samples() + [plots.summary()]
    for png in pngs:
        height, width, _ = png_size(png)
        assert width <= 2000 and height <= 700


def _rgb(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def _has_colour(image: np.ndarray, colour: str, tolerance: int = 12) -> bool:
    from matplotlib.colors import to_rgb

    target = np.array(to_rgb(colour)) * 255
    return bool((np.abs(image - target).max(axis=-1) <= tolerance).any())


def test_summary_and_sample_plots_share_axes_but_not_their_lines():
    plots = sim.CosinePlots(make_result().report)
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
    np.testing.assert_array_equal(sim.filter_tiles(kernel, (0,)), kernel[:, 0])
    np.testing.assert_array_equal(sim.filter_tiles(keras_kernel, (3,)), sim.filter_tiles(kernel, (0,)))
    # depthwise Keras kernel (kh, kw, in, multiplier): one filter per (in, multiplier)
    assert sim.filter_tiles(np.zeros((3, 3, 4, 2)), (2, 3)).shape == (8, 3, 3)

    g = Graph("keras_tiny", "keras")
    g.add_node(Node("input", OpKind.INPUT, "InputLayer"))
    g.add_node(keras_node)
    g.add_edge("input", "conv_k")
    g.inputs, g.outputs = ["input"], [("conv_k", 0)]
    assert sim.filter_nodes(g) == [keras_node]
    result = SimilarityResult(
        SimilarityReport(samples=2, layers=[layer("conv_k", 0, np.array([0.99, 1.0]), 30.0)])
    )
    logs = write(tmp_path, result, g)
    (image,) = logs["similarity"].Images("filters/conv_k")
    height, width, _ = png_size(image.encoded_image_string)
    assert width > height > 150


def test_every_weight_of_a_filter_is_a_square_of_the_same_size():
    """No resampling: filters and the gaps between them keep their proportions, so a 3x3
    filter does not look wider than its neighbour."""
    kernel = np.ones((4, 1, 2, 2), np.float32)  # 2 x 2 filters of 2 x 2: a 5 x 5 grid with a gap cross
    node = Node("c", OpKind.CONV, "Conv2d", weights={"kernel": kernel}, kernel_axes={"kernel": (0,)},
                quant=kernel_quant(kernel, 0))  # fmt: skip
    image = _rgb(sim.filters_png(node))
    gap = np.array(sim._diverging().get_bad()[:3]) * 255
    positive = np.array(sim._diverging()(1.0)[:3]) * 255
    is_gap = (np.abs(image - gap) <= 1).all(axis=2)
    is_positive = (np.abs(image - positive) <= 1).all(axis=2)
    zoom = sim.FILTER_PANEL_PX // 5
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
    assert [n.name for n in sim.filter_nodes(g)] == ["conv1", "conv2"]
    node = g.node("conv1")
    quantized_width = png_size(sim.filters_png(node))[1]
    node.quant = NodeQuantConfig()
    assert png_size(sim.filters_png(node))[1] < quantized_width
    grid = sim.tile_grid(np.ones((64, 3, 3)))
    assert grid.shape == (8 * 4 - 1, 8 * 4 - 1) and np.isnan(grid).sum() == 31 * 31 - 64 * 9
