"""Debug an accuracy drop after quantization: find the layer to blame, keep it float.

    python tutorials/debug_accuracy_drop.py [--framework pytorch|keras] [--log-folder DIR]
                                            [--epochs N] [--smoke]

The workflow of Intel Neural Insights' accuracy-debug walkthrough, with this library:

1. Quantize a model and see its accuracy collapse.
2. Find the culprit in the similarity report, ``info.similarity.ranked()``: worst first by
   *local* error (that layer alone quantized, fed float inputs), so the layer that breaks
   things stands out from the layers after it that only inherit its damage (*accumulated*
   error).
3. See it in TensorBoard: the quantized graph coloured by error class, its weights'
   histograms float vs quantized.
4. Keep it float with ``mct.core.KeepFloat(names=[...])``, quantize again: accuracy back.
5. Let ``*_tuned_post_training_quantization`` do steps 2-4 by itself (when available).

The model is the digits CNN with one outlier planted in its second convolution (a weight
1000x its largest, on an input channel that is always zero, as in
``tutorials/digits.py``). Quantized per tensor with no clipping, the outlier sets the
threshold and every other weight of that conv rounds to zero.

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
from tutorials import digits  # noqa: E402

# One threshold per weight tensor (not per output channel), set to the largest |weight|
# (no clipping): the configuration under which one outlier ruins a whole layer. The
# default (per channel, MSE threshold search) confines the damage to one output channel.
PER_TENSOR = mct.core.QuantizationConfig(
    weights_per_channel=False, weights_error_method=mct.core.QuantizationErrorMethod.NOCLIPPING
)


@dataclass
class Framework:
    """What differs between the frameworks in this tutorial."""

    channels_last: bool
    make: Callable[[], Any]
    train: Callable[..., Any]
    predict: Callable[[Any], Callable[[np.ndarray], np.ndarray]]
    with_bad_layer: Callable[[Any], tuple[Any, str]]
    ptq: Callable[..., Any]
    tuned_ptq_name: str
    weights: Callable[[Any, str], np.ndarray]  # (model, layer name) -> its kernel


def _torch_weights(model: Any, name: str) -> np.ndarray:
    return dict(model.named_modules())[name].weight.detach().numpy()


def _keras_weights(model: Any, name: str) -> np.ndarray:
    return np.asarray(model.get_layer(name).get_weights()[0])


FRAMEWORKS = {
    "pytorch": Framework(
        False, digits.torch_digits_cnn, digits.train_torch, digits.torch_predict, digits.torch_with_bad_layer,
        mct.ptq.pytorch_post_training_quantization, "pytorch_tuned_post_training_quantization", _torch_weights,
    ),
    "keras": Framework(
        True, digits.keras_digits_cnn, digits.train_keras, digits.keras_predict, digits.keras_with_bad_layer,
        mct.ptq.keras_post_training_quantization, "keras_tuned_post_training_quantization", _keras_weights,
    ),
}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="pytorch")
    parser.add_argument(
        "--log-folder",
        default=str(REPO / "demo_logs" / "debug_accuracy_drop"),
        help="where the TensorBoard logs go (default: %(default)s)",
    )
    parser.add_argument("--epochs", type=int, default=15, help="training epochs (default: %(default)s)")
    parser.add_argument(
        "--smoke", action="store_true", help="3 epochs, 2 representative batches: runs in seconds"
    )
    return parser.parse_args()


def tuned_ptq(fw: Framework) -> Callable[..., Any] | None:
    """The framework's tuned PTQ function, or None when this version of the library lacks it."""
    try:
        import model_compression_toolkit.pipeline.tuning  # noqa: F401
    except ImportError:
        return None
    return getattr(mct.ptq, fw.tuned_ptq_name, None)


def local_group(info: mct.core.QuantizationInfo, point: str) -> list[str]:
    """The compare point and the layers fused into it: ``conv -> relu`` gives [conv, relu].

    A conv followed by its activation has no quantizer of its own (its output is quantized
    after the activation), so the error measured at the ReLU is the conv's too: keep both.
    """
    names = list(info.layers)  # in graph order
    group = [point]
    for name in reversed(names[: names.index(point)]):
        layer = info.layers[name]
        if layer.activation is not None or not layer.weights:
            break
        group.insert(0, name)
    return group


