"""Masked-language pre-training of any encoder on the tasks' own text (Sun et al. 2019), with the
checkpoint's masked-language-model head or a new one."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.utilities.types import OptimizerLRScheduler
from torch import Tensor

from pal_lightning.core.batch import ATTENTION_MASK, INPUT_IDS, LABELS
from pal_lightning.core.distributed import is_main_process, rank
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import staged_folder
from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder
from pal_lightning.module.optim import FusedClippingMixin, warmup_decay_optimizer, warmup_steps_of
from pal_lightning.pretraining.data import WORD_IDS, load_tokenizer
from pal_lightning.pretraining.masking import IGNORE_INDEX, mask_tokens, maskable_positions

log = logging.getLogger(__name__)

_TRAIN_STREAM, _VAL_STREAM = 1, 2
#: The encoder folder in the run folder when ``output_dir`` is not given.
ENCODER_FOLDER = "encoder"


def load_mlm_model(encoder: str) -> tuple[Any, bool]:
    """``(model, head_from_checkpoint)``: ``encoder`` with the checkpoint's masked-language-model head, or
    a new one (``False``)."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    path = resolve_encoder(encoder)
    verbosity = hf_logging.get_verbosity()
    # not transformers' report of every missing key: one line below says what matters
    hf_logging.set_verbosity_error()
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PalUserError(
            f"Cannot load {encoder!r} ({path}) with a masked-language-model head: {first}"
        ) from err
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = set(info.get("missing_keys", ()))
    # the head is what lies outside the base model (cls., lm_head., vocab_*, ...); the decoder's bias may be
    # absent even from a checkpoint with a head: it is tied to another tensor
    base = f"{model.base_model_prefix}."
    head_from_checkpoint = not any(not k.startswith(base) and not k.endswith("bias") for k in missing)
    what = "the checkpoint's" if head_from_checkpoint else "no head in the checkpoint, training a new"
    log.info("%s: %s masked-language-model head", encoder, what)
    return model, head_from_checkpoint


def empty_or_missing(path: Path) -> bool:
    """Whether writing an encoder folder at ``path`` overwrites nothing."""
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


