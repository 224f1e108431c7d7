"""What deploying gives: exported file size and runtime latency, float vs int8, and parity.

    .venv/bin/python bench/export_bench.py                    # every model, prints the table
    .venv/bin/python bench/export_bench.py --models digits_torch,digits_keras --rounds 5
    .venv/bin/python bench/export_bench.py --json records.jsonl --readme

Per model, in one process: our PTQ (8-bit defaults), then

- PyTorch: the float model exported by ``torch.onnx.export`` and the quantized one by
  ``mct.exporter.pytorch_export_model`` (QDQ), both run by onnxruntime on the CPU;
- Keras: the float model converted to TFLite as it is and the quantized one by
  ``mct.exporter.keras_export_model(..., TFLITE, INT8)``, both run by the TFLite interpreter.

File sizes are the files on disk. Latency is one sample per call, both models given the
same threads (all cores), measured in alternating rounds so that a load change on the
machine hits both; the figure is the median of the rounds' per-call means. Parity is the
export's own comparison with our quantized model (``ExportResult.parity``). Uses this
repository's ``.venv`` (torch, TensorFlow, onnxruntime); `make bench` runs it with that
interpreter and puts its table in the report and the README.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import table  # noqa: E402

MODELS = {
    "digits_torch": "digits CNN (PyTorch)",
    "resnet18": "ResNet-18",
    "mobilenet_v2": "MobileNetV2",
    "digits_keras": "digits CNN (Keras)",
    "keras_mobilenet_v2": "MobileNetV2 (keras.applications)",
    "keras_resnet50": "ResNet50 (keras.applications)",
}
THREADS = os.cpu_count() or 1


# ------------------------------------------------------------------ models and data
def build(name: str):
    """(float model, representative batches, test set or None, framework)."""
    from bench import models
    from tests.fixtures import digits
    from tests.fixtures.trained import load_trained

    rng = np.random.default_rng(0)
    if name in ("digits_torch", "digits_keras"):
        framework = "pytorch" if name == "digits_torch" else "keras"
        x_train, _, x_test, y_test = digits.digits_data(channels_last=framework == "keras")
        return (
            load_trained(framework),
            [x_train[i * 32 : (i + 1) * 32] for i in range(5)],
            (x_test, y_test),
            framework,
        )
    if name in ("resnet18", "mobilenet_v2"):
        model = models.torch_resnet18() if name == "resnet18" else models.torch_mobilenet_v2()
        return (
            model,
            [rng.standard_normal((8, 3, 224, 224), dtype=np.float32) for _ in range(4)],
            None,
            "pytorch",
        )
    model = models.keras_application("MobileNetV2" if name == "keras_mobilenet_v2" else "ResNet50")
    return model, [rng.standard_normal((8, 224, 224, 3), dtype=np.float32) for _ in range(4)], None, "keras"


# ------------------------------------------------------------------ runtimes
def onnx_runner(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x})[0]


def tflite_runner(path: Path) -> Callable[[np.ndarray], np.ndarray]:
    from model_compression_toolkit.keras.export import interpreter

    runner = interpreter(path, threads=THREADS).get_signature_runner()
    key = next(iter(runner.get_input_details()))
    return lambda x: next(iter(runner(**{key: x}).values()))


def float_file(model, framework: str, example: np.ndarray, folder: Path) -> Path:
    """The float model as its runtime takes it: ONNX from torch.onnx, or TFLite as it is."""
    if framework == "pytorch":
        import contextlib
        import io

        import torch

        path = folder / "float.onnx"
        batch = torch.export.Dim("batch")
        with contextlib.redirect_stdout(io.StringIO()):  # torch.onnx's progress lines
            program = torch.onnx.export(model.eval(), (torch.from_numpy(example),), dynamo=True, opset_version=18,
                                        dynamic_shapes=({0: batch},), verbose=False)  # fmt: skip
        program.save(str(path))
        return path
    from model_compression_toolkit.keras.export import convert

    path = folder / "float.tflite"
    path.write_bytes(convert(model, [t.name for t in model.inputs], ["output"], int8=False))
    return path


def latency_ms(
    runners: dict[str, Callable[[], object]], rounds: int, round_seconds: float = 0.3
) -> dict[str, float]:
    """Median over ``rounds`` alternating rounds of each runner's mean milliseconds per call."""
    repeats = {}
    for key, run in runners.items():
        run()  # warm-up: the first call allocates and plans
        start = time.perf_counter()
        run()
        repeats[key] = max(1, int(round_seconds / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {key: [] for key in runners}
    for i in range(rounds):
        order = list(runners) if i % 2 == 0 else list(runners)[::-1]
        for key in order:
            start = time.perf_counter()
            for _ in range(repeats[key]):
                runners[key]()
            samples[key].append(1000 * (time.perf_counter() - start) / repeats[key])
    return {key: statistics.median(values) for key, values in samples.items()}


# ------------------------------------------------------------------ one model
def measure(name: str, rounds: int, folder: Path) -> dict:
    import model_compression_toolkit as mct
    from tests.fixtures.digits import accuracy

    model, batches, test, framework = build(name)
    data = lambda: iter([[b] for b in batches])  # noqa: E731 - MCT's representative_data_gen
    config = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))
    ptq = (
        mct.ptq.pytorch_post_training_quantization
        if framework == "pytorch"
        else mct.ptq.keras_post_training_quantization
    )
    q_model, _ = ptq(model, data, config)
    start = time.perf_counter()
    if framework == "pytorch":
        result = mct.exporter.pytorch_export_model(q_model, folder / f"{name}.onnx", data)
        runtime, runner = result.runtime, onnx_runner
    else:
        result = mct.exporter.keras_export_model(q_model, folder / f"{name}.tflite", serialization_format="TFLITE",
                                                 quantization_format="INT8", repr_dataset=data)  # fmt: skip
        runtime, runner = result.runtime, tflite_runner
    export_seconds = time.perf_counter() - start
    float_path = float_file(model, framework, batches[0][:2], folder)
    run_float, run_int8 = runner(float_path), runner(result.path)
    one = batches[0][:1]
    times = latency_ms({"float": lambda: run_float(one), "int8": lambda: run_int8(one)}, rounds)
    (parity,) = result.parity
    record = {
        "model": MODELS[name], "key": name, "runtime": f"{'ONNX QDQ' if framework == 'pytorch' else 'TFLite int8'} in {runtime}",
        "float_bytes": float_path.stat().st_size, "int8_bytes": result.file_bytes, "float_ms": times["float"],
        "int8_ms": times["int8"], "max_steps": parity.max_steps, "cosine": parity.cosine,
        "equal_fraction": parity.equal_fraction, "top1": parity.top1_agreement, "bias_cosine": parity.bias_cosine,
        "floor_cosine": parity.floor_cosine, "parity_ok": result.parity_ok, "export_seconds": export_seconds,
        "bias_rounding_steps": result.report.figures.get("bias_rounding_steps"), "threads": THREADS,
        "runtime_ops": result.runtime_ops or result.ops,
    }  # fmt: skip
    if test is not None:
        x_test, y_test = test
        predict = {"pytorch": _torch_predict, "keras": _keras_predict}[framework]
        record["float_acc"] = accuracy(predict(model), x_test, y_test)
        record["quant_acc"] = accuracy(predict(q_model), x_test, y_test)
        record["runtime_acc"] = accuracy(runner(result.path), x_test, y_test)
    return record


