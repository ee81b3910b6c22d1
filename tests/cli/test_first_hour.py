"""A user's first hour, as one walk-through on fixture data (issue "A user's own task, end to end", "Done
means"): no install step, a 4-class task of one's own with string labels in a csv beside the built-in
SST, ``fit --trainer.max_steps 20`` that ends with scores and the class names, ``predict`` that writes
the names, the saved model loaded with ``from_pretrained`` to ``predict``, ``encode`` and a pipeline, and
a file with 49 % bad rows that stops with one line naming the count and the first bad rows (the
threshold an option). The command lines run through the session's forked CLI driver (conftest.py)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

import pal_lightning
from pal_lightning import MultiTaskModule
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli, error_line

NAMES = ["business", "politics", "science", "sports"]  # classes 0..3: the train split's words, sorted
WORDS = {
    "business": "market shares",
    "politics": "vote senate",
    "science": "lab atoms",
    "sports": "goal match",
}


def write_topics(folder: Path, train: int = 48, dev: int = 16, bad: int = 0) -> None:
    """``topics/train.csv`` and ``dev.csv`` (columns text, topic: a class name); the last ``bad`` train rows
    have no label."""
    (folder / "topics").mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train), ("dev", dev)):
        with (folder / "topics" / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "topic"])
            for i in range(n):
                name = NAMES[(i * 7) % 4]  # every class in every split, in no sorted order
                label = "" if split == "train" and i >= n - bad else name
                writer.writerow([f"{WORDS[name]} number {i}", label])


#: The own task beside a built-in one, as docs/data.md ("Your own task") writes it.
MY_TASKS = {
    "model": {
        "init_args": {
            "tasks": [
                "sst",
                {
                    "name": "topics",
                    "num_labels": 4,
                    "format": "hf",
                    "files": {"train": "topics/train.csv", "dev": "topics/dev.csv"},
                    "text_columns": ["text"],
                    "label_column": "topic",
                    "id_column": None,
                },
            ],
            "pair_encoding": "cross",
        }
    },
    "data": {"init_args": {"predict_splits": ["dev"]}},
}


def test_a_users_first_hour(tmp_path: Path, forked_cli: ForkedCli) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder, bad_rows in ((good, 0), (bad, 49)):
        write_topics(write_cs224n_data(folder / "data"), train=100 if bad_rows else 48, bad=bad_rows)
        write_tiny_fit_config(folder, folder / "data")
        (folder / "my_tasks.yaml").write_text(yaml.safe_dump(MY_TASKS))
    fit = ["fit", "--config", "tiny.yaml", "--config", "my_tasks.yaml", "--trainer.max_steps", "20"]
    lenient = [*fit[:-1], "2", "--data.max_bad_rows_fraction", "0.5"]
    ran, stopped, let_through = forked_cli.run([(good, fit), (bad, fit), (bad, lenient)], workers=3)

    # fit: 20 steps end with the scores, the topics' class names among them
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "topics classes: 0 business, 1 politics, 2 science, 3 sports" in ran.stdout
    assert "Overall (dev):" in ran.stdout and "CS224N overall" not in ran.stdout  # not the CS224N trio
    assert any(line.split()[:2] == ["topics", "accuracy"] for line in ran.stdout.splitlines())
    run = good / "runs" / "version_0"
    assert (run / "checkpoints" / "best.ckpt").exists() and (run / "model" / "config.json").is_file()

    # 49 % of the train rows unusable: one line naming the count, the file and the first bad lines
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    line = error_line(stopped.stderr)  # beside Lightning's "Seed set to 7"
    assert "49 of 100 rows (49%) of task 'topics' (train) cannot be used" in line
    assert "train.csv" in line and "lines 53 (" in line  # the first bad row: line 53 of the file
    assert "--data.max_bad_rows_fraction" in line
    assert let_through.returncode == 0, let_through.stderr[-3000:]  # the threshold is an option

    # predict: the run's dev predictions with class names, and one's own sentences from the saved model
    (good / "mine.csv").write_text("id,text\n1,goal match tonight\n2,vote in the senate\n")
    predict_run = ["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]
    predict_mine = ["predict", "--predict.model", str(run / "model"), "--predict.task", "topics"]
    done = forked_cli.run(
        [(good, predict_run), (good, [*predict_mine, "--predict.input", "mine.csv"])], workers=2
    )
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-2000:] for d in done]
    rows = list(csv.reader((run / "predictions" / "topics-dev-output.csv").read_text().splitlines()))
    assert rows[0] == ["id", "label", *(f"p_{n}" for n in NAMES)] and len(rows) == 17
    assert {r[1] for r in rows[1:]} <= set(NAMES)
    mine = list(csv.reader((good / "mine-topics-predictions.csv").read_text().splitlines()))
    assert [r[0] for r in mine[1:]] == ["1", "2"] and {r[1] for r in mine[1:]} <= set(NAMES)

    # Python: from_pretrained, then predict, encode and a pipeline
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = MultiTaskModule.from_pretrained(run / "model")
    out = model.predict("topics", ["goal match tonight", "vote in the senate"])
    assert out.label_names == NAMES and set(out.labels) <= set(NAMES)
    assert model.predict("sst", ["a fine film"]).labels[0] in model.label_names["sst"]
    vectors = model.encode(["goal match tonight", "vote in the senate"], task="topics")
    assert vectors.shape == (2, model.encoder.hidden_size) and np.isfinite(vectors).all()
    assert model.encode("goal match tonight").shape == (model.encoder.hidden_size,)
    answer = pal_lightning.pipeline(run / "model", task="topics")("goal match tonight")
    assert answer == [
        {"label": out.labels[0], "score": pytest.approx(float(out.probabilities[0].max()), abs=1e-6)}
    ]
