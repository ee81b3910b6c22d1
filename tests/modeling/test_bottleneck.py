"""Bottleneck adapters per task (``houlsby``, ``pfeiffer``, alias ``bottleneck``): the module alone.

Built from a tiny config in code whose FFN width differs from the hidden width, so that a site's width
taken from the wrong side fails.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder, load_task_weights, parameter_report, save_task_weights
from pal_lightning.modeling.accounting import task_weight_formula
from pal_lightning.modeling.methods import SITES, AdapterConfig, Where, get_method
from pal_lightning.modeling.methods.bottleneck import BottleneckAdapter
from pal_lightning.testing import TINY_BERT_3_LAYERS, without_dropout
from pal_lightning.testing.conformance import run

D, D_FF, LAYERS = 32, 40, 3
ENCODER = BertConfig(
    hidden_size=D, intermediate_size=D_FF, num_hidden_layers=LAYERS, num_attention_heads=2, vocab_size=50
)
VARIANTS = ("houlsby", "pfeiffer", "bottleneck")


def _build(method: str, **options: object) -> tuple[AdapterConfig, BottleneckAdapter]:
    config = AdapterConfig(method=method, **options)  # type: ignore[arg-type]
    module = config.adapter_method.build(
        config, ENCODER, config.resolved_size(D), config.layer_indices(LAYERS)
    )
    assert isinstance(module, BottleneckAdapter)
    return config, module


def _width(site: str) -> int:
    return D_FF if site == "ffn_input" else D


@pytest.mark.parametrize(
    ("method", "sites", "nonlinearity"),
    [
        ("houlsby", ("attention_output", "ffn_output"), "swish"),
        ("pfeiffer", ("ffn_output",), "relu"),
        ("bottleneck", ("ffn_output",), "relu"),
    ],
)
def test_variant_defaults(method: str, sites: tuple[str, ...], nonlinearity: str) -> None:
    _, module = _build(method)
    assert get_method(method).where is Where.INSIDE
    assert module.layers == (0, 1, 2) and module.sites == sites and module.nonlinearity == nonlinearity
    # m = round(d / 16): 2 here, 48 at 768
    assert module.down["0"][sites[0]].weight.shape == (2, D)
    assert module.up["0"][sites[0]].weight.shape == (D, 2)


def test_the_width_comes_from_size_or_the_reduction_factor() -> None:
    assert AdapterConfig(method="pfeiffer").resolved_size(768) == 48
    assert AdapterConfig(method="houlsby").resolved_size(384) == 24
    assert AdapterConfig(method="pfeiffer", reduction_factor=4).resolved_size(D) == 8
    assert AdapterConfig(method="pfeiffer", reduction_factor=64).resolved_size(D) == 1  # never 0
    assert AdapterConfig(method="pfeiffer", reduction_factor=12).resolved_size(D) == 3  # 2.67 rounds up
    assert AdapterConfig(method="houlsby", size=5).resolved_size(D) == 5


@pytest.mark.parametrize("method", VARIANTS)
def test_a_new_task_adds_nothing(method: str) -> None:
    _, module = _build(method, targets=list(SITES))
    for layer in module.layers:
        for site in SITES:
            y = torch.randn(2, 5, _width(site))
            assert torch.equal(module.delta(layer, site, torch.randn(2, 5, 3), y), torch.zeros_like(y))
            up = module.up[str(layer)][site]
            assert not up.weight.any() and not up.bias.any()
            assert module.down[str(layer)][site].weight.abs().max() > 0  # D is drawn, N(0, 0.02)


@pytest.mark.parametrize("nonlinearity", ["relu", "gelu", "swish", "tanh"])
def test_delta_is_up_of_act_of_down_of_the_output(nonlinearity: str) -> None:
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
        ("houlsby", {}),
        ("pfeiffer", {}),
        ("bottleneck", {"size": 5}),
        ("houlsby", {"targets": list(SITES), "reduction_factor": 4}),
        ("pfeiffer", {"targets": ["ffn_input"], "placement": "top", "num_layers": 2}),
    ],
)
def test_weights_and_biases_equal_the_formulas(method: str, options: dict[str, object]) -> None:
    config, module = _build(method, **options)
    m = config.resolved_size(D)
    k = len(config.layer_indices(LAYERS))
    weights = sum(p.numel() for p in module.parameters() if p.dim() == 2)
    biases = sum(p.numel() for p in module.parameters() if p.dim() < 2)
    assert weights == config.adapter_method.weight_formula(config, D, m, k, D_FF)
    # written out: 2 n m weights and m + n biases per targeted site (n its width) and layer
    widths = [_width(s) for s in module.sites]
    assert weights == k * sum(2 * n * m for n in widths)
    assert biases == k * sum(m + n for n in widths)


def test_formulas_at_bert_base() -> None:
    houlsby, pfeiffer = AdapterConfig(method="houlsby"), AdapterConfig(method="pfeiffer")
    m = houlsby.resolved_size(768)
    assert houlsby.adapter_method.weight_formula(houlsby, 768, m, 12, 3072) == 12 * 2 * 2 * 768 * 48
    assert pfeiffer.adapter_method.weight_formula(pfeiffer, 768, m, 12, 3072) == 884_736


def _sig(method: str, **options: object) -> dict[str, object]:
    config = AdapterConfig(method=method, **options)  # type: ignore[arg-type]
    return config.adapter_method.signature(config, config.resolved_size(D), config.layer_indices(LAYERS))


def test_signature_records_what_fixes_the_weights() -> None:
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


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"size": 4, "reduction_factor": 8}, "both set the bottleneck width"),
        ({"reduction_factor": 0}, "adapter.reduction_factor must be a positive number"),
        ({"reduction_factor": "16"}, "adapter.reduction_factor must be a positive number"),
        ({"nonlinearity": "elu"}, "Unknown adapter.nonlinearity 'elu'. Choose one of relu"),
        ({"nonlinearity": ["relu"]}, "Unknown adapter.nonlinearity ['relu']. Choose one of relu"),
        ({"targets": ["ffn"]}, "Unknown adapter.targets 'ffn'. The sites are"),
        ({"alpha": 8}, "adapter.alpha does not apply to method 'houlsby' (alpha is an option of lora)"),
        ({"dropout": 0.1}, "adapter.dropout does not apply to method 'houlsby'"),
        ({"activation": "gelu"}, "follows V^D, which method 'houlsby' does not have"),
    ],
)
def test_bad_options_name_the_fix(options: dict[str, object], message: str) -> None:
    with pytest.raises(PalUserError) as err:
        AdapterConfig(method="houlsby", **options)  # type: ignore[arg-type]
    assert message in str(err.value)


@pytest.mark.parametrize("option", [{"reduction_factor": 8}, {"nonlinearity": "relu"}])
def test_bottleneck_options_are_refused_by_other_methods(option: dict[str, object]) -> None:
    (name,) = option
    with pytest.raises(PalUserError, match=f"adapter.{name} does not apply to method 'lora'.*houlsby"):
        AdapterConfig(method="lora", **option)  # type: ignore[arg-type]


# ------------------------------------------------------------------ in the encoder (MultiTaskEncoder)
TINY_NO_DROPOUT = without_dropout(TINY_BERT_3_LAYERS)


@pytest.mark.parametrize("method", ["houlsby", "pfeiffer"])
def test_a_new_bottleneck_task_is_the_plain_encoder(
    method: str, batch: dict[str, torch.Tensor], tiny_encoder
) -> None:
    model = tiny_encoder(AdapterConfig(method=method, targets=list(SITES)))
    plain = MultiTaskEncoder.from_config(TINY_NO_DROPOUT, ["a"], adapter="none").eval()
    plain.bert.load_state_dict(model.bert.state_dict())
    expected = run(plain, batch, "a")
    for task in ("a", "b"):
        torch.testing.assert_close(run(model, batch, task), expected, atol=1e-6, rtol=0)
    # each site is wired: large D and U there change task a's output alone (by little for query and
    # key: the tiny random encoder's attention is nearly uniform, its N(0, 0.02) queries near zero)
    for site in SITES:
        down, up = model.adapters["a"].down["0"][site], model.adapters["a"].up["0"][site]
        with torch.no_grad():
            for p in (*down.parameters(), *up.parameters()):
                p.normal_(0, 1.0)
        assert not torch.allclose(run(model, batch, "a"), expected, atol=1e-5), site
        torch.testing.assert_close(run(model, batch, "b"), expected, atol=1e-6, rtol=0)
        with torch.no_grad():
            up.weight.zero_()
            up.bias.zero_()


def test_parameter_report_counts_weights_and_biases(tiny_encoder) -> None:
    model = tiny_encoder(AdapterConfig(method="houlsby", size=3))
    report = parameter_report(model)
    d, layers, d_ff = (TINY_NO_DROPOUT[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size"))
    assert report.adapter_weights["a"] == layers * 2 * (2 * d * 3)
    assert report.adapter_biases["a"] == layers * 2 * (3 + d)
    assert task_weight_formula(model.adapter_config, d, layers, d_ff) == report.adapter_weights["a"]


def test_task_weights_round_trip_and_the_alias(tmp_path, batch, tiny_encoder) -> None:
    config = AdapterConfig(method="pfeiffer", init="random")
    model = tiny_encoder(config)
    save_task_weights(model, tmp_path / "b.safetensors", tasks=["b"])
    alias = tiny_encoder(AdapterConfig(method="bottleneck", init="random"), seed=1)
    alias.bert.load_state_dict(model.bert.state_dict())
    assert not torch.allclose(run(alias, batch, "b"), run(model, batch, "b"))
    load_task_weights(alias, tmp_path / "b.safetensors")  # the alias's weights are pfeiffer's
    torch.testing.assert_close(run(alias, batch, "b"), run(model, batch, "b"), atol=0, rtol=0)
    for other in (config.replace(method="houlsby"), config.replace(nonlinearity="gelu")):
        with pytest.raises(PalUserError):
            load_task_weights(tiny_encoder(other), tmp_path / "b.safetensors")
