"""How many operators one training step dispatches: the host's share of a launch-bound GPU step.

On a GPU a step whose matmuls are fast (bf16 on an H100) waits for the host to issue its kernels one
by one, so its time follows the number of operators, not the FLOPs (``benchmarks/RESULTS.md``, "GPU
figures"). This counts, on any device, every ATen operator that reaches the dispatcher in the forward,
the backward and the optimizer step of ``step_time.py``'s shared and PAL rows (torch's
``TorchDispatchMode``, from :mod:`pal_lightning.core.private_api`; views and other metadata-only operators
count too, so it is an upper bound on kernel launches). The count does not depend on the batch, so a
tiny batch on the CPU gives a GPU step's count at the same shape (autocast casts differ slightly
between devices).

Usage::

    python benchmarks/op_count.py --shape bert-base --json op_count.json
    python benchmarks/op_count.py --shape tiny          # the test's size

Prints one line per row and precision; ``--json`` writes
``{"<row>_<precision>": {"forward": n, "backward": n, "optimizer": n, "total": n}, ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from step_time import SHAPES, TASK, _Classifier  # noqa: E402

from pal_lightning.core.private_api import TorchDispatchMode  # noqa: E402
from pal_lightning.modeling import MultiTaskEncoder  # noqa: E402
from pal_lightning.module.optim import adamw  # noqa: E402

ROWS = {"shared": "none", "pals": "pals"}
PRECISIONS = {"32-true": None, "bf16-mixed": torch.bfloat16}


def op_name(func: Any) -> str:
    """An operator's short name: ``aten.addmm.default`` -> ``addmm``, ``aten.add_.Tensor`` -> ``add_``."""
    return str(func).removeprefix("aten.").split(".")[0]


class OperatorCount(TorchDispatchMode):
    """Counts the operators dispatched while it is active (and, with ``by_name``, how often each one)."""

    def __init__(self, by_name: bool = False) -> None:
        super().__init__()
        self.count = 0
        self.names: Counter[str] | None = Counter() if by_name else None
        """Operator name (:func:`op_name`) -> how many times it was dispatched; ``None`` without ``by_name``."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        if self.names is not None:
            self.names[op_name(func)] += 1
        return func(*args, **(kwargs or {}))


def count_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    dtype: torch.dtype | None,
    names: dict[str, Counter[str]] | None = None,
) -> dict:
    """Operators of one training step of ``model`` (a :class:`step_time._Classifier`), phase by phase.

    With ``names`` (an empty dict), also fills ``names[phase]`` with each operator's count in that phase.
    """
    device = next(model.parameters()).device
    ids = torch.randint(1000, 2000, (2, 16), device=device)
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0  # one padded row, as real batches have
    labels = torch.tensor([0, 1], device=device)
    by_name = names is not None
    counts: dict[str, int] = {}
    with (
        OperatorCount(by_name) as forward,
        torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None),
    ):
        loss = torch.nn.functional.cross_entropy(model(ids, mask), labels)
    counts["forward"] = forward.count
    with OperatorCount(by_name) as backward:
        loss.backward()
    counts["backward"] = backward.count
    with OperatorCount(by_name) as step:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    counts["optimizer"] = step.count
    counts["total"] = sum(counts.values())
    if names is not None:
        for phase, mode in (("forward", forward), ("backward", backward), ("optimizer", step)):
            names[phase] = mode.names or Counter()
    return counts


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape", choices=[s for s, (config, _, _) in SHAPES.items() if config], default="bert-base"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    config = SHAPES[args.shape][0]
    results: dict[str, dict[str, int]] = {}
    for row, adapter in ROWS.items():
        torch.manual_seed(0)
        model = _Classifier(MultiTaskEncoder.from_config(config, [TASK], adapter=adapter)).train()
        optimizer = adamw(model.parameters(), lr=1e-4)  # the library's choice on this device
        for precision, dtype in PRECISIONS.items():
            count_step(model, optimizer, dtype)  # the first step creates the optimizer's state
            results[f"{row}_{precision}"] = counts = count_step(model, optimizer, dtype)
            print(
                f"{args.shape} {row:>6} {precision:>10}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
            )
    if args.json:
        args.json.write_text(json.dumps({"shape": args.shape, **results}, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
