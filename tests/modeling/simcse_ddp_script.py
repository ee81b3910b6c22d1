"""Two gloo ranks: SimCSE with negatives gathered across ranks (run by test_simcse_ddp.py).

Each rank writes ``rank<r>.json`` with what it computed and what a single process computes from the
data of both ranks (every rank can rebuild every rank's data from its seed).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = (3, 2)  # rows per rank: unequal, so the gather pads


def rank_rows(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(SIZES[rank], 4, generator=g), torch.randn(SIZES[rank], 4, generator=g)


def rank_pairs(rank: int) -> dict[str, torch.Tensor]:
    """A siamese 'sts' batch of two pairs; rank 1's first pair repeats a sentence of its own."""
    g = torch.Generator().manual_seed(200 + rank)
    a = torch.randint(3, 50, (2, 4), generator=g)
    b = torch.randint(3, 50, (2, 4), generator=g)
    if rank == 1:
        b[0] = a[1]
    ones = torch.ones_like(a)
    return {
        "task": "sts",
        "input_ids_a": a,
        "attention_mask_a": ones,
        "input_ids_b": b,
        "attention_mask_b": ones,
    }


def worker(rank: int, out: str, port: int) -> None:
    # imported by the parent before it forks the ranks (see the end): one interpreter's imports for both
    from pal_lightning.modeling.simcse import (
        SimCSEConfig,
        gather_rows,
        not_negatives,
        simcse_batch_loss,
        simcse_loss,
    )
    from pal_lightning.tasks.catalogue import BUILTIN_TASKS

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    result: dict[str, object] = {}
    # 1. gather_rows + simcse_loss on raw embeddings
    z1, z2 = (t.requires_grad_() for t in rank_rows(rank))
    rows, offset = gather_rows(z2)
    loss = simcse_loss(z1, rows, 0.5, targets=offset + torch.arange(len(z1)))
    loss.backward()
    all_z2 = torch.cat([rank_rows(r)[1] for r in range(2)])
    ref_z1, ref_z2 = z1.detach().clone().requires_grad_(), all_z2.clone().requires_grad_()
    ref = simcse_loss(ref_z1, ref_z2, 0.5, targets=sum(SIZES[:rank]) + torch.arange(len(z1)))
    ref.backward()
    mine = slice(sum(SIZES[:rank]), sum(SIZES[: rank + 1]))
    result.update(
        offset=offset,
        gathered_equal=bool(torch.equal(rows.detach(), all_z2)),
        loss=float(loss),
        ref_loss=float(ref),
        grad_z1_close=bool(torch.allclose(z1.grad, ref_z1.grad, atol=1e-6)),
        grad_z2_close=bool(torch.allclose(z2.grad, ref_z2.grad[mine], atol=1e-6)),
    )
    # 2. the module-level path: unsup SimCSE on pairs with partners masked, candidates from both ranks
    emb = torch.nn.Embedding(50, 6)
    torch.nn.init.normal_(emb.weight, generator=torch.Generator().manual_seed(7))

    def encode(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return emb(inputs["input_ids"]).mean(1)  # deterministic: both views are equal

    spec = BUILTIN_TASKS["sts"]
    config = SimCSEConfig(temperature=0.3, gather_across_ranks=True)
    got = simcse_batch_loss(encode, rank_pairs(rank), spec, config)
    # by hand: candidates are [a0 a1 b0 b1] of rank 0 then of rank 1; only the local block has partners
    # and duplicates masked
    views = []
    for r in range(2):
        p = rank_pairs(r)
        views.append(encode({"input_ids": torch.cat([p["input_ids_a"], p["input_ids_b"]])}))
    cands = torch.cat(views).detach()
    local = views[rank].detach()
    p = rank_pairs(rank)
    skip = not_negatives(
        {"input_ids": torch.cat([p["input_ids_a"], p["input_ids_b"]]), "attention_mask": torch.ones(4, 4)}
    )
    total = 0.0
    for i in range(4):
        sims = []
        for j in range(8):
            k = j - 4 * rank
            if 0 <= k < 4 and bool(skip[i, k]):
                continue
            sims.append((j, float(torch.cosine_similarity(local[i], cands[j], dim=0)) / 0.3))
        positive = dict(sims)[4 * rank + i]
        total += -(positive - torch.logsumexp(torch.tensor([s for _, s in sims]), 0).item())
    result.update(module_loss=float(got), module_ref=total / 4, masked=int(skip.sum()))
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    # the ranks are forked once the parent has imported what they use (it has run no torch operation, so no
    # thread pool exists yet): spawned, each would start an interpreter and import torch and pal_lightning
    # (about 4 s of CPU each on the 2-core machine)
    import pal_lightning.modeling.simcse  # noqa: F401
    import pal_lightning.tasks.specs  # noqa: F401

    mp.start_processes(worker, args=(sys.argv[1], int(sys.argv[2])), nprocs=2, join=True, start_method="fork")
