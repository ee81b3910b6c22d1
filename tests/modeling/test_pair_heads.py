"""The literature's pair heads (pal_lightning.modeling.pair_heads): values by hand, shapes, gradients, the
choice per task from the module's ``heads`` option with its bad inputs, and a short CLI fit of the shipped
configs/pair_heads.yaml's choice on a tiny model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.version import __version__
from pal_lightning.modeling.heads import CosineSimilarityHead, SiameseClassificationHead, predict
from pal_lightning.modeling.pair_heads import (
    ConcatPairHead,
    RescaledCosineHead,
    SumPairHead,
    build_task_head,
    build_task_heads,
)
from pal_lightning.module.checkpoint_check import VERSION_KEY
from pal_lightning.tasks.specs import get_task

H = 4
SIAMESE = "siamese"


def test_rescaled_cosine_by_hand() -> None:
    # cos((3,4),(4,3)) = 24/25; cos((1,0),(0,1)) = 0; cos((1,0),(-2,0)) = -1; cos((1,1),(1,1)) = 1
    u = torch.tensor([[3.0, 4.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    v = torch.tensor([[4.0, 3.0], [0.0, 1.0], [-2.0, 0.0], [1.0, 1.0]])
    score = RescaledCosineHead()(u, v)
    expected = [(24 / 25 + 1) / 2, 0.5, 0.0, 1.0]
    assert score.shape == (4,)
    assert score.tolist() == pytest.approx(expected, abs=1e-6)
    # on STS's 0..5 scale: 2.5 (cos + 1), never clamped; the default cosine head maps cos = -1 to 0 too,
    # but cos = 0 to 0 where the rescaled one says 2.5
    sts = get_task("sts")
    assert predict(sts, score).tolist() == pytest.approx([2.5 * (24 / 25 + 1), 2.5, 0.0, 5.0], abs=1e-5)
    assert predict(sts, CosineSimilarityHead()(u, v)).tolist() == pytest.approx(
        [4.8, 0.0, 0.0, 5.0], abs=1e-5
    )


def test_concat_and_sum_heads_by_hand() -> None:
    u, v = torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[10.0, 20.0, 30.0, 40.0]])
    concat = ConcatPairHead(H, 1, dropout=0.0, squeeze=True)
    with torch.no_grad():
        concat.linear.weight.copy_(torch.arange(8.0).unsqueeze(0))  # 0..7 on [u, v]
        concat.linear.bias.fill_(0.5)
    # 0*1 + 1*2 + 2*3 + 3*4 + 4*10 + 5*20 + 6*30 + 7*40 + 0.5
    assert concat(u, v).item() == pytest.approx(20 + 600 + 0.5)
    assert concat(v, u).item() == pytest.approx(20 + 60 + 120 + 4 + 10 + 18 + 28 + 0.5)  # order matters
    summed = SumPairHead(H, 2, dropout=0.0)
    with torch.no_grad():
        summed.linear.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]))
        summed.linear.bias.zero_()
    assert summed(u, v).tolist() == [[11.0, 44.0]]
    assert torch.equal(summed(u, v), summed(v, u))  # symmetric
    for head in (concat, summed, RescaledCosineHead()):
        with pytest.raises(ValueError, match="needs both sentence vectors"):
            head(u)


@pytest.mark.parametrize(
    ("task", "head", "cls", "shape", "weight"),
    [
        ("sts", "cosine_rescaled", RescaledCosineHead, (3,), None),
        ("qqp", "concat", ConcatPairHead, (3, 2), (2, 2 * H)),
        ("sts", "concat", ConcatPairHead, (3,), (1, 2 * H)),
        ("qqp", "sum", SumPairHead, (3, 2), (2, H)),
        ("sts", "sum", SumPairHead, (3,), (1, H)),
        ("qqp", "default", SiameseClassificationHead, (3, 2), (2, 4 * H)),
        ("sts", "default", CosineSimilarityHead, (3,), None),
    ],
)
def test_shapes_and_gradients(task: str, head: str, cls: type, shape: tuple, weight: tuple | None) -> None:
    module = build_task_head(get_task(task), H, SIAMESE, dropout=0.0, head=head)
    assert type(module) is cls and module.siamese
    u = torch.randn(3, H, requires_grad=True)
    v = torch.randn(3, H, requires_grad=True)
    out = module(u, v)
    assert out.shape == shape
    out.float().pow(2).sum().backward()
    assert u.grad is not None and v.grad is not None and u.grad.abs().sum() > 0 and v.grad.abs().sum() > 0
    params = list(module.parameters())
    if weight is None:
        assert params == []
    else:
        assert module.linear.weight.shape == weight
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)


@pytest.mark.parametrize(
    ("heads", "encoding", "message"),
    [
        ({"sts": "cosine"}, SIAMESE, "Unknown head 'cosine' for task 'sts'"),
        ({"sst": "concat"}, SIAMESE, "Head 'concat' compares two sentences but task 'sst' has one"),
        ({"qqp": "cosine_rescaled"}, SIAMESE, "task 'qqp' is a classification task"),
        ({"qqp": "sum"}, {"sts": SIAMESE}, "its pair_encoding is 'cross'; set pair_encoding siamese"),
        ({"mnli": "sum"}, SIAMESE, "heads names task(s) ['mnli'] that the model does not have"),
    ],
)
def test_bad_choices_are_refused(heads: dict, encoding: object, message: str) -> None:
    specs = [get_task(t) for t in ("sst", "qqp", "sts")]
    with pytest.raises(PalUserError) as info:
        build_task_heads(specs, H, encoding, 0.0, heads)  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)


def test_tasks_not_named_keep_their_default_heads() -> None:
    specs = [get_task(t) for t in ("sst", "qqp", "sts")]
    heads = build_task_heads(specs, H, SIAMESE, 0.1, {"sts": "cosine_rescaled"})
    assert [type(h).__name__ for h in heads.values()] == [
        "LinearHead",
        "SiameseClassificationHead",
        "RescaledCosineHead",
    ]


def test_module_builds_the_chosen_heads_and_a_checkpoint_remembers_them() -> None:
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    kw = dict(encoder_config=TINY_BERT, adapter={"num_heads": 2}, pair_encoding=SIAMESE)
    module = MultiTaskModule(heads={"sts": "cosine_rescaled", "qqp": "sum"}, **kw)
    assert isinstance(module.heads["sts"], RescaledCosineHead)
    assert isinstance(module.heads["qqp"], SumPairHead)
    saved = {
        VERSION_KEY: __version__,
        "hyper_parameters": dict(module.hparams),
        "state_dict": module.state_dict(),
    }
    with pytest.raises(PalUserError, match="heads is .* in the checkpoint but None here"):
        MultiTaskModule(**kw).on_load_checkpoint(saved)


def test_pair_heads_fit_from_the_cli(tmp_path: Path) -> None:
    """4 steps of a tiny model with the shipped configs/pair_heads.yaml's choice of heads: the fit runs,
    and its checkpoint holds the chosen heads' weights ([u, v] for Quora, none for STS), all finite."""
    import yaml

    from pal_lightning.cli.main import main
    from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    shipped = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "configs" / "pair_heads.yaml").read_text()
    )
    tree = yaml.safe_load(config.read_text())
    tree["model"]["init_args"].update(heads=shipped["model.init_args.heads"], pair_encoding=SIAMESE)
    config.write_text(yaml.safe_dump(tree))
    assert main(["fit", "--config", str(config)]) == 0
    (last,) = (tmp_path / "runs" / "version_0" / "checkpoints").glob("last*.ckpt")
    state = torch.load(last, map_location="cpu", weights_only=True)["state_dict"]
    width = tree["model"]["init_args"]["encoder_config"]["hidden_size"]
    assert state["heads.qqp.linear.weight"].shape == (2, 2 * width)
    assert not any(k.startswith("heads.sts.") for k in state)
    assert all(math.isfinite(float(v.float().abs().sum())) for v in state.values() if v.is_floating_point())
