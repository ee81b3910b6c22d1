"""The pretrained-load plan as a pure function: key names, I-layer copies, refusals and what is reported."""

from __future__ import annotations

import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.encoder_state import encoder_keys, plan_pretrained_load


def _t(*shape: int) -> torch.Tensor:
    return torch.zeros(shape)


# an encoder with one shared layer (0), one individual layer (1) held by groups "a" and "b+c", one adapter
EXPECTED = {
    "backbone.embeddings.LayerNorm.weight": _t(4),
    "backbone.encoder.layer.0.w": _t(4, 4),
    "individual.a.1.w": _t(4, 4),
    "individual.b+c.1.w": _t(4, 4),
    "adapters.a.v": _t(2, 4),
}


def _checkpoint() -> dict[str, torch.Tensor]:
    """A BertModel checkpoint (no prefix, old LayerNorm names) with a pooler the encoder lacks."""
    return {
        "embeddings.LayerNorm.gamma": torch.full((4,), 2.0),
        "encoder.layer.0.w": torch.full((4, 4), 3.0),
        "encoder.layer.1.w": torch.full((4, 4), 5.0),
        "pooler.dense.weight": _t(4, 4),
        "embeddings.position_ids": _t(1, 4),
    }


def test_keys_get_the_backbone_prefix_once_and_new_layernorm_names():
    state = {"backbone.a.LayerNorm.beta": _t(1), "b.LayerNorm.gamma": _t(1), "backbone.c.weight": _t(1)}
    assert sorted(encoder_keys(state)) == [
        "backbone.a.LayerNorm.bias",
        "backbone.b.LayerNorm.weight",
        "backbone.c.weight",
    ]


def test_plan_copies_individual_layers_to_every_group_and_reports_only_unused_keys():
    own, info = plan_pretrained_load(
        _checkpoint(),
        EXPECTED,
        individual_layers=[1],
        groups=["a", "b+c"],
        not_saved=["backbone.embeddings.position_ids"],
        source="ckpt",
    )
    # everything but the new adapter is loaded; layer 1 goes to both groups' copies, not to backbone.*
    assert sorted(own) == sorted(k for k in EXPECTED if not k.startswith("adapters."))
    assert torch.equal(own["individual.a.1.w"], torch.full((4, 4), 5.0))
    assert torch.equal(own["individual.b+c.1.w"], torch.full((4, 4), 5.0))
    assert torch.equal(own["backbone.embeddings.LayerNorm.weight"], torch.full((4,), 2.0))
    assert info.source == "ckpt"
    assert info.missing_new == ["adapters.a.v"]
    # the pooler is unused; the copied layer 1 and the not-saved buffer are not reported
    assert info.unexpected == ["pooler.dense.weight"]


FIX = "Point the encoder at a complete checkpoint of the encoder's family (a folder saved with save_pretrained(), or a hub id)."


def test_plan_refuses_a_missing_encoder_weight_naming_it():
    state = _checkpoint()
    del state["encoder.layer.0.w"]
    with pytest.raises(PalUserError) as err:
        plan_pretrained_load(state, EXPECTED, individual_layers=[1], groups=["a", "b+c"], source="ckpt")
    assert str(err.value) == (
        "The checkpoint ckpt lacks 1 encoder weight(s) that are not new PAL parameters: "
        f"backbone.encoder.layer.0.w. {FIX}"
    )


@pytest.mark.parametrize("n", [8, 9])
def test_a_long_list_of_missing_weights_shows_the_first_eight(n):
    expected = {f"backbone.w{i}": _t(1) for i in range(n)} | {"adapters.a.v": _t(1)}
    with pytest.raises(PalUserError) as err:
        plan_pretrained_load({}, expected, individual_layers=[], groups=[])
    shown = ", ".join(f"backbone.w{i}" for i in range(8)) + (" and 1 more" if n == 9 else "")
    assert str(err.value) == (
        f"The checkpoint <state dict> lacks {n} encoder weight(s) that are not new PAL parameters: "
        f"{shown}. {FIX}"
    )


def test_plan_refuses_a_shape_mismatch_naming_both_shapes():
    state = {**_checkpoint(), "encoder.layer.0.w": _t(4, 5)}
    with pytest.raises(
        PalUserError, match=r"backbone\.encoder\.layer\.0\.w \(checkpoint \(4, 5\), model \(4, 4\)\)"
    ):
        plan_pretrained_load(state, EXPECTED, individual_layers=[1], groups=["a", "b+c"])
    # six wrong shapes: the first five are named, with the source and the fix
    expected = {f"backbone.w{i}": _t(2) for i in range(6)}
    with pytest.raises(PalUserError) as err:
        plan_pretrained_load({f"w{i}": _t(3) for i in range(6)}, expected, individual_layers=[], groups=[])
    named = ", ".join(f"backbone.w{i} (checkpoint (3,), model (2,))" for i in range(5))
    assert str(err.value) == (
        f"Shapes in <state dict> do not match the encoder config: {named}. "
        "Check that config.json belongs to these weights."
    )