def _torch_predict(model):
    import torch

    def predict(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    return predict


def _keras_predict(model):
    return lambda x: np.asarray(model(x, training=False))


def markdown(records: list[dict], header: bool = True) -> str:
    import platform

    import onnxruntime
    import tensorflow as tf
    import torch

    head = (
        f"Measured by `.venv/bin/python bench/export_bench.py` on {time.strftime('%Y-%m-%d')}: {THREADS} cores, "
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, TensorFlow {tf.__version__}, "
        f"Python {platform.python_version()}; 1-minute load average {os.getloadavg()[0]:.1f} at the end. "
        "Latency: one sample per call, medians of alternating rounds.\n\n"
    )
    notes = table.export_notes(records)
    return (head if header else "") + table.export_markdown(records) + ("\n\n" + notes if notes else "")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}"
    )
    parser.add_argument("--rounds", type=int, default=15, help="alternating latency rounds per model")
    parser.add_argument("--json", help="append one JSON record per model to this file")
    parser.add_argument(
        "--readme", action="store_true", help="rewrite the export table in README.md and bench/README.md"
    )
    parser.add_argument("--markdown-out", help="also write the table (with its header line) to this file")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    records = []
    with tempfile.TemporaryDirectory(prefix="mct-export-bench-") as tmp:
        for name in [m for m in args.models.split(",") if m]:
            start = time.perf_counter()
            try:
                record = measure(name, args.rounds, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a failure is a finding, reported in the table
                traceback.print_exc()
                record = {
                    "model": MODELS.get(name, name),
                    "key": name,
                    "runtime": "-",
                    "error": f"{type(exc).__name__}: {exc}",
                }
            print(f"export bench: {name} done in {time.perf_counter() - start:.0f} s: {json.dumps(record, default=str)}",
                  file=sys.stderr, flush=True)  # fmt: skip
            records.append(record)
            if args.json:
                with open(args.json, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record, default=str) + "\n")
    text = markdown(records)
    print(text)
    if args.markdown_out:
        Path(args.markdown_out).write_text(text, encoding="utf-8")
    if args.readme:
        for readme in (REPO / "README.md", REPO / "bench" / "README.md"):
            readme.write_text(table.replace_block(readme.read_text(encoding="utf-8"), text), encoding="utf-8")


if __name__ == "__main__":
    main()
