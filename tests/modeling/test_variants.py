"""The PALs paper's other task-specific functions: projected feed-forward (``pff``), projected attention on
top (``pa_on_top``), a BERT layer on top (``bert_layer_on_top``), and the optional GELU after V^D."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_accounting import BERT_BASE
from transformers import BertConfig, BertModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import (
    AdapterConfig,
    MultiTaskEncoder,
    load_task_weights,
    parameter_report,
    save_task_weights,
)
from pal_lightning.modeling.accounting import task_weight_formula
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY
from pal_lightning.testing import without_dropout
from pal_lightning.testing.conformance import run

TINY_NO_DROPOUT = without_dropout(TINY)

NEW = ("pff", "pa_on_top", "bert_layer_on_top")
D, L, D_FF = TINY["hidden_size"], TINY["num_hidden_layers"], TINY["intermediate_size"]
MINILM = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}


def _model(adapter: str, init: str = "random", **kw) -> MultiTaskEncoder:
    torch.manual_seed(0)
    kw.setdefault("num_heads", 2)
    return MultiTaskEncoder.from_config(TINY_NO_DROPOUT, ["a", "b"], adapter=adapter, init=init, **kw).eval()


@pytest.mark.parametrize("adapter", ["pff", "pa_on_top"])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_zero_init_starts_as_the_pretrained_encoder(adapter, activation, batch):
    model = _model(adapter, init="zero", activation=activation)
    plain = MultiTaskEncoder.from_config(TINY_NO_DROPOUT, ["a"], adapter="none").eval()
    plain.backbone.load_state_dict(model.backbone.state_dict())
    expected = run(plain, batch, "a")
    for task in ("a", "b"):
        assert torch.equal(run(model, batch, task), expected)
    # the random init does change the output (the comparison above can fail)
    assert not torch.allclose(run(_model(adapter, init="random"), batch, "a"), expected, atol=1e-4)


def _deeper(model: MultiTaskEncoder, top: dict[str, torch.Tensor]) -> BertModel:
    """A plain (L+1)-layer BertModel: the encoder's L layers, then a layer with the weights ``top``."""
    deeper = BertModel(BertConfig(**{**TINY_NO_DROPOUT, "num_hidden_layers": L + 1}), add_pooling_layer=False)
    state = {k[len("backbone.") :]: v for k, v in model.state_dict().items() if k.startswith("backbone.")}
    state.update({f"encoder.layer.{L}.{k}": v for k, v in top.items()})
    deeper.load_state_dict(state)
    return deeper.eval()


def test_bert_layer_on_top_starts_as_the_last_pretrained_layer_applied_twice(batch):
    """Independent reference: a plain (L+1)-layer BertModel whose top layer is a copy of layer L-1."""
    model = _model("bert_layer_on_top", init="zero")
    with torch.no_grad():
        expected = _deeper(model, model.backbone.encoder.layer[L - 1].state_dict())(**batch).last_hidden_state
    for task in ("a", "b"):
        torch.testing.assert_close(run(model, batch, task), expected, rtol=0, atol=1e-5)
    # init random: a fresh BERT layer (unit LayerNorms, biases 0), not the copy, applied after the last
    randomised = _model("bert_layer_on_top", init="random")
    with torch.no_grad():
        top = randomised.adapters["b"].layer.state_dict()
        expected = _deeper(randomised, top)(**batch).last_hidden_state
    torch.testing.assert_close(run(randomised, batch, "b"), expected, rtol=0, atol=1e-5)
    fresh = randomised.adapters["a"].layer
    assert torch.equal(fresh.output.LayerNorm.weight, torch.ones(D))
    assert torch.equal(fresh.attention.self.query.bias, torch.zeros(D))
    assert not torch.equal(
        fresh.attention.self.query.weight, model.backbone.encoder.layer[L - 1].attention.self.query.weight
    )
    # drawn with the encoder's initializer_range (BERT's init), not a fixed 0.02
    wide = MultiTaskEncoder.from_config(
        {**TINY, "initializer_range": 0.5}, ["a"], adapter="bert_layer_on_top", init="random"
    )
    assert wide.adapters["a"].layer.intermediate.dense.weight.std().item() == pytest.approx(0.5, rel=0.1)


