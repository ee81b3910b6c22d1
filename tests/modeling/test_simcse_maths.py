"""SimCSE maths: the InfoNCE loss against a hand computation, the cross-pair split, the config checks."""

from __future__ import annotations

import math

import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.simcse import (
    SimCSEConfig,
    as_simcse_config,
    concat_inputs,
    gather_rows,
    not_negatives,
    simcse_loss,
    split_cross_pairs,
)
from pal_lightning.tasks.catalogue import BUILTIN_TASKS


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _hand_info_nce(z1: list[list[float]], cands: list[list[float]], targets: list[int], tau: float) -> float:
    """-mean_i log softmax_j(cos(z1_i, c_j) / tau)[target_i], in plain Python."""
    total = 0.0
    for i, anchor in enumerate(z1):
        logits = [_cos(anchor, c) / tau for c in cands]
        total += -(logits[targets[i]] - math.log(sum(math.exp(s) for s in logits)))
    return total / len(z1)


Z1 = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]
Z2 = [[0.8, 0.6], [0.0, 1.0], [-1.0, 1.0]]


def test_unsupervised_loss_equals_hand_computation() -> None:
    expected = _hand_info_nce(Z1, Z2, [0, 1, 2], 0.05)
    got = simcse_loss(torch.tensor(Z1), torch.tensor(Z2), temperature=0.05)
    assert float(got) == pytest.approx(expected, rel=1e-5)
    # one anchor worked out fully by hand at tau = 1: cos(z1_0, .) = 0.8, 0, -1/sqrt(2)
    row0 = -(0.8 - math.log(math.exp(0.8) + 1.0 + math.exp(-1 / math.sqrt(2))))
    assert _hand_info_nce(Z1[:1], Z2, [0], 1.0) == pytest.approx(row0)


def test_hard_negatives_and_targets_equal_hand_computation() -> None:
    hard = [[1.0, -1.0], [0.5, 0.5]]
    expected = _hand_info_nce(Z1[:2], Z2 + hard, [1, 2], 0.1)
    got = simcse_loss(
        torch.tensor(Z1[:2]),
        torch.tensor(Z2),
        temperature=0.1,
        hard_negatives=torch.tensor(hard),
        targets=torch.tensor([1, 2]),
    )
    assert float(got) == pytest.approx(expected, rel=1e-5)
    # a hard negative can only add to the denominator: the loss rises
    plain = simcse_loss(torch.tensor(Z1[:2]), torch.tensor(Z2), 0.1, targets=torch.tensor([1, 2]))
    assert float(got) > float(plain)


def test_ignored_candidates_leave_the_denominator() -> None:
    ignore = torch.tensor([[False, True, False], [False, False, False], [True, True, False]])
    skip = [[1], [], [0, 1]]
    expected = 0.0
    for i, anchor in enumerate(Z1):
        kept = [j for j in range(3) if j not in skip[i]]
        expected += _hand_info_nce([anchor], [Z2[j] for j in kept], [kept.index(i)], 0.2)
    got = simcse_loss(torch.tensor(Z1), torch.tensor(Z2), 0.2, ignore=ignore)
    assert float(got) == pytest.approx(expected / 3, rel=1e-5)


def test_not_negatives_marks_partners_and_duplicates() -> None:
    # pairs (a1, b1), (a2, b2) with b2 the same tokens as a1 (padding differs: still the same sentence)
    ids = torch.tensor([[1, 5, 2, 0], [1, 6, 7, 2], [1, 8, 2, 0], [1, 5, 2, 9]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]])
    got = not_negatives({"input_ids": ids, "attention_mask": mask})
    expected = torch.zeros(4, 4, dtype=torch.bool)
    for i, j in [(0, 2), (2, 0), (1, 3), (3, 1), (0, 3), (3, 0)]:
        expected[i, j] = True
    assert torch.equal(got, expected)


