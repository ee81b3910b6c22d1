"""What the benchmarks that drive ``pal-lightning fit`` share: the command line and the run folders."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def fit_command(
    config: Path | Sequence[Path],
    root: Path,
    data_dir: Path,
    seed: int,
    options: Sequence[str],
    cli_args: Sequence[str] = (),
) -> list[str]:
    """``python -m pal_lightning fit`` of ``config`` into ``root``: quiet, seeded, weights-only best
    checkpoint; ``options`` are the benchmark's own settings, ``cli_args`` the user's extras (last wins).

    ``config`` may be a base config and its overlays, in order: they come before every option, so an
    overlay never replaces the run folder, data folder or seed set here."""
    configs = [config] if isinstance(config, (str, Path)) else list(config)
    return [
        sys.executable,
        "-m",
        "pal_lightning",
        "fit",
        *[a for c in configs for a in ("--config", str(c))],
        f"--seed_everything={seed}",
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--data.init_args.data_dir={data_dir}",
        f"--data.init_args.seed={seed}",
        "--checkpoint.save_weights_only=true",
        *options,
        *cli_args,
    ]


def version_dirs(root: Path) -> set[Path]:
    """The ``version_N`` run folders under ``root``."""
    return {p for p in root.glob("version_*") if p.is_dir()} if root.is_dir() else set()


def by_version(dirs: Sequence[Path] | set[Path]) -> list[Path]:
    """Run folders sorted by their version number."""
    return sorted(dirs, key=lambda p: int(p.name.split("_")[-1]))


def run_logged(
    cmd: Sequence[str], root: Path, log: Path, env: dict[str, str], cwd: Path, timeout: float
) -> tuple[str, float, Path | None]:
    """Run ``cmd`` with its output in ``log``; returns ``(status, wall seconds, its new run folder)``.

    The status is ``"ok"``, ``"exit N (see LOG)"`` or ``"timeout after N s"``; the run folder is
    the newest ``version_N`` under ``root`` that the command created (``None`` if it made none).
    """
    before = version_dirs(root)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as f:
        try:
            proc = subprocess.run(
                list(cmd), stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=timeout
            )
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode} (see {log})"
        except subprocess.TimeoutExpired:
            status = f"timeout after {timeout:.0f} s"
    wall = time.perf_counter() - start
    new = by_version(version_dirs(root) - before)
    return status, wall, (new[-1] if new else None)
