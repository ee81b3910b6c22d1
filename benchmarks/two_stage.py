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
    python benchmarks/two_stage.py --seeds 42 43 44 --jobs 3 --out runs/two_stage_seeds

Options after ``--`` go to both stages; ``--stage1-args`` / ``--stage2-args`` (one quoted string
each) to one stage only. With ``--seeds`` every seed runs both stages into ``<out>/seed<S>`` (up to
``--jobs`` seeds at once) and ``<out>/summary.json`` adds, per dev metric, each stage's mean and
standard deviation and the paired difference specialise - joint with its 95 % interval
(``benchmarks/paired_stats.py``): the evidence for "joint, then specialise, beats joint".
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/cli_runs.py, also when loaded by path
from cli_runs import fit_command, run_logged  # noqa: E402
from paired_stats import mean_std, paired_difference  # noqa: E402

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
    name: str,
    configs: Sequence[Path],
    args: argparse.Namespace,
    options: Sequence[str],
    out: Path,
    seed: int,
) -> tuple[str, Path | None]:
    """One ``fit`` into ``<out>/<name>``; returns its status and run folder."""
    root = out / name
    cmd = fit_command(configs, root, args.data_dir, seed, options, args.cli_args)
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
    parser.add_argument("--seeds", type=int, nargs="+", help="several seeds, each into <out>/seed<S>")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once (with --seeds)")
    parser.add_argument("--stage1-ckpt", type=Path, help="skip stage 1 and specialise this checkpoint")
    parser.add_argument("--stage1-args", default="", help="extra fit options for stage 1 only")
    parser.add_argument("--stage2-args", default="", help="extra fit options for stage 2 only")
    parser.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per stage")
    parser.add_argument("cli_args", nargs="*", help="after --: extra fit options for both stages")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    if args.stage1_ckpt is not None and not args.stage1_ckpt.is_file():
        parser.error(f"--stage1-ckpt {args.stage1_ckpt} does not exist")
    if args.seeds and args.stage1_ckpt is not None:
        parser.error("--seeds runs stage 1 for every seed; it does not take --stage1-ckpt")
    if not args.seeds:
        return two_stages(args, args.seed, args.out)[0]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(lambda seed: two_stages(args, seed, args.out / f"seed{seed}"), args.seeds))
    summary = summarise(dict(zip(args.seeds, (result for _, result in done), strict=True)))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    for key, row in summary["metrics"].items():
        diff = row["specialise_minus_joint"]
        interval = f"[{diff['low']:+.4f}, {diff['high']:+.4f}]" if diff["low"] is not None else "-"
        print(
            f"two_stage: {key:<22} joint {row['joint']['mean']:.4f}  specialise {row['specialise']['mean']:.4f}"
            f"  diff {diff['mean']:+.4f} {interval} ({diff['verdict']}, n={diff['n']})"
        )
    print(f"two_stage: wrote {args.out / 'summary.json'}")
    return 0 if all(code == 0 for code, _ in done) else 1


def two_stages(args: argparse.Namespace, seed: int, out: Path) -> tuple[int, dict[str, Any]]:
    """Stage 1 (unless ``--stage1-ckpt``), then stage 2 from its checkpoint, into ``out``; writes
    ``<out>/two_stage.json``. Returns the exit code and the result record."""
    stage1: dict[str, Any] = {}
    if args.stage1_ckpt is not None:
        ckpt = args.stage1_ckpt.resolve()
    else:
        options = shlex.split(args.stage1_args)
        status, run_dir = run_stage("joint", [args.base, args.joint], args, options, out, seed)
        if status != "ok" or run_dir is None:
            print(f"two_stage: stage 1 failed ({status}); stage 2 not run", file=sys.stderr)
            return 1, {"stage1": {"status": status}, "stage2": {}}
        ckpt = stage_checkpoint(run_dir)
        stage1 = {"run_dir": str(run_dir), **stage_scores(run_dir)}
    stage1["checkpoint"] = str(ckpt)
    options = [f"--model.init_args.init_from={ckpt}", *shlex.split(args.stage2_args)]
    status, run_dir = run_stage("specialise", [args.base, args.specialise], args, options, out, seed)
    stage2 = {"run_dir": str(run_dir) if run_dir else None, "status": status, **stage_scores(run_dir)}
    result: dict[str, Any] = {"seed": seed, "stage1": stage1, "stage2": stage2}
    if stage1.get("overall") is not None and stage2.get("overall") is not None:
        result["delta_overall"] = stage2["overall"] - stage1["overall"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "two_stage.json").write_text(json.dumps(result, indent=2))
    for name, record in (("joint", stage1), ("specialise", stage2)):
        overall = record.get("overall")
        shown = f"{overall:.4f}" if isinstance(overall, float) else "-"
        print(f"two_stage: seed {seed} {name:<10} {MONITOR} {shown}")
    if "delta_overall" in result:
        print(f"two_stage: seed {seed} specialise - joint {result['delta_overall']:+.4f}")
    print(f"two_stage: wrote {out / 'two_stage.json'}")
    return (0 if status == "ok" else 1), result


def summarise(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per dev metric (``val/overall`` and every ``val/<task>/<metric>``): each stage's mean and standard
    deviation over the seeds where both stages have it, and the paired difference specialise - joint."""
    keys: list[str] = []
    for result in results.values():
        for key in [MONITOR, *sorted(result["stage1"].get("scores", {}))]:
            if key not in keys and not key.endswith("loss") and key.count("/") in (1, 2):
                keys.append(key)
    metrics: dict[str, Any] = {}
    for key in keys:
        pairs = [
            (_value(r["stage1"], key), _value(r["stage2"], key), seed)
            for seed, r in results.items()
            if _value(r["stage1"], key) is not None and _value(r["stage2"], key) is not None
        ]
        if not pairs:
            continue
        joint, special, seeds = ([p[i] for p in pairs] for i in range(3))
        diff = paired_difference(special, joint)
        metrics[key] = {
            "seeds": seeds,
            "joint": dict(zip(("mean", "sd"), mean_std(joint), strict=True)),
            "specialise": dict(zip(("mean", "sd"), mean_std(special), strict=True)),
            "specialise_minus_joint": {
                "n": diff.n,
                "mean": diff.mean,
                "sd": diff.sd,
                "low": diff.low,
                "high": diff.high,
                "verdict": {"A better": "specialise better", "B better": "joint better"}.get(
                    diff.verdict, diff.verdict
                ),
            },
        }
    return {"seeds": sorted(results), "metrics": metrics, "runs": {str(s): r for s, r in results.items()}}


def _value(stage: dict[str, Any], key: str) -> float | None:
    value = stage.get("overall") if key == MONITOR else stage.get("scores", {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


if __name__ == "__main__":
    sys.exit(main())
