"""benchmarks/peers.py: its pieces by hand, and every system end to end on a tiny encoder (--quick)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest

from pal_lightning.testing import TINY_BERT

from .conftest import load_benchmark

matplotlib.use("Agg")  # no display; the figures are read back, not shown
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

peers = load_benchmark("peers")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def _write(out: Path, rows: list[dict], seeds: list[int], lrs: list[float]) -> Path:
    """``rows`` as a results file of a (not quick) comparison of trainer and pal_pals, 64 examples per task."""
    settings = {
        "systems": ["trainer", "pal_pals"], "seeds": seeds, "lr_multipliers": lrs,
        "budget": {"examples_per_task": 64}, "dev_limit": 0, "quick": False,
    }  # fmt: skip
    peers.write_outputs(out, rows, settings)
    return out


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


def test_lora_tuned_splits_each_task_rows_between_its_two_stages(tmp_path: Path, data_dir: Path) -> None:
    budget = peers.Budget(
        encoder="unused", data_root=str(tmp_path / "data"), examples_per_task=10, batch_size=2
    )
    peers.write_budget_data(data_dir, budget.data_dir(7), examples=10, seed=7, qqp_dev_limit=0)
    encoder, lora = peers.tuned_stages(budget)
    # 5 batches per task: round(0.5 * 5) = 2 for the encoder, 3 for the adapters; the total is the budget
    assert (encoder.examples_per_task, lora.examples_per_task) == (4, 6)
    assert encoder.data_dir(7) != lora.data_dir(7) != budget.data_dir(7)
    peers.split_training_files(budget, (encoder, lora), seed=7)
    for name in ("ids-sst-train.csv", "quora-train.csv", "sts-train.csv"):
        header, *rows = (budget.data_dir(7) / name).read_text().splitlines()
        first, second = ((stage.data_dir(7) / name).read_text().splitlines() for stage in (encoder, lora))
        assert first[0] == second[0] == header
        assert len(rows) == 10 and (len(first) - 1, len(second) - 1) == (4, 6)  # in proportion 4 : 6
        assert sorted(first[1:] + second[1:]) == sorted(rows)  # disjoint, together every row once
        assert [rows.index(r) for r in first[1:]] == sorted(rows.index(r) for r in first[1:])  # file order
    assert (lora.data_dir(7) / "sts-dev.csv").read_text() == (data_dir / "sts-dev.csv").read_text()
    with pytest.raises(ValueError, match="2 batches"):
        peers.tuned_stages(peers.Budget(encoder="unused", data_root="x", examples_per_task=3, batch_size=2))


def test_lora_tuned_starts_from_the_fine_tuned_encoder_and_keeps_the_pretrained_pooler() -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from pal_lightning.modeling.encoder import MultiTaskEncoder

    torch.manual_seed(0)
    classifier = BertForSequenceClassification(BertConfig(**TINY_BERT, num_labels=2))
    tuned = MultiTaskEncoder.from_config(TINY_BERT, ["sst"], adapter="none")  # another random draw
    pooler = classifier.bert.pooler.dense.weight.clone()
    peers.load_tuned_encoder(classifier, tuned.backbone.state_dict())
    for name, value in tuned.backbone.state_dict().items():
        assert torch.equal(classifier.bert.state_dict()[name], value), name
    assert torch.equal(classifier.bert.pooler.dense.weight, pooler)
    state = dict(tuned.backbone.state_dict())
    state.pop("encoder.layer.0.output.dense.weight")
    with pytest.raises(RuntimeError, match=r"missing \['encoder.layer.0.output.dense.weight'\]"):
        peers.load_tuned_encoder(classifier, state)


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
    # with --search-seeds, later seeds run only the chosen rates and must not vote (the chosen rate would
    # win again by its extra seeds): seed 43 ran only rate 2 and scored high, still rate 1
    rows = [*rows[2:], _row("pal_pals", 2.0, 43, 0.90, 0.90, 0.90)]
    assert peers.choose_rates(rows, "pal_pals") == dict.fromkeys(("sst_acc", "qqp_acc", "sts_pearson"), 1.0)
    # every seed ran every rate: all of them vote
    both = [*rows, _row("pal_pals", 1.0, 43, 0.10, 0.10, 0.10)]
    assert peers.choose_rates(both, "pal_pals") == dict.fromkeys(("sst_acc", "qqp_acc", "sts_pearson"), 2.0)


def _points(figure: object) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A peers figure's scatter points, spread bars (segments) and point labels."""
    from matplotlib.collections import LineCollection, PathCollection

    (ax,) = figure.axes  # type: ignore[attr-defined]
    (scatter,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    (bars,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    segments = np.asarray([np.asarray(s) for s in bars.get_segments()])
    return np.asarray(scatter.get_offsets()), segments, [t.get_text() for t in ax.texts]


def test_notebook_draws_the_mean_over_seeds_at_the_chosen_rates_against_stored_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [  # two seeds, two rates; the Trainer's rate is chosen per task, pal_pals' on overall
        _row("trainer", 1.0, 1, 0.50, 0.70, 0.80),
        _row("trainer", 2.0, 1, 0.40, 0.80, 0.70),
        _row("trainer", 1.0, 2, 0.60, 0.70, 0.60),
        _row("trainer", 2.0, 2, 0.50, 0.90, 0.50),
        _row("pal_pals", 1.0, 1, 0.50, 0.70, 0.80),
        _row("pal_pals", 1.0, 2, 0.40, 0.80, 0.60),
        _row("pal_pals", 2.0, 1, 0.20, 0.50, 0.50),
        _row("pal_pals", 2.0, 2, 0.20, 0.50, 0.50),
    ]
    for r in rows:
        r["params_stored"] = 6_000_000 if r["system"] == "trainer" else 2_500_000
    monkeypatch.setenv("PAL_PEERS_CSV", str(_write(tmp_path / "peers.csv", rows, [1, 2], [1.0, 2.0])))
    monkeypatch.setenv("PAL_PEERS_FIGURE", str(tmp_path / "peers.png"))
    namespace: dict[str, object] = {}
    notebook = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "peers.ipynb", as_version=4)
    for cell in notebook.cells:  # in this process: no kernel to start
        if cell.cell_type == "code":
            exec(compile(cell.source, "peers.ipynb", "exec"), namespace)  # noqa: S102 - our own notebook
    points, bars, labels = _points(namespace["figure"])
    # by hand: the Trainer takes rate 1 for SST (mean 0.55 > 0.45), 2 for Quora (0.85 > 0.70), 1 for STS
    # (0.70 > 0.60): seed 1 (0.5 + 0.8 + 0.9) / 3, seed 2 (0.6 + 0.9 + 0.8) / 3
    trainer = [(0.5 + 0.8 + 0.9) / 3, (0.6 + 0.9 + 0.8) / 3]
    pals = [(0.5 + 0.7 + 0.9) / 3, (0.4 + 0.8 + 0.8) / 3]  # rate 1 on overall (rate 2 is worse)
    assert labels == ["trainer", "pal_pals"]
    assert points == pytest.approx(np.array([[6.0, sum(trainer) / 2], [2.5, sum(pals) / 2]]))
    spread = [[[6.0, min(trainer)], [6.0, max(trainer)]], [[2.5, min(pals)], [2.5, max(pals)]]]
    assert bars == pytest.approx(np.array(spread))
    ax = namespace["figure"].axes[0]  # type: ignore[attr-defined]
    assert ax.get_xscale() == "log"
    assert "2 seeds, 64 examples per task, 2 learning rates, whole dev sets: a smoke run" in ax.get_title()
    assert (tmp_path / "peers.png").stat().st_size > 0


def test_bad_systems_and_rates_are_refused(tmp_path: Path) -> None:
    bad = (
        ["--systems", "lora,keras"], ["--lrs", "0"], ["--lrs", "fast"], ["--jobs", "0"],
        ["--jobs", "2", "--in-process"], ["--seeds", "2", "--search-seeds", "3"],
    )  # fmt: skip
    for argv in bad:
        with pytest.raises(SystemExit) as exc:
            peers.parse_args([*argv, "--quick", "--out", str(tmp_path / "x.csv")])
        assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:  # two stages need two batches per task
        peers.parse_args(
            ["--systems", "lora_tuned", "--examples-per-task", "32", "--out", str(tmp_path / "x.csv")]
        )
    assert exc.value.code == 2
    assert not (tmp_path / "x.csv").exists()


def _bert_params(num_labels: int) -> int:
    """A BertForSequenceClassification of TINY_BERT, counted by hand (type vocabulary 2)."""
    h, inter = TINY_BERT["hidden_size"], TINY_BERT["intermediate_size"]
    embeddings = (TINY_BERT["vocab_size"] + TINY_BERT["max_position_embeddings"] + 2) * h + 2 * h
    layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h
    pooler = h * h + h
    return embeddings + TINY_BERT["num_hidden_layers"] * layer + pooler + (h * num_labels + num_labels)


def _quick(systems: str, out: Path, *extra: str) -> list[str]:
    """``peers.py --quick`` arguments for ``systems``, one seed and one rate, writing ``out``."""
    return ["--quick", "--seeds", "1", "--lrs", "1", "--systems", systems, "--out", str(out), *extra]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One quick run of the default systems (one seed, one rate): its results file, read by the tests below."""
    out = tmp_path_factory.mktemp("peers") / "all.csv"
    assert peers.main(["--quick", "--seeds", "1", "--lrs", "1", "--out", str(out)]) == 0
    return out


def _part(quick: Path, systems: list[str], out: Path, **settings: object) -> Path:
    """The quick run's runs of ``systems`` as a results file of their own, as a call with only those
    systems (and ``settings``) writes it."""
    record = json.loads(quick.with_suffix(".json").read_text())
    rows = [r for r in record["runs"] if r["system"] in systems]
    peers.write_outputs(out, rows, {**record["settings"], "systems": systems, **settings})
    return out


def test_quick_runs_every_system(quick: Path) -> None:
    with quick.open() as f:
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
    # LoRA on the fine-tuned encoder stores what LoRA on the pretrained one stores: one encoder (with
    # the pooler) and three (LoRA + head); it trained on the same 8 examples per task in two stages
    assert rows["lora_tuned"]["lora_rank"] == rows["lora"]["lora_rank"]
    assert int(rows["lora_tuned"]["adapter_per_task"]) == lora
    assert int(rows["lora_tuned"]["params_stored"]) == encoder + 3 * lora + sum(h * c + c for c in (5, 2, 1))
    assert rows["lora_tuned"]["lr"] == "0.0001/0.001 then 0.001"
    # the rank is the one whose adapter is closest to a PAL's size
    pal = int(rows["pal_pals"]["adapter_per_task"])
    assert abs(lora - pal) <= layers * 2 * (h + h) / 2
    # sentence-transformers: one encoder (with BERT's pooler) + the SST and Quora softmax classifiers
    assert int(rows["st_multitask"]["params_stored"]) == encoder + (h * 5 + 5) + (3 * h * 2 + 2)
    assert int(rows["pal_shared"]["params_stored"]) < int(rows["pal_pals"]["params_stored"])
    payload = json.loads(quick.with_suffix(".json").read_text())
    assert (
        payload["settings"]["lr_multipliers"] == [1.0] and payload["settings"]["pal_adapter_per_task"] == pal
    )
    assert set(payload["summary"]["pal_pals_minus"]) == set(peers.SYSTEMS) - {"pal_pals"}
    # the notebook's figure from this CSV: one point per system at (stored parameters, overall), no spread
    points, bars, labels = _points(peers.plot_peers(quick))
    assert labels == list(rows)
    expected = np.array([[int(r["params_stored"]) / 1e6, float(r["overall"])] for r in rows.values()])
    assert points == pytest.approx(expected)
    assert bars == pytest.approx(np.stack([expected, expected], axis=1))  # one seed: lowest = highest


def test_resume_keeps_finished_runs_and_refuses_another_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quick: Path
) -> None:
    """--resume: a second call keeps the first's finished run (the same row, not a rerun), runs only what
    is missing and summarises both; a call that measures otherwise (other dev sets) is refused with
    exit 2, the file untouched."""
    out = _part(quick, ["pal_shared"], tmp_path / "peers.csv")
    first = json.loads(out.with_suffix(".json").read_text())["runs"]
    assert peers.main(_quick("pal_shared,st_multitask", out, "--resume")) == 0
    printed = capsys.readouterr().out
    assert "--resume: 1 finished runs kept" in printed and "[1/1] st_multitask" in printed
    record = json.loads(out.with_suffix(".json").read_text())
    runs = {r["system"]: r for r in record["runs"]}
    assert set(runs) == {"pal_shared", "st_multitask"} and runs["pal_shared"] == first[0]
    assert set(record["summary"]["systems"]) == {"pal_shared", "st_multitask"}
    before = out.read_bytes()
    assert peers.main(_quick("pal_shared,st_multitask", out, "--resume", "--dev-limit", "4")) == 2
    assert "other dev_limit" in capsys.readouterr().err and out.read_bytes() == before


def test_bf16_mixed_reaches_every_kind_of_system(tmp_path: Path) -> None:
    """--precision bf16-mixed: the Trainer-based peers get bf16 autocast (and are told they are on a CPU,
    which the Trainer requires for it), pal-lightning gets Lightning's bf16-mixed; a quick run of one of
    each finishes and records the precision in its settings and commands."""
    import peers_systems  # on sys.path: benchmarks/ (peers.py put it there)

    bf16 = peers.Budget(encoder="e", data_root=str(tmp_path), examples_per_task=64, precision="bf16-mixed")
    args = peers_systems.trainer_schedule(bf16, str(tmp_path), 2, 1e-4, 42)
    assert args["bf16"] is True and args["use_cpu"] is True  # no GPU here
    fp32 = peers.Budget(encoder="e", data_root=str(tmp_path), examples_per_task=64)
    assert peers_systems.trainer_schedule(fp32, str(tmp_path), 2, 1e-4, 42)["bf16"] is False
    assert peers_systems.pal_arguments("pal_pals", bf16, 1.0, 42)[2]["precision"] == "bf16-mixed"
    out = tmp_path / "peers.csv"
    assert peers.main(_quick("trainer,pal_shared", out, "--precision", "bf16-mixed")) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["settings"]["budget"]["precision"] == "bf16-mixed"
    assert all(r["status"] == "ok" and "--precision bf16-mixed" in r["command"] for r in record["runs"])


def test_search_seeds_and_parallel_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--search-seeds 1 --jobs 2: every rate runs at the first seed, two runs at a time, and the second
    seed runs only the rate chosen on the first, queued as soon as that system's search is over; the
    settings and commands record both options. The runner is replaced by one that scores rate 0.5
    best at seed 42 (it trains nothing: this checks the scheduling, the runs are checked above)."""
    import threading
    import time

    lock, active, peak = threading.Lock(), [0], [0]

    def fake_run(system: str, budget: object, scale: float, seed: int, log: Path) -> dict:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.1)
        with lock:
            active[0] -= 1
        best = 0.9 if scale == 0.5 else 0.5
        return {**_row(system, scale, seed, best, best, best), "rss_scope": "run"}

    monkeypatch.setattr(peers, "run_in_subprocess", fake_run)
    out = tmp_path / "peers.csv"
    argv = ["--quick", "--seeds", "3", "--search-seeds", "1", "--lrs", "0.5,1,2", "--jobs", "2"]
    assert peers.main([*argv, "--systems", "pal_shared,trainer", "--out", str(out)]) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    for system in ("pal_shared", "trainer"):
        runs = sorted((r["seed"], r["lr_scale"]) for r in record["runs"] if r["system"] == system)
        assert runs == [(42, 0.5), (42, 1.0), (42, 2.0), (43, 0.5), (44, 0.5)]
        assert record["summary"]["systems"][system]["seeds"] == [42, 43, 44]
    assert peak[0] == 2  # two at once, never more
    assert record["settings"]["search_seeds"] == [42] and record["settings"]["jobs"] == 2
    assert all("--search-seeds 1" in r["command"] for r in record["runs"])


