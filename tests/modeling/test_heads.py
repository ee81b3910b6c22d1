"""Pooling, heads, losses and predictions (pal_lightning.modeling.heads)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import (
    CosineSimilarityHead,
    LinearHead,
    SiameseClassificationHead,
    build_head,
    pool,
    predict,
    task_loss,
)
from pal_lightning.tasks.specs import TaskSpec, get_task

H = 16
B = 5


def _pair_spec(**kw: object) -> TaskSpec:
    return TaskSpec(name="pair", kind="pair_classification", text_columns=("a", "b"), **kw)  # type: ignore[arg-type]


def test_pool_cls_takes_the_first_token_and_mean_ignores_padding() -> None:
    torch.manual_seed(0)
    hidden = torch.randn(2, 6, H)
    assert torch.equal(pool(hidden, torch.ones(2, 6), "cls"), hidden[:, 0])
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    pooled = pool(hidden, mask, "mean")
    assert torch.allclose(pooled[0], hidden[0, :3].mean(0), atol=1e-6)
    assert torch.allclose(pooled[1], hidden[1].mean(0), atol=1e-6)
    # changing the padded positions must not change the pooled vector
    noisy = hidden.clone()
    noisy[0, 3:] = 1e3
    assert torch.allclose(pool(noisy, mask, "mean"), pooled, atol=1e-5)
    with pytest.raises(PalUserError, match="pooling"):
        pool(torch.zeros(1, 2, H), None, "max")


@pytest.mark.parametrize("encoding", ["cross", "siamese"])
@pytest.mark.parametrize("mode", ["cls", "mean"])
@pytest.mark.parametrize("task", ["sst", "qqp", "sts", "bce_pair"])
def test_head_output_shapes(task: str, encoding: str, mode: str) -> None:
    spec = _pair_spec(loss="bce") if task == "bce_pair" else get_task(task)
    head = build_head(spec, H, encoding, dropout=0.1)
    mask = torch.ones(B, 4)
    mask[0, 2:] = 0
    u = pool(torch.randn(B, 4, H), mask, mode)
    v = pool(torch.randn(B, 4, H), mask, mode)
    out = head(u, v) if head.siamese else head(u)
    expected = {"sst": (B, 5), "qqp": (B, 2), "sts": (B,), "bce_pair": (B, 1)}[task]
    assert out.shape == expected
    siamese_pair = encoding == "siamese" and spec.is_pair
    assert head.siamese == siamese_pair
    kinds = {
        (False, False): LinearHead,
        (True, False): SiameseClassificationHead,
        (True, True): CosineSimilarityHead,
        (False, True): LinearHead,
    }
    assert isinstance(head, kinds[(siamese_pair, spec.is_regression)])
    pred = predict(spec, out)
    assert pred.shape == (B,)
    if spec.is_regression:
        assert pred.dtype == torch.float32 and bool(((pred >= 0) & (pred <= 5)).all())
    else:
        assert pred.dtype == torch.long and bool(((pred >= 0) & (pred < spec.num_labels)).all())


def test_per_task_pair_encoding_mapping() -> None:
    mapping = {"sts": "siamese", "default": "cross"}
    assert isinstance(build_head(get_task("sts"), H, mapping, 0.0), CosineSimilarityHead)
    assert isinstance(build_head(get_task("qqp"), H, mapping, 0.0), LinearHead)


def test_siamese_classification_features() -> None:
    head = SiameseClassificationHead(H, 3, dropout=0.0)
    u, v = torch.randn(B, H), torch.randn(B, H)
    expected = head.linear(torch.cat([u, v, (u - v).abs(), u * v], -1))
    assert torch.allclose(head(u, v), expected)
    assert head.linear.in_features == 4 * H


def test_cosine_head_clamped_and_bce_thresholded_predictions() -> None:
    sts = get_task("sts")
    u = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    v = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]])
    score = CosineSimilarityHead()(u, v)
    assert torch.allclose(score, torch.tensor([1.0, -1.0, 1 / math.sqrt(2)]), atol=1e-6)
    # -1 is clamped to 0 -> the low end of 0..5
    assert torch.allclose(predict(sts, score), torch.tensor([5.0, 0.0, 5 / math.sqrt(2)]), atol=1e-5)
    assert predict(_pair_spec(loss="bce"), torch.tensor([[-0.1], [0.2]])).tolist() == [0, 1]


def test_losses() -> None:
    logits = torch.randn(B, 5)
    labels = torch.tensor([0, 1, 2, 3, 4])
    assert torch.allclose(task_loss(get_task("sst"), logits, labels), F.cross_entropy(logits, labels))

    # bce with one logit
    bce = _pair_spec(loss="bce")
    one = torch.randn(B, 1)
    y = torch.tensor([0, 1, 1, 0, 1])
    ref = F.binary_cross_entropy_with_logits(one.squeeze(1), y.float())
    assert torch.allclose(task_loss(bce, one, y), ref)
    # bce on two logits uses z1 - z0, which equals two-class cross-entropy
    two = torch.randn(B, 2)
    assert torch.allclose(task_loss(bce, two, y), F.cross_entropy(two, y), atol=1e-6)

    # mse compares with the label scaled to 0..1
    sts = get_task("sts")
    score = torch.tensor([0.0, 0.5, 1.0])
    gold = torch.tensor([0.0, 5.0, 2.5])
    expected = ((score - gold / 5.0) ** 2).mean()
    assert torch.allclose(task_loss(sts, score, gold), expected)


def test_loss_kind_mismatch_is_a_user_error() -> None:
    with pytest.raises(PalUserError, match="regression"):
        task_loss(get_task("sts").replace(loss="cross_entropy"), torch.zeros(2), torch.zeros(2))
    with pytest.raises(PalUserError, match="classification"):
        build_head(get_task("sst").replace(loss="mse"), H, "cross", 0.1)
