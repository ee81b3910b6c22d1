"""GLUE test-server submission files from ``predict`` (:class:`GlueSubmissionWriter`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from pal_lightning.callbacks.prediction_writer import PredictionWriter, predicted_pairs
from pal_lightning.core.contracts import PredictionLayout, datamodule_of, satisfies
from pal_lightning.tasks.glue import SUBMISSION_FILES, missing_submission_files, write_submission_file

log = logging.getLogger(__name__)

SUBMITTED_SPLIT = "test"


class GlueSubmissionWriter(PredictionWriter):
    """Write the GLUE server's ``<Task>.tsv`` files of the test predictions, warning about missing ones
    (``trainer.callbacks: [{class_path: pal_lightning.callbacks.glue_submission.GlueSubmissionWriter}]``).

    Args:
        output_dir: folder of the files; default ``<trainer.log_dir>/glue_submission``.
        overwrite: replace existing files instead of refusing to run.
    """

    def __init__(self, output_dir: str | None = None, overwrite: bool = False) -> None:
        super().__init__(output_dir=output_dir, overwrite=overwrite)

    def resolve_output_dir(self, trainer: pl.Trainer) -> Path:
        """``output_dir``, else ``glue_submission`` beside the prediction files or in the log folder."""
        if self.output_dir is not None:
            return self.output_dir
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if type(callback) is PredictionWriter and callback.output_dir is not None:
                return callback.output_dir.parent / "glue_submission"
        return Path(trainer.log_dir or trainer.default_root_dir) / "glue_submission"

    def expected_files(self, trainer: pl.Trainer) -> list[Path] | None:
        dm = datamodule_of(trainer)
        if not satisfies(dm, PredictionLayout):
            return None
        if SUBMITTED_SPLIT not in dm.predict_splits:
            return []
        out_dir = self.resolve_output_dir(trainer)
        # with the evaluation views predict serves (glue_mnli's MNLI-mm.tsv and AX.tsv)
        pairs = predicted_pairs(dm)
        return [
            out_dir / SUBMISSION_FILES[t][0]
            for t, s in pairs
            if s == SUBMITTED_SPLIT and t in SUBMISSION_FILES
        ]

    def _write_all(
        self, trainer: pl.Trainer, gathered: dict[tuple[str, str], list[tuple[str, Any]]]
    ) -> list[Path]:
        out_dir = self._out_dir or self.resolve_output_dir(trainer)
        keys = sorted(k for k in gathered if k[0] in SUBMISSION_FILES and k[1] == SUBMITTED_SPLIT)
        self._check_no_overwrite([out_dir / SUBMISSION_FILES[task][0] for task, _ in keys], out_dir)
        written = []
        for task, split in keys:
            rows = self._order(trainer, task, split, gathered[(task, split)])
            written.append(write_submission_file(out_dir, task, rows, overwrite=True))
            log.info("Wrote %d GLUE test predictions to %s", len(rows), written[-1])
        missing = missing_submission_files(p.name for p in written)
        if written and missing:
            log.warning(
                "The GLUE server needs all eleven files in the zip; %s lack(s) %s (WNLI.tsv: add glue_wnli to "
                "the tasks; AX.tsv, MNLI-m.tsv, MNLI-mm.tsv: glue_mnli).",
                out_dir,
                ", ".join(missing),
            )
        return written
