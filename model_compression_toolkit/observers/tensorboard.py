"""The TensorBoard observer: writes what a PTQ or export call reports into its call folder.

    stage_finished(report)  -> <n>_<stage>/ runs (`stage_view`); at quantized_graph also the
                               similarity and mixed-precision report files (`report_files`) and
                               the Quantization dashboard's page (`plugin_files`)
    trial_finished(report)  -> 5_quantized_graph/: trial n's graph tag and step n (`tuning_view`)
    tuning_finished(result) -> 5_quantized_graph/: scores per trial and the trials table
    export_finished(report) -> <format>/ (and <format>/runtime/): the exported graph, the
                               parity tables and scalars, and export_report.json (`export_view`)

A write failure (disk full) never reaches the quantization: the observer warns once,
naming the file that failed, stops writing to this call folder and leaves what was
written readable. A call folder deleted or moved away mid-run (its log folder removed,
renamed or re-pointed) is one warning saying what went with it; the folder is never
created again behind the user's back, so a run is never split in two.

    call_failed(exception)  -> a "this run is incomplete" step in the Text summary of the
                               last stage written
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model_compression_toolkit.core.export.report import ExportReport
from model_compression_toolkit.core.tuning import TuningResult
from model_compression_toolkit.errors import warn_user
from model_compression_toolkit.observers import tuning_view
from model_compression_toolkit.observers.event_file import NullRunWriter, RunWriter
from model_compression_toolkit.observers.export_view import write_export, write_export_report
from model_compression_toolkit.observers.log_folder import safe_run_path
from model_compression_toolkit.observers.plugin_files import PluginFiles
from model_compression_toolkit.observers.report_files import write_mixed_precision, write_similarity_report
from model_compression_toolkit.observers.stage_view import SUMMARY_TAG, stage_run, write_stage
from model_compression_toolkit.observers.tables import code
from model_compression_toolkit.pipeline.events import Progress, StageReport, TrialReport

logger = logging.getLogger("model_compression_toolkit")


class TensorBoardObserver:
    """An `Observer` writing every event of one PTQ call under ``call_folder`` at once.

    Args:
        call_folder: the folder of this call (inside the log folder).
        warnings_shown: where the warnings it shows are kept (``info.warnings``).
    """

    def __init__(self, call_folder: str | Path, warnings_shown: list[str] | None = None) -> None:
        self.call_folder = Path(call_folder)
        self.failed = False
        self.warnings = warnings_shown if warnings_shown is not None else []
        self._writers: list[RunWriter] = []
        self._identity = _identity(self.call_folder)  # which directory the call folder is
        self._written: list[str] = []  # the runs written so far (what a deleted folder takes along)
        self._last_stage: str | None = None  # the run of the last stage written
        self._plugin = PluginFiles()  # the Quantization dashboard's page of this call

    # -------------------------------------------------------------- writers
    def _warn(self, message: str) -> None:
        warn_user(message, RuntimeWarning)
        logger.warning(message)
        self.warnings.append(message)

    def _on_error(self, path: Path, exc: OSError) -> None:
        if not self.failed:
            if self._folder_gone():
                self._lost()
                return
            self.failed = True
            self._warn(
                f"TensorBoard logging stopped: writing {path} failed ({exc}). Quantization "
                f"goes on; what was already written under {self.call_folder} stays readable."
            )
        for w in self._writers:
            w.disable()

    def _folder_gone(self) -> bool:
        return self._identity is None or _identity(self.call_folder) != self._identity

    def _lost(self) -> None:
        """Stop writing, and say once what the deleted or moved call folder took with it."""
        self.failed = True
        for w in self._writers:
            w.disable()
        runs = ", ".join(self._written + ["mct.log"])
        self._warn(
            f"TensorBoard logging stopped: the call folder {self.call_folder} was deleted or moved during "
            "the run (it, or the log folder above it, was removed, renamed or re-pointed). Gone from "
            f"there with it: {runs}. Quantization goes on; nothing more is written for this call, so "
            "the run is not split between two folders."
        )

    def _check_folder(self) -> bool:
        """Whether writing may go on: not stopped, and the call folder still the one created."""
        if not self.failed and self._folder_gone():
            self._lost()
        return not self.failed

    def writer(self, run_name: str) -> RunWriter | NullRunWriter:
        """Open the run ``<call_folder>/<run_name>`` (``/`` nests); closed by `close`."""
        path = safe_run_path(self.call_folder, run_name)
        if self.failed:
            return NullRunWriter(path)
        w = RunWriter(path, on_error=self._on_error, root=self.call_folder)
        self._writers.append(w)
        top = path.relative_to(self.call_folder).parts[0]
        if top not in self._written:
            self._written.append(top)
        return w

    def _in_runs(self, write: Callable[[Callable[[str], Any]], None]) -> Path | None:
        """Call ``write(open_writer)``, then flush and close every run it opened.

        Returns the first run's path, or None when logging had stopped.
        """
        if not self._check_folder():
            return None
        opened: list[RunWriter | NullRunWriter] = []

        def open_writer(run_name: str) -> RunWriter | NullRunWriter:
            opened.append(self.writer(run_name))
            return opened[-1]

        try:
            write(open_writer)
        finally:
            for w in opened:
                w.close()
                if w in self._writers:
                    self._writers.remove(w)
        return opened[0].path if opened and not self.failed else None

    def _files(self, write: Callable[[Path], Any]) -> None:
        """Write report files; a failing disk warns and quantization goes on."""
        if not self._check_folder():
            return
        try:
            write(self.call_folder)
        except OSError as err:
            self._warn(f"could not write report files into {self.call_folder}: {err}; quantization goes on")

    # -------------------------------------------------------------- events
    def progress(self, progress: Progress) -> None:
        pass  # shown by the console's observer, not logged

    def stage_finished(self, report: StageReport) -> None:
        start = time.perf_counter()
        path = self._in_runs(lambda open_writer: write_stage(open_writer, report))
        if path is not None:
            self._last_stage = stage_run(report.name)
        if report.mixed_precision is not None:
            self._files(lambda folder: write_mixed_precision(folder, report.mixed_precision))
        if report.similarity is not None:
            self._files(lambda folder: write_similarity_report(folder, report.similarity.report))
        self._files(lambda folder: self._plugin.stage_finished(folder, report))
        if path is not None:
            logger.info(
                "stage %s: %d layers written to %s in %.3f s",
                report.name, len(report.graph), path, time.perf_counter() - start,
            )  # fmt: skip

    def trial_finished(self, report: TrialReport) -> None:
        self._plugin.trial_finished(report)
        if report.trial.n == 1:  # the staged PTQ: its stages wrote its graph and histograms
            return
        self._in_runs(
            lambda open_writer: tuning_view.write_evaluation(
                open_writer(stage_run("quantized_graph")),
                report.trial,
                report.graph,
                report.memory,
                report.similarity,
            )
        )

    def tuning_finished(self, result: TuningResult) -> None:
        self._files(lambda folder: self._plugin.tuning_finished(folder, result))
        self._in_runs(
            lambda open_writer: tuning_view.write_tuning(open_writer(stage_run("quantized_graph")), result)
        )

    def export_finished(self, report: ExportReport) -> None:
        path = self._in_runs(lambda open_writer: write_export(open_writer, report))
        self._files(lambda folder: write_export_report(folder, report))
        if path is not None:
            logger.info("export of %s written to %s", report.model_name, path)

    def call_failed(self, error: BaseException) -> None:
        """Add to the Text summary of the last stage written that the run stopped, and why."""
        if self._last_stage is None or not self._check_folder():
            return
        message = f"{type(error).__name__}: {error}".strip().rstrip(":")
        self._in_runs(
            lambda open_writer: open_writer(self._last_stage).add_text(
                SUMMARY_TAG,
                f"**Stopped: this run is incomplete.** The call failed after this stage with "
                f"{code(message)}; the stages after it were not written. mct.log holds the traceback.",
                step=1,
            )
        )

    def close(self) -> None:
        writers, self._writers = self._writers, []
        for w in writers:
            w.close()


def _identity(folder: Path) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``folder`` now, or None when there is none."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino
