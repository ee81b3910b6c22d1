"""Saving and loading only the task-specific weights (adapters and heads)."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder, load_task_weights, save_task_weights
from pal_lightning.modeling.task_io.weights import read_task_weights_metadata
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY


class _Model(nn.Module):
    """The shape of the LightningModule: ``encoder`` plus ``heads`` keyed by task."""

    def __init__(self, tasks=("a", "b"), heads=True, **pal) -> None:
        super().__init__()
        pal = {"size": 8, "num_heads": 2, "init": "random", **pal}
        self.encoder = MultiTaskEncoder.from_config(TINY, list(tasks), **pal)
        if heads:
            self.heads = nn.ModuleDict({t: nn.Linear(32, 3) for t in tasks})


def _task_tensors(model: _Model, task: str) -> dict[str, torch.Tensor]:
    out = {n: p.detach().clone() for n, p in model.encoder.task_parameters(task)}
    if hasattr(model, "heads"):
        out.update({f"heads.{task}.{n}": p.detach().clone() for n, p in model.heads[task].named_parameters()})
    return out


def test_round_trip_restores_adapters_heads_and_outputs(tmp_path, batch):
    torch.manual_seed(0)
    source = _Model()
    path = save_task_weights(source, tmp_path / "tasks.safetensors")
    meta = read_task_weights_metadata(path)
    assert meta["tasks"] == ["a", "b"] and meta["heads"] == ["a", "b"] and meta["hidden_size"] == 32

    torch.manual_seed(1)
    target = _Model()
    target.encoder.backbone.load_state_dict(
        source.encoder.backbone.state_dict()
    )  # the shared encoder is kept apart
    assert not torch.equal(target.heads["a"].weight, source.heads["a"].weight)
    assert load_task_weights(target, path) == ["a", "b"]
    for task in ("a", "b"):
        mine, theirs = _task_tensors(target, task), _task_tensors(source, task)
        assert mine.keys() == theirs.keys()
        for key in mine:
            torch.testing.assert_close(mine[key], theirs[key], atol=0, rtol=0)
    source.eval(), target.eval()
    with torch.no_grad():
        torch.testing.assert_close(target.encoder(**batch, task="b"), source.encoder(**batch, task="b"))


def test_a_file_holds_only_its_tasks_weights_and_loading_a_subset_leaves_other_tasks_alone(tmp_path):
    source, target = _Model(), _Model()
    with safe_open(str(save_task_weights(source, tmp_path / "a.safetensors", tasks=["a"])), "pt") as f:
        keys = set(f.keys())
    assert keys and all(k.startswith(("adapters.a.", "heads.a.")) for k in keys)
    assert "heads.a.weight" in keys and "adapters.a.down.weight" in keys
    path = save_task_weights(source, tmp_path / "both.safetensors")
    before_b = _task_tensors(target, "b")
    assert load_task_weights(target, path, tasks="a") == ["a"]
    torch.testing.assert_close(target.heads["a"].weight, source.heads["a"].weight)
    for key, value in _task_tensors(target, "b").items():
        assert torch.equal(value, before_b[key])


@pytest.mark.parametrize(
    ("other", "fragment"),
    [
        ({"size": 12}, "adapter"),
        ({"adapter": "low_rank"}, "adapter"),
        ({"placement": "top", "num_layers": 1}, "adapter"),
    ],
)
def test_mismatched_adapter_config_is_refused(tmp_path, other, fragment):
    path = save_task_weights(_Model(), tmp_path / "w.safetensors")
    with pytest.raises(PalUserError, match=fragment):
        load_task_weights(_Model(**other), path)


def test_mismatched_tasks_and_heads(tmp_path):
    path = save_task_weights(_Model(heads=False), tmp_path / "w.safetensors")
    with pytest.raises(PalUserError, match="not in this model"):
        load_task_weights(_Model(tasks=("a", "c")), path, tasks=["b"])
    with pytest.raises(PalUserError, match="not in"):
        load_task_weights(_Model(), path, tasks=["zzz"])
    with_heads = _Model()
    with pytest.raises(PalUserError, match="missing"):  # the model has heads, the file has none
        load_task_weights(with_heads, path)
    assert load_task_weights(with_heads, path, strict=False) == ["a", "b"]
    with pytest.raises(PalUserError, match="not in this model"):
        save_task_weights(with_heads, tmp_path / "x.safetensors", tasks=["c"])


def test_refusals_name_the_problem(tmp_path):
    model = _Model()
    path = save_task_weights(model, tmp_path / "w.safetensors")
    with pytest.raises(PalUserError, match="already exists"):
        save_task_weights(model, path)
    other = _Model()
    other.heads["a"] = nn.Linear(32, 5)
    with pytest.raises(PalUserError, match="heads.a.weight"):
        load_task_weights(other, path)
    with pytest.raises(PalUserError, match="does not exist"):
        load_task_weights(model, tmp_path / "nope.safetensors")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(1)}, str(foreign))
    with pytest.raises(PalUserError, match="not a pal-lightning"):
        load_task_weights(model, foreign)
    with pytest.raises(PalUserError, match="nothing to save"):
        save_task_weights(
            MultiTaskEncoder.from_config(TINY, ["a"], adapter="none"), tmp_path / "n.safetensors"
        )
    with pytest.raises(PalUserError, match="MultiTaskEncoder"):
        save_task_weights(nn.Linear(2, 2), tmp_path / "l.safetensors")
    save_task_weights(model, path, tasks=["b"], overwrite=True)
    assert read_task_weights_metadata(path)["tasks"] == ["b"]
