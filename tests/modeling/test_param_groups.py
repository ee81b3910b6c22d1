"""Per-group learning rates: encoder / adapters / heads, layer-wise decay, and the default four groups."""

from __future__ import annotations

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.param_groups import encoder_depth
from pal_lightning.testing import tiny_family_config
from pal_lightning.testing.batches import tiny_module


def _expected_lr(name: str, lr: float, adapter_lr: float, head_lr: float, decay: float, layers: int) -> float:
    """The rate a parameter should get, from its name alone."""
    if name.startswith("encoder.backbone."):
        parts = name.split(".")
        if "layer" in parts:
            layer = int(parts[parts.index("layer") + 1])
            return lr * decay ** (layers - layer)
        assert ".embeddings." in name, name  # the tiny encoder has no pooler
        return lr * decay ** (layers + 1)
    if name.startswith("encoder.adapters."):
        return adapter_lr
    assert name.startswith("heads."), name
    return head_lr


@pytest.mark.parametrize("decay", [1.0, 0.5])
def test_groups_hold_each_parameter_once_with_its_rate(decay: float) -> None:
    module = tiny_module(
        optim={"lr": 1e-4, "adapter_lr": 2e-3, "head_lr": 1e-3, "layer_lr_decay": decay, "weight_decay": 0.05}
    )
    layers = module.encoder.num_layers
    assert layers == 2
    names = {id(p): n for n, p in module.named_parameters()}
    seen: list[str] = []
    for group in module.parameter_groups():
        for p in group["params"]:
            name = names[id(p)]
            seen.append(name)
            assert group["lr"] == pytest.approx(_expected_lr(name, 1e-4, 2e-3, 1e-3, decay, layers)), name
            no_decay = name.endswith("bias") or "LayerNorm" in name
            assert group["weight_decay"] == (0.0 if no_decay else 0.05), name
            assert group["name"].endswith("_no_decay") == no_decay, name
    assert sorted(seen) == sorted(n for n, _ in module.named_parameters())  # each exactly once
    group_names = [g["name"] for g in module.parameter_groups()]
    assert {"adapters", "adapters_no_decay", "heads", "heads_no_decay"} <= set(group_names)
    if decay == 1.0:
        assert group_names[:2] == ["pretrained", "pretrained_no_decay"]
    else:  # one group per depth: top layer (1), layer 0 (2), embeddings (3); x decay / no decay
        assert group_names[:6] == [
            "encoder_depth1",
            "encoder_depth1_no_decay",
            "encoder_depth2",
            "encoder_depth2_no_decay",
            "encoder_depth3",
            "encoder_depth3_no_decay",
        ]


def test_default_gives_the_adapters_their_own_groups_at_head_lr() -> None:
    """adapter_lr None: the adapters keep groups of their own, at head_lr."""
    module = tiny_module(optim={"lr": 1e-4, "head_lr": 1e-3})
    groups = module.parameter_groups()
    assert [g["name"] for g in groups] == [
        "pretrained",
        "pretrained_no_decay",
        "adapters",
        "heads",
        "adapters_no_decay",
        "heads_no_decay",
    ]
    assert [g["lr"] for g in groups] == [1e-4, 1e-4, 1e-3, 1e-3, 1e-3, 1e-3]
    # the parameters in the order they had when adapters and heads shared one group (decay, then no
    # decay; adapters before heads within each): sums over every gradient add in the same order
    names = {id(p): n for n, p in module.named_parameters()}
    new = [names[id(p)] for g in groups[2:] for p in g["params"]]
    decays = [not (n.endswith("bias") or "LayerNorm" in n) for n in new]
    assert decays == sorted(decays, reverse=True)
    for flag in (True, False):
        part = [n for n, d in zip(new, decays, strict=True) if d == flag]
        assert part == [n for n in names.values() if n in part]


def test_decay_with_frozen_encoder_and_without_adapters() -> None:
    frozen = tiny_module(optim={"freeze_encoder": True, "layer_lr_decay": 0.5, "adapter_lr": 5e-3})
    assert {g["name"] for g in frozen.parameter_groups()} == {
        "adapters",
        "adapters_no_decay",
        "heads",
        "heads_no_decay",
    }
    shared = tiny_module(adapter="none", optim={"adapter_lr": 5e-3})
    assert not any(g["name"].startswith("adapters") for g in shared.parameter_groups())


def test_encoder_depth_formula() -> None:
    assert encoder_depth("encoder.backbone.encoder.layer.11.output.dense.weight", 12) == 1
    assert encoder_depth("encoder.backbone.encoder.layer.0.attention.self.query.bias", 12) == 12
    assert encoder_depth("encoder.backbone.embeddings.word_embeddings.weight", 12) == 13
    assert encoder_depth("encoder.backbone.pooler.dense.weight", 12) == 0


@pytest.mark.parametrize("decay", [0.0, 1.5])
def test_bad_decay_is_refused(decay: float) -> None:
    with pytest.raises(PalUserError, match="layer_lr_decay must lie in"):
        tiny_module(optim={"layer_lr_decay": decay})


def test_resume_needs_the_same_group_layout() -> None:
    """adapter_lr and layer_lr_decay shape the optimizer's groups: a resumed fit must keep them."""
    module = tiny_module(optim={"layer_lr_decay": 0.8, "adapter_lr": 2e-3})
    saved = dict(module.hparams)
    assert module.checkpoint_differences(saved, resuming=True) == []
    other = tiny_module()  # defaults: no decay, adapters in the 'new' groups
    found = other.checkpoint_differences(saved, resuming=True)
    assert any("layer_lr_decay" in d for d in found) and any("adapter_lr" in d for d in found)
    assert other.checkpoint_differences(saved, resuming=False) == []  # weights alone fit


@pytest.mark.parametrize("model_type", ["distilbert", "modernbert"])
def test_layer_decay_reaches_every_familys_layers(model_type: str) -> None:
    """docs/experiments.md: layer l of L trains at lr * decay^(L - l) in every family, whatever the path
    of its layers (transformer.layer, layers)."""
    module = tiny_module(
        encoder_config=tiny_family_config(model_type), optim={"lr": 1e-4, "layer_lr_decay": 0.5}
    )
    layers = module.encoder.num_layers
    path = module.encoder.family.layers
    names = {id(p): n for n, p in module.named_parameters()}
    rates = {names[id(p)]: g["lr"] for g in module.parameter_groups() for p in g["params"]}
    prefix = f"encoder.backbone.{path}."
    in_layers = [n for n in rates if n.startswith(prefix)]
    assert in_layers
    for name in in_layers:
        layer = int(name.removeprefix(prefix).split(".")[0])
        assert rates[name] == pytest.approx(1e-4 * 0.5 ** (layers - layer)), name
