"""Every encoder family on a tiny random config of it (2 layers, width 32): the registry, sharing regimes,
loading a saved checkpoint. Every method on every family:
``test_conformance.py``."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.families import FAMILIES, supported_model_types
from pal_lightning.modeling.methods.pals import additive_mask
from pal_lightning.testing import FAMILY_TYPES, save_tiny_encoder, tiny_family_config, without_dropout
from pal_lightning.testing.conformance import batch, build, move


def tiny(model_type: str) -> dict:
    return without_dropout(tiny_family_config(model_type))


def test_every_family_is_registered_and_an_unknown_one_is_refused():
    assert set(FAMILY_TYPES) == set(supported_model_types())
    assert {FAMILIES[t].name for t in FAMILY_TYPES} == set(FAMILY_TYPES)
    with pytest.raises(PalUserError, match=r"'gpt2' model, which pal-lightning does not wire\. Supported"):
        MultiTaskEncoder.from_config({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2}, ["a"])


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_frozen_and_individual_layers(model_type):
    model = MultiTaskEncoder.from_config(
        tiny(model_type),
        ["a", "b"],
        adapter="pals",
        size=8,
        num_heads=2,
        layer_sharing="FI",
        attn_implementation="eager",
    ).eval()
    layers = model.family.layer_list(model.backbone)
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
    folder = save_tiny_encoder(tmp_path / "enc", with_head=with_head, encoder_config=config)
    model = MultiTaskEncoder.from_pretrained(
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


def _pal_by_hooks(model: MultiTaskEncoder, inputs: dict[str, torch.Tensor], task: str) -> torch.Tensor:
    # The family's own transformers model with the encoder's weights and plain torch hooks (none of the
    # package's wiring): TS_t(h) of each adapted layer's input h joins the input of the layer's second
    # LayerNorm (post-LN) or the layer's output (pre-LN), as docs/design.md §2 writes it.
    plain = AutoModel.from_config(AutoConfig.for_model(**model.config.to_dict()), attn_implementation="eager")
    plain.load_state_dict(model.backbone.state_dict(), strict=False)
    adapter, family = model.adapters[task], model.family
    bias = additive_mask(inputs["attention_mask"], torch.float32)
    handles = []
    for index in model.adapter_layers:
        layer, seen = family.layer_list(plain)[index], {}

        def remember(module, args, kwargs, seen=seen):
            seen["h"] = (
                args[0]
                if args
                else next(kwargs[k] for k in ("hidden_states", "hidden_state", "x") if k in kwargs)
            )

        def term(index=index, seen=seen):
            return adapter(index, seen["h"], bias)

        def to_output(module, args, output, term=term):
            return (output[0] + term(), *output[1:]) if isinstance(output, tuple) else output + term()

        def to_norm_input(module, args, term=term):
            return (args[0] + term(), *args[1:])

        handles.append(layer.register_forward_pre_hook(remember, with_kwargs=True))
        if family.join_norm is None:
            handles.append(layer.register_forward_hook(to_output))
        else:
            handles.append(layer.get_submodule(family.join_norm).register_forward_pre_hook(to_norm_input))
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if family.token_types else [])
    try:
        with torch.no_grad():
            return plain.eval()(**{k: inputs[k] for k in keys}).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_a_pal_term_joins_where_the_design_puts_it_on_every_family(model_type):
    # the conformance suite checks that moved PALs change their task's rows; this checks by how much
    model = build(model_type, "pals")
    move(model.adapters["a"])
    inputs = batch(model_type)
    with torch.no_grad():
        got = model(**inputs, task="a")
    torch.testing.assert_close(got, _pal_by_hooks(model, inputs, "a"), atol=1e-5, rtol=0)
    assert (got - _pal_by_hooks(model, inputs, "b")).abs().max() > 1e-2  # task b's PALs: still zero
