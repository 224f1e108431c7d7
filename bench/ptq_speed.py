"""PTQ speed against one float pass over the same data, in one process.

    .venv/bin/python bench/ptq_speed.py --framework pytorch   # ResNet-18 shape, 4 x 8x3x224x224
    .venv/bin/python bench/ptq_speed.py --framework keras     # keras.applications.ResNet50

Prints seconds and the ratios the issues set targets for (PTQ off <= 8x the float pass,
logging on <= 1.3x off; similarity <= 0.5x the rest of PTQ and <= 3x one float pass over
its 20 samples plus plotting), and the similarity analysis's floor: the two model passes
it cannot do without (the quantized and the local model over its samples, outputs not
reduced) plus its plots.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import model_compression_toolkit as mct  # noqa: E402


def setup(framework: str):
    rng = np.random.default_rng(0)
    if framework == "pytorch":
        import torch

        from bench.models import torch_resnet18

        model = torch_resnet18()
        batches = [rng.standard_normal((8, 3, 224, 224), dtype=np.float32) for _ in range(4)]
        ptq = mct.ptq.pytorch_post_training_quantization

        def forward(x):
            with torch.no_grad():
                model(torch.from_numpy(x))
    else:
        import keras

        model = keras.applications.ResNet50(weights=None)
        batches = [rng.standard_normal((8, 224, 224, 3), dtype=np.float32) for _ in range(4)]
        ptq = mct.ptq.keras_post_training_quantization

        def forward(x):
            model(x, training=False)

    def float_pass():
        for b in batches:
            forward(b)

    first_20 = np.concatenate(batches)[:SIMILARITY_SAMPLES]
    return model, batches, ptq, float_pass, lambda: forward(first_20)


SIMILARITY_SAMPLES = 20


def interleaved(fns: dict, repeats: int) -> dict:
    """Median seconds of each function, the functions taking turns so that drift in the
    machine's speed hits them all alike."""
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=["pytorch", "keras"], default="pytorch")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, batches, ptq, float_pass, float_pass_20 = setup(args.framework)
    gen = lambda: iter([[b] for b in batches])  # noqa: E731
    no_sim = mct.core.CoreConfig(debug_config=mct.core.DebugConfig(analyze_similarity=False))

    def ptq_off():
        mct.set_log_folder(None)
        ptq(model, gen, no_sim)

    reports = []

    def ptq_on(config):
        def run():
            with tempfile.TemporaryDirectory() as tmp:
                mct.set_log_folder(tmp)
                q_model, info = ptq(model, gen, config)
                mct.set_log_folder(None)
            if info.similarity is not None:
                reports.append((info.similarity, q_model))

        return run

    def plotting():  # every image of the similarity run, as it draws them
        from model_compression_toolkit.observers import similarity_view as view
        from model_compression_toolkit.pipeline.session import produced_graph

        report, q_model = reports[-1]
        plots = view.CosinePlots(report)
        plots.summary()
        plots.samples()
        for node in view.filter_nodes(produced_graph(q_model)):
            view.filters_png(node)

    def model_passes():
        """What the analysis cannot do without: the quantized and the local model over the
        samples, with no reduction of their outputs, in the statistics pass's batches (the
        chunks the analysis runs when the float outputs fit the memory cap; otherwise it
        also runs the float model again). Returns a function that runs them."""
        from model_compression_toolkit.core.similarity.plan import Comparison
        from model_compression_toolkit.pipeline.backends import get_backend
        from model_compression_toolkit.pipeline.session import produced_graph

        report, q_model = reports[-1]
        backend = get_backend(model)
        initial, _ = backend.read(model, [batches[0][:1]])
        plan = Comparison.of(initial, produced_graph(q_model))
        float_model = backend.build(initial, quantized=False, extra_outputs=plan.float_names)
        q = backend.build(produced_graph(q_model), quantized=True)
        local = backend.build(plan.local.graph, quantized=True)
        skip, chunks, left = len(initial.outputs), [], SIMILARITY_SAMPLES
        for b in batches:
            x = b[: min(left, len(b))]
            left -= len(x)
            f_out = dict(zip(plan.float_names, backend.forward(float_model, [x])[skip:]))
            feeds = plan.local.inputs([x], f_out)
            chunks.append((x, feeds))
            if not left:
                break

        def run():
            for x, feeds in chunks:
                backend.forward(q, [x])
                backend.forward(local, feeds)

        return run

    float_pass()  # warm-up
    ptq_off()
    t = interleaved(
        {
            "float": float_pass, "float20": float_pass_20, "off": ptq_off, "on": ptq_on(no_sim),
            "sim": ptq_on(mct.core.CoreConfig()), "plots": plotting,
        },
        args.repeats,
    )  # fmt: skip
    t.update(interleaved({"passes": model_passes()}, args.repeats))
    t_float, t_off, t_on, t_sim = t["float"], t["off"], t["on"], t["sim"]
    similarity = t_sim - t_on
    print(f"framework: {args.framework}, median of {args.repeats}")
    print(f"float pass over the data: {t_float:.2f} s")
    print(f"PTQ, logging off:         {t_off:.2f} s  ({t_off / t_float:.1f}x the float pass; target <= 8x)")
    print(f"PTQ, logging on:          {t_on:.2f} s  ({t_on / t_off:.2f}x logging off; target <= 1.3x)")
    print(f"PTQ, logging + similarity:{t_sim:.2f} s  (similarity {similarity:.2f} s = {similarity / t_on:.2f}x the rest; target <= 0.5x)")
    print(
        f"similarity vs one float pass over its {SIMILARITY_SAMPLES} samples ({t['float20']:.2f} s): "
        f"{similarity / t['float20']:.1f}x; without the plots ({t['plots']:.2f} s): "
        f"{(similarity - t['plots']) / t['float20']:.1f}x (target <= 3x plus plotting)"
    )
    floor = t["passes"] + t["plots"]
    print(
        f"the analysis's floor: the quantized and local models' passes over its samples ({t['passes']:.2f} s, "
        f"no reductions) + plotting = {floor:.2f} s = {floor / t_on:.2f}x the rest"
    )


if __name__ == "__main__":
    main()
