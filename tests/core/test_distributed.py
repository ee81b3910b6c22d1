"""pal_lightning.core.distributed: a world of one without a process group, and two gloo processes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from pal_lightning.core import distributed as D
from pal_lightning.testing import free_port


def test_single_process_is_a_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not dist.is_initialized()
    assert not D.is_distributed()
    assert D.rank() == 0
    assert D.world_size() == 1
    assert D.is_main_process()
    assert D.gather_objects({"a": [1, 2]}) == [{"a": [1, 2]}]
    t = torch.tensor([1.0, -2.5])
    assert D.all_reduce_sum(t) is t
    assert t.tolist() == [1.0, -2.5]
    assert D.broadcast(t, src=0).tolist() == [1.0, -2.5]
    assert [x.tolist() for x in D.gather_tensors(t)] == [[1.0, -2.5]]
    D.barrier()  # returns at once
    D.close_process_group()  # nothing to close
    assert not dist.is_initialized()


def test_main_process_asks_the_trainer_when_given() -> None:
    class _Trainer:
        is_global_zero = False

    assert D.is_main_process() is True
    assert D.is_main_process(_Trainer()) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"LOCAL_RANK": ""}, False),
        ({"LOCAL_RANK": "0"}, False),
        ({"LOCAL_RANK": "1"}, True),  # Lightning's launcher
        ({"LOCAL_RANK": "3"}, True),
        ({"RANK": "2", "LOCAL_RANK": "0"}, True),  # torchrun, first process of the second node
        ({"RANK": "0", "LOCAL_RANK": "0"}, False),
        ({"SLURM_PROCID": "3"}, True),  # srun
        ({"SLURM_PROCID": "0"}, False),
        ({"LOCAL_RANK": "1", "SLURM_PROCID": "0"}, True),  # Lightning's launcher inside a SLURM allocation
    ],
)
def test_launched_rank_reads_the_launchers_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool
) -> None:
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert D.is_launched_rank() is expected


SCRIPT = Path(__file__).with_name("distributed_script.py")


@pytest.mark.ddp
def test_two_gloo_processes(tmp_path: Path, forked_cli: Any) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # python SCRIPT FOLDER PORT, forked from the session's driver (forked_cli, tests/conftest.py)
    proc = forked_cli.run_script(tmp_path, SCRIPT, [str(tmp_path), str(free_port())], env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in (0, 1):
        result = json.loads((tmp_path / f"rank{r}.json").read_text())
        got_rank, world, main, gathered, summed, sent, rows, still_initialized = result
        assert (got_rank, world, main) == (r, 2, r == 0)
        assert gathered == [[0], [10, 10]]
        assert summed == [3.0, 4.0]  # (1 + 2), (2 + 2)
        assert sent == [1.0]
        assert rows == [[[0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]]]  # uneven lengths, padding dropped
        assert not still_initialized  # close_process_group tore it down


def test_rank_zero_decides_launched_ranks_inherit_and_external_ones_peek(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("LOCAL_RANK", "PAL_TEST_VALUE", "PAL_TEST_PEEK"):
        monkeypatch.delenv(key, raising=False)
    assert D.decided_by_rank_zero("TEST_VALUE", "/root", lambda: "3") == "3"
    assert os.environ["PAL_TEST_VALUE"] == "/root" + os.pathsep + "3"
    monkeypatch.setenv("LOCAL_RANK", "1")  # a rank the launcher started: takes rank 0's value
    assert D.decided_by_rank_zero("TEST_VALUE", "/root", lambda: "9") == "3"
    # decided for another scope (another run root): this rank decides for itself
    assert D.decided_by_rank_zero("TEST_VALUE", "/other", lambda: "5") == "5"
    monkeypatch.setenv("LOCAL_RANK", "0")  # rank 0 always decides anew
    assert D.decided_by_rank_zero("TEST_VALUE", "/other", lambda: "6") == "6"
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("RANK", "1")  # torchrun's rank 1: nothing inherited from rank 0
    decided: list[str] = []
    value = D.decided_by_rank_zero("TEST_PEEK", "/root", lambda: decided.append("x") or "4", lambda: "7")
    assert (value, decided) == ("7", [])  # peeked, decide() (which would claim a folder) not called
    monkeypatch.setenv("RANK", "0")  # rank 0 decides (and never peeks)
    assert D.decided_by_rank_zero("TEST_PEEK", "/root", lambda: "4", lambda: "7") == "4"
