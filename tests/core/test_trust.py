"""Every load of a file in the package is a safe one (issue 13 item 7; README "Checkpoints are trusted input").

``torch.load`` unpickles, so it may only run with ``weights_only=True`` (or pass ``weights_only`` on
from its caller, as the checkpoint IO does so that ``--weights_only false`` can reach it);
``numpy.load`` only with ``allow_pickle=False``; ``pickle`` itself never loads anything. The check
reads the package's source with ``ast``, so a new unsafe call fails here before it ships.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np
import pytest
import torch

import pal_lightning
from pal_lightning.data.tokenize import load_cached

PACKAGE = Path(pal_lightning.__file__).parent


class Payload:
    """An object that only a pickle can hold."""


@functools.cache
def _all_calls() -> list[tuple[Path, ast.Call, str]]:
    """Every call in the package with its dotted name (the package is parsed once per session)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                found.append((path, node, ast.unparse(node.func)))
    return found


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    """Every call ``<module>.<attr>(...)`` in the package whose dotted name ends with ``name``."""
    return [(path, node) for path, node, func in _all_calls() if func.endswith(name)]


def _keyword(call: ast.Call, key: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == key), None)


def test_every_torch_load_is_weights_only() -> None:
    calls = _calls("torch.load")
    assert calls, "the scan found no torch.load at all: the check itself is broken"
    for path, call in calls:
        value = _keyword(call, "weights_only")
        where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
        assert value is not None, f"{where}: torch.load without weights_only"
        # Either the literal True, or the caller's own weights_only argument passed through.
        assert (isinstance(value, ast.Constant) and value.value is True) or (
            isinstance(value, ast.Name) and value.id == "weights_only"
        ), f"{where}: weights_only={ast.unparse(value)}"


def test_every_numpy_load_refuses_pickles() -> None:
    calls = _calls("np.load")
    assert calls, "the scan found no np.load at all: the check itself is broken"
    for path, call in calls:
        value = _keyword(call, "allow_pickle")
        assert isinstance(value, ast.Constant) and value.value is False, (
            f"{path.relative_to(PACKAGE)}:{call.lineno}: np.load without allow_pickle=False"
        )


def test_the_cache_reader_refuses_a_pickled_array(tmp_path: Path) -> None:
    """A cache file holding an object array is not unpickled: it is treated as damaged (None: rebuild)."""

    path = tmp_path / "split.npz"
    np.savez(path, input_ids=np.array([Payload()], dtype=object))
    assert load_cached(path) is None


def test_nothing_unpickles_directly() -> None:
    for fn in ("pickle.load", "pickle.loads", "torch.serialization.load"):
        assert not _calls(fn), f"{fn} used in the package: {_calls(fn)}"


def test_the_safe_loaders_refuse_a_pickled_object(tmp_path: Path) -> None:
    """What the checks above rely on: these flags do refuse a pickled object on this torch and numpy."""

    ckpt = tmp_path / "x.pt"
    torch.save({"obj": Payload()}, ckpt)
    with pytest.raises(Exception, match="(?i)weights.only"):
        torch.load(ckpt, weights_only=True)
    arrays = tmp_path / "x.npz"
    np.savez(arrays, a=np.array([Payload()], dtype=object))
    with pytest.raises(ValueError, match="(?i)pickle"), np.load(arrays, allow_pickle=False) as z:
        z["a"]
