"""The walk through TensorBoard shared by the PyTorch and Keras tutorials.

`tour(info, log_folder)` prints what each dashboard shows for one PTQ call, using that
call's real run and tag names.
"""

from __future__ import annotations

from pathlib import Path

import model_compression_toolkit as mct

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

    print(f"\nlog folder: {log_folder}")
    print(f"this call's call folder: {run}")
    print("  (TensorBoard lists each run as <call folder>/<stage>, so several calls sit side by side)")

    # Graphs: one graph per stage. Pick the stage in the "Run" menu on the left.
    print("\nGRAPHS -- pick a stage in the 'Run' menu:")
    for stage, what in STAGES.items():
        if (run / stage).is_dir():
            print(f"  {run.name}/{stage:<28} {what}")
    print("  Tag 'Default' is the graph; tag 'Resources' shows the memory of each node (weights + its")
    print("  output activation for one sample) at that stage's bit-widths: click a node to read it.")
    print(f"  Here the weights take {info.memory.weights_float_bytes / 1024:.1f} KiB in float and "
          f"{info.memory.weights_quantized_bytes / 1024:.1f} KiB at 8 bits.")  # fmt: skip
    print(f"  Color -> 'Device' colours nodes by layer type ({conv_type}, ReLU, ...); in quantized_graph by")
    print("  error class instead (error_low / error_medium / error_high, from the similarity analysis).")
    print("  A node's attributes hold its bits, thresholds, scales and, in quantized_graph, its metrics.")

    # Histograms and Distributions: the same data, as stacked histograms or as percentile bands.
    print("\nHISTOGRAMS / DISTRIBUTIONS:")
    print("  runs after_statistics_collection, thresholds_selection: one histogram per quantized activation,")
    print(f"    tag = layer name: {', '.join(quantized_acts)}")
    print("  run quantized_graph: each layer's weights, float and quantized on the same bins:")
    print(
        f"    {', '.join(f'{n}/weights/float' for n in with_weights[:2])}, ... and their .../weights/quantized"
    )
    print("  run similarity: each compare point's output on the same bins, float vs quantized:")
    print("    <layer>/float and <layer>/quantized (from the similarity samples)")

    # Scalars: per-channel statistics use the channel index as the step (the x axis).
    print("\nSCALARS:")
    print("  runs <stage>/min_per_channel, max_per_channel, mean_per_channel: tag = layer, x axis = channel")
    print("    index (not time): a channel whose range dwarfs the others shows up as a spike.")
    print("  runs similarity/accumulated and similarity/local: tags similarity/cosine, similarity/sqnr_db,")
    print("    similarity/mse; x axis = the layer's position in the graph. Tick both runs to overlay them:")
    print("    'local' is that layer alone quantized, 'accumulated' the whole quantized model up to it.")

    # Images: the similarity analysis as plots (matplotlib figures rendered to PNG).
    n = info.similarity.samples if info.similarity else 0
    print("\nIMAGES (run similarity):")
    print(f"  cosine_similarity/sample_0 ... sample_{n - 1}: cosine similarity float vs quantized at every")
    print("    compare point for one sample, the x axis labelled with layer names;")
    print("  cosine_similarity/summary: the mean over the samples with a min-max band;")
    print("  filters/<conv>: the first convolutions' kernels, float next to quantized.")

    # Text: markdown tables.
    print("\nTEXT:")
    print("  tag 'summary' in each stage run: layers, quantized vs float, memory, one row per layer")
    print("    (type, weight bits, activation bits, memory);")
    print("  tag 'similarity/report' in run similarity: every compare point ranked, worst first.")
    if info.similarity is not None:
        print("\n" + info.similarity.summary(top=3))

    print(f"\nfiles next to the runs: {run / 'similarity_report.json'}, similarity_report.csv, mct.log")
    print("to see all of it, run:")
    print(f"  tensorboard --logdir {log_folder}")
    print("and open http://localhost:6006")
