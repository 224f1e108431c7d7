"""Under the Graphs dashboard's ``Resources`` tag a class keeps its run-graph colour.

TensorBoard colours "Color: Device" by the order it meets the devices: in the run graph the
order of the nodes (the legend's come first), under ``Resources`` the step stats' order
and then the graph's, breadth-first. So the run metadata lists the legend's devices
first, in palette order, whatever class the first layer has. The browser test is
`tests/e2e/test_colours.py::test_the_resources_tag_keeps_the_run_graphs_palette`.
"""

from __future__ import annotations

from model_compression_toolkit.observers import protos as tb
from tests.fixtures.observed import make_graph, make_memory


def test_the_legend_devices_come_first_in_palette_order_under_resources():
    g = make_graph()
    low, high = tb.device_name("low", 3), tb.device_name("high", 1)
    devices = {node.name: low for node in g.nodes()}  # every layer low: low is met first in the graph
    legend = [("legend_high", high), ("legend_low", low)]
    meta = tb.run_metadata(g, make_memory(g), devices, legend=legend)
    assert [d.device for d in meta.step_stats.dev_stats] == [high, low]
    first = [d.node_stats[0] for d in meta.step_stats.dev_stats]
    assert [s.node_name for s in first] == ["legend_high", "legend_low"]
    assert all(not s.memory for s in first)  # a legend node holds nothing
    stats = {s.node_name for d in meta.step_stats.dev_stats for s in d.node_stats}
    assert stats == {n.name for n in tb.graph_def(g, devices=devices, legend=legend).node}
