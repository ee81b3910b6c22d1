"""The README's score figures, measured: the demo and the main job, as their README blocks run them.

Runs ``pal-lightning fit --config configs/demo.yaml`` (and, with ``--quickstart``, the main job
``configs/quickstart.yaml``) in a scratch folder, reads each run's ``scores.json`` and writes one JSON
record per command: the dev scores, the precision ``auto`` chose, the machine, the commit. The README
quotes these records, and ``tests/benchmarks/test_readme_figures.py`` checks that it does, so a change
that moves a score fails the suite until the record is re-measured and the README follows.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/readme_figures.py --out benchmarks/results_quality/readme_figures.json
    OMP_NUM_THREADS=1 python benchmarks/readme_figures.py --quickstart --out ...   # + the main job (CS224N data)
    python benchmarks/readme_figures.py --from-run demo=runs/demo/version_0 --out ...  # a run already made
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"demo": "configs/demo.yaml", "quickstart": "configs/quickstart.yaml"}
METRICS = ("val/sst/accuracy", "val/qqp/accuracy", "val/qqp/f1", "val/sts/pearson", "val/sts/spearman")


def record_of(run: Path) -> dict[str, Any]:
    """The figures of one finished run folder: overall and per-task dev scores of the best step."""
    scores = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    best = scores["best"]
    return {
        "overall": round(best["scores"]["val/overall"], 4),
        "scores": {k: round(best["scores"][k], 4) for k in METRICS},
        "step": best["step"],
    }


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument(
        "--quickstart", action="store_true", help="also run the main job (needs PAL_DATA_DIR)"
    )
    parser.add_argument(
        "--from-run",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="take NAME's figures from a finished run folder instead of running it",
    )
    args = parser.parse_args(argv)
    given = dict(item.split("=", 1) for item in args.from_run)
    names = ["demo", "quickstart"] if args.quickstart or "quickstart" in given else ["demo"]
    records: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            command = ["pal-lightning", "fit", "--config", CONFIGS[name]]
            if name in given:
                run, wall = Path(given[name]), None
            else:
                root = Path(scratch) / name
                start = time.perf_counter()
                subprocess.run([*command, "--trainer.default_root_dir", str(root)], cwd=REPO, check=True)
                run, wall = root / "version_0", round(time.perf_counter() - start, 1)
            records[name] = {**record_of(run), "command": " ".join(command), "wall_s": wall}
    from pal_lightning.cli.precision import resolve_precision

    records["source"] = {
        "precision": str(resolve_precision("auto", "cpu")),  # what `precision: auto` picks on this CPU
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
