"""Float vs quantized, layer by layer: the damaged layer is found, and the report reads back."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_compression_toolkit as mct
from model_compression_toolkit.core.similarity.metrics import SQNR_CEILING_DB
from model_compression_toolkit.core.similarity.plan import Comparison
from model_compression_toolkit.core.similarity.reference import FloatReference
from model_compression_toolkit.observers.cosine_plots import SAMPLES_TAG, SUMMARY_TAG
from model_compression_toolkit.observers.similarity_view import scalar_tag
from model_compression_toolkit.observers.stage_view import stage_run
from model_compression_toolkit.pipeline.backends import get_backend
from model_compression_toolkit.pipeline.session import produced_graph
from tests.fixtures.damage import outlier_weight
from tests.fixtures.digits import representative_dataset
from tests.fixtures.tb import layer_name, load, run_folders

PER_TENSOR = mct.core.CoreConfig(
    quantization_config=mct.core.QuantizationConfig(
        weights_per_channel=False, weights_error_method=mct.core.QuantizationErrorMethod.NOCLIPPING
    )
)


def test_a_layer_damaged_by_quantization_is_the_first_cause_and_later_layers_inherit(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    damaged, conv = outlier_weight(fw.name, model)
    mct.set_log_folder(tmp_path)
    _, info = fw.ptq(damaged, representative_dataset(x_train), PER_TENSOR)
    report = info.similarity
    first = report.quantizers[0]
    assert (first.name, first.kind, first.cause) == (conv, "weights", True), report.summary()
    assert report.causes() == [first] and first.output_sqnr_db < 10
    assert first.zero_rounded_percent > 90  # the outlier's per-tensor grid rounds the rest to 0
    # the culprit's weights: float, or on more bits where that restores; or, cheaper where it
    # restores (the kernels rounded with compensation, the outlier's channel scaled down),
    # the channels of the pairs it sits in equalized: exact in float, integer, no byte
    fix = report.suggested_fix()
    if fix.equalize:
        assert any(conv in pair for pair in fix.equalized_pairs) and fix.restores, fix.summary()
    else:
        assert fix.weights == [conv] or (not fix.weights and set(fix.weight_bits) == {conv}), fix.summary()
    assert not fix.activations, fix.summary()
    worst = report.ranked()[0]
    assert worst.role == "cause" and conv in {worst.name, *_group(info, worst.name)}
    # the layers after it inherit the damage (accumulated) but are fine alone (local)
    after = [layer for layer in report.layers if layer.position > worst.position and layer.local_sqnr_db]
    assert after and all(layer.local_sqnr_db > worst.local_sqnr_db + 10 for layer in after)
    damaged_after = [layer for layer in after if layer.sqnr_db < 20]
    assert damaged_after and all(layer.role == "inherits" for layer in damaged_after)


def _group(info, point: str) -> list[str]:
    """The layers fused into a compare point (a conv before its ReLU)."""
    return [name for name, layer in info.layers.items() if layer.activation_float_reason and point in layer.activation_float_reason]


def test_report_files_match_info_and_hold_no_nan(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    _, info = fw.ptq(model, representative_dataset(x_train))
    (run,) = run_folders(tmp_path)

    def no_constants(name):
        raise AssertionError(f"{name} in the JSON report")

    report = json.loads((run / "similarity_report.json").read_text(), parse_constant=no_constants)
    assert report["samples"] == 20
    assert [row["name"] for row in report["layers"]] == [layer.name for layer in info.similarity.ranked()]
    assert all(len(row["cosine_per_sample"]) == 20 for row in report["layers"])
    assert all(-1 <= row["cosine_mean"] <= 1 and row["sqnr_db"] <= SQNR_CEILING_DB for row in report["layers"])
    outputs = [row for row in report["layers"] if row["is_output"]]
    assert len(outputs) == 1
    csv_lines = (run / "similarity_report.csv").read_text().splitlines()
    assert len(csv_lines) == len(report["layers"]) + 1 and "local_sqnr_db" in csv_lines[0]
    assert "nan" not in (run / "similarity_report.csv").read_text().lower()
    json.dumps(info.to_dict(), allow_nan=False)


def test_similarity_reads_back_from_tensorboard(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    _, info = fw.ptq(model, representative_dataset(x_train))
    (run,) = run_folders(tmp_path)
    acc = load(run / stage_run("quantized_graph"))
    images = acc.Tags()["images"]
    assert {SAMPLES_TAG, SUMMARY_TAG} <= set(images)
    assert any(tag.startswith("Filters/") for tag in images)
    histograms = acc.Tags()["histograms"]
    for layer in info.similarity.layers:
        f, q = (e.histogram_value for e in acc.Histograms(layer.name))  # step 0 float, step 1 quantized
        assert list(f.bucket_limit) == list(q.bucket_limit)
        assert f.num == q.num > 0  # the same 20 samples
    assert {layer.name for layer in info.similarity.layers} <= set(histograms)
    assert {"similarity/causes", "similarity/report"} <= set(acc.Tags()["tensors"])  # the ranked text tables
    tags = set(acc.Tags()["scalars"])
    assert {scalar_tag(m, k) for m in ("cosine", "sqnr_db", "mse") for k in ("accumulated", "local")} <= tags
    steps = [e.step for e in acc.Scalars(scalar_tag("sqnr_db", "accumulated"))]
    assert steps == sorted(layer.position for layer in info.similarity.layers)
    devices = {layer_name(n.name): n.device for n in acc.Graph().node}
    for layer in info.similarity.layers:  # coloured by the error its own quantizers do at the output
        assert devices[layer.name].startswith(f"/device:{layer.damage_class} own error")


def test_analysis_can_be_switched_off(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
    _, info = fw.ptq(model, representative_dataset(x_train), config)
    (run,) = run_folders(tmp_path)
    assert info.similarity is None
    assert not (run / "similarity_report.json").exists()
    assert not load(run / stage_run("quantized_graph")).Tags()["images"]


def test_analysis_asked_for_runs_without_a_log_folder_and_writes_nothing(fw, trained_digits, tmp_path, monkeypatch):
    """``analyze_similarity=True`` fills ``info.similarity`` with no log folder set; the
    default (None) runs it only when a log folder is set; the user's config is not changed."""
    model, x_train, _, _ = trained_digits
    monkeypatch.chdir(tmp_path)
    gen = representative_dataset(x_train)
    _, default = fw.ptq(model, gen)
    assert default.similarity is None and default.log_folder is None
    asked = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
    _, info = fw.ptq(model, gen, asked)
    assert info.similarity is not None and info.similarity.samples == 20 and info.log_folder is None
    assert info.similarity.ranked()[0].local_sqnr_db is not None
    assert list(tmp_path.iterdir()) == []
    unset = mct.core.CoreConfig()
    mct.set_log_folder(tmp_path / "logs")
    _, logged = fw.ptq(model, gen, unset)
    assert logged.similarity is not None and unset.debug_config.analyze_similarity is None


