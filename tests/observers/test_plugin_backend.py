"""Issue 32: the Quantization dashboard's backend, on real log folders of real PTQ calls.

    a plain call, then a two-cause call (`tests.fixtures.two_causes`) -> <log folder>
    TensorBoard's WSGI app with the plugin -> werkzeug's test client -> /calls, /call?run=

Every number a page shows is the report's own: the test compares each with
``info.similarity`` (and ``info.memory``), exactly, since JSON carries floats unrounded.
"""

from __future__ import annotations

import argparse
import json
from importlib import metadata

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from model_compression_toolkit.observers.console import dashboard_url
from model_compression_toolkit.tensorboard_plugin import QuantizationPlugin
from tests.fixtures.trained import load_trained
from tests.fixtures.two_causes import HTML_NAME, logged_call, two_cause_model

ROUTE = "/data/plugin/quantization"


@pytest.fixture(scope="module")
def logged(fw, tmp_path_factory):
    """(log folder, plain call's info, two-cause call's info, names, the console's last line)."""
    folder = tmp_path_factory.mktemp(f"plugin_{fw.name}")
    plain, _ = logged_call(fw, folder, load_trained(fw.name))
    model, names, config = two_cause_model(fw)
    damaged, line = logged_call(fw, folder, model, config)
    return folder, plain, damaged, names, line


def client(logdir) -> Client:
    return Client(
        application.TensorBoardWSGI([QuantizationPlugin(base_plugin.TBContext(logdir=str(logdir)))])
    )


def get_json(c: Client, route: str, **query):
    response = c.get(f"{ROUTE}{route}", query_string=query)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data())


def run_id(info) -> str:
    return info.log_folder.name


def test_the_package_registers_the_tab_that_tensorboard_loads_as_a_module(tmp_path):
    (entry,) = [e for e in metadata.entry_points(group="tensorboard_plugins") if e.name == "quantization"]
    assert entry.load() is QuantizationPlugin
    listing = json.loads(client(tmp_path).get("/data/plugins_listing").get_data())["quantization"]
    assert listing["loading_mechanism"] == {"type": "IFRAME", "module_path": f"{ROUTE}/index.js"}
    assert listing["enabled"] is False  # an empty log folder: no call to show
    script = client(tmp_path).get(f"{ROUTE}/index.js")
    assert script.status_code == 200 and b"export async function render" in script.get_data()


def test_the_landing_page_lists_every_call_newest_first_with_its_numbers(logged):
    folder, plain, damaged, _, _ = logged
    c = client(folder)
    listing = json.loads(c.get("/data/plugins_listing").get_data())["quantization"]
    assert listing["enabled"] is True
    calls = get_json(c, "/calls")["calls"]
    assert [row["run"] for row in calls] == [run_id(damaged), run_id(plain)]
    for row, info in zip(calls, (damaged, plain)):
        assert row["model"] == info.model_name
        outputs = [layer.sqnr_db for layer in info.similarity.layers if layer.is_output]
        assert row["output_sqnr_db"] == min(outputs)
        assert row["memory"]["weights_float_bytes"] == info.memory.weights_float_bytes
        assert row["memory"]["weights_bytes"] == info.memory.weights_quantized_bytes
        assert row["memory"]["activation_bytes"] == info.memory.activation_quantized_bytes
        assert row["float_layers"] == len(info.float_layers)
        assert row["causes"] == [
            f"{q.name} {'output' if q.kind == 'activation' else 'weights'}" for q in info.similarity.causes()
        ]
    assert "at 2 bits" in calls[0]["settings"] and "at 2 bits" not in calls[1]["settings"]
    # the default hands the classifier's output on unrounded: said as such, not as a layer kept float
    (dense,) = [name for name, layer in plain.layers.items() if layer.kind == "dense"]
    assert calls[1]["settings"].endswith(f"; the model's outputs unrounded ({dense})"), calls[1]["settings"]
    assert calls[1]["causes"] == [] and calls[1]["verdict"].startswith("Nothing to fix")


