"""`make demo`: quantize a digits CNN (shipped trained weights) with logging on, in seconds.

Prints the float and the 8-bit accuracy and the command that opens the logs in TensorBoard.
``--train`` trains the CNN on scikit-learn's digits first (about 2 minutes of CPU) instead
of loading the weights that ship in ``tests/fixtures/weights``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model_compression_toolkit as mct  # noqa: E402
from model_compression_toolkit.core.numbers import format_bytes  # noqa: E402
from tests.fixtures.digits import (  # noqa: E402
    accuracy,
    digits_data,
    representative_dataset,
    torch_digits_cnn,
    torch_predict,
    train_torch,
    trained_digits_cnn,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-folder", default="demo_logs", help="where the TensorBoard logs go")
    parser.add_argument("--train", action="store_true", help="train the CNN first instead of loading its weights")
    parser.add_argument("--epochs", type=int, default=15, help="training epochs (with --train)")
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = digits_data()
    start = time.perf_counter()
    if args.train:
        model = train_torch(torch_digits_cnn(), x_train, y_train, epochs=args.epochs)
        print(f"trained a digits CNN on {len(x_train)} images in {time.perf_counter() - start:.1f} s")
    else:
        model = trained_digits_cnn("pytorch")
        print("loaded the digits CNN's shipped weights (tests/fixtures/weights; --train trains it instead)")

    log_folder = mct.set_log_folder(args.log_folder)
    start = time.perf_counter()
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, representative_dataset(x_train))
    print(f"quantized to 8 bits in {time.perf_counter() - start:.1f} s")

    float_acc = accuracy(torch_predict(model), x_test, y_test)
    quant_acc = accuracy(torch_predict(q_model), x_test, y_test)
    mem = info.memory
    print(f"float accuracy:     {float_acc:.2f} %")
    print(f"quantized accuracy: {quant_acc:.2f} %")
    print(
        f"weights memory:     {format_bytes(mem.weights_float_bytes)} -> {format_bytes(mem.weights_quantized_bytes)}"
    )
    print(f"this run's logs:    {info.log_folder}")
    print("to see every stage, run:")
    print(f"  tensorboard --logdir {log_folder}")


if __name__ == "__main__":
    main()
