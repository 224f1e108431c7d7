"""The walk through TensorBoard shared by the PyTorch and Keras tutorials.

`tour(info, log_folder)` prints what each dashboard shows for one PTQ call, using that
call's real run and tag names.
"""

from __future__ import annotations

from pathlib import Path

import model_compression_toolkit as mct
from model_compression_toolkit.core.numbers import format_bytes
from model_compression_toolkit.observers.stage_view import stage_run

STAGES = {
    "initial_graph": "the model as read by torch.fx, batch norms still there",
    "after_graph_preparation": "batch norms folded into their conv, no-op layers removed, "
    "each conv fused with its ReLU (quantized after it)",
    "after_statistics_collection": "the same graph plus the statistics of every quantized activation",
    "thresholds_selection": "the same graph, each quantizer's threshold chosen",
    "quantized_graph": "what the quantized model runs, coloured by quantization error",
}


def tour(info: mct.core.QuantizationInfo, log_folder: Path, conv_type: str = "Conv2d") -> None:
    """Print what each TensorBoard dashboard shows for this PTQ call, with its real names."""
    run = info.log_folder
    quantized_acts = [name for name, layer in info.layers.items() if layer.activation is not None]
    with_weights = [name for name, layer in info.layers.items() if layer.weights]
    stats = stage_run("after_statistics_collection")
    thresholds, quantized = stage_run("thresholds_selection"), stage_run("quantized_graph")

    print(f"\nlog folder: {log_folder}")
    print(f"this call's call folder: {run}")
    print("  (TensorBoard lists each run as <call folder>/<stage>, so several calls sit side by side;")
    print("  at most 8 runs a call: TensorBoard selects none when a folder holds more than 40)")

    # Graphs: one graph per stage, numbered in pipeline order. Pick the stage in the "Run" menu.
    print("\nGRAPHS -- pick a stage in the 'Run' menu:")
    for stage, what in STAGES.items():
        if (run / stage_run(stage)).is_dir():
            print(f"  {run.name}/{stage_run(stage):<30} {what}")
    print("  Tag 'Default' is the graph; tag 'Resources' shows the memory of each node (weights + its")
    print("  output activation for one sample) at that stage's bit-widths: click a node to read it.")
    print(f"  Here the weights take {format_bytes(info.memory.weights_float_bytes)} in float and "
          f"{format_bytes(info.memory.weights_quantized_bytes)} at 8 bits.")  # fmt: skip
    print(f"  Color -> 'Device' colours nodes by layer type ({conv_type}, ReLU, ...); in {quantized} by the")
    print("  error each layer's own quantizers do to the output: high in salmon, medium in peach, low in")
    print("  blue-grey (the legend says it in words). A node's first attribute, '» in short', says its")
    print("  bits, threshold, step and error in one line.")

    # Histograms and Distributions: the same data, as histograms or as percentile bands.
    print("\nHISTOGRAMS / DISTRIBUTIONS (step 0 float, step 1 quantized: 'overlay' draws both in one card):")
    print(f"  run {thresholds}: one histogram per quantized activation over all the data, then through")
    print(f"    its grid; tag = layer name: {', '.join(quantized_acts)}")
    print(f"  run {quantized}: the same tags, the float and the quantized model on the similarity samples,")
    print(f"    and each layer's weights: {', '.join(f'{n}/weights' for n in with_weights[:2])}, ...")

    # Scalars: per-channel statistics use the channel index as the step (the x axis).
    print("\nSCALARS:")
    print(f"  runs {stats}/min_per_channel, max_per_channel, mean_per_channel: tag = layer, x axis =")
    print("    channel index (not time): a channel whose range dwarfs the others shows up as a spike.")
    print(f"  run {quantized}: similarity/cosine (accumulated) and (local), the same for sqnr_db and mse;")
    print("    x axis = the layer's position: 'local' is that layer alone quantized, 'accumulated' the")
    print("    whole quantized model up to it.")

    # Images: per-channel ranges, and the similarity analysis as plots.
    n = info.similarity.samples if info.similarity else 0
    print("\nIMAGES:")
    print(f"  run {quantized}: Cosine similarity/0_summary (read first), then 1_sample_00 ... {n - 1:02d};")
    print("    Filters/<conv>: the first convolutions' kernels, float next to quantized.")
    print(f"  run {thresholds}: Per-channel ranges/<k>_<layer>, layers with outlier channels first.")

    # Text: markdown tables.
    print("\nTEXT:")
    print("  tag 'summary' in each stage run: layers, quantized vs float, memory, one row per layer;")
    print(f"  tags 'similarity/causes' and 'similarity/report' in run {quantized}: the quantizers to")
    print("    blame with the suggested fix, and every compare point ranked, worst first.")
    if info.similarity is not None:
        print("\n" + info.similarity.summary(top=3))

    print(f"\nfiles next to the runs: {run / 'similarity_report.json'}, similarity_report.csv, mct.log")
    print("to see all of it, run:")
    print(f"  tensorboard --logdir {log_folder}")
    print("and open http://localhost:6006")
