"""Settings shared by every test folder: hypothesis profiles, parallel runs (pytest-xdist), and the type
checker started early.

``HYPOTHESIS_PROFILE=mutation`` (set by tools/mutation/run.sh) skips shrinking: under mutation
testing a failing example only has to fail, and shrinking it can take longer than mutmut's timeout.
No example database is written (the property tests are derandomised: the same examples every run).

Parallel runs: pyproject.toml's ``addopts`` run the suite on ``-n auto`` workers, one test file per
worker at a time (``--dist loadfile``, so a module-scoped fixture is built once). ``auto`` is the
number of CPUs this process may use (at most 4), or 0 (in-process) on one CPU or under mutation
testing; ``-n 0`` runs in one process as before. Each worker gives torch (and the processes it starts)
its share of the cores, so two workers do not each start a thread per core; and the files whose
end-to-end fixtures take longest are handed out first, so that the workers finish together.

mypy (``tests/test_typing.py``) takes about 20 s of one core when its cache is cold, as on CI: when
that test is collected, mypy starts in the background as soon as collection ends, once per run (by
the xdist controller, or by the one pytest process), and the test waits for its result (the
``mypy_result`` fixture).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import Phase, settings

settings.register_profile("pal", database=None, derandomize=True)
settings.register_profile(
    "mutation", database=None, derandomize=True, phases=(Phase.explicit, Phase.generate)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pal"))


ROOT = Path(__file__).resolve().parents[1]
MYPY_TEST = "test_mypy_is_clean_on_the_package"
MAX_WORKERS = 4
"""``-n auto`` never starts more workers than this: each imports torch and collects the whole suite."""

SLOW_FILES = (
    # the end-to-end fixtures (CLI runs, DDP ranks, notebooks) and the long property tests: handed to the
    # workers first, longest first, so that the run ends with short tests on both workers rather than one
    # long file on one. By CPU seconds of the file's process tree (the worker and every process it starts,
    # forked CLI children included), measured 2026-11-28 on the 2-core machine with -n 2: torchrun ~32,
    # readme ~20 (then without its real-encoder fit), compile ~17, peers ~17, readers_fuzz ~17, ...,
    # ddp_stage2 ~3 (its ranks forked: tests/cli/cli_driver.py, listed for its DDP ranks); every file not
    # listed takes ~7 or less
    "tests/cli/test_torchrun_cli.py",
    # ~27 (2026-11-29, -n 0, user + sys of pytest and its process tree): 4 forked fits, 3 of them 2-rank DDP
    "tests/downstream/test_downstream_project.py",
    "tests/docs/test_readme.py",
    "tests/modeling/test_conformance.py",  # ~20 (2026-11-29, wall at -n 2): every method on every family
    "tests/serving/test_server.py",  # ~21 (2026-11-29, -n 0): the server's two processes start torch
    "tests/benchmarks/test_serve_load.py",  # ~17 (wall): two real servers of the load test's quick run
    "tests/module/test_compile.py",
    "tests/benchmarks/test_peers.py",
    "tests/data/test_readers_fuzz.py",
    "tests/cli/test_resume.py",
    "tests/inference/test_pipeline.py",  # ~11 (wall): a new process loads a saved model
    "tests/cli/test_cli.py",
    "tests/cli/test_cli_subprocess.py",
    "tests/cli/test_bad_inputs.py",
    "tests/cli/test_console.py",
    "tests/docs/test_notebook.py",
    "tests/data/test_demo.py",
    "tests/module/test_pretrained.py",
    "tests/gem/test_gem_ddp.py",
    "tests/cli/test_first_hour.py",
    "tests/module/test_families_module.py",
    "tests/data/test_stage_splits.py",
    "tests/data/test_ddp.py",
    "tests/cli/test_run_folders.py",
    "tests/data/test_real_data.py",
    "tests/benchmarks/test_loop_overhead.py",
    "tests/modeling/test_simcse_ddp.py",
    "tests/cli/test_ddp_cli.py",
    "tests/cli/test_ddp_stage2_pretrain.py",
)


# ------------------------------------------------------------------ parallel runs (pytest-xdist)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: the CPUs this process may use (not psutil's physical cores, 1 on a 2-vCPU machine
    with hyper-threads), at most :data:`MAX_WORKERS`; 0 (no workers) on one CPU and under mutation
    testing (mutmut runs pytest in its own process and counts the tests there)."""
    if "PYTEST_XDIST_AUTO_NUM_WORKERS" in os.environ:
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if os.environ.get("HYPOTHESIS_PROFILE") == "mutation" or "MUTANT_UNDER_TEST" in os.environ:
        return 0
    cpus = _usable_cpus()
    return min(cpus, MAX_WORKERS) if cpus > 1 else 0


