"""The methods on sites, LoRA (``lora``) and bottleneck adapters (``houlsby``, ``pfeiffer`` and its alias
``bottleneck``): the modules alone, their options, formulas and signatures.

The modules are built from a tiny config whose FFN width differs from the hidden width, so that a site's
shape taken from the wrong side fails. Every method in the encoder of every family: test_conformance.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import load_task_weights, save_task_weights
from pal_lightning.modeling.methods import SITES, AdapterConfig, Where, get_method
from pal_lightning.modeling.methods.bottleneck import BottleneckAdapter
from pal_lightning.modeling.methods.lora import LoraAdapter
from pal_lightning.testing import TINY_BERT_3_LAYERS, without_dropout
from pal_lightning.testing.conformance import run

D, D_FF, LAYERS = 32, 40, 3
ENCODER = BertConfig(
    hidden_size=D, intermediate_size=D_FF, num_hidden_layers=LAYERS, num_attention_heads=2, vocab_size=50
)
BOTTLENECKS = ("houlsby", "pfeiffer", "bottleneck")
DEFAULT_SITES = {
    "lora": ("query", "value"),
    "houlsby": ("attention_output", "ffn_output"),
    "pfeiffer": ("ffn_output",),
    "bottleneck": ("ffn_output",),
}
SHAPES = {"ffn_input": (D, D_FF), "ffn_output": (D_FF, D)}  # (in, out) by hand; D x D elsewhere


def _build(method: str, **options: object) -> tuple[AdapterConfig, LoraAdapter | BottleneckAdapter]:
    config = AdapterConfig(method=method, **options)  # type: ignore[arg-type]
    module = config.adapter_method.build(
        config, ENCODER, config.resolved_size(D), config.layer_indices(LAYERS)
    )
    assert isinstance(module, LoraAdapter if method == "lora" else BottleneckAdapter)
    return config, module


def _inputs(site: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An input x and an output y of the site's Linear, ``[2, 5, in]`` and ``[2, 5, out]``."""
    gen = torch.Generator().manual_seed(seed)
    n_in, n_out = SHAPES.get(site, (D, D))
    return torch.randn(2, 5, n_in, generator=gen), torch.randn(2, 5, n_out, generator=gen)


def _sig(method: str, **options: object) -> dict[str, object]:
    config = AdapterConfig(method=method, **options)  # type: ignore[arg-type]
    return config.adapter_method.signature(config, config.resolved_size(D), config.layer_indices(LAYERS))


@pytest.mark.parametrize(
    ("method", "width", "nonlinearity"),
    [("lora", 8, None), ("houlsby", 2, "swish"), ("pfeiffer", 2, "relu"), ("bottleneck", 2, "relu")],
)
def test_defaults(method: str, width: int, nonlinearity: str | None) -> None:
    config, module = _build(method)
    assert get_method(method).where is Where.INSIDE
    sites = DEFAULT_SITES[method]
    assert module.layers == (0, 1, 2) and module.sites == sites
    # LoRA's rank 8 whatever the width (not scaled like d_s); a bottleneck's m = round(d / 16): 2 here
    assert module.down["0"][sites[0]].weight.shape == (width, D)
    assert module.up["0"][sites[0]].weight.shape == (D, width)
    if method == "lora":  # the LoRA paper's: alpha 8, scale 1, no biases
        assert config.resolved_size(D) == config.resolved_size(768) == config.resolved_size(1024) == 8
        assert module.rank == 8 and module.scaling == 1.0
        assert not any(p.dim() < 2 for p in module.parameters())
    else:
        assert module.nonlinearity == nonlinearity


def test_the_bottleneck_width_comes_from_size_or_the_reduction_factor() -> None:
    assert AdapterConfig(method="pfeiffer").resolved_size(768) == 48
    assert AdapterConfig(method="houlsby").resolved_size(384) == 24
    assert AdapterConfig(method="pfeiffer", reduction_factor=4).resolved_size(D) == 8
    assert AdapterConfig(method="pfeiffer", reduction_factor=64).resolved_size(D) == 1  # never 0
    assert AdapterConfig(method="pfeiffer", reduction_factor=12).resolved_size(D) == 3  # 2.67 rounds up
    assert AdapterConfig(method="houlsby", size=5).resolved_size(D) == 5


def test_lora_site_shapes_follow_the_ffn_width() -> None:
    _, module = _build("lora", targets=list(SITES), size=4)
    assert module.sites == SITES
    for site in SITES:
        x, y = _inputs(site)
        assert module.down["1"][site].weight.shape == (4, x.shape[-1])
        assert module.up["1"][site].weight.shape == (y.shape[-1], 4)
        assert module.delta(1, site, x, y).shape == y.shape
        assert module.weight_delta(1, site).shape == (y.shape[-1], x.shape[-1])


