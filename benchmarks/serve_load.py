"""Load test of ``pal-lightning serve`` (issue 44, docs/serving.md "Load test"): one model of N tasks served
three ways on the same cores, each driven over localhost by an asyncio client (benchmarks/serve_load_client.py):

* ``mixed``: one server, a batch of requests of any tasks run as one forward pass (``--batching mixed``);
* ``per_task``: the same server running each task of a batch as its own forward (``--batching per_task``),
  what a server without task routing gives;
* ``single``: one one-task server per task (``--tasks <task>``, N processes), the client sending each request
  to its task's server: what users run today.

For each: the servers' resident memory after a warm-up (RSS and PSS summed over each server's process tree:
the command, LitServe's manager, the inference worker and the HTTP process), a closed-loop saturation run
(``--clients`` clients, each sending its next request when answered) and open-loop Poisson arrivals at
fractions of that saturation throughput (``--fractions``) or at given rates (``--rates``), bounded in requests
and seconds; throughput, p50/p95/p99 latency, and the batches the servers formed (``GET /stats``: requests and
tasks per batch, forward passes). Writes one JSON record and prints the ratios of issue 44's "Done means".
The task mix is uniform over the model's tasks, or Zipf-like (``--mix zipf``).

Usage (the model: benchmarks/specs/serve_8tasks.yaml, trained first when missing)::

    python benchmarks/serve_load.py --train                  # trains if needed, then all three modes
    python benchmarks/serve_load.py --model runs/x/version_0/model --modes mixed,per_task
    python benchmarks/serve_load.py --quick --out /tmp/q.json   # a tiny random model, seconds of load

Figures on a shared machine are noisy: other processes take the cores the servers are measured on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_load_client as client  # noqa: E402

from pal_lightning.tasks.specs import resolve_tasks  # noqa: E402
from pal_lightning.testing import free_port  # noqa: E402
from pal_lightning.testing.processes import get_json, wait_healthy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "benchmarks" / "specs" / "serve_8tasks.yaml"
RUNS = REPO / "runs" / "serve_8tasks"  # ignored by git
OUT = REPO / "benchmarks" / "results_speed" / "serve_load_cpu.json"
MODES = ("mixed", "per_task", "single")
QUICK_TASKS = ("sst", "qqp")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--model", help="a saved model folder (default: the newest runs/serve_8tasks/version_N/model)"
    )
    p.add_argument(
        "--train", action="store_true", help="train benchmarks/specs/serve_8tasks.yaml when no model"
    )
    p.add_argument(
        "--data-dir", help="GLUE's folder (default: $PAL_DATA_DIR/../glue, else ../shared/data/glue)"
    )
    p.add_argument(
        "--quick", action="store_true", help="a tiny random model of 2 tasks, a few seconds of load"
    )
    p.add_argument("--modes", default=",".join(MODES), help="of mixed, per_task, single (default: all)")
    p.add_argument(
        "--mix", choices=("uniform", "zipf"), default="uniform", help="the task mix (default uniform)"
    )
    p.add_argument("--zipf-s", type=float, default=1.1, help="the Zipf exponent: task k gets a share ∝ 1/k^s")
    p.add_argument("--clients", type=int, default=32, help="closed-loop clients at saturation (default 32)")
    p.add_argument("--requests", type=int, default=3000, help="most requests of a run (default 3000)")
    p.add_argument("--seconds", type=float, default=20.0, help="most seconds of a run (default 20)")
    p.add_argument("--warmup", type=int, default=64, help="requests before measuring (default 64)")
    p.add_argument("--fractions", default="0.5", help="open-loop rates as fractions of saturation (0.5)")
    p.add_argument("--rates", default="", help="open-loop rates in requests/s instead of --fractions")
    p.add_argument("--max-batch-size", type=int, default=16, help="the servers' --max_batch_size (16)")
    p.add_argument("--batch-timeout", type=float, default=0.005, help="the servers' --batch_timeout (0.005)")
    p.add_argument("--workers", type=int, default=1, help="--workers_per_device of the N-task server (1)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: cores / workers)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores the servers share (all)")
    p.add_argument("--out", type=Path, default=OUT, help=f"the JSON record (default {OUT.relative_to(REPO)})")
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    if not set(args.modes) <= set(MODES):
        p.error(f"--modes: use some of {', '.join(MODES)}")
    if args.quick:
        args.requests, args.seconds, args.warmup, args.clients = 40, 1.5, 8, 8
    return args


# --- the model -----------------------------------------------------------------------------------------------


def quick_model(folder: Path) -> Path:
    """A tiny random model of :data:`QUICK_TASKS` saved in ``folder``."""
    import torch

    from pal_lightning import MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=list(QUICK_TASKS), encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}
    )
    return Path(module.save_pretrained(folder / "model"))


def newest_model(root: Path) -> Path | None:
    found = sorted(
        root.glob("version_*/model/config.json"), key=lambda p: int(p.parent.parent.name.split("_")[1])
    )
    return found[-1].parent if found else None


def glue_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    cs224n = os.environ.get("PAL_DATA_DIR")
    if cs224n and (Path(cs224n).parent / "glue").is_dir():
        return Path(cs224n).parent / "glue"
    return REPO.parent / "shared" / "data" / "glue"


def train(data_dir: Path) -> Path:
    """``pal-lightning fit`` of benchmarks/specs/serve_8tasks.yaml into runs/serve_8tasks; its model folder."""
    cmd = [sys.executable, "-m", "pal_lightning", "fit", "--config", str(SPEC), f"--data.data_dir={data_dir}"]
    cmd += [f"--trainer.default_root_dir={RUNS}", "--trainer.enable_progress_bar=false"]
    print("training:", " ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    print(f"trained in {time.perf_counter() - start:.0f} s", flush=True)
    model = newest_model(RUNS)
    assert model is not None, "fit wrote no model folder"
    return model


# --- the servers ---------------------------------------------------------------------------------------------


@contextmanager
def servers(
    args: argparse.Namespace, model: Path, plans: list[list[str]], threads: int, logs: Path
) -> Iterator[list[tuple[int, subprocess.Popen[bytes]]]]:
    """Start one ``pal-lightning serve`` per plan (its extra options) on its own port, wait until all are
    healthy, and stop them (SIGTERM, as Ctrl-C) at the end."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    started: list[tuple[int, subprocess.Popen[bytes]]] = []
    try:
        for plan in plans:
            port = free_port()
            cmd = [sys.executable, "-m", "pal_lightning", "serve", str(model), "--port", str(port)]
            cmd += ["--accelerator", "cpu", "--max_batch_size", str(args.max_batch_size)]
            cmd += ["--batch_timeout", str(args.batch_timeout), *plan]
            with open(logs / f"server-{port}.log", "wb") as log:  # the child keeps its own descriptor
                process = subprocess.Popen(
                    cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            started.append((port, process))
        for port, process in started:
            wait_healthy(port, process, 600, (logs / f"server-{port}.log").read_text)
        yield started
    finally:
        for _, process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def tree_memory(pid: int) -> dict[str, float]:
    """RSS and PSS (MiB) summed over a process and its descendants, and how many there are. RSS counts the
    pages two processes share (a forked HTTP process and its parent) twice; PSS shares them out."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    rss = pss = 0.0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return {"rss_mib": rss / 2**20, "pss_mib": pss / 2**20, "processes": len(procs)}


def merged_stats(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``GET /stats`` counters of several servers as one server's."""
    from pal_lightning.serving.stats import TOTALS

    out: dict[str, Any] = {name: sum(s[name] for s in snapshots) for name in TOTALS}
    for key in ("batch_sizes", "tasks_per_batch"):
        out[key] = {}
        for s in snapshots:
            for k, n in s[key].items():
                out[key][k] = out[key].get(k, 0) + n
    return out


def stats_of(ports: list[int]) -> dict[str, Any]:
    return merged_stats([get_json(p, "/stats") for p in ports])


# --- one mode ------------------------------------------------------------------------------------------------


def measure(
    args: argparse.Namespace, model: Path, mode: str, tasks: dict[str, int], logs: Path
) -> dict[str, Any]:
    """Memory, saturation and open-loop figures of one way of serving ``tasks``."""
    from pal_lightning.serving.stats import difference

    names = list(tasks)
    if mode == "single":  # one worker each: N processes already
        plans = [["--batching", "mixed", "--workers_per_device", "1", "--tasks", t] for t in names]
    else:
        plans = [["--batching", mode, "--workers_per_device", str(args.workers)]]
    workers = len(names) if mode == "single" else args.workers
    threads = args.threads or max(1, args.cores // workers)  # the same cores, shared out
    start = time.perf_counter()
    with servers(args, model, plans, threads, logs) as started:
        ready_s = time.perf_counter() - start
        ports = [p for p, _ in started]
        pools = {p: client.Pool(p) for p in ports}
        by_task = {t: pools[ports[i] if mode == "single" else ports[0]] for i, t in enumerate(names)}
        requests = client.Requests(tasks, client.mix_weights(len(names), args.mix, args.zipf_s), seed=1)

        def route(task: str) -> client.Pool:
            return by_task[task]

        def run(coroutine: Any) -> list[client.Sample]:
            return asyncio.run(coroutine)

        async def closed(n: int, seconds: float) -> list[client.Sample]:
            try:
                return await client.closed_loop(route, requests, args.clients, n, seconds)
            finally:
                for pool in pools.values():
                    pool.close()

        warm = client.summary(run(closed(args.warmup, args.seconds)))
        memory = [tree_memory(process.pid) for _, process in started]
        before = stats_of(ports)
        saturation = client.summary(run(closed(args.requests, args.seconds)))
        saturation["batches"] = difference(before, stats_of(ports))
        rates = [float(r) for r in args.rates.split(",") if r] or [
            float(f) * (saturation["throughput"] or 1.0) for f in args.fractions.split(",") if f
        ]
        open_runs = []
        for rate in rates:

            async def arrivals(rate: float = rate) -> list[client.Sample]:
                try:
                    return await client.open_loop(route, requests, rate, args.requests, args.seconds, seed=2)
                finally:
                    for pool in pools.values():
                        pool.close()

            before = stats_of(ports)
            one = client.summary(run(arrivals()))
            one.update(rate=rate, batches=difference(before, stats_of(ports)))
            one["p99_over_p50"] = one["p99_ms"] / one["p50_ms"] if one["p50_ms"] else None
            open_runs.append(one)
    out = {
        "mode": mode,
        "servers": len(plans),
        "torch_threads_per_worker": threads,
        "ready_seconds": ready_s,
        "warmup": warm,
        "memory": {
            "per_server": memory,
            "rss_mib": sum(m["rss_mib"] for m in memory),
            "pss_mib": sum(m["pss_mib"] for m in memory),
        },
        "saturation": saturation,
        "open_loop": open_runs,
    }
    print(line_of(out), flush=True)
    return out


def line_of(r: dict[str, Any]) -> str:
    s = r["saturation"]
    b = s["batches"]
    text = (
        f"{r['mode']:>8}: {r['servers']} server(s) ({r['torch_threads_per_worker']} thread(s) a worker), RSS {r['memory']['rss_mib']:.0f} MiB "
        f"(PSS {r['memory']['pss_mib']:.0f}); saturation {s['throughput'] or 0:.1f} req/s, "
        f"p50 {s['p50_ms'] or 0:.0f} ms p99 {s['p99_ms'] or 0:.0f} ms, {s['failed']} failed, "
        f"{b['mean_batch_size'] or 0:.1f} requests and {b['mean_tasks_per_batch'] or 0:.1f} tasks a batch"
    )
    for o in r["open_loop"]:
        text += (
            f"\n          open loop {o['rate']:.1f} req/s: p50 {o['p50_ms'] or 0:.0f} ms p95 {o['p95_ms'] or 0:.0f} ms "
            f"p99 {o['p99_ms'] or 0:.0f} ms ({o['failed']} failed, {o['batches']['mean_batch_size'] or 0:.1f} a batch)"
        )
    return text


# --- the ratios ----------------------------------------------------------------------------------------------


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The figures of issue 44's "Done means" that these runs give (``None`` where a mode was not run), each
    with its target."""

    def sat(mode: str) -> float | None:
        return results[mode]["saturation"]["throughput"] if mode in results else None

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, Any] = {}
    if "single" in results:
        per = results["single"]["memory"]["per_server"]
        one_rss = sum(m["rss_mib"] for m in per) / len(per)
        one_pss = sum(m["pss_mib"] for m in per) / len(per)
        n = len(per)
        out[f"memory_{n}_servers_over_1task_server"] = {
            "value": results["single"]["memory"]["rss_mib"] / one_rss,
            "pss": results["single"]["memory"]["pss_mib"] / one_pss,
            "target": f"~{n}x",
        }
        if "mixed" in results:
            out["memory_ntask_server_over_1task_server"] = {
                "value": results["mixed"]["memory"]["rss_mib"] / one_rss,
                "pss": results["mixed"]["memory"]["pss_mib"] / one_pss,
                "target": "<= 1.3",
            }
    out["saturation_mixed_over_single"] = {"value": div(sat("mixed"), sat("single")), "target": ">= 1.0"}
    out["saturation_mixed_over_per_task"] = {"value": div(sat("mixed"), sat("per_task")), "target": ">= 1.2"}
    if "mixed" in results and results["mixed"]["open_loop"]:
        out["p99_over_p50_at_half_saturation"] = {
            "value": results["mixed"]["open_loop"][0]["p99_over_p50"],
            "target": "<= 3",
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="serve_load-"))
    if args.quick:
        model = quick_model(work)
    else:
        found = Path(args.model) if args.model else newest_model(RUNS)
        if found is None and args.train:
            found = train(glue_dir(args.data_dir))
        if found is None or not (found / "config.json").is_file():
            sys.exit(
                f"No model at {found or RUNS}: pass --model FOLDER, or --train to train {SPEC.relative_to(REPO)}."
            )
        model = found
    config = json.loads((model / "config.json").read_text())
    tasks = {spec.name: 2 if spec.is_pair else 1 for spec in resolve_tasks(config["tasks"])}
    print(
        f"model {model}: {len(tasks)} tasks; modes {', '.join(args.modes)}; {args.cores} cores; logs in {work}",
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    for mode in args.modes:
        results[mode] = measure(args, model, mode, tasks, work)
    record = {
        "model": str(model),
        "tasks": tasks,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average": os.getloadavg()},
        "results": results,
        "ratios": ratios(results),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"\nratios (issue 44, Done means), written to {args.out}:")
    for name, r in record["ratios"].items():
        value = "n/a" if r["value"] is None else f"{r['value']:.2f}"
        extra = f" (PSS {r['pss']:.2f})" if "pss" in r else ""
        print(f"  {name}: {value}{extra}  target {r['target']}")
    return record


if __name__ == "__main__":
    main()