def test_small_memory_cap_gives_the_same_report_in_chunks(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    _, big = fw.ptq(model, representative_dataset(x_train))
    small_cap = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(similarity_memory_cap=1 << 20, similarity_samples=7))
    _, small = fw.ptq(model, representative_dataset(x_train), small_cap)
    assert small.similarity.samples == 7
    for a, b in zip(big.similarity.layers, small.similarity.layers):
        assert a.name == b.name
        np.testing.assert_allclose(a.cosine_per_sample[:7], b.cosine_per_sample, rtol=1e-6, atol=1e-9)


def counting(data):
    """``data``, and a list that grows by one each time it is iterated."""
    calls = []

    def counted():
        calls.append(1)
        return data()

    return counted, calls


def test_the_statistics_pass_gives_the_comparison_its_float_side(fw, trained_digits, tmp_path):
    """The float model runs once over the data: the comparison reuses the first samples'
    float outputs. When they do not fit under the memory cap at once, the float model
    runs again, chunk by chunk, over a second iteration of the data, with the same result."""
    model, x_train, _, _ = trained_digits
    data = representative_dataset(x_train, 3, 8)
    counted, calls = counting(data)
    mct.set_log_folder(tmp_path)
    _, kept = fw.ptq(model, counted)
    assert len(calls) == 1 and kept.similarity.samples == 20
    calls.clear()
    small_cap = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(similarity_memory_cap=1 << 20))
    _, chunked = fw.ptq(model, counted, small_cap)
    assert len(calls) == 2 and chunked.similarity.samples == 20
    first, second = (load(run / stage_run("quantized_graph")) for run in run_folders(tmp_path))
    for layer in kept.similarity.layers:  # the float histograms kept by the statistics pass hold the 20 samples
        counts = [e.histogram_value.num for acc in (first, second) for e in acc.Histograms(layer.name)]
        assert len(counts) == 4 and len(set(counts)) == 1, (layer.name, counts)
        # over the cap too, the float side is the statistics pass's histogram: not binned again
        kept_float, chunked_float = (acc.Histograms(layer.name)[0].histogram_value for acc in (first, second))
        assert kept_float.bucket_limit == chunked_float.bucket_limit and kept_float.bucket == chunked_float.bucket
    for a, b in zip(kept.similarity.layers, chunked.similarity.layers):  # batches of 8 vs chunks of other
        assert a.name == b.name  # sizes: float sums differ in the last bits, a rare value rounds the other way
        np.testing.assert_allclose(a.cosine_per_sample, b.cosine_per_sample, rtol=1e-4)
        np.testing.assert_allclose(a.local_sqnr_db or 0, b.local_sqnr_db or 0, rtol=1e-3)