class MLMPretrainModule(FusedClippingMixin, pl.LightningModule):
    """Masked-language-model pre-training of an encoder; writes the result in ``save_pretrained`` layout.

    A step's masks are a pure function of ``(seed, step, rank)``; validation's are the same every time.

    Args:
        encoder: folder or hub id of the encoder (and its tokenizer) to continue pre-training.
        output_dir: where the encoder and tokenizer are written at the end of ``fit`` (missing or empty);
            ``None``: ``<run folder>/encoder``.
        mlm_probability: share of the maskable tokens (or words) chosen for prediction (BERT: 0.15).
        whole_word: choose whole words (every piece of a word together) instead of single tokens.
        lr: peak learning rate of AdamW.
        weight_decay: AdamW decoupled weight decay (not on biases and LayerNorm weights).
        warmup_ratio: fraction of ``trainer.max_steps`` spent warming up linearly.
        seed: seed of the masks (with the step and the rank).
    """

    def __init__(
        self,
        encoder: str = DEFAULT_ENCODER,
        output_dir: str | None = None,
        mlm_probability: float = 0.15,
        whole_word: bool = False,
        lr: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.06,
        seed: int = 42,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if not 0.0 < mlm_probability < 1.0:
            raise PalUserError(f"mlm_probability must lie in (0, 1), got {mlm_probability}.")
        if not 0.0 <= warmup_ratio <= 1.0:
            raise PalUserError(f"warmup_ratio must lie in [0, 1], got {warmup_ratio}.")
        if output_dir is not None and not empty_or_missing(Path(output_dir)):
            raise PalUserError(
                f"output_dir {output_dir} already holds files; the pre-trained encoder is never written over "
                "them. Pick a new folder, or leave output_dir unset (the run folder's encoder/)."
            )
        self.tokenizer = load_tokenizer(encoder)
        self.model, self.head_from_checkpoint = load_mlm_model(encoder)
        # from_pretrained returns it in eval mode, which Lightning would keep (no dropout)
        self.model.train()
        special = set(self.tokenizer.all_special_ids)
        self.special_ids = sorted(special)
        vocab = int(self.model.config.vocab_size)
        self.random_ids = torch.tensor([i for i in range(vocab) if i not in special], dtype=torch.long)
        self._batches = {_TRAIN_STREAM: 0, _VAL_STREAM: 0}  # the batches masked so far, per stream
        self.output_path: Path | None = None  # set at the end of fit

    def _generator(self, stream: int, index: int) -> torch.Generator:
        words = [int(self.hparams["seed"]) % (1 << 63), stream, index, rank()]
        return torch.Generator().manual_seed(int(np.random.SeedSequence(words).generate_state(1)[0]))

    def mask_batch(self, batch: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
        """``input_ids`` corrupted and ``labels`` added (:func:`~pal_lightning.pretraining.masking.mask_tokens`)."""
        ids = batch[INPUT_IDS]
        maskable = maskable_positions(ids, batch[ATTENTION_MASK], self.special_ids)
        corrupted, labels = mask_tokens(
            ids,
            maskable,
            mask_token_id=int(self.tokenizer.mask_token_id),
            random_ids=self.random_ids,
            probability=self.hparams["mlm_probability"],
            generator=generator,
            word_ids=batch[WORD_IDS] if self.hparams["whole_word"] else None,
        )
        return {INPUT_IDS: corrupted, ATTENTION_MASK: batch[ATTENTION_MASK], LABELS: labels}

    def _masked(self, batch: dict[str, Tensor], stream: int) -> dict[str, Tensor]:
        # masked on the CPU, so that the masks do not depend on the device
        generator = self._generator(stream, self._batches[stream])
        self._batches[stream] += 1
        masked = self.mask_batch({k: v.cpu() for k, v in batch.items()}, generator)
        return {k: v.to(self.device) for k, v in masked.items()}

    def on_validation_epoch_start(self) -> None:
        self._batches[_VAL_STREAM] = 0  # the same masks at every validation

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["mlm_masked_batches"] = self._batches[_TRAIN_STREAM]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._batches[_TRAIN_STREAM] = int(checkpoint.get("mlm_masked_batches", 0))

    def _loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, int]:
        labels = batch[LABELS]
        predicted = int((labels != IGNORE_INDEX).sum())
        logits = self.model(input_ids=batch[INPUT_IDS], attention_mask=batch[ATTENTION_MASK]).logits
        if predicted == 0:  # nothing chosen in this batch (tiny batches): a zero loss that keeps the graph
            return logits.sum() * 0.0, 0
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGNORE_INDEX
        )
        return loss, predicted

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, predicted = self._loss(self._masked(batch, _TRAIN_STREAM))
        self.log("train/mlm_loss", loss, prog_bar=True, batch_size=max(predicted, 1))
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, predicted = self._loss(self._masked(batch, _VAL_STREAM))
        if predicted:
            # weighted by the number of predicted tokens: the epoch value is the mean over all of them
            self.log("val/mlm_loss", loss, prog_bar=True, batch_size=predicted, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        value = self.trainer.callback_metrics.get("val/mlm_loss")
        if value is not None and math.isfinite(float(value)):
            self.log("val/perplexity", math.exp(min(float(value), 50.0)), sync_dist=True)

    def configure_optimizers(self) -> OptimizerLRScheduler:
        """AdamW (no decay on biases and LayerNorms), linear warmup then decay to 0 at ``max_steps``."""
        max_steps = self.trainer.max_steps
        if max_steps is None or max_steps < 1:
            raise PalUserError(
                "Masked-language pre-training needs trainer.max_steps (--trainer.max_steps N)."
            )
        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        # every family's norms, however named (LayerNorm, sa_layer_norm, attn_norm, ...)
        norms = {
            id(p) for m in self.model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()
        }
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                (
                    no_decay if name.endswith("bias") or "LayerNorm" in name or id(p) in norms else decay
                ).append(p)
        groups = [
            {"params": decay, "weight_decay": self.hparams["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        warmup = warmup_steps_of(int(max_steps), None, self.hparams["warmup_ratio"])
        return warmup_decay_optimizer(self, groups, int(max_steps), warmup, lr=self.hparams["lr"])

    def on_fit_end(self) -> None:
        """Write the encoder (with its head) and the tokenizer into ``output_dir`` (rank 0)."""
        log_dir = self.trainer.log_dir  # every rank: a broadcast under DDP
        target = self.hparams["output_dir"] or (str(Path(log_dir) / ENCODER_FOLDER) if log_dir else None)
        if target is None:
            raise PalUserError(
                "No output_dir and no run folder to write the encoder into; set --model.output_dir."
            )
        self.output_path = Path(target)
        if is_main_process(self.trainer):
            self.save_encoder(self.output_path)
        self.trainer.strategy.barrier()

    def save_encoder(self, path: str | Path) -> Path:
        """Write the model (with its head) and tokenizer into the new or empty folder ``path``."""
        path = Path(path)
        if not empty_or_missing(path):
            raise PalUserError(
                f"{path} already holds files; the pre-trained encoder is not written over them."
            )
        with staged_folder(path) as tmp:  # a failed save leaves no half-written encoder folder
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
        print(
            f"pal-lightning: wrote the pre-trained encoder to {path}; fine-tune it with --model.encoder {path}",
            flush=True,
        )
        return path
