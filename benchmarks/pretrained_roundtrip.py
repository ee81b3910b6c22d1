"""Check: a ``save_pretrained`` folder reproduces the trained model exactly, in a new process.

Process 1 (this one) loads the run's best checkpoint with ``MultiTaskModule.load_from_checkpoint``
(the encoder built from its name, the trained weights from the checkpoint) and predicts the first
``--n`` dev examples of every task. Process 2 loads the run's ``model/`` folder with
``MultiTaskModule.from_pretrained`` and nothing else, and predicts the same examples. The target is
a maximum absolute difference of 0 over all probabilities and scores.

Usage (after ``pal-lightning fit --config configs/demo.yaml``)::

    HF_HUB_OFFLINE=1 python benchmarks/pretrained_roundtrip.py --run runs/demo/version_0 --data-dir demo
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def dev_inputs(data_dir: str, tasks: list[dict[str, Any]], n: int) -> dict[str, list[Any]]:
    """The first ``n`` dev texts of each task (pairs as lists of two)."""
    from pal_lightning.data.sources.readers import read_split, resolve_data_dir
    from pal_lightning.tasks.specs import TaskSpec

    out = {}
    for task in tasks:
        spec = TaskSpec(**task)
        raw = read_split(spec, "dev", resolve_data_dir(data_dir))
        cols = [c[:n] for c in raw.texts]
        out[spec.name] = cols[0] if len(cols) == 1 else [list(p) for p in zip(*cols, strict=True)]
    return out


def predictions(module: Any, inputs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    out = {}
    for task, texts in inputs.items():
        texts = [tuple(t) if isinstance(t, list) else t for t in texts]
        pred = module.predict(task, texts)
        out[task] = pred.scores if pred.scores is not None else pred.probabilities.tolist()
    return out


def _child(folder: str, inputs_json: str) -> None:
    from pal_lightning import MultiTaskModule

    module = MultiTaskModule.from_pretrained(folder)
    print(json.dumps(predictions(module, json.loads(Path(inputs_json).read_text()))))


def max_abs_diff(a: Any, b: Any) -> float:
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        return max((max_abs_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return abs(float(a) - float(b))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a run folder with scores.json and model/")
    parser.add_argument("--data-dir", default=os.environ.get("PAL_DATA_DIR"), help="default: $PAL_DATA_DIR")
    parser.add_argument("--n", type=int, default=100, help="dev examples per task")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from pal_lightning import MultiTaskModule

    folder = args.run / "model"
    ckpt = json.loads((args.run / "scores.json").read_text())["best_model_path"]
    config = json.loads((folder / "config.json").read_text())
    inputs = dev_inputs(args.data_dir, config["tasks"], args.n)
    module = MultiTaskModule.load_from_checkpoint(ckpt, map_location="cpu", weights_only=True)
    module.predict_max_length = config["max_length"]
    ours = predictions(module, inputs)
    inputs_file = args.run / ".roundtrip_inputs.json"
    inputs_file.write_text(json.dumps(inputs))
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--child", str(folder), str(inputs_file)],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        inputs_file.unlink(missing_ok=True)
    theirs = json.loads(child.stdout.strip().splitlines()[-1])
    result = {
        "checkpoint": ckpt,
        "folder": str(folder),
        "examples_per_task": {t: len(v) for t, v in inputs.items()},
        "max_abs_diff": {t: max_abs_diff(ours[t], theirs[t]) for t in ours},
    }
    result["max_abs_diff_all"] = max(result["max_abs_diff"].values())
    print(
        f"from_pretrained in a new process vs the checkpoint: max abs difference {result['max_abs_diff_all']:g} "
        f"over {sum(result['examples_per_task'].values())} dev examples ({result['max_abs_diff']})"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        main()
