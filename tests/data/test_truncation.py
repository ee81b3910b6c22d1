"""Truncation at ``max_length`` through the DataModule, with the real tokenizer.

Expected token ids are assembled by hand from the tokenizer's output for each sentence alone
(no truncation): ``[CLS] a [SEP] b [SEP]`` with the *longer* sentence cut from its end (the
tokenizer's ``longest_first``), each siamese side cut on its own, single sentences cut at the end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pal_lightning.data import MultiTaskDataModule
from pal_lightning.testing import write_cs224n_quirks, write_lines

MAX = 16
LONG = "the film was long and the plot was dull but the music and the actor were great fun to watch"
SHORT = "a good story"


def _tokens(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _rows(enc) -> list[list[int]]:  # noqa: ANN001
    return [enc.input_ids[enc.offsets[i] : enc.offsets[i + 1]].tolist() for i in range(len(enc.offsets) - 1)]


def _dm(tmp_path: Path, **kw) -> MultiTaskDataModule:
    data = write_cs224n_quirks(tmp_path / "data", bad_rows=False)
    write_lines(
        data / "quora-train.csv",
        [
            "\tid\tsentence1\tsentence2\tis_duplicate",
            f"0\tq0\t{LONG}\t{SHORT}\t1.0",  # first sentence longer: it is the one cut
            f"1\tq1\t{SHORT}\t{LONG}\t0.0",  # second sentence longer
            f"2\tq2\t{SHORT}\t{SHORT}\t0.0",  # fits: nothing cut
        ],
    )
    write_lines(
        data / "ids-sst-train.csv", ["\tid\tsentence\tsentiment", f"0\ts0\t{LONG}\t1", f"1\ts1\t{SHORT}\t2"]
    )
    return MultiTaskDataModule(data_dir=str(data), cache_dir=False, max_length=MAX, **kw)


def test_cross_pairs_cut_the_longer_sentence(tmp_path: Path, tokenizer) -> None:  # noqa: ANN001
    dm = _dm(tmp_path, tasks=["qqp", "sst"])
    split = dm.load_split("qqp", "train")
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    long, short = _tokens(tokenizer, LONG), _tokens(tokenizer, SHORT)
    assert len(long) + len(short) + 3 > MAX and 2 * len(short) + 3 <= MAX
    keep = MAX - 3 - len(short)
    rows = _rows(split.encodings[""])
    assert rows[0] == [cls, *long[:keep], sep, *short, sep]
    assert rows[1] == [cls, *short, sep, *long[:keep], sep]
    assert rows[2] == [cls, *short, sep, *short, sep]
    types = split.encodings[""].token_type_ids
    first = types[split.encodings[""].offsets[0] : split.encodings[""].offsets[1]].tolist()
    assert first == [0] * (keep + 2) + [1] * (len(short) + 1)  # segment ids follow the cut

    sst = _rows(dm.load_split("sst", "train").encodings[""])
    assert sst[0] == [cls, *long[: MAX - 2], sep] and sst[1] == [cls, *short, sep]


def test_siamese_sides_are_cut_on_their_own(tmp_path: Path, tokenizer) -> None:  # noqa: ANN001
    dm = _dm(tmp_path, tasks=["qqp"], pair_encoding="siamese")
    split = dm.load_split("qqp", "train")
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    long, short = _tokens(tokenizer, LONG), _tokens(tokenizer, SHORT)
    a, b = _rows(split.encodings["a"]), _rows(split.encodings["b"])
    assert a[0] == [cls, *long[: MAX - 2], sep] and b[0] == [cls, *short, sep]
    assert a[1] == [cls, *short, sep] and b[1] == [cls, *long[: MAX - 2], sep]
    assert max(np.diff(split.encodings["a"].offsets)) == MAX
