"""The TensorBoard observer: writes what a PTQ call reports into its call folder.

    stage_finished(report)  -> <n>_<stage>/ runs (`stage_view`); at quantized_graph also the
                               similarity and mixed-precision report files (`report_files`)
    trial_finished(report)  -> tune_<n>_acc_<score>/ (`tuning_view`)
    tuning_finished(result) -> tuning/

A write failure (disk full) never reaches the quantization: the observer warns once,
naming the file that failed, stops writing to this call folder and leaves what was
written readable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model_compression_toolkit.core.tuning import TuningResult
from model_compression_toolkit.errors import warn_user
from model_compression_toolkit.observers import tuning_view
from model_compression_toolkit.observers.event_file import NullRunWriter, RunWriter
from model_compression_toolkit.observers.log_folder import safe_run_path
from model_compression_toolkit.observers.report_files import write_mixed_precision, write_similarity_report
from model_compression_toolkit.observers.stage_view import write_stage
from model_compression_toolkit.pipeline.events import Progress, StageReport, TrialReport

logger = logging.getLogger("model_compression_toolkit")
TUNING_RUN = "tuning"


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

    # -------------------------------------------------------------- writers
    def _warn(self, message: str) -> None:
        warn_user(message, RuntimeWarning)
        logger.warning(message)
        self.warnings.append(message)

    def _on_error(self, path: Path, exc: OSError) -> None:
        if not self.failed:
            self.failed = True
            self._warn(
                f"TensorBoard logging stopped: writing {path} failed ({exc}). Quantization "
                f"goes on; what was already written under {self.call_folder} stays readable."
            )
        for w in self._writers:
            w.disable()

    def writer(self, run_name: str) -> RunWriter | NullRunWriter:
        """Open the run ``<call_folder>/<run_name>`` (``/`` nests); closed by `close`."""
        path = safe_run_path(self.call_folder, run_name)
        if self.failed:
            return NullRunWriter(path)
        w = RunWriter(path, on_error=self._on_error)
        self._writers.append(w)
        return w

    def _in_runs(self, write: Callable[[Callable[[str], Any]], None]) -> Path | None:
        """Call ``write(open_writer)``, then flush and close every run it opened.

        Returns the first run's path, or None when logging had stopped.
        """
        if self.failed:
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
        if report.mixed_precision is not None:
            self._files(lambda folder: write_mixed_precision(folder, report.mixed_precision))
        if report.similarity is not None:
            self._files(lambda folder: write_similarity_report(folder, report.similarity.report))
        if path is not None:
            logger.info(
                "stage %s: %d layers written to %s in %.3f s",
                report.name, len(report.graph), path, time.perf_counter() - start,
            )  # fmt: skip

    def trial_finished(self, report: TrialReport) -> None:
        self._in_runs(
            lambda open_writer: tuning_view.write_evaluation(
                open_writer(report.trial.run_name), report.graph, report.memory, report.similarity
            )
        )

    def tuning_finished(self, result: TuningResult) -> None:
        self._in_runs(lambda open_writer: tuning_view.write_tuning(open_writer(TUNING_RUN), result))

    def close(self) -> None:
        writers, self._writers = self._writers, []
        for w in writers:
            w.close()

