"""``benchmarks/host_cost.py`` in a small mode (MiniLM's structure at width 48, two steps): it counts each
system's operators as ``op_count.py`` does and writes the ratios; ``gpu_check.sh --cpu --dry-run`` lists its
runs on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from .conftest import gpu_check_dry_run, load_benchmark, option


def test_small_mode_counts_operators_and_writes_the_ratios(tmp_path: Path) -> None:
    host_cost = load_benchmark("host_cost")
    out = tmp_path / "host.json"
    argv = ["--shape", "minilm", "--rows", "shared,pals", "--modes", "eager", "--precisions", "bf16-mixed"]
    argv += ["--reps", "2", "--warmup", "1", "--threads", str(torch.get_num_threads())]
    result = host_cost.main([*argv, "--json", str(out)])
    assert json.loads(out.read_text()) == result
    systems = result["systems"]
    assert set(systems) == {"shared/bf16-mixed/eager", "pals/bf16-mixed/eager"}
    for precision in ("bf16-mixed",):
        pals, shared = systems[f"pals/{precision}/eager"], systems[f"shared/{precision}/eager"]
        ratio = result["ratios"][f"pals/shared {precision}/eager"]
        assert ratio["ops"] == pytest.approx(pals["ops"] / shared["ops"], abs=1e-4)
        assert ratio["time"] == pytest.approx(pals["ms"] / shared["ms"], rel=1e-3)
        assert len(pals["steps_ms"]) == 2
        # the per-name table adds up to the difference of the totals counted by op_count's count_step
        extra = result["pals_minus_shared_ops"][precision]
        assert extra["forward"]["(total)"] > 0 and extra["backward"]["(total)"] > 0
        assert sum(v for k, v in extra["forward"].items() if k != "(total)") == extra["forward"]["(total)"]
    assert result["structure"] == {"layers": 6, "heads": 12} and result["width"] == 48


def test_gpu_check_cpu_dry_run_lists_the_host_cost_runs_only(tmp_path: Path) -> None:
    lines = gpu_check_dry_run(tmp_path / "gpu", "--cpu")
    assert len(lines) == 2 and all("benchmarks/host_cost.py" in line for line in lines)
    for line, what in zip(lines, ("real", "small"), strict=True):
        assert option(line, "--device") == "cpu"
        assert option(line, "--json") == str(tmp_path / "gpu" / f"host_cost_{what}_cpu.json")
    assert not (tmp_path / "gpu").exists()  # a dry run writes nothing


def test_gpu_check_compiled_run_asks_for_cuda_graphs_when_given_seconds(tmp_path: Path) -> None:
    """``COMPILED_S`` adds the compiled real-width run, last, with the module's CUDA-graph mode; the
    benchmark hands that mode to the encoder call the module uses."""
    runs = {
        seconds: gpu_check_dry_run(tmp_path / "gpu", "--cpu", COMPILED_S=seconds) for seconds in ("0", "240")
    }
    assert len(runs["0"]) == 2 and runs["240"][:2] == runs["0"]
    assert option(runs["240"][2], "--compile-mode") == "reduce-overhead"
    assert option(runs["240"][2], "--modes") == "eager,compiled"
    assert option(runs["240"][2], "--json") == str(tmp_path / "gpu" / "host_cost_compiled_cpu.json")

    host_cost = load_benchmark("host_cost")
    args = host_cost.parser().parse_args(["--compile-mode", "reduce-overhead"])
    config = host_cost.encoder_config("minilm", 48, 16, 128)
    encoder = host_cost.MultiTaskEncoder.from_config(config, ["t"], adapter="pals")
    wrapped = host_cost._CompiledEncoder(encoder, args.backend, args.compile_mode)
    assert (wrapped.call.backend, wrapped.call.mode) == ("inductor", "reduce-overhead")
