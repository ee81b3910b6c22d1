"""Small data folders in the CS224N minBERT starter layout for tests (``sst``, ``qqp``, ``sts``). Tests
count their rows, lengths and ids: neither may change.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

#: The words of :func:`write_cs224n_data`.
MOVIE_WORDS = tuple("movie plot great awful fun dull story scene music end actor good bad long short".split())
#: The words of :func:`write_cs224n_quirks`.
REVIEW_WORDS = tuple(
    "the a good bad film movie plot actor great awful fun dull long short story scene music end".split()
)


def sentence(i: int, words: Sequence[str] = REVIEW_WORDS, length: int | None = None) -> str:
    """The ``i``-th deterministic sentence: ``length`` (default 3 to 13) words of ``words`` from ``3 i`` on."""
    n = length if length is not None else 3 + (i * 7) % 11
    return " ".join(words[(i * 3 + k) % len(words)] for k in range(n))


def write_lines(path: Path, lines: Sequence[str]) -> Path:
    """Each line followed by a newline, as UTF-8; returns ``path``."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _short(i: int) -> str:
    return sentence(i, MOVIE_WORDS, 3 + (i * 5) % 7)


def write_cs224n_data(
    root: str | os.PathLike[str], n_train: int = 24, n_dev: int = 10, n_test: int = 6
) -> Path:
    """A clean data folder of ``n_train`` / ``n_dev`` / ``n_test`` rows per task (STS's test split labelled)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sst_h, pair_h = "\tid\tsentence\tsentiment", "\tid\tsentence1\tsentence2\t{label}"
    write_lines(
        root / "ids-sst-train.csv", [sst_h, *(f"{i}\tst{i}\t {_short(i)} .\t{i % 5}" for i in range(n_train))]
    )
    write_lines(
        root / "ids-sst-dev.csv", [sst_h, *(f"{i}\tsd{i}\t {_short(i + 3)} .\t{i % 5}" for i in range(n_dev))]
    )
    write_lines(
        root / "ids-sst-test-student.csv",
        ["0\t\tid\tsentence", *(f"{i}\t{i}.0\tss{i}\t {_short(i + 7)}" for i in range(n_test))],
    )
    for prefix, label, scale in (("quora", "is_duplicate", 1), ("sts", "similarity", 5)):
        for split, n, off in (("train", n_train, 0), ("dev", n_dev, 11)):
            rows = [
                f"{i}\t{prefix[0]}{split[0]}{i}\t{_short(i + off)}\t{_short(i + off + 1)}\t"
                + f"{(i % (scale + 1)) if scale > 1 else i % 2:.1f}"
                for i in range(n)
            ]
            write_lines(root / f"{prefix}-{split}.csv", [pair_h.format(label=label), *rows])
        labelled = prefix == "sts"
        write_lines(
            root / f"{prefix}-test-student.csv",
            [
                "\tid\tsentence1\tsentence2" + ("\tsimilarity" if labelled else ""),
                *(
                    f"{i}\t{prefix[0]}x{i}\t{_short(i)}\t{_short(i + 2)}"
                    + (f"\t{i % 6}.0" if labelled else "")
                    for i in range(n_test)
                ),
            ],
        )
    return root


def write_cs224n_quirks(
    root: str | os.PathLike[str], n_sst: int = 40, n_qqp: int = 60, n_sts: int = 30, bad_rows: bool = True
) -> Path:
    """A data folder with the starter files' quirks (and, with ``bad_rows``, one row of every kind the
    readers skip)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sst_h, pair_h = "\tid\tsentence\tsentiment", "\tid\tsentence1\tsentence2"
    sst = [f"{i}\tsst{i:04d}\t {sentence(i)} -LRB- x -RRB- .\t{i % 5}" for i in range(n_sst)]
    qqp = [f"{i}\tqqp{i:04d}\t{sentence(i)}?\t{sentence(i + 1)}?\t{float(i % 2)}" for i in range(n_qqp)]
    qqp.insert(2, '5000\tqqpquote\t"""What is """"staff work"""" here?"""\tWhat is staff work?\t1.0')
    sts = [f"{i}\tsts{i:04d}\t{sentence(i)}\t{sentence(i + 2)}\t{(i % 26) / 5:.1f}" for i in range(n_sts)]
    if bad_rows:
        sst.append(f"{n_sst}\tsstbad1\t a fine sentence\t7")  # label out of range
        sst.append(f"{n_sst + 1}\tsstbad2\t   \t2")  # empty text
        qqp.append('9001\tqqpbad1\t"""Which is the best RO water purifier?"\t\t')  # unclosed quote
        qqp.append("9002\tqqpbad2\tfirst question?\tsecond question?\tyes")  # non-numeric label
        sts.append(f"{n_sts}\tstsbad1\tone sentence\tanother sentence\t5.5")  # score out of range
    files: dict[str, tuple[str, list[str]]] = {
        "ids-sst-train.csv": (sst_h, sst),
        "ids-sst-dev.csv": (sst_h, [f"{i}\tsstdev{i:03d}\t {sentence(i + 5)}\t{i % 5}" for i in range(12)]),
        "ids-sst-test-student.csv": (
            "0\t\tid\tsentence",
            [f"{i}\t{i}.0\tssttest{i:03d}\t {sentence(i + 9)}" for i in range(9)],
        ),
        "quora-train.csv": (pair_h + "\tis_duplicate", qqp),
        "quora-dev.csv": (
            pair_h + "\tis_duplicate",
            [
                f"{i}\tqqpdev{i:03d}\t{sentence(i + 2)}?\t{sentence(i + 3)}?\t{float(i % 2)}"
                for i in range(14)
            ],
        ),
        "quora-test-student.csv": (
            pair_h,
            [f"{i}\tqqptest{i:03d}\t{sentence(i)}?\t{sentence(i + 4)}?" for i in range(7)],
        ),
        "sts-train.csv": (pair_h + "\tsimilarity", sts),
        "sts-dev.csv": (
            pair_h + "\tsimilarity",
            [f"{i}\tstsdev{i:03d}\t{sentence(i)}\t{sentence(i + 5)}\t{(i % 6):.1f}" for i in range(10)],
        ),
        "sts-test-student.csv": (
            pair_h,
            [f"{i}\tststest{i:03d}\t{sentence(i)}\t{sentence(i + 6)}" for i in range(8)],
        ),
    }
    for name, (header, rows) in files.items():
        write_lines(root / name, [header, *rows])
    return root
