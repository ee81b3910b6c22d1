"""LoRA per task (``adapter="lora"``): the module alone, its options, counts and signature.

The encoder's hook (a site's output y becomes ``y + delta(layer, site, x, y)``) is tested with the
encoder families; here the module is built from a tiny config in code, with an FFN width unlike the
hidden width so that a swapped in/out shape fails.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import BertConfig, BertModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import parameter_report
from pal_lightning.modeling.accounting import task_weight_formula
from pal_lightning.modeling.methods import SITES, AdapterConfig, Where, get_method
from pal_lightning.modeling.methods.lora import LoraAdapter
from pal_lightning.testing import TINY_BERT_3_LAYERS, without_dropout
from pal_lightning.testing.conformance import run

D, D_FF, LAYERS = 32, 40, 3
ENCODER = BertConfig(
    hidden_size=D, intermediate_size=D_FF, num_hidden_layers=LAYERS, num_attention_heads=2, vocab_size=50
)


def _build(**options: object) -> tuple[AdapterConfig, LoraAdapter]:
    config = AdapterConfig(method="lora", **options)  # type: ignore[arg-type]
    size = config.resolved_size(D)
    layers = config.layer_indices(LAYERS)
    module = config.adapter_method.build(config, ENCODER, size, layers)
    assert isinstance(module, LoraAdapter)
    return config, module


def _inputs(site: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An input x and an output y of the site's Linear, ``[2, 5, in]`` and ``[2, 5, out]``."""
    gen = torch.Generator().manual_seed(seed)
    n_in = D_FF if site == "ffn_output" else D
    n_out = D_FF if site == "ffn_input" else D
    return torch.randn(2, 5, n_in, generator=gen), torch.randn(2, 5, n_out, generator=gen)


def test_defaults_are_the_lora_papers() -> None:
    config, module = _build()
    method = get_method("lora")
    assert method.where is Where.INSIDE
    assert module.layers == (0, 1, 2) and module.sites == ("query", "value")
    # rank 8 whatever the width (not scaled like d_s), alpha 8: scale 1
    assert config.resolved_size(D) == config.resolved_size(768) == config.resolved_size(1024) == 8
    assert module.rank == 8 and module.scaling == 1.0
    assert module.down["0"]["query"].weight.shape == (8, D)
    assert module.up["0"]["query"].weight.shape == (D, 8)
    assert not any(p.dim() < 2 for p in module.parameters())  # no biases


def test_site_shapes_follow_the_ffn_width() -> None:
    _, module = _build(targets=list(SITES), size=4)
    assert module.sites == SITES
    for site in SITES:
        x, y = _inputs(site)
        assert module.down["1"][site].weight.shape == (4, x.shape[-1])
        assert module.up["1"][site].weight.shape == (y.shape[-1], 4)
        assert module.delta(1, site, x, y).shape == y.shape
        assert module.weight_delta(1, site).shape == (y.shape[-1], x.shape[-1])


def test_a_new_task_adds_nothing() -> None:
    _, module = _build(targets=list(SITES))
    for layer in module.layers:
        for site in SITES:
            x, y = _inputs(site, seed=layer)
            assert torch.equal(module.delta(layer, site, x, y), torch.zeros_like(y))
            assert not module.weight_delta(layer, site).any()
            # B is zero, A is not: A is drawn as nn.Linear draws (kaiming uniform, a = sqrt(5))
            a = module.down[str(layer)][site].weight
            assert a.abs().max() > 0 and a.abs().max() <= 1 / math.sqrt(a.shape[1])
            assert not module.up[str(layer)][site].weight.any()


def test_random_init_draws_b_too() -> None:
    _, module = _build(init="random")
    b = module.up["0"]["value"].weight
    assert b.abs().max() > 0 and b.std().item() == pytest.approx(0.02, rel=0.3)


@pytest.mark.parametrize("site", SITES)
def test_delta_is_the_scaled_low_rank_product_and_weight_delta_its_matrix(site: str) -> None:
    _, module = _build(init="random", targets=[site], size=4, alpha=12.0)
    x, y = _inputs(site)
    a = module.down["2"][site].weight
    b = module.up["2"][site].weight
    by_hand = (x @ a.T @ b.T) * (12.0 / 4)
    delta = module.delta(2, site, x, y)
    torch.testing.assert_close(delta, by_hand)
    torch.testing.assert_close(x @ module.weight_delta(2, site).T, delta)
    # y is not read: the update depends on the input alone
    torch.testing.assert_close(module.delta(2, site, x, torch.zeros_like(y)), delta)


def test_alpha_scales_the_update() -> None:
    torch.manual_seed(0)
    _, eight = _build(init="random")
    _, sixteen = _build(init="random", alpha=16)
    sixteen.load_state_dict(eight.state_dict())
    x, y = _inputs("query")
    torch.testing.assert_close(sixteen.delta(0, "query", x, y), 2 * eight.delta(0, "query", x, y))


