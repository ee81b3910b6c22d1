"""Every encoder family with every per-task method, on a tiny random config of that family (2 layers,
width 32): the plain family model at zero initialisation, modules that act once changed, the parameter
formulas, what training changes, sharing regimes, loading a saved checkpoint, LoRA's merge."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskBert
from pal_lightning.modeling.accounting import task_weight_formula
from pal_lightning.modeling.families import FAMILIES, family_of, supported_model_types
from pal_lightning.testing import FAMILY_TYPES, save_tiny_encoder, tiny_family_config

#: Methods whose new modules leave the encoder's output unchanged at their default initialisation.
IDENTITY_AT_START = ["pals", "pals_no_sharing", "low_rank", "pff", "lora", "houlsby", "pfeiffer", "pa_on_top"]
METHODS = [*IDENTITY_AT_START, "bert_layer_on_top"]
OPTIONS = {
    "pals": {"size": 8, "num_heads": 2},
    "pals_no_sharing": {"size": 8, "num_heads": 2},
    "pa_on_top": {"size": 8, "num_heads": 2},
    "low_rank": {"size": 8},
    "pff": {"size": 8},
    "lora": {"size": 4},
    "houlsby": {"size": 4},
    "pfeiffer": {"size": 4},
    "bert_layer_on_top": {},
}


def no_dropout(config: dict) -> dict:
    names = (
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "dropout",
        "attention_dropout",
        "embedding_dropout",
        "mlp_dropout",
        "hidden_dropout",
        "attention_dropout_prob",
    )
    return {**config, **{n: 0.0 for n in names}}


def tiny(model_type: str) -> dict:
    return no_dropout(tiny_family_config(model_type))


def batch(model_type: str, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (3, 9), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 1 if model_type in ("roberta", "xlm-roberta", "mpnet") else 0
    types = torch.zeros_like(ids)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def plain_output(model: MultiTaskBert, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The family's own transformers model with the encoder's weights (no hooks, no per-task module)."""
    config = AutoConfig.for_model(**{**model.config.to_dict()})
    plain = AutoModel.from_config(config, attn_implementation="eager").eval()
    missing, _ = plain.load_state_dict(model.bert.state_dict(), strict=False)
    assert all(k.startswith("pooler.") for k in missing), missing
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if model.family.token_types else [])
    with torch.no_grad():
        return plain(**{k: inputs[k] for k in keys}).last_hidden_state


def build(model_type: str, method: str, **options) -> MultiTaskBert:
    torch.manual_seed(0)
    options = {**OPTIONS[method], **options}
    model = MultiTaskBert.from_config(
        tiny(model_type), ["a", "b"], adapter=method, attn_implementation="eager", **options
    )
    return model.eval()


