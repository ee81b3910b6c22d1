"""The built-in GLUE tasks read from GLUE's download (``glue_data/<TASK>/*.tsv``): fixture files with each quirk
of the real ones, a missing task as one line, the hub's layout elsewhere; and the real files' counts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources import glue_data
from pal_lightning.data.sources.readers import check_files_exist, read_split, resolve_source
from pal_lightning.tasks.specs import get_task

BOM = "\ufeff"


def _write(path: Path, lines: list[str], final_newline: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="utf-8")


def write_glue_data(root: Path) -> Path:
    """``root/glue`` as GLUE's download (CoLA, MRPC, RTE, STS-B, WNLI) and ``root/glue-sst-2`` beside it."""
    glue = root / "glue"
    cola = [
        "gj04\t1\t\tThe sailors rode the breeze.",
        'cj99\t0\t*\tHe said " that .',
        "gj04\t1\t\tBill left.",
    ]
    _write(glue / "CoLA/train.tsv", cola)
    _write(glue / "CoLA/dev.tsv", cola[:2], final_newline=False)
    _write(glue / "CoLA/test.tsv", ["index\tsentence", "0\tBill whistled.", "1\tThe car honked."])
    mrpc = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    _write(
        glue / "MRPC/train.tsv",
        [
            BOM + mrpc,
            '1\t702876\t702977\tHe called " the witness " .\tAs " the witness " .',
            "0\t1\t2\tA b .\tC d .",
        ],
    )
    _write(glue / "MRPC/dev.tsv", [BOM + mrpc, "0\t5\t6\tE f .\tG h ."])
    _write(glue / "MRPC/test.tsv", ["index\t#1 ID\t#2 ID\t#1 String\t#2 String", "7\t8\t9\tI j .\tK l ."])
    rte = "index\tsentence1\tsentence2\tlabel"
    _write(
        glue / "RTE/train.tsv",
        [rte, "0\tA man runs.\tA man moves.\tentailment", "1\tIt rains.\tIt is dry.\tnot_entailment"]
        + ["2\tX.\tY.\tmaybe"],  # a label name RTE does not have: a bad row at line 4
    )
    _write(glue / "RTE/dev.tsv", [rte, "0\tA.\tB.\tnot_entailment"])
    _write(glue / "RTE/test.tsv", ["index\tsentence1\tsentence2", "0\tC.\tD.", "1\tE.\tF."])
    sts = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    _write(
        glue / "STS-B/train.tsv",
        [
            sts + "\tscore",
            "0\tg\tf\ty\t0001\tnone\tnone\tA plane.\tAn air plane.\t5.000",
            "1\tg\tf\ty\t2\tn\tn\tA.\tB.\t0.4",
        ],
    )
    _write(glue / "STS-B/dev.tsv", [sts + "\tscore", "0\tg\tf\ty\t0\tn\tn\tC.\tD.\t3.800"])
    _write(glue / "STS-B/test.tsv", [sts, "0\tg\tf\ty\t0\tn\tn\tE.\tF."])
    wnli = "index\tsentence1\tsentence2\tlabel"
    _write(glue / "WNLI/train.tsv", [wnli, "0\tI stuck a pin.\tIt had a hole.\t1", "1\tA.\tB.\t0"])
    _write(glue / "WNLI/dev.tsv", [wnli, "0\tC.\tD.\t0"])
    _write(glue / "WNLI/test.tsv", ["index\tsentence1\tsentence2", "0\tE.\tF."])
    sst = root / "glue-sst-2"
    _write(sst / "train_full.tsv", ["sentence\tlabel", "hide new secretions \t0", "a charming journey \t1"])
    _write(sst / "dev.tsv", ["sentence\tlabel", 'it \'s " charming " \t1'])
    _write(sst / "test.tsv", ["index\tsentence", "0\tuneasy mishmash ."])
    return glue


@pytest.fixture
def glue(tmp_path: Path) -> Path:
    return write_glue_data(tmp_path)


def _read(task: str, split: str, data_dir: Path):  # noqa: ANN202 - RawSplit
    return read_split(get_task(task), split, data_dir)


def test_cola_without_header_and_its_test_file_with_one(glue: Path) -> None:
    train = _read("glue_cola", "train", glue)
    assert (train.rows, train.ids, train.labels.tolist()) == (3, ["0", "1", "2"], [1, 0, 1])  # type: ignore[union-attr]
    assert train.texts == [["The sailors rode the breeze.", 'He said " that .', "Bill left."]]
    dev = _read("glue_cola", "dev", glue)  # no final newline: the last row is still read
    assert (dev.rows, len(dev), dev.labels.tolist()) == (2, 2, [1, 0])  # type: ignore[union-attr]
    test = _read("glue_cola", "test", glue)
    assert (test.ids, test.labels, test.texts) == (["0", "1"], None, [["Bill whistled.", "The car honked."]])