def _worker_threads() -> int | None:
    """Threads per worker: its share of the CPUs (None outside an xdist worker)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, _usable_cpus() // workers)


def pytest_configure(config: pytest.Config) -> None:
    threads = _worker_threads()
    if threads is not None:
        # before torch is imported: its intra-op pool and those of the processes this worker starts
        # (spawned DDP ranks, CLI subprocesses that do not set it themselves) take their share only
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, str(threads))


_TERMINAL = ("COLUMNS", "LINES")
"""Set in an xdist worker's environment (80 x 24) though not in the run's: the width of the CLI's help
and of its progress bars must not change."""


@pytest.fixture(scope="session", autouse=True)
def _worker_settings(request: pytest.FixtureRequest) -> None:
    """In an xdist worker: torch's intra-op pool has the worker's share of the CPUs (tests that set
    their own thread count restore this one afterwards), and the terminal size variables are the run's."""
    threads = _worker_threads()
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)
    terminal = getattr(request.config, "workerinput", {}).get("pal_terminal", {})
    for name in _TERMINAL:
        if terminal.get(name) is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = terminal[name]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return  # one process: the usual order
    # the controller hands out files in the order the workers collected them: the slow ones first
    rank = {name: i for i, name in enumerate(SLOW_FILES)}

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path)).resolve()
        try:
            name = path.relative_to(ROOT).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)  # stable: the order within a file, and of the other files, stays


# ------------------------------------------------------------------ mypy in the background, once per run

_mypy: dict[str, Any] = {}
_MYPY_DIR = "pal_mypy_dir"
"""Key of ``workerinput``: the folder where the controller's mypy writes ``mypy.log`` and ``mypy.rc``."""


def _start_mypy(folder: Path) -> None:
    """Start ``python -m mypy`` from the repository root (so that it reads pyproject.toml's
    [tool.mypy]) with its report in ``folder/mypy.log``; ``folder/mypy.rc`` holds its exit status
    once it has finished (written by a thread of this process)."""
    if "run" in _mypy:
        return
    folder.mkdir(parents=True, exist_ok=True)
    # a file, not a pipe: a full pipe would stall mypy while no test reads it
    log: IO[bytes] = (folder / "mypy.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "mypy"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def wait() -> None:
        returncode = proc.wait()
        log.close()
        (folder / "mypy.rc.tmp").write_text(str(returncode))
        os.replace(folder / "mypy.rc.tmp", folder / "mypy.rc")

    thread = threading.Thread(target=wait, name="mypy", daemon=True)
    thread.start()
    _mypy["run"] = (proc, thread, folder)


def _own_folder() -> Path:
    if "folder" not in _mypy:
        _mypy["folder"] = Path(tempfile.mkdtemp(prefix="pal-mypy-"))
    return Path(_mypy["folder"])


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: every worker learns where the run's mypy writes its result, and the terminal
    size variables of the run."""
    node.workerinput[_MYPY_DIR] = str(_own_folder())
    node.workerinput["pal_terminal"] = {name: os.environ.get(name) for name in _TERMINAL}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist controller: start mypy once, when the first worker has collected the mypy test."""
    if any(nodeid.endswith(f"::{MYPY_TEST}") for nodeid in ids):
        _start_mypy(_own_folder())


def pytest_collection_finish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller runs mypy
    if any(item.name == MYPY_TEST for item in session.items):
        _start_mypy(_own_folder())


def pytest_unconfigure(config: pytest.Config) -> None:
    if "run" in _mypy and _mypy["run"][0].poll() is None:
        _mypy["run"][0].kill()  # the mypy test was interrupted or deselected after collection
        _mypy["run"][1].join(timeout=10)
    if "folder" in _mypy:
        shutil.rmtree(_mypy["folder"], ignore_errors=True)


@pytest.fixture
def mypy_result(request: pytest.FixtureRequest) -> tuple[int, str]:
    """mypy's exit status and report: from the run started after collection (by this process or by the
    xdist controller), else from a run started now."""
    workerinput = getattr(request.config, "workerinput", {})
    folder = Path(workerinput[_MYPY_DIR]) if _MYPY_DIR in workerinput else None
    if folder is None or not (folder / "mypy.log").exists():  # one process, or no run started for us
        _start_mypy(_own_folder())
        folder = _mypy["run"][2]
    deadline = time.monotonic() + 600
    while not (folder / "mypy.rc").exists():
        assert time.monotonic() < deadline, "mypy did not finish in 600 s"
        time.sleep(0.2)
    return int((folder / "mypy.rc").read_text()), (folder / "mypy.log").read_text()


@pytest.fixture(scope="session")
def forked_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One CLI driver per test process (per xdist worker), started when a test first asks for it:
    ``pal-lightning`` command lines and DDP scripts run in processes forked from it
    (:class:`cli.forked.ForkedCli`, tests/cli/forked.py)."""
    from cli.forked import ForkedCli  # tests/ is on sys.path: this file's folder is no package

    cli = ForkedCli(tmp_path_factory.mktemp("forked_cli"))
    yield cli
    cli.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A clean CS224N-layout data folder (``write_cs224n_data``; tests/data overrides it with the quirks)."""
    from pal_lightning.testing import write_cs224n_data

    return write_cs224n_data(tmp_path / "data")


@pytest.fixture
def tiny_yaml(tmp_path: Path, data_dir: Path) -> Path:
    """A complete 4-step ``fit`` config of a tiny model on ``data_dir`` (``write_tiny_fit_config``)."""
    from pal_lightning.testing import write_tiny_fit_config

    return write_tiny_fit_config(tmp_path, data_dir)
