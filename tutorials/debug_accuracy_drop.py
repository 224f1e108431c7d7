"""Debug an accuracy drop after quantization: find the quantizer that causes it, fix it.

    python tutorials/debug_accuracy_drop.py [--framework pytorch|keras] [--log-folder DIR]
                                            [--epochs N] [--smoke]

The most common way real models fail 8-bit quantization: one activation channel carries
values hundreds of times larger than the others. Here the digits CNN gets one: a channel
of its second block is scaled up 300x and the next conv's weights for that channel down
300x, so the float model computes exactly what it did. Quantized, the accuracy collapses.

1. Quantize the model and see its accuracy collapse.
2. Read the causes in the similarity report, ``info.similarity.causes()``: every quantizer
   (a layer's output, or its weights) ranked by how much it alone damages the model's
   output. The layer where the damage *shows* (the last ones, whose accumulated error is
   worst) is not where it is *caused*.
3. See why: over the whole tensor the damaged activation looks fine (the outlier channel
   dominates its SQNR); per channel it does not (most channels round to zero).
4. Apply the suggested fix, ``CoreConfig(keep_float=info.similarity.suggested_fix())``,
   and quantize again: the accuracy comes back.
5. Let ``*_tuned_post_training_quantization`` do steps 2-4 by itself.

``--smoke`` trains 3 epochs and uses 2 representative batches: seconds, for the tests.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quieter TensorFlow start-up (Keras only)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import model_compression_toolkit as mct  # noqa: E402
from model_compression_toolkit.core.numbers import format_bytes  # noqa: E402
from tests.fixtures import digits  # noqa: E402

OUTLIER = 300.0  # how much larger the outlier channel is


def torch_outlier(model: Any, x: np.ndarray) -> tuple[Any, str]:
    """Scale the busiest channel of the second block up (its batch norm) and the third
    conv's weights for that channel down: the same function, one outlier channel."""
    import copy

    import torch

    model = copy.deepcopy(model)
    with torch.no_grad():
        channel = int(model[:6](torch.from_numpy(x)).mean(dim=(0, 2, 3)).argmax())
        model[4].weight[channel] *= OUTLIER  # batch norm 2: gamma and beta
        model[4].bias[channel] *= OUTLIER
        model[6].weight[:, channel] /= OUTLIER  # conv 3: the weights reading that channel
    return model, "5"  # the ReLU of block 2: the activation holding the outlier


@dataclass
class Framework:
    """What differs between the frameworks in this tutorial."""

    channels_last: bool
    make: Callable[[], Any]
    train: Callable[..., Any]
    predict: Callable[[Any], Callable[[np.ndarray], np.ndarray]]
    ptq: Callable[..., Any]
    tuned_ptq: Callable[..., Any]
    plant: Callable[[Any, np.ndarray], tuple[Any, str]]


def plant_keras(model: Any, x: np.ndarray) -> tuple[Any, str]:
    """The Keras version: the same change, through the layers' weights."""
    import keras

    trained = model.get_weights()
    model = keras.models.clone_model(model)
    model.set_weights(trained)
    relus = [layer for layer in model.layers if isinstance(layer, keras.layers.ReLU)]
    bn = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)][1]
    conv = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)][2]
    channel = int(np.asarray(keras.Model(model.inputs, relus[1].output)(x)).mean(axis=(0, 1, 2)).argmax())
    gamma, beta, mean, variance = bn.get_weights()
    gamma[channel] *= OUTLIER
    beta[channel] *= OUTLIER
    bn.set_weights([gamma, beta, mean, variance])
    kernel, *rest = conv.get_weights()
    kernel[:, :, channel, :] /= OUTLIER
    conv.set_weights([kernel, *rest])
    return model, relus[1].name