def main() -> None:
    args = parse_args()
    fw = FRAMEWORKS[args.framework]
    epochs, batches = (3, 2) if args.smoke else (args.epochs, 5)

    x_train, y_train, x_test, y_test = digits.digits_data(channels_last=fw.channels_last)
    start = time.perf_counter()
    trained = fw.train(fw.make(), x_train, y_train, epochs=epochs)
    # `planted` is the compare point the outlier's damage first reaches. We do not use it to
    # debug, only to check at the end that the report pointed at the right layer.
    model, planted = fw.with_bad_layer(trained)
    print(
        f"trained the {args.framework} digits CNN for {epochs} epoch(s) in {time.perf_counter() - start:.1f} s"
    )

    def evaluate(m: Any) -> float:
        return digits.accuracy(fw.predict(m), x_test, y_test)

    log_folder = mct.set_log_folder(args.log_folder)
    data_gen = digits.representative_dataset(x_train, batches=batches, batch_size=32)
    per_tensor = mct.core.CoreConfig(quantization_config=PER_TENSOR)

    # ------------------------------------------------------------ 1. the accuracy drop
    print("\n== 1. quantize (8 bits, weights per tensor, no clipping)")
    q_model, info = fw.ptq(model, data_gen, per_tensor)
    float_acc, damaged_acc = evaluate(model), evaluate(q_model)
    print(f"float accuracy:     {float_acc:.2f} %")
    print(f"quantized accuracy: {damaged_acc:.2f} %")
    print(f"logs of this call:  {info.log_folder}")

    # ------------------------------------------------------------ 2. the culprit
    # Every quantized activation is a compare point. For each, the report holds the error
    # of the quantized model up to that point (accumulated: cosine_mean, sqnr_db, mse) and
    # the error of that layer alone quantized on float inputs (local_*). ranked() sorts by
    # local SQNR, worst first. Error classes: low >= 30 dB, medium 15-30 dB, high < 15 dB.
    print("\n== 2. the similarity report, worst first by local error (that layer alone quantized)")
    ranked = info.similarity.ranked()
    print(f"  {'layer':<24} {'type':<18} {'local SQNR':>11} {'accumulated SQNR':>17}  class")
    for layer in ranked[:5]:
        local = f"{layer.local_sqnr_db:7.1f} dB" if layer.local_sqnr_db is not None else "      n/a"
        print(
            f"  {layer.name:<24} {layer.layer_type:<18} {local:>11} {layer.sqnr_db:14.1f} dB  {layer.error_class}"
        )
    worst = ranked[0]
    inherit = [
        layer.name
        for layer in info.similarity.layers
        if layer.position > worst.position and layer.sqnr_db < 15 and (layer.local_sqnr_db or 0) >= 30
    ]
    print(
        f"worst layer by local error: {worst.name} ({worst.layer_type}), local SQNR {worst.ranking_sqnr_db:.1f} dB"
    )
    if inherit:
        print(f"  {', '.join(inherit)}: bad accumulated but good local error -- they only inherit its damage")

    group = local_group(info, worst.name)
    conv = group[0]
    print(f"its local group (what the local error measured): {' -> '.join(group)}")

    # ------------------------------------------------------------ 3. look at it
    print(f"\n== 3. why {conv!r} breaks")
    # Neural Insights' next step: the weights' histogram. The numbers tell the same story.
    w = np.abs(fw.weights(model, conv)).ravel()  # as trained (before batch-norm folding)
    bulk = float(np.percentile(w, 99))
    print(f"  its weights: largest |w| {w.max():.3g}, 99th percentile {bulk:.3g} ({w.max() / bulk:.0f}x)")
    wcfg = next(iter(info.layers[conv].weights.values()))  # its kernel's quantization
    threshold, step = float(np.max(wcfg["threshold"])), float(np.max(wcfg["grid"]["scale"]))
    print(
        f"  per tensor the outlier sets the threshold: {threshold:.3g} (after folding), one 8-bit step {step:.3g}"
    )
    print("  so every weight but the outlier rounds to zero")
    run = info.log_folder
    print("  In TensorBoard:")
    later = sorted({layer.error_class for layer in info.similarity.layers if layer.position > worst.position})
    print(
        f"    Graphs, run {run.name}/quantized_graph, Color 'Device': {worst.name} is error_{worst.error_class},"
    )
    print(
        f"      the layers after it {' / '.join(f'error_{c}' for c in later) or '-'} (judged by local error);"
    )
    print("      click a node for its cosine / SQNR / MSE")
    print(f"    Histograms, run {run.name}/quantized_graph: {conv}/weights/float vs {conv}/weights/quantized")
    print(f"    Scalars, runs {run.name}/similarity/local and /accumulated: similarity/sqnr_db per layer")

    # ------------------------------------------------------------ 4. keep it float
    print(f"\n== 4. keep {' and '.join(group)} float, quantize again")
    keep = mct.core.CoreConfig(quantization_config=PER_TENSOR, keep_float=mct.core.KeepFloat(names=group))
    q_fixed, info_fixed = fw.ptq(model, data_gen, keep)
    recovered_acc = evaluate(q_fixed)
    print(f"recovered accuracy: {recovered_acc:.2f} %")
    print(f"  {worst.name}: {info_fixed.float_layers.get(worst.name)}")
    mem = info_fixed.memory
    print(
        f"  weights {mem.weights_float_bytes / 1024:.1f} KiB float -> {mem.weights_quantized_bytes / 1024:.1f} KiB"
    )
    print(f"  logs of this call:  {info_fixed.log_folder}")
    print(f"the planted layer was {planted!r}: {'found' if worst.name == planted else 'MISSED'}")

    # ------------------------------------------------------------ 5. automatically
    tuned = tuned_ptq(fw)
    if tuned is None:
        print("\n== 5. tuned PTQ is not available in this version: skipped")
    else:
        # Trial 1 is the plain PTQ; each next trial keeps the next worst local group float,
        # until the drop below the float accuracy is at most max_drop (here 1 point).
        print("\n== 5. the same, automatically: tuned PTQ")
        config = mct.core.TuningConfig(max_drop=1.0, max_trials=3)
        q_tuned, info_tuned = tuned(model, data_gen, evaluate, config, per_tensor)
        print(f"tuned accuracy:     {evaluate(q_tuned):.2f} %")
        print(info_tuned.tuning.summary())
        runs = sorted(
            p.name for p in info_tuned.log_folder.iterdir() if p.name.startswith(("baseline_", "tune_"))
        )
        print(f"  TensorBoard runs in {info_tuned.log_folder.name}: {', '.join(runs)} and tuning")
        print("  (the same histogram tags in each: compare a layer's fp32 and int8 side by side)")

    print("\nto see every run, start:")
    print(f"  tensorboard --logdir {log_folder}")


if __name__ == "__main__":
    main()