def test_dropout_acts_on_the_input_in_training_only() -> None:
    _, module = _build(init="random", dropout=0.5)
    x, y = _inputs("value")
    module.train()
    torch.manual_seed(1)
    dropped = module.delta(0, "value", x, y)
    module.eval()
    kept = module.delta(0, "value", x, y)
    assert not torch.allclose(dropped, kept)
    torch.testing.assert_close(kept, x @ module.weight_delta(0, "value").T)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"size": 4},
        {"targets": ["query", "key", "value", "attention_output"]},
        {"targets": ["ffn_input", "ffn_output"], "size": 3},
        {"targets": list(SITES), "placement": "top", "num_layers": 2},
        {"placement": "bottom"},
    ],
)
def test_weights_equal_the_formula(options: dict[str, object]) -> None:
    config, module = _build(**options)
    size = config.resolved_size(D)
    k = len(config.layer_indices(LAYERS))
    weights = sum(p.numel() for p in module.parameters())
    assert weights == config.adapter_method.weight_formula(config, D, size, k, D_FF)
    # the formula written out: r (in + out) per targeted site and layer
    widths = {"ffn_input": (D, D_FF), "ffn_output": (D_FF, D)}
    sites = config.targets or ("query", "value")
    assert weights == k * sum(size * sum(widths.get(s, (D, D))) for s in sites)


def test_formula_at_bert_base() -> None:
    config = AdapterConfig(method="lora")
    # 12 layers x 2 sites (query, value) x r (768 + 768), r = 8
    assert config.adapter_method.weight_formula(config, 768, 8, 12, 3072) == 294_912


def test_signature_records_what_fixes_the_weights() -> None:
    method = get_method("lora")

    def sig(**options: object) -> dict[str, object]:
        config = AdapterConfig(method="lora", **options)  # type: ignore[arg-type]
        return method.signature(config, config.resolved_size(D), config.layer_indices(LAYERS))

    base = sig()
    assert base["method"] == "lora" and base["size"] == 8 and base["targets"] == ["query", "value"]
    assert sig(targets=["value", "query"]) == base  # the same selection written in another order
    assert sig(dropout=0.1) == base  # dropout changes no weight
    for other in ({"size": 4}, {"targets": ["query", "key"]}, {"placement": "top"}, {"alpha": 16}):
        assert sig(**other) != base, other


def test_targets_are_stored_in_site_order_and_round_trip() -> None:
    config = AdapterConfig(method="lora", targets=["value", "query"])
    assert config.targets == ("query", "value")
    assert AdapterConfig.coerce(config.to_dict()) == config
    assert config.to_dict()["targets"] == ["query", "value"]  # a plain list for YAML and JSON
    assert AdapterConfig(method="lora", targets="key").targets == ("key",)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"targets": ["query", "attention"]}, "Unknown adapter.targets 'attention'. The sites are query"),
        ({"targets": []}, "at least one"),
        ({"targets": ["query", "query"]}, "at most once"),
        ({"targets": 3}, "adapter.targets must be a list of site names"),
        ({"alpha": 0}, "adapter.alpha must be a positive number"),
        ({"alpha": float("nan")}, "adapter.alpha must be a positive number"),
        ({"dropout": 1.0}, "adapter.dropout must be a probability in [0, 1)"),
        ({"dropout": -0.1}, "adapter.dropout must be a probability"),
        ({"activation": "gelu"}, "follows V^D, which method 'lora' does not have"),
        ({"reduction_factor": 8}, "adapter.reduction_factor does not apply to method 'lora'"),
        ({"nonlinearity": "relu"}, "adapter.nonlinearity does not apply to method 'lora'"),
        ({"placement": "top", "num_layers": 9}, "exceeds the encoder's"),
    ],
)
def test_bad_options_name_the_fix(options: dict[str, object], message: str) -> None:
    with pytest.raises(PalUserError) as err:
        config = AdapterConfig(method="lora", **options)  # type: ignore[arg-type]
        config.layer_indices(LAYERS)
    assert message in str(err.value)


@pytest.mark.parametrize("option", [{"alpha": 4}, {"dropout": 0.1}, {"targets": ["query"]}])
def test_lora_options_are_refused_by_other_methods(option: dict[str, object]) -> None:
    (name,) = option
    with pytest.raises(PalUserError, match=f"adapter.{name} does not apply to method 'pals' .*lora"):
        AdapterConfig(method="pals", **option)  # type: ignore[arg-type]


def test_unset_method_options_are_none_so_older_checkpoints_compare_equal() -> None:
    # a checkpoint saved before these fields existed has none of them, one saved later has every method's
    # (null); the field-by-field check of the adapter options reads a missing field as None
    own = ("targets", "alpha", "dropout", "reduction_factor", "nonlinearity")
    assert not set(own) & set(AdapterConfig().to_dict())
    assert all(
        AdapterConfig(method="lora").to_dict()[name] is None for name in ("targets", "alpha", "dropout")
    )
    earlier = {**AdapterConfig().to_dict(), **dict.fromkeys(own), "dropout": 0}  # no dropout is no dropout
    assert AdapterConfig.coerce(earlier) == AdapterConfig()
    with pytest.raises(
        PalUserError, match=r"adapter.dropout does not apply to method 'pals' \(dropout is an"
    ):
        AdapterConfig.coerce({"method": "pals", "dropout": 0.1})


