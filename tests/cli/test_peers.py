"""benchmarks/peers.py: its pieces by hand, and every system end to end on a tiny encoder (--quick)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from .conftest import TINY_BERT, load_benchmark

peers = load_benchmark("peers")


def test_budget_subset_is_seeded_and_the_same_file_for_every_system(tmp_path: Path, data_dir: Path) -> None:
    rows = peers.budget_rows(24, 10, seed=42)
    assert rows == sorted(set(rows)) and len(rows) == 10 and rows == peers.budget_rows(24, 10, seed=42)
    assert rows != peers.budget_rows(24, 10, seed=43)
    assert peers.budget_rows(5, 10, seed=1) == [0, 1, 2, 3, 4]  # a small file is kept whole
    target = peers.write_budget_data(data_dir, tmp_path / "seed42", examples=10, seed=42, qqp_dev_limit=3)
    source = (data_dir / "sts-train.csv").read_text().splitlines()
    kept = (target / "sts-train.csv").read_text().splitlines()
    assert kept == [source[0], *(source[1 + i] for i in rows)]
    assert len((target / "quora-dev.csv").read_text().splitlines()) == 1 + 3
    assert (target / "ids-sst-dev.csv").is_symlink() and not (target / "sts-train.csv").is_symlink()
    cut = peers.write_budget_data(
        data_dir, tmp_path / "cut", examples=10, seed=42, qqp_dev_limit=0, dev_limit=4
    )
    source_dev = (data_dir / "ids-sst-dev.csv").read_text().splitlines()
    assert (cut / "ids-sst-dev.csv").read_text().splitlines() == source_dev[:5]
    assert (data_dir / "ids-sst-dev.csv").read_text().splitlines() == source_dev  # the source is untouched


def test_one_scorer_agrees_with_numpy() -> None:
    rng = np.random.default_rng(0)
    labels, predictions = rng.integers(0, 5, 50), rng.integers(0, 5, 50)
    assert peers.score_task("sst", predictions, labels) == pytest.approx(np.mean(predictions == labels))
    y, p = rng.uniform(0, 5, 40), rng.normal(size=40)
    assert peers.score_task("sts", p, y) == pytest.approx(np.corrcoef(p, y)[0, 1], abs=1e-5)
    row = {"sst_acc": 0.5, "qqp_acc": 0.8, "sts_pearson": 0.6}
    assert peers.overall(row) == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    assert peers.overall({**row, "qqp_acc": None}) is None


def _row(system: str, scale: float, seed: int, sst: float, qqp: float, sts: float) -> dict:
    row = dict.fromkeys(peers.COLUMNS)
    row.update(
        system=system, lr_scale=scale, seed=seed, status="ok", sst_acc=sst, qqp_acc=qqp, sts_pearson=sts
    )
    row["overall"] = (sst + qqp + (sts + 1) / 2) / 3
    return row


def test_rates_chosen_per_task_for_separate_models_and_on_overall_for_multitask() -> None:
    rows = [
        _row("trainer", 1.0, 42, 0.50, 0.70, 0.80),
        _row("trainer", 2.0, 42, 0.40, 0.80, 0.70),
        _row("pal_pals", 1.0, 42, 0.50, 0.70, 0.80),  # overall 0.7000
        _row("pal_pals", 2.0, 42, 0.40, 0.80, 0.79),  # overall 0.6983
    ]
    assert peers.choose_rates(rows, "trainer") == {"sst_acc": 1.0, "qqp_acc": 2.0, "sts_pearson": 1.0}
    assert peers.choose_rates(rows, "pal_pals") == dict.fromkeys(("sst_acc", "qqp_acc", "sts_pearson"), 1.0)
    (scores,) = peers.selected_scores(rows, "trainer").values()
    assert scores["overall"] == pytest.approx((0.50 + 0.80 + 0.90) / 3)  # each task at its own best rate


def test_bad_systems_and_rates_are_refused(tmp_path: Path) -> None:
    for argv in (["--systems", "lora,keras"], ["--lrs", "0"], ["--lrs", "fast"]):
        with pytest.raises(SystemExit) as exc:
            peers.parse_args([*argv, "--quick", "--out", str(tmp_path / "x.csv")])
        assert exc.value.code == 2
    assert not (tmp_path / "x.csv").exists()


def _bert_params(num_labels: int) -> int:
    """A BertForSequenceClassification of TINY_BERT, counted by hand (type vocabulary 2)."""
    h, inter = TINY_BERT["hidden_size"], TINY_BERT["intermediate_size"]
    embeddings = (TINY_BERT["vocab_size"] + TINY_BERT["max_position_embeddings"] + 2) * h + 2 * h
    layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h
    pooler = h * h + h
    return embeddings + TINY_BERT["num_hidden_layers"] * layer + pooler + (h * num_labels + num_labels)


def test_quick_runs_every_system(tmp_path: Path) -> None:
    out = tmp_path / "peers.csv"
    assert peers.main(["--quick", "--seeds", "1", "--lrs", "1", "--out", str(out)]) == 0
    with out.open() as f:
        rows = {r["system"]: r for r in csv.DictReader(f)}
    assert list(rows) == list(peers.SYSTEMS)
    for r in rows.values():
        assert r["status"] == "ok", r
        sst, qqp, sts = float(r["sst_acc"]), float(r["qqp_acc"]), float(r["sts_pearson"])
        assert float(r["overall"]) == pytest.approx((sst + qqp + (sts + 1) / 2) / 3)
        assert float(r["train_s"]) > 0 and float(r["peak_rss_mb"]) > 100 and r["examples_per_task"] == "8"
        assert float(r["ms_per_example"]) == pytest.approx(1000 * float(r["train_s"]) / 24, rel=1e-6)
    h, layers = TINY_BERT["hidden_size"], TINY_BERT["num_hidden_layers"]
    # three whole models for the Trainer; one frozen encoder and three (LoRA + head) for peft
    assert int(rows["trainer"]["params_stored"]) == sum(_bert_params(c) for c in (5, 2, 1))
    rank = int(rows["lora"]["lora_rank"])
    lora = rank * layers * 2 * (h + h)  # query and value: A (r x h) and B (h x r) each
    assert int(rows["lora"]["adapter_per_task"]) == lora
    encoder = _bert_params(0)
    assert int(rows["lora"]["params_stored"]) == encoder + 3 * lora + sum(h * c + c for c in (5, 2, 1))
    # the rank is the one whose adapter is closest to a PAL's size
    pal = int(rows["pal_pals"]["adapter_per_task"])
    assert abs(lora - pal) <= layers * 2 * (h + h) / 2
    # sentence-transformers: one encoder (with BERT's pooler) + the SST and Quora softmax classifiers
    assert int(rows["st_multitask"]["params_stored"]) == encoder + (h * 5 + 5) + (3 * h * 2 + 2)
    assert int(rows["pal_shared"]["params_stored"]) < int(rows["pal_pals"]["params_stored"])
    payload = json.loads(out.with_suffix(".json").read_text())
    assert (
        payload["settings"]["lr_multipliers"] == [1.0] and payload["settings"]["pal_adapter_per_task"] == pal
    )
    assert set(payload["summary"]["pal_pals_minus"]) == set(peers.SYSTEMS) - {"pal_pals"}