def test_every_family_is_registered_and_an_unknown_one_is_refused():
    assert set(FAMILY_TYPES) == set(supported_model_types())
    assert {FAMILIES[t].name for t in FAMILY_TYPES} == set(FAMILY_TYPES)
    with pytest.raises(PalUserError, match=r"'gpt2' model, which pal-lightning does not wire\. Supported"):
        MultiTaskBert.from_config({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2}, ["a"])


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
@pytest.mark.parametrize("method", IDENTITY_AT_START)
def test_new_modules_leave_the_family_output_unchanged_and_act_once_trained(model_type, method):
    model = build(model_type, method)
    inputs = batch(model_type)
    assert model.family is family_of(model.config)
    with torch.no_grad():
        start = model(**inputs, task="a")
    torch.testing.assert_close(start, plain_output(model, inputs), atol=1e-6, rtol=0)
    with torch.no_grad():  # the per-task modules moved away from their start: the hooks must carry them
        for p in model.adapters["a"].parameters():
            p.add_(torch.randn_like(p) * 0.2)
        moved = model(**inputs, task="a")
        other = model(**inputs, task="b")
    assert (moved - start).abs().max() > 1e-3
    torch.testing.assert_close(other, start, atol=1e-6, rtol=0)  # task b's modules are untouched


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
@pytest.mark.parametrize("method", METHODS)
def test_weight_matrices_per_task_equal_the_method_formula(model_type, method):
    model = build(model_type, method)
    counted = sum(p.numel() for _, p in model.adapter_parameters("a") if p.ndim == 2)
    config = model.config
    formula = task_weight_formula(
        model.adapter_config, model.hidden_size, model.num_layers, int(config.intermediate_size)
    )
    if method == "bert_layer_on_top" and model_type == "modernbert":
        # the formula is BERT's layer (4 d^2 + 2 d d_ff); ModernBERT's gated FFN has a second d x d_ff input
        assert counted == formula + 32 * 37
    else:
        assert counted == formula


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
@pytest.mark.parametrize("method", ["pals", "lora", "houlsby", "bert_layer_on_top"])
def test_steps_with_a_frozen_encoder_change_only_the_task_modules(model_type, method):
    model = build(model_type, method)
    model.train()
    for _, p in model.pretrained_parameters():
        p.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = [p for _, p in model.adapter_parameters("a")]
    optimizer = torch.optim.SGD(trainable, lr=0.5)
    for seed in range(3):
        optimizer.zero_grad()
        model(**batch(model_type, seed), task="a").pow(2).mean().backward()
        optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith("adapters.a.") for n in changed), sorted(changed)


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_frozen_and_individual_layers(model_type):
    model = MultiTaskBert.from_config(
        tiny(model_type),
        ["a", "b"],
        adapter="pals",
        size=8,
        num_heads=2,
        layer_sharing="FI",
        attn_implementation="eager",
    ).eval()
    layers = model.family.layer_list(model.bert)
    assert not any(p.requires_grad for p in layers[0].parameters())
    assert list(layers[1].parameters()) == []  # the slot; each task has its copy
    assert sorted(model.individual) == ["a", "b"]
    inputs = batch(model_type)
    with torch.no_grad():
        a, b = model(**inputs, task="a"), model(**inputs, task="b")
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
        for p in model.individual["a"].parameters():
            p.add_(torch.randn_like(p) * 0.1)
        assert (model(**inputs, task="a") - a).abs().max() > 1e-3
        torch.testing.assert_close(model(**inputs, task="b"), b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
@pytest.mark.parametrize("with_head", [False, True])
def test_a_saved_checkpoint_loads_under_the_family_names(model_type, with_head, tmp_path):
    config = {**tiny(model_type), "vocab_size": 100}
    folder = save_tiny_encoder(tmp_path / "enc", with_head=with_head, bert_config=config)
    model = MultiTaskBert.from_pretrained(
        folder, ["a"], adapter="pals", size=8, num_heads=2, attn_implementation="eager"
    ).eval()
    assert model.family.name == model_type
    assert model.loading_info is not None and model.loading_info.missing_new
    reference = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    inputs = batch(model_type)
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if model.family.token_types else [])
    with torch.no_grad():
        expected = reference(**{k: inputs[k] for k in keys}).last_hidden_state
        torch.testing.assert_close(model(**inputs, task="a"), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_lora_merged_into_the_weights_equals_lora_beside_them(model_type):
    model = build(
        model_type, "lora", targets=["query", "key", "value", "attention_output", "ffn_input", "ffn_output"]
    )
    with torch.no_grad():
        for p in model.adapters["a"].parameters():
            p.add_(torch.randn_like(p) * 0.2)
        inputs = batch(model_type)
        unmerged = model(**inputs, task="a")
        model.merge("a")
        assert len(model.adapters) == 0
        merged = model(**inputs, task="a")
    assert (unmerged - plain_output(build(model_type, "lora"), inputs)).abs().max() > 1e-3
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=0)


def test_a_bottleneck_adapter_cannot_be_merged():
    model = build("bert", "pfeiffer")
    with pytest.raises(PalUserError, match="cannot be merged"):
        model.merge("a")
