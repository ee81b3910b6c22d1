"""Helpers for the data tests: small CS224N-format files with every kind of bad row."""

from __future__ import annotations

from pathlib import Path

WORDS = "the a good bad film movie plot actor great awful fun dull long short story scene music end".split()


def sentence(i: int, n: int | None = None) -> str:
    """A deterministic sentence of varying length."""
    n = n if n is not None else 3 + (i * 7) % 11
    return " ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(n))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def make_cs224n_dir(
    root: Path, n_sst: int = 40, n_qqp: int = 60, n_sts: int = 30, bad_rows: bool = True
) -> Path:
    """Write ids-sst-*, quora-*, sts-* files in the starter's layout (tab-separated, leftover index column).

    With ``bad_rows`` the train files also hold, in this order: a Quora row with an unclosed
    triple quote (sentence2 and label empty, like the real file), a Quora row with a
    non-numeric label, an SST row with an out-of-range label, an SST row with empty text and
    an STS row with an out-of-range score.
    """
    root.mkdir(parents=True, exist_ok=True)
    sst = ["\tid\tsentence\tsentiment"]
    sst += [f"{i}\tsst{i:04d}\t {sentence(i)} -LRB- x -RRB- .\t{i % 5}" for i in range(n_sst)]
    if bad_rows:
        sst.append(f"{n_sst}\tsstbad1\t a fine sentence\t7")  # label out of range
        sst.append(f"{n_sst + 1}\tsstbad2\t   \t2")  # empty text
    write_lines(root / "ids-sst-train.csv", sst)
    write_lines(
        root / "ids-sst-dev.csv",
        ["\tid\tsentence\tsentiment"]
        + [f"{i}\tsstdev{i:03d}\t {sentence(i + 5)}\t{i % 5}" for i in range(12)],
    )
    write_lines(
        root / "ids-sst-test-student.csv",
        ["0\t\tid\tsentence"] + [f"{i}\t{i}.0\tssttest{i:03d}\t {sentence(i + 9)}" for i in range(9)],
    )
    q = ["\tid\tsentence1\tsentence2\tis_duplicate"]
    q += [f"{i}\tqqp{i:04d}\t{sentence(i)}?\t{sentence(i + 1)}?\t{float(i % 2)}" for i in range(n_qqp)]
    q.insert(3, '5000\tqqpquote\t"""What is """"staff work"""" here?"""\tWhat is staff work?\t1.0')
    if bad_rows:
        q.append('9001\tqqpbad1\t"""Which is the best RO water purifier?"\t\t')  # unclosed quote
        q.append("9002\tqqpbad2\tfirst question?\tsecond question?\tyes")  # non-numeric label
    write_lines(root / "quora-train.csv", q)
    write_lines(
        root / "quora-dev.csv",
        ["\tid\tsentence1\tsentence2\tis_duplicate"]
        + [f"{i}\tqqpdev{i:03d}\t{sentence(i + 2)}?\t{sentence(i + 3)}?\t{float(i % 2)}" for i in range(14)],
    )
    write_lines(
        root / "quora-test-student.csv",
        ["\tid\tsentence1\tsentence2"]
        + [f"{i}\tqqptest{i:03d}\t{sentence(i)}?\t{sentence(i + 4)}?" for i in range(7)],
    )
    s = ["\tid\tsentence1\tsentence2\tsimilarity"]
    s += [f"{i}\tsts{i:04d}\t{sentence(i)}\t{sentence(i + 2)}\t{(i % 26) / 5:.1f}" for i in range(n_sts)]
    if bad_rows:
        s.append(f"{n_sts}\tstsbad1\tone sentence\tanother sentence\t5.5")  # score out of range
    write_lines(root / "sts-train.csv", s)
    write_lines(
        root / "sts-dev.csv",
        ["\tid\tsentence1\tsentence2\tsimilarity"]
        + [f"{i}\tstsdev{i:03d}\t{sentence(i)}\t{sentence(i + 5)}\t{(i % 6):.1f}" for i in range(10)],
    )
    write_lines(
        root / "sts-test-student.csv",
        ["\tid\tsentence1\tsentence2"]
        + [f"{i}\tststest{i:03d}\t{sentence(i)}\t{sentence(i + 6)}" for i in range(8)],
    )
    return root
