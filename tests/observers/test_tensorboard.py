"""TensorBoard protos, one builder at a time, and stages read back with TensorBoard's loader."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
from tensorboard.compat.proto import event_pb2, summary_pb2

from model_compression_toolkit.core.calibration.statistics import NodeStatistics
from model_compression_toolkit.core.graph import Graph, Node, OpKind
from model_compression_toolkit.core.quant_config import (
    NodeQuantConfig,
)
from model_compression_toolkit.observers import event_file as ef
from model_compression_toolkit.observers import protos as tb
from model_compression_toolkit.observers.call import observe_call
from model_compression_toolkit.observers.graph_view import graph_attrs
from model_compression_toolkit.observers.log_folder import get_log_folder, safe_run_path, set_log_folder
from model_compression_toolkit.observers.stage_view import stage_run
from model_compression_toolkit.observers.tensorboard import TensorBoardObserver
from model_compression_toolkit.pipeline.events import STAGES, StageReport
from tests.fixtures.observed import (
    load,
    make_graph,
    make_memory,
    write_run,
)


# ---------------------------------------------------------------- scalar series
def test_scalar_series_events_put_every_tag_of_a_step_in_one_event():
    series = {"a/b": np.arange(200, dtype=np.float32), "é c": np.array([1.5, np.nan, -2.0])}
    events = ef.scalar_series_events(series, 123.25)
    assert len(events) == 200
    for step in (0, 1, 2, 199):
        expected = event_pb2.Event(wall_time=123.25, step=step)
        for tag, values in series.items():
            if step < values.size and np.isfinite(values[step]):
                expected.summary.value.add(tag=tag, simple_value=float(values[step]))
        assert events[step] == expected


# ---------------------------------------------------------------- pure builders
def graph_def(g: Graph, **kwargs):
    return tb.graph_def(g, graph_attrs(g, make_memory(g)), **kwargs)


def test_graph_def_nodes_edges_shapes_and_quantization():
    g = make_graph()
    nodes = {n.name: n for n in graph_def(g).node}
    assert list(nodes) == [n.name for n in g.nodes()]
    assert list(nodes["add"].input) == ["split", "split:1"]
    assert list(nodes["conv"].input) == ["input"]
    conv = nodes["conv"]
    assert conv.op == "Conv2d" and conv.device == "/device:Conv2d:0"
    assert list(conv.attr["pytorch.kernel_size"].list.i) == [3, 3]  # the framework's own, kept apart
    assert conv.attr["pytorch.padding"].s == b"same"
    assert conv.attr["layer.kind"].s == b"conv"
    assert conv.attr["quantization.weights.kernel.n_bits"].i == 8
    assert conv.attr["quantization.weights.kernel.method"].s == b"symmetric"
    assert conv.attr["quantization.weights.kernel.per_channel"].b is True
    assert conv.attr["quantization.weights.kernel.threshold_min"].f == pytest.approx(
        0.1
    )  # numbers as numbers
    assert conv.attr["quantization.weights.kernel.threshold_max"].f == pytest.approx(0.4)
    assert conv.attr["quantization.activation.threshold"].f == 2.5
    assert conv.attr["quantization.activation.signed"].b is True
    assert conv.attr["memory.weights_bytes"].i == 4 * (4 * 27 + 4)
    assert nodes["split"].attr["quantization.float_reason"].s == b"unknown op"
    assert nodes["split"].attr["quantization.bits"].s == b"A float"
    shapes = nodes["split"].attr["_output_shapes"].list.shape
    assert [[d.size for d in s.dim] for s in shapes] == [[-1, 2, 8, 8]] * 2


def test_the_node_panel_lists_one_plain_line_first():
    """TensorBoard lists a node's attributes in reverse alphabetical order: the line in words
    sorts after every other key, and the groups read top down."""
    g = make_graph()
    for node in graph_def(g).node:
        keys = sorted((k for k in node.attr if k != "_output_shapes"), reverse=True)
        assert keys[0] == tb.IN_SHORT, keys
        groups = [k.split(".")[0] for k in keys[1:]]
        assert groups == sorted(groups, reverse=True)
    conv = {n.name: n for n in graph_def(g).node}["conv"].attr[tb.IN_SHORT].s.decode()
    assert conv == "W8 per channel, A8 signed, threshold 2.5, step 0.01953", conv
    fused = make_graph()
    fused.node("conv").quant = NodeQuantConfig(
        weights=fused.node("conv").quant.weights,
        fused_into="split",
        activation_float_reason="fused with the activation 'split'",
    )
    attrs = graph_attrs(fused, make_memory(fused))["conv"]
    assert attrs[tb.IN_SHORT] == "W8 per channel, output quantized after layer split"
    assert attrs["quantization.activation.quantized_after"] == "split"
    assert not any("float_reason" in k for k in attrs)  # nothing of a fused conv is float


def test_integer_layer_names_are_bracketed_so_tensorboard_keeps_the_graph_order():
    g = make_graph({"conv": "0", "split": "12", "add": "007", "dense": "a/3"})
    names = [n.name for n in graph_def(g).node]
    assert names == ["input", "[0]", "[12]", "007", "a/[3]"]
    meta = tb.run_metadata(g, make_memory(g))
    assert {ns.node_name for dev in meta.step_stats.dev_stats for ns in dev.node_stats} == set(names)


def test_graph_def_device_override_and_legend_first():
    g = make_graph()
    legend = [
        ("colour legend/high", tb.device_name("high", 1)),
        ("colour legend/low", tb.device_name("low", 4)),
    ]
    gd = graph_def(g, devices={"conv": tb.device_name("error: high")}, legend=legend)
    assert [(n.name, n.device) for n in gd.node[:2]] == legend and not gd.node[0].input
    assert {n.name: n.device for n in gd.node}["conv"] == "/device:error_ high:0"


def test_run_metadata_one_entry_per_node_with_its_memory():
    g = make_graph()
    memory = make_memory(g)
    meta = tb.run_metadata(g, memory)
    stats = {ns.node_name: (dev.device, ns) for dev in meta.step_stats.dev_stats for ns in dev.node_stats}
    gd = graph_def(g)
    assert set(stats) == {n.name for n in gd.node}
    for node in gd.node:
        device, ns = stats[node.name]
        assert device == node.device  # TensorBoard overwrites the node's device with this
        assert sum(m.total_bytes for m in ns.memory) == memory[node.name].total_bytes > 0
        assert ns.all_start_micros > 0
    _, conv = stats["conv"]
    assert [d.size for d in conv.output[0].tensor_description.shape.dim] == [1, 4, 8, 8]


def test_hostile_graph_names_stay_parseable():
    g = make_graph({"split": "a:1", "add": "^b//c/"})
    names = {n.name for n in graph_def(g).node}
    assert "a_1" in names and "b/c" in names


def test_histogram_proto_uses_right_edges_and_true_count():
    counts = np.array([0, 3, 0, 5, 2, 0, 0])
    edges = np.arange(8, dtype=np.float64)
    h = tb.histogram_proto(counts, edges, count=10, sum=31.0, sum_squares=111.0, min=1.2, max=4.9)
    assert list(h.bucket_limit) == [2.0, 3.0, 4.0, 5.0]  # right edges of buckets 1..4
    assert list(h.bucket) == [3, 0, 5, 2]
    assert (h.num, h.sum, h.sum_squares, h.min, h.max) == (10, 31.0, 111.0, 1.2, 4.9)
    assert tb.histogram_proto(np.zeros(3), np.arange(4.0)).num == 0


def test_histogram_proto_merges_fine_bins_exactly():
    values = np.random.default_rng(3).gamma(2.0, size=50_000)
    counts, edges = np.histogram(values, bins=2048)
    h = tb.histogram_proto(counts, edges, count=values.size)
    assert len(h.bucket) <= tb.MAX_BUCKETS == 256 < np.count_nonzero(counts)
    assert sum(h.bucket) == h.num == values.size
    assert set(h.bucket_limit) <= set(edges[1:]) and h.bucket_limit[-1] == edges[-1]
    limits = np.asarray(h.bucket_limit)
    below = np.searchsorted(values, limits, side="right", sorter=np.argsort(values))
    np.testing.assert_array_equal(np.cumsum(h.bucket)[:-1], below[:-1])  # each bucket holds its values
    odd = tb.histogram_proto(np.ones(5), np.arange(6.0), max_buckets=2)  # 3 + 2 bins
    assert (list(odd.bucket_limit), list(odd.bucket)) == ([3.0, 5.0], [3.0, 2.0])


def test_histogram_from_values_is_exact():
    values = np.random.default_rng(2).normal(size=(7, 11))
    h = tb.histogram_from_values(values, bins=32)
    assert h.num == values.size == sum(h.bucket)
    assert h.sum == pytest.approx(values.sum(), abs=1e-12)
    assert h.sum_squares == pytest.approx((values**2).sum(), rel=1e-12)
    assert (h.min, h.max) == (values.min(), values.max())
    assert h.bucket_limit[-1] == values.max()  # the last right edge is the maximum
    same = tb.histogram_from_values(values * 0.5, bins=np.linspace(values.min(), values.max(), 33))
    assert set(same.bucket_limit) <= set(np.linspace(values.min(), values.max(), 33)[1:])


def test_figure_to_png_and_image_header():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1), dpi=50)
    ax.plot([0, 1], [1, 0])
    png = tb.figure_to_png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert tb.png_size(png)[:2] == (50, 100)
    assert not plt.get_fignums()


def test_safe_run_path_never_leaves_the_root(tmp_path):
    for name in ("../x", "/etc/passwd", "a/../../b", "a b'\"c", "ünï/cødé", "..", "", "a\x00b"):
        path = safe_run_path(tmp_path, name)
        assert path.resolve().is_relative_to(tmp_path.resolve()) and path != tmp_path
    assert safe_run_path(tmp_path, "a b") != safe_run_path(tmp_path, "a_b")


# ---------------------------------------------------------------- a run read back
def test_every_stage_round_trips_through_tensorboard(tmp_path):
    start = time.time()
    folder, g, acts = write_run(tmp_path)
    mux = pem.EventMultiplexer().AddRunsFromDirectory(str(folder))
    mux.Reload()
    runs = set(mux.Runs())
    statistics = stage_run("after_statistics_collection")
    per_channel = {f"{statistics}/{k}_per_channel" for k in ("min", "max", "mean")}
    assert runs == {stage_run(s) for s in STAGES} | per_channel  # 8 runs, in pipeline order by name
    assert sorted(runs) == [
        *(stage_run(s) for s in STAGES[:3]),
        *sorted(per_channel),
        *map(stage_run, STAGES[3:]),
    ]
    edges = {(e.src, e.dst, e.src_index) for e in g.edges()}
    for stage in STAGES:
        acc = load(folder / stage_run(stage))
        gd = acc.Graph()
        assert [n.name for n in gd.node] == [n.name for n in g.nodes()]
        read_edges = set()
        for n in gd.node:
            assert n.attr["_output_shapes"].list.shape
            for inp in n.input:
                src, _, k = inp.partition(":")
                read_edges.add((src, n.name, int(k or 0)))
        assert read_edges == edges
        meta = acc.RunMetadata("Resources")
        per_node = [ns for dev in meta.step_stats.dev_stats for ns in dev.node_stats]
        assert sorted(ns.node_name for ns in per_node) == sorted(n.name for n in g.nodes())
        assert all(sum(m.total_bytes for m in ns.memory) > 0 for ns in per_node)
        (text,) = acc.Tensors("summary")
        markdown = text.tensor_proto.string_val[0].decode()
        assert "| layers | 5 |" in markdown and "quantized layers" in markdown and "total memory" in markdown
        assert "| layers kept in float | 3 |" in markdown  # input, unknown op and dense: no quantizer
        assert "- `split`: unknown op" in markdown
        assert text.tensor_proto.dtype == 7  # DT_STRING
        for event in [text, *(e for t in acc.Tags()["histograms"] for e in acc.Histograms(t))]:
            assert start - 1 <= event.wall_time <= time.time() + 1
    assert "summary" in load(folder / stage_run("initial_graph")).PluginTagToContent("text")


def test_activation_histograms_and_per_channel_scalars(tmp_path):
    folder, g, acts = write_run(tmp_path)
    acc = load(folder / stage_run("thresholds_selection"))
    with_grid = {n.name for n in g.nodes() if n.quant.activation is not None}
    assert set(acc.Tags()["histograms"]) == with_grid == {"conv", "add"}
    for name in with_grid:
        values = acts[name]
        events = acc.Histograms(name)
        assert [e.step for e in events] == [0, 1]  # float, then through its grid: one card, two steps
        h, through = (e.histogram_value for e in events)
        _, edges = np.histogram(values.ravel(), bins=64)
        assert h.num == values.size == sum(h.bucket) == sum(through.bucket)
        assert h.sum == values.sum() and h.sum_squares == pytest.approx((values**2).sum(), rel=1e-15)
        assert set(h.bucket_limit) <= set(edges[1:]) and h.bucket_limit[-1] == edges[-1]
        assert set(through.bucket_limit) <= set(edges[1:])  # the same bins
        assert (h.min, h.max) == (values.min(), values.max())
    assert not load(folder / stage_run("after_statistics_collection")).Tags()["histograms"]
    for kind, fn in (("min", np.min), ("max", np.max), ("mean", np.mean)):
        scalars = load(folder / stage_run("after_statistics_collection") / f"{kind}_per_channel")
        assert set(scalars.Tags()["scalars"]) == set(acts)
        for name, values in acts.items():
            events = scalars.Scalars(name)
            expected = fn(np.moveaxis(values, 1, 0).reshape(values.shape[1], -1), axis=1)
            assert [e.step for e in events] == list(range(values.shape[1]))
            np.testing.assert_allclose([e.value for e in events], expected, rtol=1e-6)
    images = load(folder / stage_run("thresholds_selection")).Tags()["images"]
    assert sorted(images) == ["Per-channel ranges/001_conv", "Per-channel ranges/002_add"]


def test_quantized_graph_weight_histograms_share_bins(tmp_path):
    folder, g, _ = write_run(tmp_path)
    acc = load(folder / stage_run("quantized_graph"))
    f, q = (e.histogram_value for e in acc.Histograms("conv/weights"))
    kernel = g.node("conv").weights["kernel"]
    assert f.num == q.num == kernel.size
    lo, hi = min(f.min, q.min), max(f.max, q.max)
    grid = np.linspace(lo, hi, 257)[1:]
    for h in (f, q):
        assert np.allclose(
            h.bucket_limit, grid[np.searchsorted(grid, h.bucket_limit[0]) :][: len(h.bucket_limit)]
        )


def test_extra_runs_and_images_through_the_run_context(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    set_log_folder(tmp_path)
    with observe_call("m", get_log_folder()) as run:
        fig = Figure(figsize=(2, 2), dpi=40)
        fig.add_subplot().plot([1, 2])
        (observer,) = [o for o in run.observer.observers if isinstance(o, TensorBoardObserver)]
        w = observer.writer("similarity")
        w.add_image("cosine", tb.figure_to_png(fig), step=3)
        w.add_scalar("score", 0.5, step=1)
        w.flush()
        acc = load(run.folder / "similarity")  # flushed: readable while the run goes on
        (img,) = acc.Images("cosine")
        assert (img.step, img.width, img.height) == (3, 80, 80)
        assert acc.Scalars("score")[0].value == 0.5
    assert w.disabled or w._file is None  # closed with the run


def test_a_wide_model_gets_every_channel_of_every_layer(tmp_path):
    """60 layers, 2048-bin histograms, 2048 channels: the stage and its three scalar runs.

    (How long this takes is measured in bench/, not asserted here.)"""
    rng = np.random.default_rng(3)
    g = Graph("wide", "keras")
    prev = None
    stats = {}
    for i in range(60):
        name = f"block_{i}/conv"
        g.add_node(
            Node(
                name,
                OpKind.CONV if i else OpKind.INPUT,
                "Conv2D",
                output_shapes=[(None, 7, 7, 2048)],
                weights={"kernel": rng.normal(size=(1, 1, 8, 8))} if i else {},
            )
        )
        if prev:
            g.add_edge(prev, name)
        prev = name
        counts = rng.integers(0, 1000, size=2048)
        stats[name] = NodeStatistics(
            counts=counts,
            edges=np.linspace(-1, 1, 2049),
            count=int(counts.sum()),
            sum=1.0,
            sum_squares=2.0,
            min=-1.0,
            max=1.0,
            min_per_channel=rng.normal(size=2048),
            max_per_channel=rng.normal(size=2048),
            mean_per_channel=rng.normal(size=2048),
        )
    g.inputs, g.outputs = ["block_0/conv"], [(prev, 0)]
    memory = make_memory(g)
    sink = TensorBoardObserver(tmp_path)
    sink.stage_finished(StageReport("initial_graph", g, memory))
    sink.stage_finished(StageReport("after_statistics_collection", g, memory, statistics=stats))
    sink.close()
    acc = load(tmp_path / stage_run("after_statistics_collection") / "max_per_channel")
    assert len(acc.Scalars("block_59/conv")) == 2048


def test_writing_does_not_import_tensorflow(tmp_path):
    code = (
        "import sys\n"
        "from model_compression_toolkit.observers.event_file import RunWriter\n"
        f"w = RunWriter({str(tmp_path)!r}); w.add_scalar('x', 1.0); w.close()\n"
        "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules, 'framework imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
    assert load(tmp_path).Scalars("x")[0].value == 1.0


def test_run_writer_raises_without_on_error_and_reports_with_it(tmp_path, monkeypatch):
    seen = []
    w = ef.RunWriter(tmp_path / "r", on_error=lambda p, e: seen.append((p, e)))
    monkeypatch.setattr(ef.RunWriter, "_write", _disk_full)
    w.add_scalar("x", 1.0)
    w.flush()
    assert seen and seen[0][0] == tmp_path / "r" and w.disabled
    w.add_scalar("x", 2.0)  # ignored
    w.close()
    monkeypatch.undo()
    raw = ef.RunWriter(tmp_path / "s")
    monkeypatch.setattr(ef.RunWriter, "_write", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        raw.add_scalar("x", 1.0)  # written at once: the error reaches the caller there
    assert raw.disabled
    raw.close()


def _disk_full(self, data):
    raise OSError(28, "No space left on device")


def test_histogram_proto_round_trips_through_the_summary_proto():
    h = tb.histogram_proto(np.array([1, 2]), np.array([0.0, 1.0, 2.0]), count=3)
    value = summary_pb2.Summary.Value(tag="t", histo=h)
    assert summary_pb2.Summary.Value.FromString(value.SerializeToString()).histo.num == 3


def test_records_are_the_bytes_tensorboards_record_writer_writes(tmp_path):
    """The C checksum frames every record exactly as tensorboard's pure-Python one does."""
    import io

    from tensorboard.summary.writer.record_writer import RecordWriter

    payloads = [b"", b"x", bytes(range(256)) * 3, np.random.default_rng(0).bytes(100_000)]
    expected = io.BytesIO()
    reference = RecordWriter(expected)
    for data in payloads:
        reference.write(data)
    assert b"".join(ef.frame_record(data) for data in payloads) == expected.getvalue()
