"""The pretrained-load plan as a pure function: key names, I-layer copies, refusals and what is reported."""

from __future__ import annotations

import pytest
import torch

from pal_lightning.errors import PalUserError
from pal_lightning.modeling.encoder_state import encoder_keys, plan_pretrained_load


def _t(*shape: int) -> torch.Tensor:
    return torch.zeros(shape)


# an encoder with one shared layer (0), one individual layer (1) held by groups "a" and "b+c", one adapter
EXPECTED = {
    "bert.embeddings.LayerNorm.weight": _t(4),
    "bert.encoder.layer.0.w": _t(4, 4),
    "individual.a.1.w": _t(4, 4),
    "individual.b+c.1.w": _t(4, 4),
    "adapters.a.v": _t(2, 4),
}


def _checkpoint() -> dict[str, torch.Tensor]:
    """A BertModel checkpoint (no ``bert.`` prefix, old LayerNorm names) with a pooler the encoder lacks."""
    return {
        "embeddings.LayerNorm.gamma": torch.full((4,), 2.0),
        "encoder.layer.0.w": torch.full((4, 4), 3.0),
        "encoder.layer.1.w": torch.full((4, 4), 5.0),
        "pooler.dense.weight": _t(4, 4),
        "embeddings.position_ids": _t(1, 4),
    }


def test_keys_get_the_bert_prefix_once_and_new_layernorm_names():
    state = {"bert.a.LayerNorm.beta": _t(1), "b.LayerNorm.gamma": _t(1), "bert.c.weight": _t(1)}
    assert sorted(encoder_keys(state)) == [
        "bert.a.LayerNorm.bias",
        "bert.b.LayerNorm.weight",
        "bert.c.weight",
    ]


def test_plan_copies_individual_layers_to_every_group_and_reports_only_unused_keys():
    own, info = plan_pretrained_load(
        _checkpoint(),
        EXPECTED,
        individual_layers=[1],
        groups=["a", "b+c"],
        not_saved=["bert.embeddings.position_ids"],
        source="ckpt",
    )
    # everything but the new adapter is loaded; layer 1 goes to both groups' copies, not to bert.*
    assert sorted(own) == sorted(k for k in EXPECTED if not k.startswith("adapters."))
    assert torch.equal(own["individual.a.1.w"], torch.full((4, 4), 5.0))
    assert torch.equal(own["individual.b+c.1.w"], torch.full((4, 4), 5.0))
    assert torch.equal(own["bert.embeddings.LayerNorm.weight"], torch.full((4,), 2.0))
    assert info.source == "ckpt"
    assert info.missing_new == ["adapters.a.v"]
    # the pooler is unused; the copied layer 1 and the not-saved buffer are not reported
    assert info.unexpected == ["pooler.dense.weight"]


def test_plan_refuses_a_missing_encoder_weight_naming_it():
    state = _checkpoint()
    del state["encoder.layer.0.w"]
    with pytest.raises(PalUserError, match=r"lacks 1 encoder weight\(s\).*bert\.encoder\.layer\.0\.w"):
        plan_pretrained_load(state, EXPECTED, individual_layers=[1], groups=["a", "b+c"])


def test_plan_refuses_a_shape_mismatch_naming_both_shapes():
    state = {**_checkpoint(), "encoder.layer.0.w": _t(4, 5)}
    with pytest.raises(
        PalUserError, match=r"bert\.encoder\.layer\.0\.w \(checkpoint \(4, 5\), model \(4, 4\)\)"
    ):
        plan_pretrained_load(state, EXPECTED, individual_layers=[1], groups=["a", "b+c"])
