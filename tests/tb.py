"""Reading logs back with TensorBoard's own loader."""

from __future__ import annotations

import re
from pathlib import Path

from tensorboard.backend.event_processing import event_accumulator as ea


def load(path: Path) -> ea.EventAccumulator:
    acc = ea.EventAccumulator(str(path), size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
    acc.Reload()
    return acc


def run_folders(log_folder: Path) -> list[Path]:
    """The PTQ call folders inside a log folder, in name (= time) order."""
    return sorted(p for p in Path(log_folder).iterdir() if p.is_dir())


def resources(acc: ea.EventAccumulator) -> dict[str, int]:
    """Bytes per node from the stage's `Resources` run metadata (the colour legend's nodes,
    listed there without memory to keep the palette's order, left out)."""
    meta = acc.RunMetadata("Resources")
    return {
        layer_name(ns.node_name): max(m.total_bytes for m in ns.memory)
        for dev in meta.step_stats.dev_stats
        for ns in dev.node_stats
        if ns.memory
    }


def layer_name(node_name: str) -> str:
    """The layer a TensorBoard node stands for: ``[5]`` is layer ``5`` (`protos.graph_node_names`)."""
    return "/".join(re.sub(r"^\[(\d+)\]$", r"\1", part) for part in node_name.split("/"))


def layer_names(acc: ea.EventAccumulator) -> set[str]:
    """The layers of a stage's graph (the colour legend's nodes left out)."""
    return {layer_name(n.name) for n in acc.Graph().node if n.op != "legend"}


def tagged_graphs(log_folder: Path, run: str) -> dict[str, str]:
    """Tag -> the graph (pbtxt) TensorBoard's own Graphs plugin serves for that tag of ``run``."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.graph import graphs_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(log_folder))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(log_folder))
    plugin = graphs_plugin.GraphsPlugin(base_plugin.TBContext(logdir=str(log_folder), multiplexer=mux, data_provider=provider))
    ctx = context.RequestContext()
    tags = plugin.info_impl(ctx, "").get(run, {}).get("tags", {})
    return {tag: plugin.graph_impl(ctx, run, tag, False, "")[0] for tag, item in tags.items() if item["op_graph"]}
