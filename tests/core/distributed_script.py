"""Two gloo ranks through pal_lightning.core.distributed (run by test_distributed.py): each writes
``rank<r>.json`` with what every helper gave it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pal_lightning.core import distributed as D


def worker(rank: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        # rank r holds r + 1 rows of values 10 r, so the expected results are known by hand
        gathered = D.gather_objects([10 * rank] * (rank + 1))
        summed = D.all_reduce_sum(torch.tensor([float(rank + 1), 2.0]))
        sent = D.broadcast(torch.tensor([float(rank)]), src=1)
        rows = [x.tolist() for x in D.gather_tensors(torch.full((rank + 1, 2), float(rank)))]
        D.barrier()
        info = [D.rank(), D.world_size(), D.is_main_process()]
        result = [*info, gathered, summed.tolist(), sent.tolist(), rows]
    finally:
        D.close_process_group()
    result.append(dist.is_initialized())
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    # forked once the parent has imported what the ranks use (it has run no torch operation, so no thread
    # pool exists yet): spawned, each would start an interpreter and import torch
    mp.start_processes(worker, args=(sys.argv[1], int(sys.argv[2])), nprocs=2, join=True, start_method="fork")