def test_a_calls_page_shows_the_numbers_of_info_similarity(logged):
    folder, _, damaged, names, _ = logged
    report = damaged.similarity
    page = get_json(client(folder), "/call", run=run_id(damaged))
    # both causes, each with its evidence, the outlier's channel and the fix to paste
    causes = {(c["name"], c["kind"]): c for c in page["causes"]}
    assert list(causes) == [(q.name, q.kind) for q in report.causes()]
    assert {(names["activation"], "activation"), (names["weights"], "weights")} <= set(causes)
    outlier = causes[(names["activation"], "activation")]
    assert (
        outlier["channel"] == int(names["channel"])
        and f"channel {names['channel']}" in outlier["evidence"][0]
    )
    assert outlier["channels"]["outliers"][0] == int(names["channel"])
    for q in report.causes():
        shown = causes[(q.name, q.kind)]
        assert (shown["output_sqnr_db"], shown["sqnr_db"], shown["bits"]) == (
            q.output_sqnr_db,
            q.sqnr_db,
            q.bits,
        )
        assert q.name in page["verdict"]
    fix = report.suggested_fix()
    assert page["fix"]["code"] == fix.code() and page["fix"]["effects"] == fix.effects()
    assert page["fix"]["output_sqnr_db_after"] == fix.output_sqnr_db_after
    # every quantizer: its own SQNR, alone at the output, accumulated at its layer
    nodes = {n["name"]: n for n in page["graph"]["nodes"]}
    shown = {(q["name"], q["kind"]): q for q in page["quantizers"]}
    assert set(shown) == {(q.name, q.kind) for q in report.quantizers}
    compared = {layer.name: layer for layer in report.layers}
    for q in report.quantizers:
        row = shown[(q.name, q.kind)]
        assert (row["own_db"], row["output_db"], row["cause"]) == (q.sqnr_db, q.output_sqnr_db, q.cause)
        # a conv fused with the ReLU after it: accumulated where its output is quantized, at the ReLU
        (after,) = (
            {dst for src, dst in page["graph"]["edges"] if src == q.name}
            if q.name not in compared
            else {q.name}
        )
        assert row["accumulated_db"] == compared[after].sqnr_db
        assert (row["harm"] == "cause") == q.cause and row["harm"] in {"cause", "inherits", "fine"}
    # each compared layer's float-vs-quantized histogram, with the report's shares
    for layer in report.layers:
        histogram = nodes[layer.name]["histogram"]
        assert sum(histogram["float"]) > 0 and len(histogram["edges"]) == len(histogram["quantized"]) + 1
        assert histogram["zero_rounded_percent"] == layer.zero_rounded_percent
        assert histogram["clipped_percent"] == layer.clipped_percent
    # the graph: every layer, its edges, each quantizer coloured by its own harm
    nodes = {n["name"]: n for n in page["graph"]["nodes"]}
    assert set(nodes) == set(damaged.layers)
    assert (
        all(src in nodes and dst in nodes for src, dst in page["graph"]["edges"]) and page["graph"]["edges"]
    )
    assert nodes[names["activation"]]["output"] == "cause" and nodes[names["weights"]]["weights"] == "cause"
    # a layer after the outlier, damaged by it but fine on its own, is not blamed
    inherited = [
        q for q in report.quantizers if not q.cause and compared.get(q.name) and compared[q.name].sqnr_db < 30
    ]
    assert inherited and all(shown[(q.name, q.kind)]["harm"] == "inherits" for q in inherited)


def test_names_reach_the_page_verbatim(fw, logged):
    """Escaping is the frontend's job (it inserts names as text): the JSON carries them as given."""
    if fw.name != "pytorch":
        pytest.skip("Keras layer names are chosen by Keras here")
    folder, _, damaged, _, _ = logged
    page = get_json(client(folder), "/call", run=run_id(damaged))
    assert HTML_NAME in {n["name"] for n in page["graph"]["nodes"]} and HTML_NAME in damaged.layers
    assert any(HTML_NAME in (src, dst) for src, dst in page["graph"]["edges"])


def test_the_consoles_url_opens_the_call_in_tensorboard_started_as_printed(logged):
    _, _, damaged, _, line = logged
    command, url = line.split("tensorboard --logdir ", 1)[1].split(" and open ")
    assert command == str(damaged.log_folder) and url == dashboard_url(run_id(damaged))
    run = url.split("&run=", 1)[1]
    page = get_json(client(command), "/call", run=run)  # the call folder itself served
    assert page["model"] == damaged.model_name and len(page["causes"]) == len(damaged.similarity.causes())


@pytest.mark.parametrize(
    "route", ["/call?run=../..", "/call?run=nothing", "/static/../plugin.py", "/static/calls.py"]
)
def test_nothing_outside_the_calls_and_the_frontend_is_served(logged, route):
    assert client(logged[0]).get(f"{ROUTE}{route}").status_code == 404


@pytest.fixture(scope="module")
def tuned(fw, logged):
    """A tuned call of the two-cause model into the same log folder: (its info)."""
    import model_compression_toolkit as mct
    from tests.fixtures.digits import accuracy, representative_dataset

    model, _, _ = two_cause_model(fw)
    x_train, _, x_test, y_test = fw.data()
    tune = {
        "pytorch": mct.ptq.pytorch_tuned_post_training_quantization,
        "keras": mct.ptq.keras_tuned_post_training_quantization,
    }
    mct.set_log_folder(logged[0])
    try:
        _, info = tune[fw.name](
            model, representative_dataset(x_train), lambda m: accuracy(fw.predict(m), x_test, y_test),
            mct.core.TuningConfig(max_drop=1.0, max_trials=2),
        )  # fmt: skip
    finally:
        mct.set_log_folder(None)
    return info


def test_a_tuned_call_shows_the_users_metric_and_the_returned_trial(logged, tuned):
    c = client(logged[0])
    row = get_json(c, "/calls")["calls"][0]  # the newest
    assert row["run"] == run_id(tuned)
    best = tuned.tuning.best
    assert row["metric"]["score"] == best.score and row["metric"]["baseline"] == tuned.tuning.baseline_score
    assert row["metric"]["trial"] == best.n and f"{best.score:.4f}" in row["metric"]["in_words"]
    page = get_json(c, "/call", run=run_id(tuned))
    # the page is the returned trial's: info.similarity
    shown = {(q["name"], q["kind"]): q["own_db"] for q in page["quantizers"]}
    assert shown == {(q.name, q.kind): q.sqnr_db for q in tuned.similarity.quantizers}
    assert [c["name"] for c in page["causes"]] == [q.name for q in tuned.similarity.causes()]


def test_a_logdir_spec_serves_its_calls_under_their_names(logged):
    """``tensorboard --logdir_spec damaged:<folder>`` (as the debugging tutorial prints it)."""
    folder, plain, damaged, _, _ = logged
    flags = argparse.Namespace(logdir_spec=f"damaged:{folder}")
    c = Client(
        application.TensorBoardWSGI([QuantizationPlugin(base_plugin.TBContext(logdir="", flags=flags))])
    )
    assert [row["run"] for row in get_json(c, "/calls")["calls"]][-2:] == [
        f"damaged/{run_id(damaged)}",
        f"damaged/{run_id(plain)}",
    ]
    assert get_json(c, "/call", run=f"damaged/{run_id(damaged)}")["model"] == damaged.model_name