def test_bert_layer_on_top_copies_the_pretrained_layer_after_loading():
    model = MultiTaskEncoder.from_config(TINY, ["a"], adapter="bert_layer_on_top")
    donor = MultiTaskEncoder.from_config(TINY, ["a"], adapter="none")
    with torch.no_grad():
        for p in donor.backbone.parameters():
            p.add_(1.0)
    model.load_pretrained_state(donor.backbone.state_dict())
    top = model.adapters["a"].layer.state_dict()
    last = donor.backbone.encoder.layer[L - 1].state_dict()
    assert all(torch.equal(top[k], last[k]) for k in last)


def test_gelu_after_v_d_is_applied_by_hand():
    """The pff adapter's TS term recomputed from its weights: GELU(V^D FFN(V^E h)) with FFN = W2 GELU(W1 x)."""
    model = _model("pff", activation="gelu")
    adapter = model.adapters["a"]
    h = torch.randn(2, 5, D)
    x = h @ adapter.down.weight.T + adapter.down.bias
    ffn = adapter.ffn["1"]
    x = F.gelu(x @ ffn.fc1.weight.T + ffn.fc1.bias) @ ffn.fc2.weight.T + ffn.fc2.bias
    expected = F.gelu(x @ adapter.up.weight.T + adapter.up.bias)
    torch.testing.assert_close(adapter(1, h, None), expected)
    ungated = _model("pff", activation="none").adapters["a"](1, h, None)
    torch.testing.assert_close(F.gelu(ungated), expected)  # same weights (same seed), only the GELU differs


def test_parameter_counts_equal_hand_formulas():
    # tiny: d = 32, L = 3, d_ff = 37; default d_s at width 32: round(32 * 204 / 768) = 9 (pff),
    # pa_on_top to a multiple of 2 heads: 8
    pff = parameter_report(_model("pff"))
    assert pff.adapter_size == 9
    assert pff.adapter_weights["a"] == 2 * 32 * 9 + 3 * (9 * 13 + 13 * 9)  # inner 3 * 9 // 2 = 13
    assert pff.adapter_biases["a"] == 9 + 32 + 3 * (13 + 9)
    top = parameter_report(_model("pa_on_top"))
    assert top.adapter_size == 8
    assert top.adapter_weights["a"] == 2 * 32 * 8 + 6 * 4 * 8 * 8
    assert top.adapter_biases["a"] == 8 + 32 + 6 * (3 * 8 + 8 + 2 * 8)  # qkv, out, LayerNorm gain+bias
    layer = parameter_report(_model("bert_layer_on_top"))
    assert layer.adapter_size == 0
    assert layer.adapter_weights["a"] == 4 * 32 * 32 + 2 * 32 * 37
    assert layer.adapter_biases["a"] == 4 * 32 + 37 + 32 + 2 * 2 * 32
    for report in (pff, top, layer):  # the pure formula agrees with the counted model
        config = AdapterConfig(method=report.method, num_heads=2)
        assert task_weight_formula(config, D, L, D_FF) == report.adapter_weights["b"]


