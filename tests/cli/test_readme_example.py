"""What the pages name exists, and CI performs the README's install and test commands (issue 18, item 2).

The pages' blocks themselves run in ``test_readme_blocks.py``; these checks read text only.
"""

from __future__ import annotations

import re
import shlex

from .test_readme_blocks import PAGES, ROOT, command_lines, fenced, page_text, section


def test_pages_name_shipped_configs() -> None:
    named = {n for page in PAGES for n in re.findall(r"configs/([a-z][\w/]*\.yaml)", page_text(page))}
    assert {"quickstart.yaml", "ddp.yaml", "demo.yaml"} <= named
    missing = sorted(n for n in named if not (ROOT / "configs" / n).is_file())
    assert not missing


def _words(lines: list[str]) -> list[tuple[str, ...]]:
    return [tuple(shlex.split(line)) for line in lines]


def _ci_block(name: str) -> list[tuple[str, ...]]:
    """The commands after ``# --- <name>`` in ``.ci/run``, up to its next ``# ---`` marker, as words."""
    ci = (ROOT / ".ci" / "run").read_text()
    match = re.search(rf"^# --- {name}.*?\n(.*?)(?=^# ---|\Z)", ci, re.S | re.M)
    assert match, f"no '# --- {name}' block in .ci/run"
    return _words(command_lines(match.group(1)))


def test_ci_performs_the_readmes_install_and_test_commands() -> None:
    install = _words([c for b in fenced(section("Install"), "bash") for c in command_lines(b)])
    contributor = ("pip", "install", "-e", ".[dev,offline,export,peers]")
    assert contributor in install
    ci_install = _ci_block("README install")
    assert contributor in ci_install
    assert set(ci_install) <= set(install), "an install line of .ci/run that the README does not show"
    (test,) = [c for b in fenced(section("Test"), "bash") for c in command_lines(b)]
    assert test == "python -m pytest -q"
    assert tuple(shlex.split(test)) in _ci_block("README test command")