def test_loss_rejects_bad_temperature_and_shapes() -> None:
    with pytest.raises(ValueError, match="temperature"):
        simcse_loss(torch.ones(2, 3), torch.ones(2, 3), temperature=0.0)
    with pytest.raises(ValueError, match="z1"):
        simcse_loss(torch.ones(2, 3), torch.ones(2, 4))


def test_gather_rows_without_process_group_is_identity() -> None:
    z = torch.randn(3, 4, requires_grad=True)
    rows, offset = gather_rows(z)
    assert rows is z and offset == 0


def test_split_cross_pairs_recovers_both_sentences() -> None:
    CLS, SEP = 101, 102
    # row 0: [CLS] 5 6 [SEP] 7 [SEP]; row 1: [CLS] 8 [SEP] 9 10 11 [SEP] (no padding); types 0 then 1
    ids = torch.tensor([[CLS, 5, 6, SEP, 7, SEP, 0], [CLS, 8, SEP, 9, 10, 11, SEP]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]])
    a, b = split_cross_pairs({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    assert a["input_ids"].tolist() == [[CLS, 5, 6, SEP], [CLS, 8, SEP, 0]]
    assert a["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert b["input_ids"].tolist() == [[CLS, 7, SEP, 0, 0], [CLS, 9, 10, 11, SEP]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert int(a["token_type_ids"].abs().sum() + b["token_type_ids"].abs().sum()) == 0
    both = concat_inputs([a, b])
    assert both["input_ids"].shape == (4, 5) and both["input_ids"][1].tolist() == [CLS, 8, SEP, 0, 0]
    with pytest.raises(PalUserError, match="second sentence"):
        split_cross_pairs({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})


SPECS = {n: BUILTIN_TASKS[n] for n in ("sst", "qqp", "sts")}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SimCSEConfig(tasks=["snli"]), r"simcse.tasks names task\(s\) \['snli'\]"),
        (SimCSEConfig(tasks=[]), "no tasks to take sentences from"),
        (SimCSEConfig(mode="sup", tasks=["sts"]), "needs pair classification tasks"),
        (SimCSEConfig(mode="sup", tasks=["qqp"], positive_label=3), "positive_label 3 is not a label"),
        (SimCSEConfig(temperature=0.0), "temperature must be > 0"),
        (SimCSEConfig(weight=-1.0), "weight must be >= 0"),
        (SimCSEConfig(every_k_steps=0), "every_k_steps must be >= 1"),
        (SimCSEConfig(mode="supervised"), "mode 'supervised' is unknown"),  # type: ignore[arg-type]
    ],
)
def test_config_check_one_line_errors(config: SimCSEConfig, message: str) -> None:
    with pytest.raises(PalUserError, match=message) as info:
        config.check(SPECS)
    assert "\n" not in str(info.value)


def test_config_defaults_and_round_trip() -> None:
    assert SimCSEConfig().active_tasks(SPECS) == ("sst", "qqp", "sts")
    assert SimCSEConfig(mode="sup").active_tasks(SPECS) == ("qqp",)  # the only pair classification task
    config = SimCSEConfig(weight=0.2, tasks=["sst"])
    assert as_simcse_config({"weight": 0.2, "tasks": ["sst"]}) == config
    assert as_simcse_config(None) is None and as_simcse_config(config) is config
    with pytest.raises(PalUserError, match="SimCSEConfig"):
        as_simcse_config({"wieght": 0.2})


def test_loss_is_computed_in_float32_under_autocast() -> None:
    z1 = torch.tensor(Z1, dtype=torch.bfloat16)
    z2 = torch.tensor(Z2, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = simcse_loss(z1, z2, temperature=0.05)
    assert got.dtype == torch.float32
    expected = _hand_info_nce(z1.float().tolist(), z2.float().tolist(), [0, 1, 2], 0.05)
    assert float(got) == pytest.approx(expected, rel=1e-5)
