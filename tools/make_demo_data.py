"""Build pal_lightning/data/sources/demo/: a few hundred real rows per task from the CS224N minBERT files.

Each demo file keeps the source file's header and a fixed random sample of its lines (seed 0), in
the source order, byte for byte. A line is kept only if it parses on its own (tab-separated,
standard quoting) into all header columns with a non-empty label, so the demo has no malformed rows.

    python tools/make_demo_data.py /work/shared/data/cs224n-minbert
"""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "pal_lightning" / "demo_data"
#: source file -> rows kept
PLAN = {
    "ids-sst-train.csv": 400,
    "ids-sst-dev.csv": 200,
    "quora-train.csv": 400,
    "quora-dev.csv": 200,
    "sts-train.csv": 400,
    "sts-dev.csv": 200,
}


def well_formed(line: str, width: int) -> bool:
    fields = next(csv.reader([line], delimiter="\t"))
    return len(fields) == width and all(f.strip() for f in fields[1:])


def main(source: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, n in PLAN.items():
        lines = (Path(source) / name).read_text(encoding="utf-8").splitlines(keepends=True)
        header, rows = lines[0], lines[1:]
        width = len(next(csv.reader([header], delimiter="\t")))
        good = [i for i, line in enumerate(rows) if well_formed(line.rstrip("\n"), width)]
        keep = sorted(random.Random(0).sample(good, n))
        (OUT / name).write_text(header + "".join(rows[i] for i in keep), encoding="utf-8")
        print(f"{name}: {n} of {len(rows)} rows")


if __name__ == "__main__":
    main(sys.argv[1])