@pytest.mark.parametrize("method", ["lora", *BOTTLENECKS])
def test_a_new_task_adds_nothing(method: str) -> None:
    _, module = _build(method, targets=list(SITES))
    for layer in module.layers:
        for site in SITES:
            x, y = _inputs(site, seed=layer)
            assert torch.equal(module.delta(layer, site, x, y), torch.zeros_like(y))
            down, up = module.down[str(layer)][site], module.up[str(layer)][site]
            assert not up.weight.any() and (up.bias is None or not up.bias.any())
            # the down projection is drawn: N(0, 0.02) for a bottleneck, for LoRA's A as nn.Linear draws
            # (kaiming uniform, a = sqrt(5))
            assert down.weight.abs().max() > 0
            if method == "lora":
                assert not module.weight_delta(layer, site).any()
                assert down.weight.abs().max() <= 1 / math.sqrt(down.weight.shape[1])


def test_lora_random_init_draws_b_too() -> None:
    _, module = _build("lora", init="random")
    b = module.up["0"]["value"].weight
    assert b.abs().max() > 0 and b.std().item() == pytest.approx(0.02, rel=0.3)


@pytest.mark.parametrize("site", SITES)
def test_lora_delta_is_the_scaled_low_rank_product_and_weight_delta_its_matrix(site: str) -> None:
    _, module = _build("lora", init="random", targets=[site], size=4, alpha=12.0)
    x, y = _inputs(site)
    a = module.down["2"][site].weight
    b = module.up["2"][site].weight
    by_hand = (x @ a.T @ b.T) * (12.0 / 4)
    delta = module.delta(2, site, x, y)
    torch.testing.assert_close(delta, by_hand)
    torch.testing.assert_close(x @ module.weight_delta(2, site).T, delta)
    # y is not read: the update depends on the input alone
    torch.testing.assert_close(module.delta(2, site, x, torch.zeros_like(y)), delta)


def test_lora_alpha_scales_the_update() -> None:
    torch.manual_seed(0)
    _, eight = _build("lora", init="random")
    _, sixteen = _build("lora", init="random", alpha=16)
    sixteen.load_state_dict(eight.state_dict())
    x, y = _inputs("query")
    torch.testing.assert_close(sixteen.delta(0, "query", x, y), 2 * eight.delta(0, "query", x, y))


def test_lora_dropout_acts_on_the_input_in_training_only() -> None:
    _, module = _build("lora", init="random", dropout=0.5)
    x, y = _inputs("value")
    module.train()
    torch.manual_seed(1)
    dropped = module.delta(0, "value", x, y)
    module.eval()
    kept = module.delta(0, "value", x, y)
    assert not torch.allclose(dropped, kept)
    torch.testing.assert_close(kept, x @ module.weight_delta(0, "value").T)


@pytest.mark.parametrize("nonlinearity", ["relu", "gelu", "swish", "tanh"])
def test_bottleneck_delta_is_up_of_act_of_down_of_the_output(nonlinearity: str) -> None:
    act = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu, "tanh": torch.tanh}[nonlinearity]
    _, module = _build("houlsby", init="random", nonlinearity=nonlinearity, targets=["ffn_input"])
    y = torch.randn(2, 5, D_FF)
    down, up = module.down["1"]["ffn_input"], module.up["1"]["ffn_input"]
    by_hand = act(y @ down.weight.T + down.bias) @ up.weight.T + up.bias
    delta = module.delta(1, "ffn_input", torch.randn(2, 5, D), y)
    torch.testing.assert_close(delta, by_hand)
    assert delta.abs().max() > 0
    # a bottleneck is not linear in the input: nothing for merge to fold
    assert not hasattr(module, "weight_delta")


