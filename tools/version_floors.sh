#!/usr/bin/env bash
# Version floors: install the LOWEST version of each dependency pyproject.toml admits (torch excepted,
# it stays at the README's torch==2.13.0) into a throw-away virtual environment and run a subset of the
# tests there. CI tests only the newest versions; this script checks that the floors are honest.
#
#   tools/version_floors.sh                       # the default subset, floors of the five key libraries
#   FLOORS=all tools/version_floors.sh            # every core dependency at its floor
#   TESTS="tests/test_metrics.py" tools/version_floors.sh
#   VENV=/tmp/floors KEEP_VENV=1 tools/version_floors.sh   # reuse/keep the environment
#
# Found on 2026-11-26 (Python 3.11, torch 2.13.0+cpu, transformers 5.0.0, datasets 2.18.0, torchmetrics 1.3.0
# passed at their floors): lightning 2.4.0 lacks LightningCLI._parse_ckpt_path (tests/core/test_private_api.py) and
# logs metrics.csv steps as floats ('2.0'); 2.5.5 has no weights_only in TorchCheckpointIO.load_checkpoint;
# 2.6.0 passes -> floor 2.6.0. jsonargparse 4.32-4.40 fail to apply overlays that extend
# trainer.callbacks ('str' object has no attribute 'append') and 4.43-4.45 refuse or mis-merge
# overlays (init_args.lr not expected; adapter_only.yaml); 4.46.0 passes -> floor 4.46.
#
# Not part of CI (it downloads and installs a second set of libraries: minutes). Needs network access
# to the package index. Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-$(mktemp -d /tmp/pal-floors.XXXXXX)/venv}
FLOORS=${FLOORS:-key}
# Fast tests that exercise each floored library: Lightning + jsonargparse (the CLI, resume, checkpoints),
# transformers (the encoder, tokenizer, from_pretrained), torchmetrics (scores), datasets (hub sources).
TESTS=${TESTS:-"tests/core/test_private_api.py tests/test_metrics.py tests/module/test_multitask.py tests/module/test_pretrained.py \
tests/modeling/test_encoder.py tests/data/test_hf_sources.py tests/data/test_datamodule.py \
tests/cli/test_cli.py tests/cli/test_resume.py tests/cli/test_bad_inputs.py"}

python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
pip install torch==2.13.0

# pyproject's ">=" lower bounds become "==" pins in a constraints file (FLOORS=key: the libraries whose
# APIs the code leans on; FLOORS=all: every core dependency except torch).
constraints="$(dirname "$VENV")/floors.txt"
FLOORS="$FLOORS" python - >"$constraints" <<'PY'
import os, re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
key = {"lightning", "transformers", "datasets", "torchmetrics", "jsonargparse"}
for dep in deps:
    m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", dep)
    if m is None or m.group(1) == "torch":
        continue
    if os.environ["FLOORS"] == "all" or m.group(1) in key:
        print(f"{m.group(1)}=={m.group(3)}")
PY
echo "floors:"; sed 's/^/  /' "$constraints"

pip install -c "$constraints" -e ".[dev,offline]"
echo "installed:"
pip list 2>/dev/null | grep -iE "^(torch|lightning|pytorch-lightning|transformers|datasets|torchmetrics|jsonargparse|numpy|huggingface.hub|tokenizers) "

export HF_HUB_OFFLINE=1
set +e
# shellcheck disable=SC2086
python -m pytest -q -p no:cacheprovider $TESTS
rc=$?
set -e
if [ -z "${KEEP_VENV:-}" ]; then rm -rf "$VENV"; fi
exit "$rc"