def test_the_float_side_is_kept_when_it_fits_beside_one_sample_of_the_quantized_outputs(
    fw, trained_digits, tmp_path
):
    """A cap that holds the float outputs of the 20 samples but the quantized outputs of
    only one sample: the statistics pass still keeps the float side (the data is iterated
    once), and the quantized and local models run on one sample at a time, same report."""
    model, x_train, _, _ = trained_digits
    data = representative_dataset(x_train, 3, 8)
    counted, calls = counting(data)
    mct.set_log_folder(tmp_path)
    q_model, roomy = fw.ptq(model, counted)
    float_graph, _ = get_backend(model).read(model, [x_train[:8]])
    plan = Comparison.of(float_graph, produced_graph(q_model))
    cap = int(20 * plan.float_bytes + 1.5 * plan.other_bytes)
    assert plan.keeps_reference(20, cap) and plan.chunk_size(20, cap, reference=True) == 1
    assert plan.chunk_size(20, cap) < 20  # without the kept float side it would not fit at once
    calls.clear()
    tight = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(similarity_memory_cap=cap))
    _, one_by_one = fw.ptq(model, counted, tight)
    assert len(calls) == 1 and one_by_one.similarity.samples == 20
    for a, b in zip(roomy.similarity.layers, one_by_one.similarity.layers):
        assert a.name == b.name
        np.testing.assert_allclose(a.cosine_per_sample, b.cosine_per_sample, rtol=1e-5)
        np.testing.assert_allclose(a.local_sqnr_db or 0, b.local_sqnr_db or 0, rtol=1e-4)


@pytest.mark.parametrize("keep", [True, False])
def test_the_float_histograms_serve_only_a_comparison_of_exactly_their_samples(keep):
    """The statistics pass takes the float histograms on the first samples it was asked to
    record: a comparison of fewer or more samples bins its float outputs itself, unless
    the data held fewer samples than asked for (then every comparison sees just those)."""

    def recorded(batches: int) -> FloatReference:
        reference = FloatReference(["a"], 20, keep=keep)
        for _ in range(batches):
            x = np.zeros((8, 2), np.float32)
            reference.add([x], {"a": x})
        reference.histograms = {"a": (np.ones(2), np.arange(3.0))}
        return reference

    full, short = recorded(3), recorded(1)  # 20 of 24 samples; the data's only 8
    assert full.samples == 20 and short.samples == 8
    assert list(full.histograms_of(20)) == ["a"]
    assert full.histograms_of(19) == {} and full.histograms_of(33) == {}
    assert list(short.histograms_of(8)) == list(short.histograms_of(33)) == ["a"]
    assert short.histograms_of(5) == {}


