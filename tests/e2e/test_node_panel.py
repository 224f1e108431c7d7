"""Issue 23, point 5: a clicked node's panel reads top down.

It listed 22-23 attributes in reverse alphabetical order with the threshold at the bottom,
the scale as a string, a fused conv "float: fused" though nothing in it is float, and a
Keras ReLU's own ``threshold 0`` beside the quantization threshold. Now one plain-language
line, ``» in short``, comes first; quantization numbers are numbers; the framework's own
attributes are kept apart.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import graph_pb2

from tests.e2e import browser, pages
from tests.fixtures.tb import layer_name

pytestmark = pytest.mark.e2e

IN_SHORT = "» in short"
OUTLIER_CALLS = ("pytorch_outlier", "keras_outlier")


def served_graph(board, run: str) -> graph_pb2.GraphDef:
    return text_format.Parse(board.get("/data/plugin/graphs/graph", run=run).decode(), graph_pb2.GraphDef())


def node_name(graph: graph_pb2.GraphDef, layer: str) -> str:
    """The node TensorBoard shows for ``layer`` (a PyTorch ``5`` is shown as ``[5]``)."""
    (name,) = [n.name for n in graph.node if layer_name(n.name) == layer and n.op != "legend"]
    return name


def panel(driver, board, run: str, node: str) -> list[tuple[str, dict]]:
    """The attributes the panel of ``node`` lists, top down: (key, the value as TensorBoard shows it, parsed)."""
    browser.open_page(driver, f"{board.url}/#graphs")
    pages.select_graph(driver, run)
    pages.select_node(driver, node)
    return [(key, json.loads(shown)) for key, shown in pages.node_attributes(driver)]


def number(text: str, before: str) -> float:
    match = re.search(rf"{before} (-?[\d.]+(?:e[-+]?\d+)?)", text)
    assert match, (before, text)
    return float(match[1])


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_the_panel_lists_in_short_first_in_plain_numbers(board, calls, driver, key):
    logged = calls[key]
    layer, run = logged.names["activation"], logged.name("5_quantized_graph")
    attrs = panel(driver, board, run, node_name(served_graph(board, run), layer))
    key0, first = attrs[0]
    assert key0 == IN_SHORT, [k for k, _ in attrs][:5]
    line = first["s"]
    assert "\\" not in line and "{" not in line, line  # words, no escapes
    quant = logged.info.layers[layer].activation
    assert line.startswith(f"A{quant['n_bits']} unsigned, threshold "), line
    assert number(line, "threshold") == pytest.approx(quant["threshold"], rel=1e-3)  # 4 digits: 618.6
    assert number(line, "step") == pytest.approx(float(np.max(quant["grid"]["scale"])), rel=1e-3)
    entry = next(q for q in logged.info.similarity.quantizers if (q.name, q.kind) == (layer, "activation"))
    assert f"{entry.zero_rounded_percent:.0f} % of non-zero values round to 0" in line, line
    assert "own error at the output high" in line and "a cause" in line, line

    values = dict(attrs)
    for name in ("threshold", "scale"):
        assert values[f"quantization.activation.{name}"].keys() == {"f"}, values  # a number, not a string
    assert values["quantization.activation.n_bits"] == {"i": quant["n_bits"]}
    groups = {k.split(".")[0] for k, _ in attrs[1:]}
    assert groups <= {"similarity", "quantization", "memory", "layer", logged.framework}, groups


def test_a_keras_relu_keeps_its_own_threshold_apart_from_the_quantization_threshold(board, calls, driver):
    logged = calls["keras_outlier"]
    layer, run = logged.names["activation"], logged.name("5_quantized_graph")
    values = dict(panel(driver, board, run, node_name(served_graph(board, run), layer)))
    assert values["keras.threshold"] == {"f": 0.0}
    assert values["quantization.activation.threshold"]["f"] > 100  # the outlier channel's range
    assert "threshold" not in values


@pytest.mark.parametrize("key", OUTLIER_CALLS)
def test_a_fused_conv_says_where_its_output_is_quantized_not_that_it_is_float(board, calls, driver, key):
    logged = calls[key]
    layer, run = logged.names["activation"], logged.name("5_quantized_graph")
    graph = served_graph(board, run)
    (conv,) = [n.name for n in graph.node
               if n.attr["quantization.activation.quantized_after"].s.decode() == layer]  # fmt: skip
    attrs = panel(driver, board, run, conv)
    assert attrs[0][0] == IN_SHORT
    line = attrs[0][1]["s"]
    assert line.startswith("W8 per channel, output quantized after"), line
    assert layer in line and "\\" not in line, line
    assert not [k for k, _ in attrs if "float" in k], [k for k, _ in attrs]