def test_paper_sizes_and_the_eight_task_ratios_at_bert_base():
    """Weights per task at BERT-base and MiniLM (hand arithmetic), and the paper's 1.13x / 1.10x."""
    with torch.device("meta"):
        base = MultiTaskEncoder.from_config({**BERT_BASE, "vocab_size": 30522}, [f"t{i}" for i in range(8)])
        top = MultiTaskEncoder.from_config(
            {**BERT_BASE, "vocab_size": 30522}, [f"t{i}" for i in range(8)], adapter="pa_on_top"
        )
    assert parameter_report(top).adapter_weights["t0"] == 2 * 768 * 204 + 6 * 4 * 204**2 == 1_312_128
    # the paper's encoder count includes the pooler (768 * 768 + 768), which MultiTaskEncoder leaves out
    pooler = 768 * 768 + 768
    for model, paper in ((base, 1.13), (top, 1.10)):
        report = parameter_report(model)
        assert round((report.total + pooler) / (report.shared + pooler), 2) == paper
    cases = {
        ("pff", 768): 2 * 768 * 204 + 12 * 3 * 204**2,
        ("pa_on_top", 768): 1_312_128,
        ("bert_layer_on_top", 768): 4 * 768**2 + 2 * 768 * 3072,
        ("pff", 384): 2 * 384 * 102 + 6 * 3 * 102**2,
        ("pa_on_top", 384): 2 * 384 * 102 + 6 * 4 * 102**2,
        ("bert_layer_on_top", 384): 4 * 384**2 + 2 * 384 * 1536,
    }
    for (adapter, d), expected in cases.items():
        shape = BERT_BASE if d == 768 else MINILM
        pal = AdapterConfig(method=adapter)
        formula = task_weight_formula(pal, d, shape["num_hidden_layers"], shape["intermediate_size"])
        assert formula == expected, adapter


def test_task_weights_refuse_another_variant_or_activation(tmp_path):
    path = save_task_weights(_model("pff"), tmp_path / "pff.safetensors")
    for other in (_model("pals", size=10), _model("pff", activation="gelu")):
        with pytest.raises(PalUserError, match="was saved for"):
            load_task_weights(other, path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "pa_on_top", "placement": "top"}, "sits after the last layer"),
        ({"method": "bert_layer_on_top", "size": 64}, "does not apply"),
        ({"method": "none", "activation": "gelu"}, "does not have"),
        ({"method": "bert_layer_on_top", "activation": "gelu"}, "does not have"),
        ({"method": "pals", "activation": "relu"}, "Unknown adapter.activation"),
        ({"method": "pa_on_top", "size": 10, "num_heads": 4}, "not divisible"),
    ],
)
def test_bad_variant_options_name_the_problem(kwargs, message):
    with pytest.raises(PalUserError, match=message):
        AdapterConfig(**kwargs)


def test_default_sizes_scale_with_the_width():
    assert AdapterConfig(method="pff").resolved_size(768) == 204
    assert AdapterConfig(method="pff").resolved_size(384) == 102
    assert AdapterConfig(method="pa_on_top").resolved_size(384) == 102
    assert AdapterConfig(method="pa_on_top", num_heads=12).resolved_size(768) == 204
    assert AdapterConfig(method="pals", placement="top").resolved_size(384) == 138
    for adapter in ("pa_on_top", "bert_layer_on_top"):
        assert AdapterConfig(method=adapter).layer_indices(12) == ()


def test_top_blocks_take_berts_defaults_where_a_family_config_lacks_the_field():
    """DistilBERT's config has no ``layer_norm_eps`` (its layers use 1e-12): ``pa_on_top``'s LayerNorms take
    1e-12; a config without ``initializer_range`` gives ``bert_layer_on_top`` BERT's 0.02."""
    from transformers import DistilBertConfig

    from pal_lightning.modeling.methods.on_top import BertLayerOnTop, ProjectedAttentionOnTopMethod

    distil = DistilBertConfig(dim=D, n_layers=L, n_heads=2, hidden_dim=D_FF, vocab_size=99)
    assert not hasattr(distil, "layer_norm_eps")
    block = ProjectedAttentionOnTopMethod().build(
        AdapterConfig(method="pa_on_top", num_heads=2), distil, 8, ()
    )
    norms = [m for m in block.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and {m.eps for m in norms} == {1e-12}

    class WithoutInitRange:  # a family config without the field (BertConfig has a class default)
        def __getattr__(self, name: str) -> object:
            if name == "initializer_range":
                raise AttributeError(name)
            return getattr(bert, name)

    bert = BertConfig(**TINY, initializer_range=0.5)
    layer = BertLayerOnTop(AdapterConfig(method="bert_layer_on_top"), WithoutInitRange(), L)
    assert layer.initializer_range == 0.02 and type(layer.layer).__name__ == "BertLayer"
