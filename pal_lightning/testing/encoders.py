"""Tiny random BERT encoders for tests: a config built in code, and one saved as an encoder folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The vocabulary of BERT and all-MiniLM-L6-v2, so that the packaged offline tokenizer can feed a tiny
#: encoder.
BERT_VOCAB_SIZE = 30522


def tiny_bert_config(
    *,
    layers: int = 2,
    heads: int = 2,
    vocab_size: int = BERT_VOCAB_SIZE,
    max_positions: int = 128,
) -> dict[str, Any]:
    """The ``bert_config`` of a random encoder of width 32 (feed-forward width 37, so that no size is
    accidentally equal to another)."""
    return {
        "hidden_size": 32,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 37,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_positions,
    }


def without_dropout(bert_config: dict[str, Any]) -> dict[str, Any]:
    """``bert_config`` with both dropout rates zero, for exact comparisons in training mode."""
    return {**bert_config, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


#: A random 2-layer encoder of width 32 with the real (MiniLM/BERT) vocabulary, so the real offline
#: tokenizer can feed it: ``MultiTaskModule(bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})``.
TINY_BERT = tiny_bert_config()

#: Three layers, so that top-half / bottom-half placements differ from "all"; 100 token ids, for
#: batches of random ids without a tokenizer.
TINY_BERT_3_LAYERS = tiny_bert_config(layers=3, heads=4, vocab_size=100, max_positions=64)


def save_tiny_encoder(
    folder: str | Path, with_head: bool = False, seed: int = 0, bert_config: dict[str, Any] | None = None
) -> Path:
    """A random :data:`TINY_BERT` (or ``bert_config``, e.g. ``tiny_bert_config(layers=6)``) saved as an
    encoder folder (``save_pretrained``) with the packaged MiniLM tokenizer, with or without a
    masked-language-model head; returns the folder.

    Skips the calling test when the offline MiniLM package (the tokenizer's source) is not installed.
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

    from pal_lightning.core.hub import packaged_minilm_dir

    source = packaged_minilm_dir()
    if source is None:
        import pytest  # only reached from a test: this module is test support

        pytest.skip("the offline MiniLM package (its tokenizer) is not installed")
    torch.manual_seed(seed)
    config = BertConfig(**(TINY_BERT if bert_config is None else bert_config))
    model = BertForMaskedLM(config) if with_head else BertModel(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return Path(folder)
