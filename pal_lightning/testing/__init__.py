"""Small, offline fixtures for tests of code built on pal-lightning (ours and users'), imported like any
other part of the package (``from pal_lightning.testing import TINY_BERT, quiet_trainer``):

* a tiny random encoder (:mod:`.encoders`): :data:`TINY_BERT`, a 2-layer, width-32 ``bert_config`` with
  the real BERT/MiniLM vocabulary, so the packaged offline tokenizer can feed it
  (``MultiTaskModule(bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})`` trains in milliseconds); other
  shapes from :func:`tiny_bert_config` (:func:`without_dropout` for exact comparisons);
  :func:`save_tiny_encoder` writes one as an encoder folder;
* fixture data (:mod:`.data`): :func:`write_cs224n_data` (a clean set in the CS224N starter layout) and
  :func:`write_cs224n_quirks` (the starter files' quirks and bad rows);
* :func:`quiet_trainer` (:mod:`.trainer`): a CPU ``Trainer`` that logs, saves and prints nothing unless told;
* CLI runs (:mod:`.configs`): :func:`write_tiny_fit_config`, :func:`write_tiny_pretrain_config`,
  :func:`save_stage1_checkpoint`, :data:`TINY_GEM`;
* callbacks for CLI subprocesses, named by their full path in a config (not imported here: they need
  Lightning): ``pal_lightning.testing.callbacks.KillAtStep`` and ``...RankRecorder``.
* tiny token-id batches and a module that trains on them without tokenizer or files (not imported
  here either): ``pal_lightning.testing.batches`` (``tiny_module``, ``make_batch``, ``TinyData``).
"""

from __future__ import annotations

from pal_lightning.testing.configs import (
    TINY_GEM,
    save_stage1_checkpoint,
    write_tiny_fit_config,
    write_tiny_pretrain_config,
)
from pal_lightning.testing.data import sentence, write_cs224n_data, write_cs224n_quirks, write_lines
from pal_lightning.testing.encoders import (
    BERT_VOCAB_SIZE,
    FAMILY_TYPES,
    TINY_BERT,
    TINY_BERT_3_LAYERS,
    save_tiny_encoder,
    tiny_bert_config,
    tiny_family_config,
    without_dropout,
)
from pal_lightning.testing.processes import free_port, run_spawned
from pal_lightning.testing.trainer import QUIET_TRAINER, quiet_trainer

__all__ = [
    "free_port",
    "run_spawned",
    "BERT_VOCAB_SIZE",
    "FAMILY_TYPES",
    "QUIET_TRAINER",
    "TINY_BERT",
    "TINY_BERT_3_LAYERS",
    "TINY_GEM",
    "quiet_trainer",
    "save_stage1_checkpoint",
    "save_tiny_encoder",
    "sentence",
    "tiny_bert_config",
    "tiny_family_config",
    "write_cs224n_data",
    "write_cs224n_quirks",
    "write_lines",
    "write_tiny_fit_config",
    "write_tiny_pretrain_config",
    "without_dropout",
]