def test_mrpc_with_its_byte_order_mark_and_quotes_as_text(glue: Path) -> None:
    train = _read("glue_mrpc", "train", glue)
    assert train.labels.tolist() == [1, 0] and train.ids == ["0", "1"]  # type: ignore[union-attr]
    assert train.texts[0][0] == 'He called " the witness " .' and train.texts[1][0] == 'As " the witness " .'
    assert _read("glue_mrpc", "dev", glue).labels.tolist() == [0]  # type: ignore[union-attr]
    test = _read("glue_mrpc", "test", glue)
    assert (test.ids, test.labels) == (["7"], None)  # the index column: what the submission file names


def test_rte_label_names_in_the_hubs_order_and_a_bad_one_by_line(glue: Path) -> None:
    train = _read("glue_rte", "train", glue)
    assert train.labels.tolist() == [0, 1]  # type: ignore[union-attr]  # entailment 0, not_entailment 1
    assert train.bad_rows == [(4, "non-numeric label 'maybe'")]
    with pytest.raises(PalUserError, match=r"RTE/train.tsv, line 4: bad row"):
        read_split(get_task("glue_rte"), "train", glue, on_bad_row="error")
    assert _read("glue_rte", "test", glue).ids == ["0", "1"]


def test_stsb_scores_wnli_and_sst2_from_its_sibling_folder(glue: Path) -> None:
    stsb = _read("glue_stsb", "train", glue)
    assert stsb.labels.tolist() == pytest.approx([5.0, 0.4]) and stsb.texts[1] == ["An air plane.", "B."]  # type: ignore[union-attr]
    assert _read("glue_stsb", "test", glue).labels is None
    assert _read("glue_wnli", "train", glue).labels.tolist() == [1, 0]  # type: ignore[union-attr]
    sst2 = _read("glue_sst2", "train", glue)
    assert Path(sst2.source) == glue.parent / "glue-sst-2" / "train_full.tsv"
    assert sst2.texts == [["hide new secretions", "a charming journey"]]
    assert _read("glue_sst2", "dev", glue).texts == [['it \'s " charming "']]


def test_a_missing_task_is_one_line_naming_the_folder_and_the_files(glue: Path) -> None:
    requests = [
        (get_task("glue_qnli"), "train"),
        (get_task("glue_qnli"), "dev"),
        (get_task("glue_rte"), "dev"),
    ]
    with pytest.raises(PalUserError) as err:
        check_files_exist(requests, glue)
    message = str(err.value)
    assert "\n" not in message and str(glue.resolve()) in message
    assert "glue_qnli/train: QNLI/train.tsv; glue_qnli/dev: QNLI/dev.tsv." in message
    assert "<TASK>/{train,dev,test}.tsv" in message and "CoLA, MRPC, RTE, STS-B, WNLI" in message
    assert "glue_rte" not in message


def test_other_folders_and_changed_specs_keep_the_hub_layout(glue: Path, tmp_path: Path) -> None:
    spec = get_task("glue_rte")
    assert resolve_source(spec, "train", glue).kind == "glue_data"  # type: ignore[union-attr]
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    hub = resolve_source(spec, "train", empty)
    assert hub is not None and (hub.kind, hub.location, hub.hf_split) == ("hub", "nyu-mll/glue", "train")
    changed = spec.replace(metrics=("f1",))  # a user's own copy: not read from GLUE's files
    assert glue_data.local_file(changed, "train", glue) is None
    assert glue_data.local_file(get_task("sst"), "train", glue) is None


def test_a_file_whose_header_is_not_glues_stops_with_one_line(glue: Path) -> None:
    _write(glue / "WNLI/dev.tsv", ["index\tpremise\thypothesis\tlabel", "0\tA.\tB.\t0"])
    with pytest.raises(
        PalUserError, match=r"lacks the column\(s\) \['sentence1', 'sentence2'\] of GLUE's WNLI"
    ):
        _read("glue_wnli", "dev", glue)


def test_mnli_and_the_diagnostic_set_by_their_own_file_names(glue: Path) -> None:
    columns = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label"
    _write(glue / "MNLI/train.tsv", [columns, "0\t1\t1e\tg\tA.\tB.\tneutral\tneutral"])
    _write(glue / "MNLI/dev_mismatched.tsv", [columns, "0\t1\t1e\tg\tA.\tB.\tcontradiction\tcontradiction"])
    _write(glue / "diagnostic/diagnostic.tsv", ["index\tsentence1\tsentence2", "0\tA.\tB."])
    mnli = get_task("glue_mnli")
    mm, ax = mnli.views()
    assert read_split(mnli, "train", glue).labels.tolist() == [1]  # type: ignore[union-attr]
    assert read_split(mm, "dev", glue).labels.tolist() == [2]  # type: ignore[union-attr]
    assert read_split(ax, "test", glue).texts == [["A."], ["B."]]


# --------------------------------------------------------------------------- the real files