def test_figure_labels_a_system_with_fewer_seeds(tmp_path: Path) -> None:
    """A system measured at fewer seeds than the others is labelled with its count: its point is not a
    mean over the seeds the title names."""
    rows = [
        _row("trainer", 1.0, 1, 0.5, 0.7, 0.8),
        _row("trainer", 1.0, 2, 0.6, 0.7, 0.8),
        _row("pal_pals", 1.0, 1, 0.5, 0.7, 0.9),
    ]
    for r in rows:
        r["params_stored"] = 1_000_000
    out = _write(tmp_path / "peers.csv", rows, [1, 2], [1.0])
    assert _points(peers.plot_peers(out))[2] == ["trainer", "pal_pals (1 seed)"]


def test_merge_joins_parts_run_apart_and_refuses_what_does_not_join(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quick: Path
) -> None:
    """--merge: two parts that share a run (as two machines resumed from one common file: pal_shared, then
    st_multitask on one and trainer on the other) join into one file holding every run once, summarised
    again, with both parts' commands; a part that scored a shared run otherwise, a part measured on other
    dev sets, and an --out that is not among the parts but exists are each refused with exit 2, nothing
    written."""
    parts = [_part(quick, ["pal_shared", s], tmp_path / f"{s}.csv") for s in ("st_multitask", "trainer")]
    out = tmp_path / "all.csv"
    assert peers.main(["--merge", *map(str, parts), "--out", str(out)]) == 0
    assert "merged 3 runs from 2 files" in capsys.readouterr().out
    record = json.loads(out.with_suffix(".json").read_text())
    assert sorted(r["system"] for r in record["runs"]) == ["pal_shared", "st_multitask", "trainer"]
    assert set(record["summary"]["systems"]) == {"pal_shared", "st_multitask", "trainer"}
    assert [m["file"] for m in record["settings"]["merged_from"]] == [
        str(p.with_suffix(".json")) for p in parts
    ]
    with out.open() as f:
        assert len(list(csv.DictReader(f))) == 3

    # the same run with another score in one part: refused, naming the run
    tampered = json.loads(parts[1].with_suffix(".json").read_text())
    next(r for r in tampered["runs"] if r["system"] == "pal_shared")["sst_acc"] += 0.1
    parts[1].with_suffix(".json").write_text(json.dumps(tampered))
    again = tmp_path / "again.csv"
    assert peers.main(["--merge", *map(str, parts), "--out", str(again)]) == 2
    assert "pal_shared lr x1 seed 42 differs" in capsys.readouterr().err and not again.exists()
    # a part measured on other dev sets
    other = _part(quick, ["lora"], tmp_path / "other.csv", dev_limit=4)
    assert peers.main(["--merge", str(parts[0]), str(other), "--out", str(tmp_path / "x.csv")]) == 2
    assert "other dev_limit" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()
    # a file that is not a results file (truncated JSON, or another JSON): one line, no traceback
    for text in ('{"settings": {', '{"rows": []}'):
        stray = tmp_path / "stray.json"
        stray.write_text(text)
        assert peers.main(["--merge", str(parts[0]), str(stray), "--out", str(tmp_path / "y.csv")]) == 2
        assert "name results files written by peers.py" in capsys.readouterr().err
        assert not (tmp_path / "y.csv").exists()
    # an existing --out that is not one of the parts would be overwritten: refused by the parser
    with pytest.raises(SystemExit) as stop:
        peers.main(["--merge", str(parts[0]), "--out", str(other)])
    assert stop.value.code == 2 and "would overwrite" in capsys.readouterr().err


def test_labels_of_near_points_stand_in_one_column_without_overlap() -> None:
    """Points that store nearly the same parameters get their labels in one column right of the group's
    rightmost point, in score order, each at least the gap below the one above; a point far away on x
    keeps its label at its own height."""
    x = [22.6, 22.7, 23.4, 23.5, 68.1]
    y = [0.745, 0.740, 0.746, 0.735, 0.738]
    positions = peers.label_positions(x, y, gap=0.05)
    gap = 0.05 * (max(y) - min(y))
    cluster = [positions[k] for k in (2, 0, 1, 3)]  # by score, highest first
    assert [px for px, _ in cluster] == pytest.approx([23.5 * 1.03] * 4)
    heights = [py for _, py in cluster]
    assert heights[0] == y[2]
    assert all(a - b >= gap - 1e-12 for a, b in zip(heights, heights[1:], strict=False))
    assert all(py <= y[k] for k, (_, py) in enumerate(positions))  # a label never rises above its point
    assert positions[4] == (pytest.approx(68.1 * 1.03), y[4])
