"""The PAL encoder against an independent implementation of the paper's formula, and the PAL's cost.

The reference below is written from the equations (Stickland & Murray 2019, docs/design.md §2) with plain
tensor algebra on the raw weights, one head and one layer at a time: it shares no code with
``pal_lightning.modeling`` beyond reading the weights. The fused implementation (one Q/K/V matmul, one
``scaled_dot_product_attention`` call, the mask built once per forward) must give the same hidden states
and keep the saved parameter names.
"""

from __future__ import annotations

import pytest
import torch
from pal_by_hand import Dispatched, attention_by_hand
from torch.nn import functional as F

from pal_lightning.modeling import AdapterConfig, MultiTaskEncoder
from pal_lightning.modeling.methods.on_top import ProjectedAttentionBlock, ProjectedAttentionOnTop
from pal_lightning.modeling.methods.pals import scores_dtype
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY
from pal_lightning.testing import without_dropout

TINY_NO_DROPOUT = without_dropout(TINY)
PAL_SIZE, PAL_HEADS = 8, 2


def _linear(x: torch.Tensor, state: dict, name: str) -> torch.Tensor:
    return x @ state[f"{name}.weight"].T + state[f"{name}.bias"]


def _reference(model: MultiTaskEncoder, batch: dict, task: str, adapter: str) -> torch.Tensor:
    """h^{l+1} = LN2(h_att + FFN(h_att) + V^D g_l(V^E h)) with h_att = LN1(h + SA(h)), every layer."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    keep = batch["attention_mask"].bool()
    eps = model.config.layer_norm_eps
    h = model.backbone.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
    for layer in range(model.num_layers):
        p = f"backbone.encoder.layer.{layer}"
        heads = model.config.num_attention_heads
        q, k, v = (_linear(h, state, f"{p}.attention.self.{n}") for n in ("query", "key", "value"))
        sa = _linear(attention_by_hand(q, k, v, heads, keep=keep), state, f"{p}.attention.output.dense")
        h_att = F.layer_norm(
            h + sa,
            h.shape[-1:],
            state[f"{p}.attention.output.LayerNorm.weight"],
            state[f"{p}.attention.output.LayerNorm.bias"],
            eps,
        )
        ffn = _linear(F.gelu(_linear(h_att, state, f"{p}.intermediate.dense")), state, f"{p}.output.dense")
        a = f"adapters.{task}"
        shared = adapter == "pals"
        down = f"{a}.down" if shared else f"{a}.down.{layer}"
        up = f"{a}.up" if shared else f"{a}.up.{layer}"
        x = _linear(h, state, down)
        if adapter != "low_rank":
            qkv = _linear(x, state, f"{a}.attention.{layer}.qkv")
            x = attention_by_hand(*qkv.split(PAL_SIZE, dim=-1), PAL_HEADS, keep=keep)
        ts = _linear(x, state, up)
        h = F.layer_norm(
            h_att + ffn + ts,
            h.shape[-1:],
            state[f"{p}.output.LayerNorm.weight"],
            state[f"{p}.output.LayerNorm.bias"],
            eps,
        )
    return h


EXPECTED_KEYS = {
    "pals": ["down.bias", "down.weight", "up.bias", "up.weight"]
    + [f"attention.{i}.qkv.{w}" for i in range(3) for w in ("bias", "weight")],
    "pals_no_sharing": [f"{n}.{i}.{w}" for n in ("down", "up") for i in range(3) for w in ("bias", "weight")]
    + [f"attention.{i}.qkv.{w}" for i in range(3) for w in ("bias", "weight")],
    "low_rank": [f"{n}.{i}.{w}" for n in ("down", "up") for i in range(3) for w in ("bias", "weight")],
}


@pytest.mark.parametrize("adapter", ["pals", "pals_no_sharing", "low_rank"])
def test_encoder_equals_the_papers_formula_and_keeps_its_saved_names(adapter, batch):
    torch.manual_seed(0)
    model = MultiTaskEncoder.from_config(
        TINY_NO_DROPOUT, ["a", "b"], adapter=adapter, size=PAL_SIZE, num_heads=PAL_HEADS, init="random"
    ).eval()
    with torch.no_grad():
        got = model(**batch, task="b")
        expected = _reference(model, batch, "b", adapter)
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-6, rtol=1e-6)
    # the saved layout: Q, K, V of a layer in one [3 d_s, d_s] matrix, rows in the order Q, K, V
    names = sorted(k.removeprefix("adapters.a.") for k in model.state_dict() if k.startswith("adapters.a."))
    assert names == sorted(EXPECTED_KEYS[adapter])
    if adapter != "low_rank":
        assert model.adapters["a"].attention["0"].qkv.weight.shape == (3 * PAL_SIZE, PAL_SIZE)


def _on_top_reference(model: MultiTaskEncoder, batch: dict, task: str, gelu: bool) -> torch.Tensor:
    """pa_on_top: h + act(V^D B(V^E h)), B = 6 blocks x -> LN(x + W_O Attn(x)) in d_s, on the plain encoder's
    output h (module docstring of :mod:`pal_lightning.modeling.methods.on_top`)."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    keep = batch["attention_mask"].bool()
    h = model.backbone(**batch).last_hidden_state  # no task: the plain encoder
    a = f"adapters.{task}"
    x = _linear(h, state, f"{a}.down")
    for k in range(6):
        qkv = _linear(x, state, f"{a}.blocks.{k}.attention.qkv")
        attended = _linear(
            attention_by_hand(*qkv.split(PAL_SIZE, dim=-1), PAL_HEADS, keep=keep),
            state,
            f"{a}.blocks.{k}.out",
        )
        norm = (state[f"{a}.blocks.{k}.norm.weight"], state[f"{a}.blocks.{k}.norm.bias"])
        x = F.layer_norm(x + attended, x.shape[-1:], *norm, model.config.layer_norm_eps)
    ts = _linear(x, state, f"{a}.up")
    return h + (F.gelu(ts) if gelu else ts)


