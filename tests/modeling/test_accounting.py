"""Parameter accounting, including the paper's BERT-base PAL count."""

from __future__ import annotations

import torch
from torch import nn

from pal_lightning.modeling import MultiTaskEncoder, ParameterReport, parameter_report
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY

BERT_BASE = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 10,  # the vocabulary does not matter for the PAL count
}


def _on_meta(**kwargs) -> MultiTaskEncoder:
    # shapes only: no memory, no initialisation cost
    with torch.device("meta"):
        return MultiTaskEncoder.from_config(BERT_BASE, ["a", "b"], **kwargs)


def test_bert_base_pal_weights_match_the_paper():
    assert _on_meta().adapter_size == 204  # the default size at 768
    report = parameter_report(_on_meta(adapter={"method": "pals", "size": 204}))
    assert report.adapter_weights == {"a": 1_811_520, "b": 1_811_520}
    assert 2 * 768 * 204 + 12 * 3 * 204**2 == 1_811_520
    # biases apart: V^E (204) + V^D (768) + Q, K, V per layer (12 * 3 * 204)
    assert report.adapter_biases["a"] == 204 + 768 + 12 * 3 * 204
    assert report.adapter_size == 204


def test_variant_formulas():
    d, L, ds = 768, 12, 84
    assert parameter_report(_on_meta(adapter={"method": "pals_no_sharing", "size": ds})).adapter_weights[
        "a"
    ] == L * (2 * d * ds + 3 * ds**2)
    assert (
        parameter_report(_on_meta(adapter={"method": "low_rank", "size": 100})).adapter_weights["a"]
        == L * 2 * d * 100
    )
    report = parameter_report(_on_meta(adapter="pals", placement="top", num_layers=6))
    assert report.adapter_size == 276
    assert report.adapter_weights["a"] == 2 * d * 276 + 6 * 3 * 276**2
    none = parameter_report(_on_meta(adapter="none"))
    assert none.adapter_weights == {"a": 0, "b": 0} and none.total == none.shared


class _WithHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = MultiTaskEncoder.from_config(TINY, ["a", "b"], size=8, num_heads=2)
        self.heads = nn.ModuleDict({"a": nn.Linear(32, 5), "b": nn.Linear(32, 1)})
        self.log_temperature = nn.Parameter(torch.zeros(()))


def test_module_with_heads():
    module = _WithHeads()
    module.encoder.backbone.embeddings.requires_grad_(False)
    report = parameter_report(module)
    assert isinstance(report, ParameterReport)
    assert report.heads == {"a": 32 * 5 + 5, "b": 33}
    assert report.shared == sum(p.numel() for p in module.encoder.backbone.parameters())
    assert report.stored_per_task["a"] == report.adapter_params("a") + 165
    assert report.other == 1
    assert report.total == sum(p.numel() for p in module.parameters())
    assert report.ratio == report.total / report.shared
    frozen = sum(p.numel() for p in module.encoder.backbone.embeddings.parameters())
    assert report.trainable == report.total - frozen
    text = str(report)
    assert "shared pretrained encoder" in text and f"{report.total:,}" in text
    assert any(line.strip().startswith("b ") for line in text.splitlines())


def test_plain_encoder_report_matches_the_model():
    model = MultiTaskEncoder.from_config(TINY, ["a"], adapter="low_rank", size=3)
    report = parameter_report(model)
    assert report.heads == {"a": 0} and report.other == 0
    assert report.total == sum(p.numel() for p in model.parameters())
    assert report.adapter_params("a") == sum(p.numel() for _, p in model.task_parameters("a"))
