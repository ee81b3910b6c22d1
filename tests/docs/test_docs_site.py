"""The documentation site builds with every warning an error (``mkdocs build --strict``, as CONTRIBUTING.md
says): pages, navigation, links and the API reference generated from the docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's notice about its successor, not a warning
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,  # mkdocs.yml's paths (the snippet base, the package) are the repository's
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    assert "WARNING" not in build.stderr, build.stderr
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "pal-lightning" in home and "api/" in home
    api = (site / "api" / "module" / "index.html").read_text(encoding="utf-8")
    # the class, one of its documented methods and an argument, from the docstrings
    assert "MultiTaskModule" in api and "save_pretrained" in api and "pair_encoding" in api
    assert ":class:" not in api  # the docstrings' Sphinx roles became links or code
    # CONTRIBUTING.md, included from the repository root
    assert "Mutation testing" in (site / "contributing" / "index.html").read_text(encoding="utf-8")