def test_the_nonlinearity_changes_the_function() -> None:
    torch.manual_seed(0)
    _, swish = _build("houlsby", init="random")
    _, relu = _build("houlsby", init="random", nonlinearity="relu")
    relu.load_state_dict(swish.state_dict())
    y = torch.randn(2, 5, D)
    assert not torch.allclose(swish.delta(0, "ffn_output", y, y), relu.delta(0, "ffn_output", y, y))


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("lora", {}),
        ("lora", {"size": 4}),
        ("lora", {"targets": ["query", "key", "value", "attention_output"]}),
        ("lora", {"targets": ["ffn_input", "ffn_output"], "size": 3}),
        ("lora", {"targets": list(SITES), "placement": "top", "num_layers": 2}),
        ("lora", {"placement": "bottom"}),
        ("houlsby", {}),
        ("pfeiffer", {}),
        ("bottleneck", {"size": 5}),
        ("houlsby", {"targets": list(SITES), "reduction_factor": 4}),
        ("pfeiffer", {"targets": ["ffn_input"], "placement": "top", "num_layers": 2}),
    ],
)
def test_weights_and_biases_equal_the_formulas(method: str, options: dict[str, object]) -> None:
    config, module = _build(method, **options)
    size, k = config.resolved_size(D), len(config.layer_indices(LAYERS))
    weights = sum(p.numel() for p in module.parameters() if p.dim() == 2)
    biases = sum(p.numel() for p in module.parameters() if p.dim() < 2)
    assert weights == config.adapter_method.weight_formula(config, D, size, k, D_FF)
    # written out per targeted site and layer: r (in + out) for LoRA, no biases; for a bottleneck 2 n m
    # weights and m + n biases, n the site's output width
    shapes = [SHAPES.get(s, (D, D)) for s in getattr(config, "targets", None) or DEFAULT_SITES[method]]
    if method == "lora":
        assert weights == k * sum(size * (n_in + n_out) for n_in, n_out in shapes) and biases == 0
    else:
        assert weights == k * sum(2 * n * size for _, n in shapes)
        assert biases == k * sum(size + n for _, n in shapes)


def test_formulas_at_bert_base() -> None:
    lora, houlsby, pfeiffer = (AdapterConfig(method=m) for m in ("lora", "houlsby", "pfeiffer"))
    # 12 layers x 2 sites (query, value) x r (768 + 768), r = 8
    assert lora.adapter_method.weight_formula(lora, 768, 8, 12, 3072) == 294_912
    m = houlsby.resolved_size(768)
    assert houlsby.adapter_method.weight_formula(houlsby, 768, m, 12, 3072) == 12 * 2 * 2 * 768 * 48
    assert pfeiffer.adapter_method.weight_formula(pfeiffer, 768, m, 12, 3072) == 884_736


def test_signatures_record_what_fixes_the_weights() -> None:
    base = _sig("lora")
    assert base["method"] == "lora" and base["size"] == 8 and base["targets"] == ["query", "value"]
    assert _sig("lora", targets=["value", "query"]) == base  # the same selection written in another order
    assert _sig("lora", dropout=0.1) == base  # dropout changes no weight
    for other in ({"size": 4}, {"targets": ["query", "key"]}, {"placement": "top"}, {"alpha": 16}):
        assert _sig("lora", **other) != base, other
    base = _sig("pfeiffer")
    assert base["method"] == "pfeiffer" and base["size"] == 2 and base["targets"] == ["ffn_output"]
    assert _sig("bottleneck") == base  # the alias's weight files are pfeiffer's
    assert _sig("pfeiffer", size=2) == base  # the same width however it was set
    for other in (
        {"size": 4},
        {"reduction_factor": 4},
        {"targets": ["attention_output", "ffn_output"]},
        {"nonlinearity": "gelu"},
        {"placement": "bottom"},
    ):
        assert _sig("pfeiffer", **other) != base, other
    # same sites and width, other method (and non-linearity): houlsby's weights are not pfeiffer's
    assert _sig("houlsby", targets=["ffn_output"]) != base