FRAMEWORKS = {
    "pytorch": Framework(
        False, digits.torch_digits_cnn, digits.train_torch, digits.torch_predict,
        mct.ptq.pytorch_post_training_quantization, mct.ptq.pytorch_tuned_post_training_quantization, torch_outlier,
    ),
    "keras": Framework(
        True, digits.keras_digits_cnn, digits.train_keras, digits.keras_predict,
        mct.ptq.keras_post_training_quantization, mct.ptq.keras_tuned_post_training_quantization, plant_keras,
    ),
}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="pytorch")
    parser.add_argument(
        "--log-folder",
        default=str(REPO / "demo_logs" / "debug_accuracy_drop"),
        help="where the TensorBoard logs go (default: %(default)s)",
    )
    parser.add_argument("--epochs", type=int, default=15, help="training epochs (default: %(default)s)")
    parser.add_argument("--smoke", action="store_true", help="3 epochs, 2 representative batches: runs in seconds")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    fw = FRAMEWORKS[args.framework]
    epochs, batches = (3, 2) if args.smoke else (args.epochs, 5)

    x_train, y_train, x_test, y_test = digits.digits_data(channels_last=fw.channels_last)
    start = time.perf_counter()
    trained = fw.train(fw.make(), x_train, y_train, epochs=epochs)
    print(f"trained the {args.framework} digits CNN for {epochs} epoch(s) in {time.perf_counter() - start:.1f} s")

    def evaluate(m: Any) -> float:
        return digits.accuracy(fw.predict(m), x_test, y_test)

    # `planted` is the activation that holds the outlier. We do not use it to debug, only
    # to check at the end that the report named it.
    model, planted = fw.plant(trained, x_train[:256])
    print(f"planted an outlier channel: float accuracy {evaluate(trained):.2f} % before, {evaluate(model):.2f} % after")

    log_folder = mct.set_log_folder(args.log_folder)
    data_gen = digits.representative_dataset(x_train, batches=batches, batch_size=32)

    # ------------------------------------------------------------ 1. the accuracy drop
    print("\n== 1. quantize (the defaults: 8 bits, weights per channel, activations per tensor)")
    q_model, info = fw.ptq(model, data_gen)
    float_acc, damaged_acc = evaluate(model), evaluate(q_model)
    print(f"float accuracy:     {float_acc:.2f} %")
    print(f"quantized accuracy: {damaged_acc:.2f} %")
    print(f"logs of this call:  {info.log_folder}")

    # ------------------------------------------------------------ 2. the causes
    # Every quantizer is switched on alone in the float model, and the output's SQNR
    # against the float output says how much it damages the model (under 20 dB: a cause).
    report = info.similarity
    print("\n== 2. the quantizers ranked by what each alone does to the output")
    print(f"  {'quantizer':<26} {'output SQNR alone':>18} {'own SQNR':>9} {'median channel':>15}  cause")
    for q in report.quantizers[:5]:
        alone = f"{q.output_sqnr_db:8.1f} dB" if q.output_sqnr_db is not None else "not measured"
        median = f"{q.channel_sqnr_median_db:8.1f} dB" if q.channel_sqnr_median_db is not None else "n/a"
        print(f"  {q.name + ' (' + q.kind + ')':<26} {alone:>18} {q.sqnr_db:6.1f} dB {median:>15}  {'yes' if q.cause else ''}")
    first = report.causes()[0]
    print(f"first cause: {first.name} ({first.kind}), output SQNR alone {first.output_sqnr_db:.1f} dB")
    shows = [layer for layer in report.layers if layer.role == "inherits"]
    if shows:
        where = ", ".join(f"{layer.name} (accumulated SQNR {layer.sqnr_db:.1f} dB)" for layer in shows)
        print(f"  where the damage shows: {where} -- they only inherit it")

    # ------------------------------------------------------------ 3. why
    print(f"\n== 3. why {first.name!r} breaks")
    print(f"  over the whole tensor its own error looks small: SQNR {first.sqnr_db:.1f} dB")
    print(
        f"  per channel it is not: the median channel keeps {first.channel_sqnr_median_db:.1f} dB, "
        f"{first.high_error_channels_percent:.0f} % of the channels are under 15 dB"
    )
    print(
        f"  one channel's range is {first.channel_range_spread:.0f}x the median channel's, and "
        f"{first.zero_rounded_percent:.0f} % of the values round to zero on its per-tensor grid"
    )
    run = info.log_folder
    print("  In TensorBoard:")
    print(f"    Text, run {run.name}/5_quantized_graph: similarity/causes (this table, and the fix)")
    print(f"    Graphs, run {run.name}/5_quantized_graph: {first.name} is salmon (high own error); click it")
    print(f"    Images, run {run.name}/4_thresholds_selection: 'Per-channel ranges' shows {first.name}'s outlier first")
    print(f"    Images, run {run.name}/5_quantized_graph: 'Cosine similarity/0_summary' marks the worst cause")

    # ------------------------------------------------------------ 4. the fix
    fix = report.suggested_fix()
    print("\n== 4. the suggested fix, applied as the report says")
    print(f"  {fix.code()}".replace("\n", "\n  "))
    q_fixed, info_fixed = fw.ptq(model, data_gen, mct.core.CoreConfig(keep_float=fix), run_name="with fix")
    recovered_acc = evaluate(q_fixed)
    print(f"recovered accuracy: {recovered_acc:.2f} %")
    mem = info_fixed.memory
    print(f"  weights {format_bytes(mem.weights_float_bytes)} float -> {format_bytes(mem.weights_quantized_bytes)}")
    layer = info_fixed.layers[planted]
    kept = info_fixed.float_layers.get(planted)
    print(f"  {planted}: {kept or str(layer.activation['n_bits']) + '-bit output (integer, not float)'}")
    print(f"  logs of this call:  {info_fixed.log_folder}")
    print(f"the planted outlier was in {planted!r}: {'found' if first.name == planted else 'MISSED'}")

    # ------------------------------------------------------------ 5. automatically
    # Trial 1 is the plain PTQ; trial 2 applies its report's fix; later trials keep the
    # next quantizers in rank order float, until the drop is at most max_drop (1 point).
    print("\n== 5. the same, automatically: tuned PTQ")
    config = mct.core.TuningConfig(max_drop=1.0, max_trials=3)
    q_tuned, info_tuned = fw.tuned_ptq(model, data_gen, evaluate, config)
    print(f"tuned accuracy:     {evaluate(q_tuned):.2f} %")
    print(info_tuned.tuning.summary())
    trials = ", ".join(t.run_name for t in info_tuned.tuning.trials)
    print(f"  TensorBoard, run {info_tuned.log_folder.name}/5_quantized_graph: trials {trials}")
    print("    (Graphs: one tag per later trial; Histograms: step n is trial n; Scalars: tuning/accuracy)")

    print("\nto see every run, start:")
    print(f"  tensorboard --logdir {log_folder}")
    print("or to compare the damaged call with the fixed one, side by side:")
    print(f"  tensorboard --logdir_spec damaged:{info.log_folder},fixed:{info_fixed.log_folder}")


if __name__ == "__main__":
    main()
