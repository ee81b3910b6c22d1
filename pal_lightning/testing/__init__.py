"""Small, offline fixtures for tests of code built on pal-lightning (``from pal_lightning.testing import ...``):
tiny random encoders (:data:`TINY_BERT` has the real BERT vocabulary, so the offline tokenizer feeds it),
fixture data in the CS224N layout, a quiet ``Trainer``, CLI configs, a free port for gloo, and callbacks for
CLI subprocesses (``pal_lightning.testing.callbacks``, not imported here: they need Lightning).
``pal_lightning.testing.batches`` (not imported here either): tiny token-id batches and a module that
trains on them without tokenizer or files.
"""

from __future__ import annotations

from pal_lightning.testing.configs import (
    QUIET_TRAINER,
    TINY_GEM,
    quiet_trainer,
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
from pal_lightning.testing.processes import free_port

__all__ = [
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
    "free_port",
]
