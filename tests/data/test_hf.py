"""Built-in tasks name their source and, without a data folder, read their public Hugging Face copies;
``format: hf`` reads hub datasets, ``save_to_disk`` folders and a ``DatasetDict`` (issue 12, item 1). The hub
is small local copies in its own layout (``serve_hub``); a hub id without a copy fails as offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

datasets = pytest.importorskip("datasets")

from pal_lightning.core.errors import PalUserError  # noqa: E402
from pal_lightning.data import MultiTaskDataModule  # noqa: E402
from pal_lightning.data.sources import hf as hf_sources  # noqa: E402
from pal_lightning.data.sources.hf import HUB_COPIES  # noqa: E402
from pal_lightning.data.sources.readers import check_files_exist, read_split  # noqa: E402
from pal_lightning.tasks.catalogue import BUILTIN_TASKS  # noqa: E402
from pal_lightning.tasks.specs import TaskSpec, get_task  # noqa: E402

STARTER = "github.com/gpoesia/minbert-default-final-project"

SST5 = {
    "train": [("a gripping , funny film", 4), ("dull and long", 0), ("it 's fine", 2)],
    "dev": [("great acting", 3), ("awful plot", 1)],
    "test": [("a good story", 3), ("bad music", 0)],
}
QQP = {  # (question1, question2, label); GLUE hides the test labels as -1
    "train": [
        ("How do I cook rice?", "What is the way to cook rice?", 1),
        ("Why is the sky blue?", "Who won?", 0),
    ],
    "validation": [("Is tea good?", "Is tea healthy?", 1), ("What is AI?", "Where is Rome?", 0)],
    "test": [("How old is the moon?", "What is the moon's age?", -1)],
}
STSB = {  # (sentence1, sentence2, label 0..5 float); test labels -1
    "train": [
        ("A man plays a guitar.", "A man plays guitar.", 4.75),
        ("A cat sleeps.", "A car drives.", 0.5),
    ],
    "validation": [("A dog runs.", "A dog is running.", 4.2), ("Kids play.", "Stocks fell.", 0.0)],
    "test": [("A woman sings.", "A lady sings.", -1.0)],
}


def write_hub_copies(root: Path) -> None:
    """Local copies of SetFit/sst5 and nyu-mll/glue (qqp, stsb) in the files and columns of the hub."""
    sst5 = root / "SetFit" / "sst5"
    sst5.mkdir(parents=True)
    names = ["very negative", "negative", "neutral", "positive", "very positive"]
    for split, rows in SST5.items():
        lines = [json.dumps({"text": t, "label": y, "label_text": names[y]}) for t, y in rows]
        (sst5 / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    qqp_label = datasets.ClassLabel(names=["not_duplicate", "duplicate"])
    for config, table, label in (("qqp", QQP, qqp_label), ("stsb", STSB, datasets.Value("float32"))):
        folder = root / "nyu-mll" / "glue" / config
        folder.mkdir(parents=True)
        columns = ("question1", "question2") if config == "qqp" else ("sentence1", "sentence2")
        features = datasets.Features(
            {
                **dict.fromkeys(columns, datasets.Value("string")),
                "label": label,
                "idx": datasets.Value("int32"),
            }
        )
        for split, rows in table.items():
            values = {name: [r[k] for r in rows] for k, name in enumerate((*columns, "label"))}
            ds = datasets.Dataset.from_dict({**values, "idx": list(range(len(rows)))}, features=features)
            ds.to_parquet(str(folder / f"{split}-00000-of-00001.parquet"))


@pytest.fixture
def hub(tmp_path: Path, serve_hub: Any) -> Path:
    """``datasets.load_dataset`` with the hub replaced by local copies; other hub ids fail as offline."""
    root = tmp_path / "hub"
    write_hub_copies(root)

    def local(path: str, name: str | None) -> tuple[str] | None:
        folder = root / path / (name or "")
        return (str(folder),) if path in ("SetFit/sst5", "nyu-mll/glue") and folder.is_dir() else None

    serve_hub(local)
    return root


@pytest.fixture
def no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory without ./data, and no PAL_DATA_DIR: no data folder is given."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("PAL_DATA_DIR", raising=False)
    return work


def _config_without_a_folder(tmp_path: Path) -> Path:
    """The tiny fit config of pal_lightning.testing with no data folder at all."""
    import yaml

    from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "files"))
    values = yaml.safe_load(config.read_text())
    del values["data"]["init_args"]["data_dir"]
    config.write_text(yaml.safe_dump(values))
    return config


def test_every_builtin_task_names_its_source() -> None:
    # by hand: the starter's file prefix of each CS224N task, and each task's public copy
    expected = {
        "sst": ("ids-sst-", "SetFit/sst5"),
        "qqp": ("quora-", "nyu-mll/glue, config qqp"),
        "sts": ("sts-", "nyu-mll/glue, config stsb"),
        "cfimdb": ("ids-cfimdb-", "No public Hugging Face copy"),
        "sst2": ("train_full.tsv", "nyu-mll/glue, config sst2"),
    }
    assert set(expected) == set(BUILTIN_TASKS)
    for name, (files, public) in expected.items():
        source = get_task(name).source
        assert files in source and public in source, name
        assert (STARTER in source) == (name != "sst2"), name


def test_hub_copies_are_the_builtin_tasks_with_hub_columns() -> None:
    expected = {  # hub id, config, text columns, id column: from the hub's dataset cards
        "sst": ("SetFit/sst5", None, ("text",), None),
        "qqp": ("nyu-mll/glue", "qqp", ("question1", "question2"), "idx"),
        "sts": ("nyu-mll/glue", "stsb", ("sentence1", "sentence2"), "idx"),
        "sst2": ("nyu-mll/glue", "sst2", ("sentence",), "idx"),
    }
    assert set(HUB_COPIES) == set(expected)
    for name, (path, config, columns, id_column) in expected.items():
        copy, spec = HUB_COPIES[name], BUILTIN_TASKS[name]
        assert (copy.hf_path, copy.hf_name, copy.text_columns, copy.id_column) == (
            path,
            config,
            columns,
            id_column,
        )
        assert copy.format == "hf" and copy.label_column == "label"
        assert copy.files == {"train": "train", "dev": "validation", "test": "test"}
        same = ("kind", "num_labels", "label_range", "metrics")
        assert all(getattr(copy, field) == getattr(spec, field) for field in same), name


def test_a_data_folder_keeps_the_files(
    tmp_path: Path, no_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = [get_task("sst"), get_task("cfimdb"), get_task("qqp").replace(files={"train": "mine.csv"})]
    read = hf_sources.with_hub_copies(specs, None)
    # no folder: the unchanged built-ins with a copy read it; cfimdb has none; a changed qqp keeps its files
    assert [s.format for s in read] == ["hf", "cs224n", "cs224n"] and read[0] == HUB_COPIES["sst"]
    assert hf_sources.with_hub_copies(specs, tmp_path) == specs
    monkeypatch.setenv("PAL_DATA_DIR", str(tmp_path))
    assert hf_sources.with_hub_copies(specs, None) == specs
    monkeypatch.delenv("PAL_DATA_DIR")
    (no_folder / "data").mkdir()
    assert hf_sources.with_hub_copies(specs, None) == specs


def test_without_a_folder_builtin_tasks_read_the_hub(hub: Path, no_folder: Path, tmp_path: Path) -> None:
    dm = MultiTaskDataModule(tasks=["sst", "qqp", "sts"], cache_dir=tmp_path / "cache", max_length=32)
    assert dm.hparams["tasks"] == ["sst", "qqp", "sts"]  # saved as given, not as read
    dm.setup("fit")
    assert dm.train_sizes == {"sst": 3, "qqp": 2, "sts": 2}
    sst = dm.load_split("sst", "train")
    assert sst.labels.tolist() == [4, 0, 2] and sst.ids.tolist() == ["0", "1", "2"]
    assert dm.load_split("sst", "dev").labels.tolist() == [3, 1]
    qqp = dm.load_split("qqp", "dev")  # our dev is GLUE's validation split; ids are GLUE's idx
    assert qqp.labels.tolist() == [1, 0] and qqp.ids.tolist() == ["0", "1"]
    assert dm.load_split("sts", "train").labels.tolist() == pytest.approx([4.75, 0.5])
    # GLUE's hidden test labels (-1) make unlabelled splits; SetFit/sst5's test split is labelled
    assert dm.load_split("qqp", "test").labels is None and dm.load_split("sts", "test").labels is None
    assert dm.load_split("sst", "test").labels.tolist() == [3, 0]
    assert {b["task"] for b in dm.test_dataloader()} == {"sst"}


def test_the_token_cache_follows_the_dataset_files(hub: Path, no_folder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    def sst_train() -> list[int]:
        hf_sources.clear_loaded()
        dm = MultiTaskDataModule(tasks=["sst"], cache_dir=cache, max_length=32)
        return dm.load_split("sst", "train").labels.tolist()

    assert sst_train() == [4, 0, 2]
    files = sorted(cache.rglob("*"))
    assert sst_train() == [4, 0, 2] and sorted(cache.rglob("*")) == files  # read from the cache
    # a new version of the dataset (a changed label): new hub cache files, so tokenised again
    lines = (hub / "SetFit" / "sst5" / "train.jsonl").read_text().splitlines()
    lines[1] = json.dumps({"text": "dull and long", "label": 1, "label_text": "negative"})
    (hub / "SetFit" / "sst5" / "train.jsonl").write_text("\n".join(lines) + "\n")
    assert sst_train() == [4, 1, 2]


def test_offline_without_a_folder_is_one_line_naming_both_ways(
    hub: Path,
    no_folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pal_lightning.cli.main import USER_ERROR_EXIT, main

    config = _config_without_a_folder(tmp_path)

    def offline(path: str, name: str | None = None, **kwargs: Any) -> Any:
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert main(["fit", "--config", str(config)]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("pal-lightning: error:")]
    for fragment in ("SetFit/sst5", "--data.data_dir", "PAL_DATA_DIR", STARTER, "go online", "data_dir demo"):
        assert fragment in line, fragment
    assert not (tmp_path / "runs").exists()


def test_a_hub_dataset_without_the_asked_split_is_one_line(
    hub: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from pal_lightning.cli.main import USER_ERROR_EXIT, main
    from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

    # SetFit/sst5's dev split is "validation"; a task asking for "dev" names a split it does not have
    mine = {
        "name": "mine",
        "num_labels": 5,
        "label_range": [0, 4],
        "format": "hf",
        "hf_path": "SetFit/sst5",
        "files": {"train": "train", "dev": "dev"},
        "text_columns": ["text"],
        "label_column": "label",
        "id_column": None,
    }
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "files"), tasks=["sst", mine])
    assert main(["fit", "--config", str(config)]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("pal-lightning: error:")]
    for fragment in ("SetFit/sst5", "no split 'dev'", "its splits are test, train, validation"):
        assert fragment in line, fragment
    assert "Traceback" not in err and not (tmp_path / "runs").exists()
    assert yaml.safe_load(config.read_text())["model"]["init_args"]["tasks"][1]["files"]["dev"] == "dev"


def test_a_dataset_dict_and_a_saved_folder_serve_only_their_splits(tmp_path: Path) -> None:
    hf_sources.clear_loaded()
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"s": ["good", "bad", "fine"], "y": [1, 0, 1]}),
            "validation": datasets.Dataset.from_dict({"s": ["great", "awful"], "y": [1, 0]}),
        }
    )
    fields: dict[str, Any] = {"name": "mine", "text_columns": ("s",), "label_column": "y", "id_column": None}
    spec = hf_sources.dataset_task(dd, tmp_path / "saved", **fields)
    assert spec.format == "hf" and spec.hf_path == str(tmp_path / "saved")
    assert read_split(spec, "train", tmp_path).labels.tolist() == [1, 0, 1]
    assert read_split(spec, "dev", tmp_path).texts == [["great", "awful"]]
    # no test split: not served (the default split names), refused when named
    dm = MultiTaskDataModule(tasks=[spec], data_dir=tmp_path, cache_dir=False, max_length=16)
    dm.prepare_data()
    assert not dm.splits.exists(spec, "test")
    with pytest.raises(PalUserError, match="No task has a labelled test split"):
        dm.test_dataloader()
    named = spec.replace(files={"train": "train", "dev": "validation", "test": "test"})
    with pytest.raises(PalUserError, match=r"has no split 'test' .*its splits are train, validation\. Name"):
        check_files_exist([(named, "test")], tmp_path)
    # a saved single Dataset is the training split; a relative folder is found in the data directory
    dd["train"].save_to_disk(str(tmp_path / "one"))
    one = TaskSpec(format="hf", hf_path="one", **fields)
    assert read_split(one, "train", tmp_path).labels.tolist() == [1, 0, 1]
    # nothing is overwritten
    with pytest.raises(PalUserError, match="already exists and is not empty"):
        hf_sources.dataset_task(dd, tmp_path / "one", **fields)
    assert datasets.load_from_disk(str(tmp_path / "one"))["y"] == [1, 0, 1]


def test_the_docs_format_hf_example_reads_as_written(hub: Path, tmp_path: Path) -> None:
    """The own-task example of docs/data.md ("Your own task: `format: hf`") reads as written."""
    import re

    import yaml

    from pal_lightning.tasks.specs import resolve_tasks

    page = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    section = page.split("## Your own task: `format: hf`", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    sst, mrpc, topics = resolve_tasks(yaml.safe_load(block)["model"]["init_args"]["tasks"])
    assert sst == get_task("sst") and (mrpc.hf_path, mrpc.hf_name) == ("nyu-mll/glue", "mrpc")
    # GLUE MRPC in the hub's layout
    folder = hub / "nyu-mll" / "glue" / "mrpc"
    folder.mkdir()
    pairs = {
        "train": [("He left.", "He went away.", 1), ("It rains.", "Cats purr.", 0)],
        "validation": [("A", "B", 0)],
    }
    for split, rows in pairs.items():
        columns = {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows]}
        columns.update(label=[r[2] for r in rows], idx=[10 + i for i in range(len(rows))])
        datasets.Dataset.from_dict(columns).to_parquet(str(folder / f"{split}-00000-of-00001.parquet"))
    data = tmp_path / "data"
    train = read_split(mrpc, "train", data)
    assert train.texts == [["He left.", "It rains."], ["He went away.", "Cats purr."]]
    assert train.ids == ["10", "11"]
    assert read_split(mrpc, "dev", data).labels.tolist() == [0]
    # the user's local csv, jsonl and parquet files: four classes named by words (sorted: business 0,
    # politics 1, science 2, sports 3), no label_range
    (data / "topics").mkdir(parents=True)
    (data / "topics" / "train.csv").write_text(
        'text,topic\nwon the cup,sports\n"votes, polls",politics\nnew chip,science\nshares fell,business\n'
    )
    (data / "topics" / "dev.jsonl").write_text('{"text": "a goal", "topic": "sports"}\n')
    datasets.Dataset.from_dict({"text": ["rates"], "topic": ["business"]}).to_parquet(
        str(data / "topics" / "test.parquet")
    )
    train = read_split(topics, "train", data)
    assert train.texts == [["won the cup", "votes, polls", "new chip", "shares fell"]]
    assert train.labels.tolist() == [3, 1, 2, 0]
    assert read_split(topics, "dev", data).labels.tolist() == [3]
    assert read_split(topics, "test", data).labels.tolist() == [0]


def test_pal_lightning_fit_trains_on_the_hub_copies(hub: Path, no_folder: Path, tmp_path: Path) -> None:
    """End to end through the CLI: no data folder, the built-in tasks from their hub copies."""
    import csv

    import yaml

    from pal_lightning.cli.main import main

    config = _config_without_a_folder(tmp_path)
    assert main(["fit", "--config", str(config)]) == 0
    (run,) = (tmp_path / "runs").glob("version_*")
    with (run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/sst/accuracy")]
    # validated on the hub copies' dev splits: 2 SST-5 and 2 QQP rows, so accuracies are 0, 0.5 or 1
    assert rows and all(float(r[f"val/{t}/accuracy"]) in (0, 0.5, 1) for r in rows for t in ("sst", "qqp"))
    # and 2 STS-B pairs: the Pearson correlation of two points is +1 or -1 (10 rows of the files: hardly ever)
    assert all(abs(float(r["val/sts/pearson"])) == pytest.approx(1.0, abs=1e-5) for r in rows)
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["init_args"].get("data_dir") is None
