"""GLUE as built-in tasks (issue 14 item 3), read from a small local copy of nyu-mll/glue in the hub's layout:
specs, metrics, scores and submission files by hand, fits, and the paper's setting at 1.13x one BERT-base."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

datasets = pytest.importorskip("datasets")

from pal_lightning.core.errors import PalUserError  # noqa: E402
from pal_lightning.data.sources import hf as hf_sources  # noqa: E402
from pal_lightning.data.sources.readers import read_split  # noqa: E402
from pal_lightning.tasks.catalogue import GLUE_EIGHT, GLUE_TASKS  # noqa: E402
from pal_lightning.tasks.glue import glue_average, missing_submission_files, write_submission_file  # noqa: E402
from pal_lightning.tasks.metrics import build_metric, overall_score  # noqa: E402
from pal_lightning.tasks.specs import get_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: config -> (text columns, label names or None for STS-B's float, splits): from the nyu-mll/glue card
HUB = {
    "cola": (("sentence",), ["unacceptable", "acceptable"], ("train", "validation", "test")),
    "sst2": (("sentence",), ["negative", "positive"], ("train", "validation", "test")),
    "mrpc": (("sentence1", "sentence2"), ["not_equivalent", "equivalent"], ("train", "validation", "test")),
    "qqp": (("question1", "question2"), ["not_duplicate", "duplicate"], ("train", "validation", "test")),
    "stsb": (("sentence1", "sentence2"), None, ("train", "validation", "test")),
    "mnli": (
        ("premise", "hypothesis"),
        ["entailment", "neutral", "contradiction"],
        ("train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched"),
    ),
    "qnli": (("question", "sentence"), ["entailment", "not_entailment"], ("train", "validation", "test")),
    "rte": (("sentence1", "sentence2"), ["entailment", "not_entailment"], ("train", "validation", "test")),
    "wnli": (("sentence1", "sentence2"), ["not_entailment", "entailment"], ("train", "validation", "test")),
    "ax": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"], ("test",)),
}
WORDS = "the a cat dog runs sleeps big small red old new house car tree sees".split()


def _label(config: str, i: int, split: str) -> float | int:
    if split.startswith("test"):
        return -1.0 if config == "stsb" else -1  # GLUE hides its test labels
    names = HUB[config][1]
    if names is None:
        return round((i % 11) / 2, 1)
    # the mismatched dev set is labelled differently from the matched one, so that the two scores differ
    return (i + 1) % len(names) if split == "validation_mismatched" else i % len(names)


def _text(i: int, column: int) -> str:
    return " ".join(WORDS[(i * 3 + column + j) % len(WORDS)] for j in range(3 + i % 4))


def write_glue_copy(
    root: Path, n: int = 8, skip: tuple[str, str] | None = None, only: str | None = None
) -> Path:
    """``root`` as the nyu-mll/glue repository: ``<config>/<split>-00000-of-00001.parquet`` and a README whose
    ``configs:`` block maps each split to its files; ``skip`` = (config, split) leaves one split out, ``only``
    writes one config."""
    lines = ["---", "configs:"]
    for config, (columns, names, splits) in HUB.items() if only is None else [(only, HUB[only])]:
        lines += [f"- config_name: {config}", "  data_files:"]
        for split in splits:
            if (config, split) == skip:
                continue
            rows = n if split == "train" else n // 2 + (config == "ax")  # AX: one row more than the rest
            label = datasets.Value("float32") if names is None else datasets.ClassLabel(names=names)
            features = dict.fromkeys(columns, datasets.Value("string"))
            features |= {"label": label, "idx": datasets.Value("int32")}
            table = {c: [_text(i, k) for i in range(rows)] for k, c in enumerate(columns)}
            table |= {"label": [_label(config, i, split) for i in range(rows)], "idx": list(range(rows))}
            (root / config).mkdir(parents=True, exist_ok=True)
            ds = datasets.Dataset.from_dict(table, features=datasets.Features(features))
            ds.to_parquet(str(root / config / f"{split}-00000-of-00001.parquet"))
            lines += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (root / "README.md").write_text("\n".join([*lines, "---", ""]))
    return root


@pytest.fixture(scope="module")
def glue_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_glue_copy(tmp_path_factory.mktemp("hub") / "glue")


def _glue_at(root: Path) -> Any:
    """``nyu-mll/glue`` (and its config) read from ``root``."""
    return lambda path, name: (str(root), name) if path == "nyu-mll/glue" else None


@pytest.fixture
def glue(glue_root: Path, serve_hub: Any) -> Path:
    serve_hub(_glue_at(glue_root))
    return glue_root


def test_glue_task_specs_by_hand() -> None:
    expected = {  # name: (config, kind, labels, metrics, dev split, test split)
        "glue_cola": ("cola", "single_classification", 2, ("matthews",), "validation", "test"),
        "glue_sst2": ("sst2", "single_classification", 2, ("accuracy",), "validation", "test"),
        "glue_mrpc": ("mrpc", "pair_classification", 2, ("accuracy", "f1"), "validation", "test"),
        "glue_qqp": ("qqp", "pair_classification", 2, ("accuracy", "f1"), "validation", "test"),
        "glue_stsb": ("stsb", "pair_regression", 1, ("pearson", "spearman"), "validation", "test"),
        "glue_mnli": ("mnli", "pair_classification", 3, ("accuracy",), "validation_matched", "test_matched"),
        "glue_qnli": ("qnli", "pair_classification", 2, ("accuracy",), "validation", "test"),
        "glue_rte": ("rte", "pair_classification", 2, ("accuracy",), "validation", "test"),
        "glue_wnli": ("wnli", "pair_classification", 2, ("accuracy",), "validation", "test"),
    }
    assert set(GLUE_TASKS) == set(expected)
    assert set(GLUE_EIGHT) == set(expected) - {"glue_wnli"}
    for name, (config, kind, labels, metrics, dev, test) in expected.items():
        spec = get_task(name)
        assert (spec.hf_path, spec.hf_name, spec.format) == ("nyu-mll/glue", config, "hf"), name
        assert (spec.kind.value, spec.num_labels, spec.metrics) == (kind, labels, metrics), name
        assert spec.files == {"train": "train", "dev": dev, "test": test}, name
        assert spec.text_columns == HUB[config][0] and (spec.label_column, spec.id_column) == ("label", "idx")
    assert get_task("glue_stsb").label_range == (0.0, 5.0) and get_task("glue_mnli").label_range == (0.0, 2.0)
    # glue_mnli's head is also scored on MNLI's mismatched sets and predicts the diagnostic set (config ax)
    mm, ax = get_task("glue_mnli").views()
    mm_files = {"dev": "validation_mismatched", "test": "test_mismatched"}
    assert (mm.name, mm.hf_name, mm.files) == ("glue_mnli_mm", "mnli", mm_files)
    assert (ax.name, ax.hf_name, ax.files, ax.text_columns) == (
        "glue_ax",
        "ax",
        {"test": "test"},
        HUB["ax"][0],
    )
    assert (ax.num_labels, mm.num_labels, ax.eval_views, mm.eval_views) == (3, 3, {}, {})


def test_every_glue_task_reads_its_local_hub_copy(glue: Path) -> None:
    mm, ax = get_task("glue_mnli").views()
    assert read_split(mm, "dev", glue).labels.tolist() == [1, 2, 0, 1]  # type: ignore[union-attr]
    assert read_split(ax, "test", glue).ids == ["0", "1", "2", "3", "4"]
    assert read_split(ax, "test", glue).labels is None  # hidden
    for name, spec in GLUE_TASKS.items():
        config = spec.hf_name
        assert config is not None
        train = read_split(spec, "train", glue)
        assert len(train.ids) == 8 and len(train.texts) == len(HUB[config][0]), name
        assert train.labels is not None
        assert train.labels.tolist() == pytest.approx([_label(config, i, "train") for i in range(8)]), name
        assert train.texts[0][0] == " ".join(WORDS[j % len(WORDS)] for j in range(3)), name
        assert read_split(spec, "dev", glue).ids == ["0", "1", "2", "3"], name
        assert read_split(spec, "test", glue).labels is None, name  # -1: hidden labels


def test_matthews_by_hand() -> None:
    preds, target = torch.tensor([1, 1, 0, 0, 1, 0, 1]), torch.tensor([1, 0, 0, 1, 1, 0, 1])
    tp, tn, fp, fn = 3, 2, 1, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    metric = build_metric("matthews", get_task("glue_cola"))
    metric.update(preds, target)
    assert float(metric.compute()) == pytest.approx(expected)
    with pytest.raises(PalUserError, match="regression task"):
        build_metric("matthews", get_task("glue_stsb"))


def test_glue_average_by_hand() -> None:
    scores = {
        "glue_cola": {"matthews": 0.5},
        "glue_mrpc": {"accuracy": 0.8, "f1": 0.9},
        "glue_stsb": {"pearson": 0.7, "spearman": 0.6},
        "glue_mnli": {"accuracy": 0.8},
        "glue_mnli_mm": {"accuracy": 0.7},
    }
    specs = [*GLUE_TASKS.values(), *get_task("glue_mnli").views()]
    # CoLA 0.5, MRPC 0.85, STS-B 0.65, MNLI (0.8 + 0.7) / 2 = 0.75: four tasks
    assert glue_average(scores, specs) == pytest.approx((0.5 + 0.85 + 0.65 + 0.75) / 4)
    assert overall_score(scores, specs) == pytest.approx((0.5 + 0.85 + 0.65 + 0.75) / 4)
    # the same over the scored tasks alone, glue_mnli_mm being glue_mnli's evaluation view; the diagnostic
    # set AX is not part of the GLUE score even when scored
    views = [GLUE_TASKS[t] for t in ("glue_cola", "glue_mrpc", "glue_stsb", "glue_mnli")]
    views += get_task("glue_mnli").views()
    with_ax = {**scores, "glue_ax": {"accuracy": 0.1}}
    assert overall_score(with_ax, views) == pytest.approx((0.5 + 0.85 + 0.65 + 0.75) / 4)
    # with a non-GLUE task the overall is the mean of main metrics mapped to 0..1 instead
    mixed = {"glue_cola": {"matthews": 0.5}, "sst2": {"accuracy": 0.9}}
    assert overall_score(mixed, [*specs, get_task("sst2")]) == pytest.approx(((0.5 + 1) / 2 + 0.9) / 2)
    assert glue_average({}, specs) is None


def test_submission_files_by_hand(tmp_path: Path) -> None:
    assert write_submission_file(tmp_path, "glue_mnli", [("0", 2), ("1", 0)]).name == "MNLI-m.tsv"
    assert (tmp_path / "MNLI-m.tsv").read_text() == "index\tprediction\n0\tcontradiction\n1\tentailment\n"
    write_submission_file(tmp_path, "glue_rte", [("5", 1)])
    assert (tmp_path / "RTE.tsv").read_text() == "index\tprediction\n5\tnot_entailment\n"
    write_submission_file(tmp_path, "glue_stsb", [("0", 3.25)])
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n0\t3.25\n"
    write_submission_file(tmp_path, "glue_cola", [("0", 1)])
    assert (tmp_path / "CoLA.tsv").read_text() == "index\tprediction\n0\t1\n"
    # WNLI: GLUE's own 0/1 labels, 1 = entailment (the hub's class 1); AX: MNLI's label names
    write_submission_file(tmp_path, "glue_wnli", [("3", 1), ("4", 0)])
    assert (tmp_path / "WNLI.tsv").read_text() == "index\tprediction\n3\t1\n4\t0\n"
    write_submission_file(tmp_path, "glue_ax", [("0", 1)])
    assert (tmp_path / "AX.tsv").read_text() == "index\tprediction\n0\tneutral\n"
    missing = ["SST-2.tsv", "MRPC.tsv", "QQP.tsv", "MNLI-mm.tsv", "QNLI.tsv"]
    assert missing_submission_files(p.name for p in tmp_path.iterdir()) == missing
    with pytest.raises(PalUserError, match="already exists"):
        write_submission_file(tmp_path, "glue_cola", [("0", 0)])
    assert (tmp_path / "CoLA.tsv").read_text().endswith("0\t1\n")  # nothing overwritten
    with pytest.raises(PalUserError, match="no GLUE submission file"):
        write_submission_file(tmp_path, "sst", [("0", 0)])


def test_one_mnli_head_scores_both_dev_sets_and_writes_three_files(
    glue: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """GLUE's MNLI setting: one head, trained on MNLI's train split, scored on the matched and the mismatched
    dev sets and predicting both test sets and the diagnostic set AX. The heads are made to answer one
    class whatever the input (MNLI ``neutral``, RTE ``entailment``), so every value follows from the local
    copy's labels by hand."""
    from pal_lightning import MultiTaskDataModule, MultiTaskModule
    from pal_lightning.callbacks.glue_submission import GlueSubmissionWriter
    from pal_lightning.testing import TINY_BERT, quiet_trainer

    tasks = ["glue_mnli", "glue_rte"]
    module = MultiTaskModule(tasks=tasks, encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    assert list(module.heads) == tasks  # one MNLI head: no second head for the mismatched sets
    with torch.no_grad():
        for task, answer in (("glue_mnli", 1), ("glue_rte", 0)):
            module.heads[task].linear.weight.zero_()
            module.heads[task].linear.bias.copy_(
                5.0 * torch.nn.functional.one_hot(torch.tensor(answer), 3 - (task == "glue_rte"))
            )
    dm = MultiTaskDataModule(tasks=tasks, data_dir=str(tmp_path), eval_batch_size=3, cache_dir=False)
    quiet_trainer().validate(module, datamodule=dm, verbose=False)
    # dev labels: MNLI matched i % 3 = [0, 1, 2, 0] (one neutral of 4), mismatched (i + 1) % 3 = [1, 2, 0, 1]
    # (two); RTE i % 2 = [0, 1, 0, 1] (two entailment)
    matched, mismatched, rte = 1 / 4, 2 / 4, 2 / 4
    scores = module.last_scores["val"]
    assert scores["val/glue_mnli/accuracy"] == pytest.approx(matched)
    assert scores["val/glue_mnli_mm/accuracy"] == pytest.approx(mismatched)
    assert scores["val/glue_rte/accuracy"] == pytest.approx(rte)
    # the GLUE score counts MNLI once, as the mean of the two (not (m + mm + rte) / 3 = 0.4167)
    assert scores["val/overall"] == pytest.approx(((matched + mismatched) / 2 + rte) / 2)
    assert not any("glue_ax" in k for k in scores)  # AX has no dev set (and is not in the GLUE score)

    out = tmp_path / "submission"
    trainer = quiet_trainer(callbacks=[GlueSubmissionWriter(output_dir=str(out))])
    with caplog.at_level("WARNING", logger="pal_lightning.callbacks.glue_submission"):
        trainer.predict(module, datamodule=dm, return_predictions=False)
    assert sorted(p.name for p in out.iterdir()) == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "RTE.tsv"]
    header = "index\tprediction\n"
    neutral = header + "".join(f"{i}\tneutral\n" for i in range(4))
    assert (out / "MNLI-m.tsv").read_text() == neutral and (out / "MNLI-mm.tsv").read_text() == neutral
    ax = header + "".join(f"{i}\tneutral\n" for i in range(5))  # AX's own 5 ids, from its config
    assert (out / "AX.tsv").read_text() == ax
    assert (out / "RTE.tsv").read_text() == header + "".join(f"{i}\tentailment\n" for i in range(4))
    assert "WNLI.tsv" in caplog.text and "CoLA.tsv" in caplog.text  # a complete zip needs them too
    # a second run refuses before predicting, naming the views' files too, and overwrites nothing
    with pytest.raises(PalUserError, match="MNLI-m.tsv, MNLI-mm.tsv, AX.tsv, RTE.tsv. Nothing was predicted"):
        quiet_trainer(callbacks=[GlueSubmissionWriter(output_dir=str(out))]).predict(module, datamodule=dm)
    assert (out / "AX.tsv").read_text() == ax


