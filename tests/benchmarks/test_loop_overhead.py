"""benchmarks/loop_overhead.py: its arithmetic by hand, and every side end to end on a tiny encoder (--quick)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from .conftest import load_benchmark

lo = load_benchmark("loop_overhead")


def _run(side: str, repeat: int, s: float) -> dict:
    return {"side": side, "repeat": repeat, "warmup": repeat == 0, "s_per_example": s}


def test_intervals_ratios_and_summary_by_hand() -> None:
    assert lo.step_intervals(10.0, [10.5, 11.25, 12.0]) == pytest.approx([0.5, 0.75, 0.75])
    runs = [
        _run("trainer", 0, 9.0),  # warmups: left out
        _run("pal", 0, 1.0),
        _run("trainer", 1, 2.0),
        _run("pal", 1, 2.2),
        _run("trainer", 2, 4.0),
        _run("pal", 2, 4.8),
        _run("trainer", 3, 1.0),
        _run("pal", 3, 1.0),
    ]
    assert lo.paired_ratios(runs, "pal", "trainer") == pytest.approx([1.1, 1.2, 1.0])
    for r in runs:
        r.update(median_step_s=r["s_per_example"] / 2, call_s=3 * r["s_per_example"], examples=3)
    summary = lo.summarize(runs, ["trainer", "pal"], target=1.10)
    assert summary["sides"]["trainer"]["s_per_example"] == {"median": 2.0, "min": 1.0, "max": 4.0, "n": 3}
    assert summary["sides"]["pal"]["median_step_s"]["median"] == pytest.approx(1.1)
    ratio = summary["ratios"]["pal/trainer"]
    assert (
        ratio["median"] == pytest.approx(1.1) and ratio["min"] == 1.0 and ratio["max"] == pytest.approx(1.2)
    )
    assert ratio["met"] is True and "pal/trainer_pal_net" not in summary["ratios"]
    assert lo.summarize(runs, ["trainer", "pal"], target=1.05)["ratios"]["pal/trainer"]["met"] is False


def test_fingerprint_sees_one_changed_bit_and_skips_the_pooler() -> None:
    a = {"x.weight": torch.ones(3), "pooler.dense.weight": torch.zeros(2)}
    b = {"x.weight": torch.ones(3), "pooler.dense.weight": torch.ones(2)}
    assert lo.fingerprint(iter(a.items())) == lo.fingerprint(iter(b.items()))
    c = {"x.weight": torch.tensor([1.0, 1.0, float(torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)))])}
    assert lo.fingerprint(iter(a.items())) != lo.fingerprint(iter(c.items()))


def test_quick_trains_every_side_the_same_steps_from_the_same_weights(tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel

    from pal_lightning.testing import TINY_BERT

    out = tmp_path / "lo.json"
    keep: dict = {}
    assert lo.main(["--quick", "--steps", "3", "--json", str(out)], keep=keep) == 0
    payload = json.loads(out.read_text())
    assert payload["checks"] == {"same_initial_encoder": True, "steps_as_asked": True, "same_batches": True}
    assert payload["machine"]["torch_threads"] == 1 and payload["machine"]["cpu_count"] >= 1
    assert payload["settings"]["steps"] == 3 and payload["settings"]["hf_optim"] == "adamw_torch_fused"
    assert len(payload["runs"]) == 2 * len(lo.SIDES)
    for run in payload["runs"]:
        assert len(run["step_s"]) == 3 and run["loop_s"] >= sum(run["step_s"]) > 0
        assert run["s_per_example"] == pytest.approx(run["loop_s"] / (3 * 4))
        assert run["optimizer"]["fused"] is True  # both sides on torch's fused AdamW kernel
    assert set(payload["summary"]["ratios"]) == {"pal/trainer", "pal/trainer_pal_net"}
    # from the optimizers themselves: every parameter stepped exactly 3 times on every side
    for side in lo.SIDES:
        optimizer = getattr(keep[side]["optimizer"], "optimizer", keep[side]["optimizer"])
        steps = {int(state["step"]) for state in optimizer.state.values()}
        trainable = sum(p.requires_grad for g in optimizer.param_groups for p in g["params"])
        assert steps == {3} and len(optimizer.state) == trainable and keep[side]["global_step"] == 3
    # the initial encoder weights: bit-identical on every side, and those the tiny encoder folder was
    # saved from (peers.quick_encoder: seed 0, a random TINY_BERT BertModel)
    torch.manual_seed(0)
    saved = dict(BertModel(BertConfig(**TINY_BERT)).named_parameters())
    pal = keep["pal"]["initial"]
    assert set(pal) == {n for n in saved if not n.startswith("pooler.")}
    for side in lo.SIDES:
        initial = keep[side]["initial"]
        assert all(torch.equal(initial[n], saved[n]) for n in pal), side
    # pal-lightning trained the batches it planned, in order (its sampler's indices, step by step)
    assert len(keep["pal"]["indices"]) == 3 and all(len(i) == 4 for i in keep["pal"]["indices"])