#: ``../shared/data/glue`` beside ``$PAL_DATA_DIR`` (``../shared/data/cs224n-minbert`` in CI).
REAL = Path(os.environ.get("PAL_DATA_DIR", "") or "/nonexistent").parent / "glue"
#: (task, split): rows, from ../shared/data/README.md ("GLUE small tasks" and "Files")
REAL_ROWS = {
    "glue_cola": (8551, 1043, 1063),
    "glue_mrpc": (3668, 408, 1725),
    "glue_rte": (2490, 277, 3000),
    "glue_stsb": (5749, 1500, 1379),
    "glue_wnli": (635, 71, 146),
    "glue_sst2": (67349, 872, 1821),
}
#: class counts of the train files (glue/SOURCES.md: RTE 1249 entailment / 1241 not; MRPC 2474 / 1194;
#: CoLA 6023 acceptable / 2528)
LAST_COLA_DEV = "John talked to Bill about himself."
REAL_TRAIN_CLASSES = {"glue_rte": [1249, 1241], "glue_mrpc": [1194, 2474], "glue_cola": [2528, 6023]}


@pytest.mark.integration
def test_the_real_glue_files_row_and_label_counts() -> None:
    if not REAL.is_dir():
        pytest.skip("../shared/data/glue (beside PAL_DATA_DIR) is not here")
    for task, counts in REAL_ROWS.items():
        for split, rows in zip(("train", "dev", "test"), counts, strict=True):
            data = _read(task, split, REAL)
            assert (data.rows, len(data), data.skipped) == (rows, rows, 0), (task, split)
            assert (data.labels is None) == (split == "test"), (task, split)
            assert len(set(data.ids)) == rows
    for task, classes in REAL_TRAIN_CLASSES.items():
        assert np.bincount(_read(task, "train", REAL).labels).tolist() == classes, task  # type: ignore[arg-type]
    stsb = _read("glue_stsb", "dev", REAL).labels
    assert stsb is not None and stsb.min() == 0.0 and stsb.max() == 5.0
    mrpc = _read("glue_mrpc", "train", REAL)
    assert mrpc.texts[0][0].startswith('Amrozi accused his brother , whom he called " the witness "')
    assert _read("glue_mrpc", "test", REAL).ids[:2] == ["0", "1"]
    cola_dev = _read("glue_cola", "dev", REAL)  # no final newline: its last row is read all the same
    assert cola_dev.texts[0][-1] == LAST_COLA_DEV and cola_dev.labels[-1] == 1  # type: ignore[index]


def test_fit_on_carved_validation_then_test_on_dev_and_submission_files(glue: Path, tmp_path: Path) -> None:
    """The whole path on GLUE's files: fit validates on rows carved from train, ``test`` scores dev, and
    ``predict`` writes the server's files with the test files' own index column."""
    import json

    import yaml

    from pal_lightning.cli.main import main
    from pal_lightning.testing import write_tiny_fit_config

    rte = glue / "RTE/train.tsv"
    rte.write_text("".join(rte.read_text().splitlines(keepends=True)[:-1]))  # without its bad row
    config = write_tiny_fit_config(tmp_path, glue, tasks=["glue_cola", "glue_mrpc", "glue_rte"])
    values = yaml.safe_load(config.read_text())
    values["model"]["init_args"]["pair_encoding"] = "cross"
    values["data"]["init_args"]["validation_fraction"] = 0.34
    values["trainer"]["max_steps"] = 2
    values["trainer"]["callbacks"] = [
        {"class_path": "pal_lightning.callbacks.glue_submission.GlueSubmissionWriter"}
    ]
    config.write_text(yaml.safe_dump(values))
    assert main(["fit", "--config", str(config)]) == 0
    run = tmp_path / "runs" / "version_0"
    fitted = json.loads((run / "scores.json").read_text())
    assert {"val/glue_rte/accuracy", "val/overall"} <= set(fitted["best"]["scores"])
    (ckpt,) = (run / "checkpoints").glob("last*.ckpt")
    assert main(["test", "--config", str(config), "--ckpt_path", str(ckpt)]) == 0
    (tested,) = run.glob("test/version_*/scores.json")
    assert {"test/glue_cola/matthews", "test/glue_mrpc/f1", "test/glue_rte/accuracy"} <= set(
        json.loads(tested.read_text())["scores"]
    )
    assert main(["predict", "--config", str(config), "--ckpt_path", str(ckpt)]) == 0
    out = run / "glue_submission"
    assert sorted(p.name for p in out.iterdir()) == ["CoLA.tsv", "MRPC.tsv", "RTE.tsv"]
    mrpc = (out / "MRPC.tsv").read_text().splitlines()
    assert mrpc[0] == "index\tprediction" and mrpc[1].split("\t")[0] == "7"  # MRPC/test.tsv's index
    rte = {row.split("\t")[1] for row in (out / "RTE.tsv").read_text().splitlines()[1:]}
    assert rte <= {"entailment", "not_entailment"}