def test_targets_are_stored_in_site_order_and_round_trip() -> None:
    config = AdapterConfig(method="lora", targets=["value", "query"])
    assert config.targets == ("query", "value")
    assert AdapterConfig.coerce(config.to_dict()) == config
    assert config.to_dict()["targets"] == ["query", "value"]  # a plain list for YAML and JSON
    assert AdapterConfig(method="lora", targets="key").targets == ("key",)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "options", "message"),
    [
        (
            "lora",
            {"targets": ["query", "attention"]},
            "Unknown adapter.targets 'attention'. The sites are query",
        ),
        ("lora", {"targets": []}, "at least one"),
        ("lora", {"targets": ["query", "query"]}, "at most once"),
        ("lora", {"targets": 3}, "adapter.targets must be a list of site names"),
        ("lora", {"alpha": 0}, "adapter.alpha must be a positive number"),
        ("lora", {"alpha": float("nan")}, "adapter.alpha must be a positive number"),
        ("lora", {"dropout": 1.0}, "adapter.dropout must be a probability in [0, 1)"),
        ("lora", {"dropout": -0.1}, "adapter.dropout must be a probability"),
        ("lora", {"activation": "gelu"}, "follows V^D, which method 'lora' does not have"),
        ("lora", {"reduction_factor": 8}, "adapter.reduction_factor does not apply to method 'lora'"),
        ("lora", {"nonlinearity": "relu"}, "adapter.nonlinearity does not apply to method 'lora'"),
        ("lora", {"placement": "top", "num_layers": 9}, "exceeds the encoder's"),
        ("houlsby", {"size": 4, "reduction_factor": 8}, "both set the bottleneck width"),
        ("houlsby", {"reduction_factor": 0}, "adapter.reduction_factor must be a positive number"),
        ("houlsby", {"reduction_factor": "16"}, "adapter.reduction_factor must be a positive number"),
        ("houlsby", {"nonlinearity": "elu"}, "Unknown adapter.nonlinearity 'elu'. Choose one of relu"),
        ("houlsby", {"nonlinearity": ["relu"]}, "Unknown adapter.nonlinearity ['relu']. Choose one of relu"),
        ("houlsby", {"targets": ["ffn"]}, "Unknown adapter.targets 'ffn'. The sites are"),
        (
            "houlsby",
            {"alpha": 8},
            "adapter.alpha does not apply to method 'houlsby' (alpha is an option of lora)",
        ),
        ("houlsby", {"dropout": 0.1}, "adapter.dropout does not apply to method 'houlsby'"),
        ("houlsby", {"activation": "gelu"}, "follows V^D, which method 'houlsby' does not have"),
    ],
)
def test_bad_options_name_the_fix(method: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(PalUserError) as err:
        AdapterConfig(method=method, **options).layer_indices(LAYERS)  # type: ignore[arg-type]
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("option", "other", "owner"),
    [
        ({"alpha": 4}, "pals", "lora"),
        ({"dropout": 0.1}, "pals", "lora"),
        ({"targets": ["query"]}, "pals", "lora"),
        ({"reduction_factor": 8}, "lora", "houlsby"),
        ({"nonlinearity": "relu"}, "lora", "houlsby"),
    ],
)
def test_a_methods_options_are_refused_by_other_methods(
    option: dict[str, object], other: str, owner: str
) -> None:
    (name,) = option
    with pytest.raises(PalUserError, match=f"adapter.{name} does not apply to method '{other}' .*{owner}"):
        AdapterConfig(method=other, **option)  # type: ignore[arg-type]


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
    """Every weight of the task's adapter moved (LoRA's B from zero, its A through B after step 1),
    nothing else but the head."""
    changed, names = frozen_steps(tiny_encoder(adapter), task)
    assert changed and all(n.startswith((f"adapters.{task}.", "head.")) for n in changed), sorted(changed)
    own = {n for n in names if n.startswith(f"adapters.{task}.")}
    assert {n for n in changed if n.startswith(f"adapters.{task}.")} == own


def test_lora_equals_peft_on_the_same_tiny_bert(batch: dict[str, torch.Tensor], tiny_encoder) -> None:
    from peft import LoraConfig, get_peft_model

    ours = tiny_encoder(AdapterConfig(method="lora", init="random", alpha=16, size=4))
    bert = BertModel(BertConfig(**TINY_NO_DROPOUT), add_pooling_layer=False).eval()
    bert.load_state_dict(ours.backbone.state_dict())  # the encoder keeps transformers' own model and names
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


def test_bottleneck_task_weights_round_trip_and_the_alias(tmp_path, batch, tiny_encoder) -> None:
    config = AdapterConfig(method="pfeiffer", init="random")
    model = tiny_encoder(config)
    save_task_weights(model, tmp_path / "b.safetensors", tasks=["b"])
    alias = tiny_encoder(AdapterConfig(method="bottleneck", init="random"), seed=1)
    alias.backbone.load_state_dict(model.backbone.state_dict())
    assert not torch.allclose(run(alias, batch, "b"), run(model, batch, "b"))
    load_task_weights(alias, tmp_path / "b.safetensors")  # the alias's weights are pfeiffer's
    torch.testing.assert_close(run(alias, batch, "b"), run(model, batch, "b"), atol=0, rtol=0)
    for other in (config.replace(method="houlsby"), config.replace(nonlinearity="gelu")):
        with pytest.raises(PalUserError):
            load_task_weights(tiny_encoder(other), tmp_path / "b.safetensors")
    with pytest.raises(PalUserError, match="cannot be merged"):  # a bottleneck is not linear in x
        model.merge("a")
