"""Tiny random encoders (BERT, and one config per encoder family) for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The vocabulary of BERT and all-MiniLM-L6-v2 (the offline tokenizer's).
BERT_VOCAB_SIZE = 30522


def tiny_bert_config(
    *, layers: int = 2, heads: int = 2, vocab_size: int = BERT_VOCAB_SIZE, max_positions: int = 128
) -> dict[str, Any]:
    """The ``encoder_config`` of a random encoder of width 32 (feed-forward 37: no size equals another)."""
    return {
        "hidden_size": 32,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 37,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_positions,
    }


def without_dropout(encoder_config: dict[str, Any]) -> dict[str, Any]:
    """``encoder_config`` with both dropout rates zero, for exact comparisons in training mode."""
    return {**encoder_config, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


#: A random 2-layer encoder of width 32 with the real vocabulary:
#: ``MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})``.
TINY_BERT = tiny_bert_config()

#: Three layers (top/bottom-half placements differ from "all"), 100 token ids (no tokenizer needed).
TINY_BERT_3_LAYERS = tiny_bert_config(layers=3, heads=4, vocab_size=100, max_positions=64)


_ROBERTA = {"pad_token_id": 1, "type_vocab_size": 1}
#: Per encoder family: its config keys beyond BERT's (a position table of ``max_positions + 2`` where listed).
_FAMILY_EXTRAS: dict[str, dict[str, Any]] = {
    "bert": {},
    "roberta": _ROBERTA,
    "xlm-roberta": _ROBERTA,
    "electra": {"embedding_size": 16},
    "distilbert": {},
    "mpnet": {"pad_token_id": 1},
    "deberta-v2": {
        "relative_attention": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_buckets": 16,
        "max_relative_positions": -1,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "position_biased_input": False,
        "type_vocab_size": 0,
    },
    "modernbert": {
        "global_attn_every_n_layers": 2,
        "local_attention": 8,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "cls_token_id": 1,
        "sep_token_id": 2,
    },
}
#: The model types of the encoder families (:mod:`pal_lightning.modeling.families`), one tiny config each.
FAMILY_TYPES = tuple(_FAMILY_EXTRAS)


def tiny_family_config(
    model_type: str, *, layers: int = 2, heads: int = 2, vocab_size: int = 100, max_positions: int = 64
) -> dict[str, Any]:
    """The ``encoder_config`` (with ``model_type``) of a random width-32 encoder of one family, shaped as its
    checkpoints are."""
    base = tiny_bert_config(layers=layers, heads=heads, vocab_size=vocab_size, max_positions=max_positions)
    if model_type in ("roberta", "xlm-roberta", "mpnet"):  # positions start after the padding id
        base["max_position_embeddings"] = max_positions + 2
    if model_type == "distilbert":
        renamed = {"hidden_size": "dim", "intermediate_size": "hidden_dim"}
        renamed |= {"num_hidden_layers": "n_layers", "num_attention_heads": "n_heads"}
        base = {renamed.get(k, k): v for k, v in base.items()}
    return {"model_type": model_type, **base, **_FAMILY_EXTRAS[model_type]}


def save_tiny_encoder(
    folder: str | Path, with_head: bool = False, seed: int = 0, encoder_config: dict[str, Any] | None = None
) -> Path:
    """A random :data:`TINY_BERT` (or ``encoder_config``) saved as an encoder folder with the offline MiniLM
    tokenizer, ``with_head`` a masked-language-model head (skips the test without that package)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from pal_lightning.core.hub import packaged_minilm_dir

    source = packaged_minilm_dir()
    if source is None:
        import pytest  # only reached from a test: this module is test support

        pytest.skip("the offline MiniLM package (its tokenizer) is not installed")
    torch.manual_seed(seed)
    options = dict(TINY_BERT if encoder_config is None else encoder_config)
    config = AutoConfig.for_model(options.pop("model_type", "bert"), **options)
    model = AutoModelForMaskedLM.from_config(config) if with_head else AutoModel.from_config(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return Path(folder)