@pytest.mark.parametrize("samples", [1, 33])
def test_sample_count_is_respected_even_across_batches(fw, trained_digits, tmp_path, samples):
    model, x_train, _, _ = trained_digits
    mct.set_log_folder(tmp_path)
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(similarity_samples=samples))
    _, info = fw.ptq(model, representative_dataset(x_train, 5, 16), config)
    assert info.similarity.samples == samples
    assert all(len(layer.cosine_per_sample) == samples for layer in info.similarity.layers)


def test_standalone_analysis_of_a_model_we_produced(fw, trained_digits, tmp_path):
    model, x_train, _, _ = trained_digits
    q_model, _ = fw.ptq(model, representative_dataset(x_train))  # no log folder: no analysis ran
    mct.set_log_folder(tmp_path)
    result = mct.analyze_similarity(model, q_model, representative_dataset(x_train))
    assert result.report.samples == 20 and result.report.layers
    (run,) = run_folders(tmp_path)
    assert (run / "similarity_report.json").exists()
    assert SUMMARY_TAG in load(run / stage_run("quantized_graph")).Tags()["images"]
    with pytest.raises(mct.errors.ModelReadError, match="returned by a PTQ call"):
        mct.analyze_similarity(model, model, representative_dataset(x_train))


def test_an_output_without_a_batch_axis_is_compared_whole(tmp_path):
    """A scalar output (here the mean activation) cannot be cut into samples: it is kept
    and compared whole, batch by batch, while every other point gets its 20 samples."""
    import torch
    from torch import nn

    class WithScalar(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            return self.fc(y.mean(dim=(2, 3))), y.mean()

    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((8, 3, 16, 16), dtype=np.float32) for _ in range(4)]
    mct.set_log_folder(tmp_path)
    _, info = mct.ptq.pytorch_post_training_quantization(WithScalar().eval(), lambda: iter([[b] for b in batches]))
    lengths = {layer.name: len(layer.cosine_per_sample) for layer in info.similarity.layers}
    scalar = [name for name, n in lengths.items() if n != 20]
    assert len(scalar) == 1 and lengths[scalar[0]] == 3  # batches of 8, 8 and 4 samples
    assert info.similarity.samples == 20


def _two_branches(fw):
    """A conv's 8 channels split in two, a 1x1 conv on the first half, a 3x3 on the second,
    added (Keras: `keras.ops.split`, one node with two outputs; PyTorch: `chunk`)."""
    if fw.name == "pytorch":
        import torch
        from torch import nn

        class TwoBranches(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.a, self.c, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 3, padding=1)

            def forward(self, x):
                p, q = torch.relu(self.a(x)).chunk(2, dim=1)
                return self.c(p) + self.b(q)

        torch.manual_seed(0)
        return TwoBranches().eval()
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3))
    p, q = keras.ops.split(keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="a")(x), 2, axis=-1)
    out = keras.layers.Add(name="add")(
        [keras.layers.Conv2D(4, 1, name="c")(p), keras.layers.Conv2D(4, 3, padding="same", name="b")(q)]
    )
    return keras.Model(x, out)


def test_a_layer_fed_by_a_second_output_is_never_given_a_local_error_of_another_input(fw):
    """The float pass keeps each node's first output: the conv reading the split's second half
    gets no local error in Keras (it used to be measured against the first half: -1.4 dB, the
    worst layer of a healthy model), and the right one in PyTorch, whose chunk is one node
    per half."""
    x = np.random.default_rng(0).normal(size=(32, 3, 12, 12)).astype(np.float32)
    x = np.ascontiguousarray(np.moveaxis(x, 1, -1)) if fw.channels_last else x
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=True))
    _, info = fw.ptq(_two_branches(fw), lambda: iter([[x[:16]], [x[16:]]]), config)
    layers = {layer.name: layer for layer in info.similarity.layers}
    second = layers["b"]
    assert second.local_sqnr_db is None or second.local_sqnr_db > 25, info.similarity.summary()
    assert layers["c"].local_sqnr_db is not None and layers["c"].local_sqnr_db > 25
    if fw.name == "pytorch":
        assert second.local_sqnr_db is not None

