"""Two-stage training, "joint, then specialise", in one command.

Stage 1 (``configs/two_stage/joint.yaml`` over a base config) trains the shared encoder, the PALs
and the heads on all tasks together. Stage 2 (``configs/two_stage/specialise.yaml`` over the same
base) starts from stage 1's best checkpoint (``--model.init_args.init_from``: weights only, a new
run with its own optimizer and schedule), freezes the shared encoder and trains every task's PALs
and head. Both stages run through ``pal-lightning fit`` as subprocesses, each into its own run
folder; the script prints both stages' dev scores and the difference, and writes them to
``<out>/two_stage.json``.

Usage::

    export PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1
    python benchmarks/two_stage.py --base configs/quickstart.yaml
    python benchmarks/two_stage.py --stage1-ckpt runs/two_stage/joint/version_0/checkpoints/best-...ckpt
    python benchmarks/two_stage.py -- --trainer.max_steps 20     # extra options for both stages

Options after ``--`` go to both stages; ``--stage1-args`` / ``--stage2-args`` (one quoted string
each) to one stage only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/cli_runs.py, also when loaded by path
from cli_runs import fit_command, run_logged  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
JOINT = REPO / "configs" / "two_stage" / "joint.yaml"
SPECIALISE = REPO / "configs" / "two_stage" / "specialise.yaml"
MONITOR = "val/overall"


def stage_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a finished stage hands on: its best (``scores.json``), else its ``last.ckpt``.

    Raises:
        SystemExit: when the run wrote neither.
    """
    scores = run_dir / "scores.json"
    if scores.is_file():
        best = json.loads(scores.read_text()).get("best_model_path")
        if best and Path(best).is_file():
            return Path(best)
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.is_file():
        return last
    raise SystemExit(f"two_stage: stage 1 in {run_dir} wrote no checkpoint to start stage 2 from")


def stage_scores(run_dir: Path | None) -> dict[str, Any]:
    """The best validation's scores of a run (``scores.json``), or an empty record."""
    if run_dir is None or not (run_dir / "scores.json").is_file():
        return {}
    payload = json.loads((run_dir / "scores.json").read_text())
    best = payload.get("best") or {}
    return {"overall": payload.get("overall"), "scores": best.get("scores", {}), "step": best.get("step")}


def run_stage(
    name: str, configs: Sequence[Path], args: argparse.Namespace, options: Sequence[str]
) -> tuple[str, Path | None]:
    """One ``fit`` into ``<out>/<name>``; returns its status and run folder."""
    root = args.out / name
    cmd = fit_command(configs, root, args.data_dir, args.seed, options, args.cli_args)
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    print(f"two_stage: {name}: {shlex.join(cmd)}", flush=True)
    status, wall, run_dir = run_logged(cmd, root, root / f"{name}.log", env, REPO, args.timeout)
    print(f"two_stage: {name}: {status} in {wall:.0f} s, run folder {run_dir}", flush=True)
    return status, run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=REPO / "configs" / "quickstart.yaml", help="base config")
    parser.add_argument("--joint", type=Path, default=JOINT, help="stage-1 overlay")
    parser.add_argument("--specialise", type=Path, default=SPECIALISE, help="stage-2 overlay")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("PAL_DATA_DIR", "data")))
    parser.add_argument("--out", type=Path, default=Path("runs/two_stage"), help="run folders go below")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--stage1-ckpt", type=Path, help="skip stage 1 and specialise this checkpoint")
    parser.add_argument("--stage1-args", default="", help="extra fit options for stage 1 only")
    parser.add_argument("--stage2-args", default="", help="extra fit options for stage 2 only")
    parser.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per stage")
    parser.add_argument("cli_args", nargs="*", help="after --: extra fit options for both stages")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()

    stage1: dict[str, Any] = {}
    if args.stage1_ckpt is not None:
        if not args.stage1_ckpt.is_file():
            parser.error(f"--stage1-ckpt {args.stage1_ckpt} does not exist")
        ckpt = args.stage1_ckpt.resolve()
    else:
        status, run_dir = run_stage("joint", [args.base, args.joint], args, shlex.split(args.stage1_args))
        if status != "ok" or run_dir is None:
            print(f"two_stage: stage 1 failed ({status}); stage 2 not run", file=sys.stderr)
            return 1
        ckpt = stage_checkpoint(run_dir)
        stage1 = {"run_dir": str(run_dir), **stage_scores(run_dir)}
    stage1["checkpoint"] = str(ckpt)
    options = [f"--model.init_args.init_from={ckpt}", *shlex.split(args.stage2_args)]
    status, run_dir = run_stage("specialise", [args.base, args.specialise], args, options)
    stage2 = {"run_dir": str(run_dir) if run_dir else None, "status": status, **stage_scores(run_dir)}
    result: dict[str, Any] = {"stage1": stage1, "stage2": stage2}
    if stage1.get("overall") is not None and stage2.get("overall") is not None:
        result["delta_overall"] = stage2["overall"] - stage1["overall"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "two_stage.json").write_text(json.dumps(result, indent=2))
    for name, record in (("joint", stage1), ("specialise", stage2)):
        overall = record.get("overall")
        shown = f"{overall:.4f}" if isinstance(overall, float) else "-"
        print(f"two_stage: {name:<10} {MONITOR} {shown}")
    if "delta_overall" in result:
        print(f"two_stage: specialise - joint {result['delta_overall']:+.4f}")
    print(f"two_stage: wrote {args.out / 'two_stage.json'}")
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
