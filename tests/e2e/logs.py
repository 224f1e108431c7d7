"""The PTQ calls the end-to-end tests and the docs screenshots look at, logged into one folder.

    shipped digits CNNs (`tests.fixtures.trained`) -> 5 PTQ calls -> <log folder>/<call>/<n>_<stage>/ ...

Five calls of at most 8 runs each: 40 runs, the most TensorBoard still selects by default.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e import browser
from tests.fixtures.tb import load, run_folders

# The calls, in the order they are made: each framework's digits CNN, the PyTorch one with an
# outlier channel (`tests.fixtures.damage.outlier_channel`, named by ``run_name=``), that model
# again through tuned PTQ (trial 1 the plain PTQ, trial 2 its report's suggested fix: the
# call is named ``tuned``), and the Keras one with an outlier channel. Five calls, one tuned,
# of 8 runs each.
CALLS = ("pytorch", "keras", "pytorch_outlier", "pytorch_fixed", "keras_outlier")
RUN_NAMES = {"pytorch_outlier": "outlier", "keras_outlier": "outlier"}
LOAD_TIMEOUT_S = 90.0


@dataclass
class LoggedRun:
    """One PTQ call's logs: `log_folder` is what TensorBoard serves, `run` the call's folder in it.

    Attributes:
        framework: ``"pytorch"`` or ``"keras"``.
        log_folder: the folder every call logged into.
        run: this call's folder (``info.log_folder``).
        info: the call's `QuantizationInfo`.
        names: the damaged layers (`outlier_channel`'s ``activation``, ``consumer``,
            ``channel``), for the damaged calls.
    """

    framework: str
    log_folder: Path
    run: Path
    info: Any = None
    names: dict[str, str] | None = None

    def name(self, *parts: str) -> str:
        """A TensorBoard run name: the path below the log folder, e.g. `Sequential_<time>/5_quantized_graph`."""
        return "/".join((self.run.relative_to(self.log_folder).as_posix(), *parts))

    def runs(self) -> list[str]:
        """This call's TensorBoard runs (every folder holding an event file), sorted."""
        folders = {p.parent for p in self.run.rglob("events.out.tfevents.*")}
        return sorted(f.relative_to(self.log_folder).as_posix() for f in folders)

    def runs_with(self, kind: str) -> dict[str, list[str]]:
        """TensorBoard run name -> tags of `kind` ("scalars", "images", "text", ...), for runs that have any."""
        out = {}
        for run in self.runs():
            acc = load(self.log_folder / run)
            if kind == "text":
                tags = [t for t in acc.Tags()["tensors"] if acc.SummaryMetadata(t).plugin_data.plugin_name == "text"]
            else:
                tags = acc.Tags()[kind]
            if tags:
                out[run] = list(tags)
        return out


def build_logs(log_folder: Path, calls: tuple[str, ...] = CALLS) -> dict[str, LoggedRun]:
    """The ``calls`` (keys of `CALLS`), logged one after the other into ``log_folder``."""
    import model_compression_toolkit as mct
    from tests.conftest import FRAMEWORKS
    from tests.fixtures.damage import outlier_channel
    from tests.fixtures.digits import representative_dataset
    from tests.fixtures.trained import load_trained

    logged: dict[str, LoggedRun] = {}
    mct.set_log_folder(log_folder)
    try:
        for key in calls:
            framework = key.split("_")[0]
            fw = FRAMEWORKS[framework]
            x_train = fw.data()[0]
            model, names, config = load_trained(framework), None, None
            if key.endswith(("_outlier", "_fixed")):
                with warnings.catch_warnings():  # Keras on the fixture's probe model: a list of one input expected
                    warnings.simplefilter("ignore", UserWarning)
                    model, names = outlier_channel(framework, model, x_train[:64])
            before = set(run_folders(log_folder))
            if key.endswith("_fixed"):
                _, info = _tuned(framework, model, representative_dataset(x_train))
            else:
                _, info = fw.ptq(model, representative_dataset(x_train), core_config=config, run_name=RUN_NAMES.get(key))
            (run,) = set(run_folders(log_folder)) - before
            logged[key] = LoggedRun(framework, Path(log_folder), run, info, names)
    finally:
        mct.set_log_folder(None)
    return logged


def _tuned(framework: str, model: Any, data: Any) -> tuple[Any, Any]:
    """Tuned PTQ within a point of float, two trials at most: trial 2 is the report's fix."""
    import model_compression_toolkit as mct
    from tests.conftest import FRAMEWORKS
    from tests.fixtures.digits import accuracy

    fw = FRAMEWORKS[framework]
    _, _, x_test, y_test = fw.data()
    tuned = getattr(mct.ptq, f"{framework}_tuned_post_training_quantization")
    return tuned(model, data, lambda m: accuracy(fw.predict(m), x_test, y_test),
                 mct.core.TuningConfig(max_drop=1.0, max_trials=2))  # fmt: skip


def served_tags(board, plugin: str) -> dict[str, set[str]]:
    """Run -> tags, as the plugin's /tags route lists them."""
    return {run: set(tags) for run, tags in board.json(f"/data/plugin/{plugin}/tags").items()}


def expected_tags(calls: dict[str, LoggedRun], kind: str) -> dict[str, set[str]]:
    """Run -> tags of ``kind`` as TensorBoard's own EventAccumulator reads them from the files."""
    return {run: set(tags) for logged in calls.values() for run, tags in logged.runs_with(kind).items()}


def wait_until_served(board, calls: dict[str, LoggedRun], timeout_s: float = LOAD_TIMEOUT_S) -> None:
    """Return once ``board`` serves every scalar, histogram, image and text tag the calls wrote
    (TensorBoard answers before it has read every run)."""
    expected = {kind: expected_tags(calls, kind) for kind in ("scalars", "histograms", "images", "text")}
    try:
        browser.wait_for(lambda: all(served_tags(board, k) == tags for k, tags in expected.items()),
                         timeout_s, "TensorBoard to load every run")  # fmt: skip
    except TimeoutError as error:
        raise TimeoutError(f"{error}; its output:\n{board.log_tail()}") from None
