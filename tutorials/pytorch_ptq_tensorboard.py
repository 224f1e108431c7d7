"""Quantize a PyTorch CNN with logging on, then tour what each TensorBoard dashboard shows.

    python tutorials/pytorch_ptq_tensorboard.py [--log-folder DIR] [--epochs N] [--smoke]

1. Train the digits CNN (3 x conv + batch norm + ReLU, pooling, linear) on scikit-learn's
   digits, upscaled to 32x32 (no download).
2. ``mct.set_log_folder(...)``, then ``mct.ptq.pytorch_post_training_quantization``.
3. Print the float and the 8-bit accuracy, then walk through the TensorBoard runs and tags
   this very call wrote, dashboard by dashboard, and the ``tensorboard --logdir`` line.

``--smoke`` trains 3 epochs and uses 2 representative batches: seconds, for the tests.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import model_compression_toolkit as mct  # noqa: E402
from model_compression_toolkit.core.numbers import format_bytes  # noqa: E402
from tests.fixtures.digits import (  # noqa: E402
    accuracy,
    digits_data,
    representative_dataset,
    torch_digits_cnn,
    torch_predict,
    train_torch,
)
from tutorials.tour import tour  # noqa: E402

# The stages of a PTQ call, in order: each is one TensorBoard run inside the call's folder.


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--log-folder",
        default=str(REPO / "demo_logs" / "pytorch_ptq_tensorboard"),
        help="where the TensorBoard logs go (default: %(default)s)",
    )
    parser.add_argument("--epochs", type=int, default=15, help="training epochs (default: %(default)s)")
    parser.add_argument(
        "--smoke", action="store_true", help="3 epochs, 2 representative batches: runs in seconds"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    epochs, batches = (3, 2) if args.smoke else (args.epochs, 5)

    # ---------------------------------------------------------------- 1. a trained model
    x_train, y_train, x_test, y_test = digits_data()  # N x 1 x 32 x 32: PyTorch is channels-first
    start = time.perf_counter()
    model = train_torch(torch_digits_cnn(), x_train, y_train, epochs=epochs)
    print(
        f"trained the digits CNN for {epochs} epoch(s) on {len(x_train)} images in {time.perf_counter() - start:.1f} s"
    )

    # ---------------------------------------------------------------- 2. quantize with logging on
    # set_log_folder checks the folder at once (LogFolderError if it cannot be written).
    # Every PTQ call then writes its own call folder <ModelClass>_<YYYYmmdd-HHMMSS> inside it.
    log_folder = mct.set_log_folder(args.log_folder)
    # The representative data: a callable returning batches, each a list with one array per
    # model input. 5 batches of 32 images are plenty for 8 bits.
    data_gen = representative_dataset(x_train, batches=batches, batch_size=32)
    start = time.perf_counter()
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, data_gen)
    print(
        f"quantized to 8 bits (with logging and similarity analysis) in {time.perf_counter() - start:.1f} s"
    )

    float_acc = accuracy(torch_predict(model), x_test, y_test)
    quant_acc = accuracy(torch_predict(q_model), x_test, y_test)
    print(f"float accuracy:     {float_acc:.2f} %")
    print(f"quantized accuracy: {quant_acc:.2f} %")
    mem = info.memory
    print(
        f"weights memory:     {format_bytes(mem.weights_float_bytes)} -> {format_bytes(mem.weights_quantized_bytes)}"
    )

    tour(info, log_folder)


if __name__ == "__main__":
    main()