def _tiny_glue_config(tmp_path: Path, tasks: list[str]) -> Path:
    import yaml

    from pal_lightning.testing import write_tiny_fit_config

    config = write_tiny_fit_config(tmp_path, tmp_path / "no_files", tasks=tasks)
    values = yaml.safe_load(config.read_text())
    values["model"]["init_args"]["pair_encoding"] = "cross"
    values["trainer"]["max_steps"] = 2  # one validation
    values["trainer"]["callbacks"] = [
        {"class_path": "pal_lightning.callbacks.glue_submission.GlueSubmissionWriter"}
    ]
    config.write_text(yaml.safe_dump(values))
    return config


def test_glue_tasks_fit_and_predict_submission_files(glue: Path, tmp_path: Path) -> None:
    from pal_lightning.cli.main import main

    config = _tiny_glue_config(tmp_path, ["glue_cola", "glue_mnli", "glue_stsb"])
    assert main(["fit", "--config", str(config)]) == 0
    run = tmp_path / "runs" / "version_0"
    (ckpt,) = (run / "checkpoints").glob("last*.ckpt")
    assert main(["predict", "--config", str(config), "--ckpt_path", str(ckpt)]) == 0
    out = run / "glue_submission"  # beside run / "predictions"
    written = ["AX.tsv", "CoLA.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "STS-B.tsv"]
    assert sorted(p.name for p in out.iterdir()) == written
    mnli = (out / "MNLI-m.tsv").read_text().splitlines()
    assert mnli[0] == "index\tprediction" and [r.split("\t")[0] for r in mnli[1:]] == ["0", "1", "2", "3"]
    assert {r.split("\t")[1] for r in mnli[1:]} <= {"entailment", "neutral", "contradiction"}
    sts = [float(r.split("\t")[1]) for r in (out / "STS-B.tsv").read_text().splitlines()[1:]]
    assert len(sts) == 4 and all(0.0 <= s <= 5.0 for s in sts)
    metrics = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    logged = {"val/glue_cola/matthews", "val/glue_stsb/spearman", "val/glue_mnli_mm/accuracy", "val/overall"}
    assert logged <= set(metrics)


@pytest.mark.parametrize(
    ("task", "skip", "expected"),
    [
        ("glue_rte", ("rte", "validation"), ("(config rte)", "no split 'validation'", "test, train")),
        # the split of glue_mnli's evaluation view (the mismatched dev set) is checked before training too
        (
            "glue_mnli",
            ("mnli", "validation_mismatched"),
            ("(config mnli)", "'validation_mismatched'", "glue_mnli_mm"),
        ),
    ],
)
def test_a_glue_task_whose_split_is_missing_is_one_line(
    tmp_path: Path,
    serve_hub: Any,
    capsys: pytest.CaptureFixture[str],
    task: str,
    skip: tuple[str, str],
    expected: tuple[str, ...],
) -> None:
    from pal_lightning.cli.main import USER_ERROR_EXIT, main

    serve_hub(_glue_at(write_glue_copy(tmp_path / "glue", n=4, skip=skip, only=skip[0])))
    config = _tiny_glue_config(tmp_path, [task])
    assert main(["fit", "--config", str(config)]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("pal-lightning: error:")]
    assert "nyu-mll/glue" in line and all(part in line for part in expected), line
    assert not (tmp_path / "runs").exists()  # stopped before anything was written
    hf_sources.clear_loaded()


@pytest.mark.parametrize(
    ("config", "tasks", "ratio"),
    [
        ("glue_bert_base_pals.yaml", list(GLUE_EIGHT), 1.13),
        # one more PAL set (2 * 768 * 204 + 12 * 3 * 204**2 = 1,811,520 weights, +1.7 % of BERT-base) and head
        ("glue_bert_base_pals_wnli.yaml", [*GLUE_EIGHT, "glue_wnli"], 1.15),
    ],
)
def test_the_papers_glue_setting_stores_1_13x_one_bert_base(
    capsys: pytest.CaptureFixture[str], config: str, tasks: list[str], ratio: float
) -> None:
    """configs/glue_bert_base_pals.yaml's model with a random-init BERT-base (no download, on the meta device:
    shapes only): 8 tasks with PALs of d_s 204 store 1.13x one BERT-base (Stickland & Murray 2019, Table 1);
    MNLI counts once (its mismatched and diagnostic sets have no head). With WNLI for a complete submission,
    1.15x."""
    import yaml

    from pal_lightning.cli.main import main
    from pal_lightning.module.multitask import MultiTaskModule

    assert main(["fit", "--config", str(ROOT / "configs" / config), "--print_config"]) == 0
    args = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    assert args["tasks"] == tasks and args["adapter"]["method"] == "pals" and args["adapter"]["size"] == 204
    bert_base = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    args = {k: v for k, v in args.items() if k not in ("encoder", "encoder_revision", "init_from")}
    with torch.device("meta"):
        module = MultiTaskModule(**{**args, "encoder_config": bert_base})
    report = module.parameter_report()
    assert report.shared > 108_000_000  # BERT-base with its 30,522-token vocabulary
    assert sorted(report.adapter_weights) == sorted(tasks)  # no adapters for glue_mnli_mm or glue_ax
    assert all(w == 2 * 768 * 204 + 12 * 3 * 204**2 for w in report.adapter_weights.values())
    assert round(report.total / report.shared, 2) == ratio