@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_projected_attention_on_top_equals_its_formula(activation, batch):
    # a large LayerNorm epsilon, so that a block using another one shows
    config = {**TINY_NO_DROPOUT, "layer_norm_eps": 0.1}
    torch.manual_seed(0)
    model = MultiTaskEncoder.from_config(
        config,
        ["a", "b"],
        adapter="pa_on_top",
        size=PAL_SIZE,
        num_heads=PAL_HEADS,
        init="random",
        activation=activation,
    ).eval()
    with torch.no_grad():
        got = model(**batch, task="b")
        expected = _on_top_reference(model, batch, "b", gelu=activation == "gelu")
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # built directly, the blocks take BERT's LayerNorm epsilon
    top = ProjectedAttentionOnTop(AdapterConfig(method="pa_on_top", num_heads=2), 16, 8)
    assert top.blocks[0].norm.eps == ProjectedAttentionBlock(8, 2).norm.eps == 1e-12


def test_one_pal_is_at_most_five_kernels_and_a_forward_waits_for_the_device_no_more_than_bert(batch):
    torch.manual_seed(0)
    model = MultiTaskEncoder.from_config(TINY, ["a"], size=PAL_SIZE, num_heads=PAL_HEADS, init="random")
    h = torch.randn(3, 7, TINY["hidden_size"])
    mask = torch.zeros(3, 1, 1, 7)
    with torch.no_grad(), Dispatched() as count:
        model.adapters["a"](1, h, mask)
    # V^E, fused Q/K/V, one attention, V^D, and at most one copy to concatenate the heads (none where the
    # attention kernel writes them side by side already, as on this CPU): no per-layer mask work
    assert len(count.computing()) <= 5, count.computing()
    assert sum("addmm" in op for op in count.computing()) == 3
    assert sum("scaled_dot_product" in op for op in count.computing()) == 1

    plain = MultiTaskEncoder.from_config(TINY, ["a"], adapter="none")
    syncs = {}
    for name, encoder in (("pals", model), ("none", plain)):
        with Dispatched() as count:
            encoder(**batch, task="a").sum().backward()
        syncs[name] = count.ops["aten._local_scalar_dense.default"]  # a tensor read on the host
    assert syncs["pals"] == syncs["none"]


def test_the_mask_is_built_in_the_autocast_dtype_once(batch):
    cpu = torch.device("cpu")
    assert scores_dtype(torch.float32, cpu) == torch.float32
    model = MultiTaskEncoder.from_config(TINY, ["a"], size=PAL_SIZE, num_heads=PAL_HEADS, init="random")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # the CPU computes the attention product in fp32 under autocast (modeling/attention.py)
        assert scores_dtype(torch.float32, cpu) == torch.float32
        with Dispatched() as casts:
            out = model(**batch, task="a")
    assert torch.isfinite(out).all()
    mask_shape = (batch["input_ids"].shape[0], 1, 1, batch["input_ids"].shape[1])
    assert casts.cast_shapes and mask_shape not in casts.cast_shapes  # no layer casts the PAL mask
    # without autocast: in the weights' dtype (float64 here), again never cast by a layer
    model.double()
    with Dispatched() as casts:
        assert model(**batch, task="a").dtype == torch.float64
    assert mask_shape not in casts.cast_shapes
