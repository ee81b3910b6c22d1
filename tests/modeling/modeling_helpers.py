"""Constants shared by the modeling tests (imported by the test files; not a test module)."""

from __future__ import annotations

TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "vocab_size": 100,
    "max_position_embeddings": 64,
}
"""A tiny random BERT shape; three layers so that top/bottom placements differ from 'all'."""

TINY_NO_DROPOUT = {**TINY, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
"""The same without dropout, for exact comparisons in training mode."""
