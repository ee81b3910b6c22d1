"""Further pre-training of the encoder on the tasks' text (masked language modelling).

``pal-lightning pretrain --config configs/pretrain_mlm.yaml`` trains :class:`MLMPretrainModule` on
the sentences of :class:`MLMDataModule` and writes an encoder folder that ``--model.encoder`` takes.
"""

from pal_lightning.pretraining.data import MLMDataModule, load_tokenizer, task_sentences
from pal_lightning.pretraining.masking import mask_tokens, maskable_positions
from pal_lightning.pretraining.mlm import MLMPretrainModule

__all__ = [
    "MLMDataModule",
    "MLMPretrainModule",
    "load_tokenizer",
    "mask_tokens",
    "maskable_positions",
    "task_sentences",
]