# ------------------------------------------------------------------ in the encoder (MultiTaskEncoder)
TINY_NO_DROPOUT = without_dropout(TINY_BERT_3_LAYERS)


@pytest.mark.parametrize(("adapter", "task"), [("lora", "a"), ("houlsby", "b")])
def test_training_with_a_frozen_encoder_changes_only_the_tasks_adapter_and_head(
    tiny_encoder, frozen_steps, adapter: str, task: str
) -> None:
    """LoRA and a bottleneck adapter: every weight of the task's adapter moved (LoRA's B from zero, its A
    through B after step 1), nothing else but the head."""
    changed, names = frozen_steps(tiny_encoder(adapter), task)
    assert changed and all(n.startswith((f"adapters.{task}.", "head.")) for n in changed), sorted(changed)
    own = {n for n in names if n.startswith(f"adapters.{task}.")}
    assert {n for n in changed if n.startswith(f"adapters.{task}.")} == own


def test_parameter_report_and_formula_for_lora(tiny_encoder) -> None:
    model = tiny_encoder(AdapterConfig(method="lora", targets=["query", "ffn_input"], size=4))
    report = parameter_report(model)
    d, layers, d_ff = (TINY_NO_DROPOUT[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size"))
    expected = layers * 4 * ((d + d) + (d + d_ff))
    assert report.adapter_weights == {"a": expected, "b": expected}
    assert report.adapter_biases == {"a": 0, "b": 0}
    assert task_weight_formula(model.adapter_config, d, layers, d_ff) == expected


def test_lora_equals_peft_on_the_same_tiny_bert(batch: dict[str, torch.Tensor], tiny_encoder) -> None:
    from peft import LoraConfig, get_peft_model

    ours = tiny_encoder(AdapterConfig(method="lora", init="random", alpha=16, size=4))
    bert = BertModel(BertConfig(**TINY_NO_DROPOUT), add_pooling_layer=False).eval()
    bert.load_state_dict(ours.bert.state_dict())  # the encoder keeps transformers' own model and names
    with torch.no_grad():
        plain = bert(**batch).last_hidden_state
    peft_model = get_peft_model(
        bert, LoraConfig(r=4, lora_alpha=16, lora_dropout=0.0, target_modules=["query", "value"])
    ).eval()
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert trainable == sum(p.numel() for p in ours.adapters["a"].parameters())
    with torch.no_grad():
        for i in range(TINY_NO_DROPOUT["num_hidden_layers"]):
            attention = peft_model.base_model.model.encoder.layer[i].attention.self
            for site in ("query", "value"):
                a, b = ours.adapters["a"].pair(i, site)
                getattr(attention, site).lora_A["default"].weight.copy_(a.weight)
                getattr(attention, site).lora_B["default"].weight.copy_(b.weight)
        theirs = peft_model(**batch).last_hidden_state
    torch.testing.assert_close(run(ours, batch, "a"), theirs, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(theirs, plain, atol=1e-3)  # the updates act: the comparison can fail


@pytest.mark.parametrize(
    "adapter",
    [
        {"method": "lora", "size": 4, "alpha": 16, "targets": ["value", "ffn_input"]},
        {"method": "houlsby", "reduction_factor": 8, "nonlinearity": "gelu", "placement": "top"},
    ],
)
def test_save_pretrained_and_from_pretrained_keep_the_method(adapter: dict[str, object], tmp_path) -> None:
    """Both INSIDE methods (LoRA and a bottleneck variant) with non-default options, through a model folder."""
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    torch.manual_seed(0)
    module = MultiTaskModule(tasks=["sst", "sts"], encoder_config=TINY_BERT, adapter=adapter).eval()
    with torch.no_grad():  # non-zero updates, so that a lost or misplaced weight shows
        for p in module.encoder.adapters.parameters():
            p.normal_(0, 0.2)
    loaded = MultiTaskModule.from_pretrained(module.save_pretrained(tmp_path / "model")).eval()
    assert loaded.encoder.adapter_config == module.encoder.adapter_config == AdapterConfig.coerce(adapter)
    batch = {"input_ids": torch.randint(5, 90, (2, 6)), "attention_mask": torch.ones(2, 6, dtype=torch.long)}
    for task in ("sst", "sts"):
        torch.testing.assert_close(run(loaded.encoder, batch, task), run(module.encoder, batch, task))
    saved, reloaded = module.state_dict(), loaded.state_dict()
    assert saved.keys() == reloaded.keys() and all(torch.equal(saved[k], reloaded[k]) for k in saved)
