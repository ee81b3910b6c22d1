"""Benchmark: ``module.predict`` on 1,000 sentences in one call vs one call per sentence.

The sentences are the first ``--n`` real SST sentences (dev, then test) read by the library's own
reader; the model is the real all-MiniLM-L6-v2 encoder with PALs and the three CS224N heads
(untrained heads: speed does not depend on the weights). Both ways predict the same sentences and
must agree (max abs difference of the probabilities is reported). Library and model loading are
excluded; each way runs once for warm-up on a few sentences first.

Usage::

    PAL_DATA_DIR=/work/shared/data/cs224n-minbert HF_HUB_OFFLINE=1 \\
        python benchmarks/predict_speed.py --json predict_speed.json

Target: batched at least 5x faster than one call per sentence.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

TARGET_RATIO = 5.0


def sst_sentences(data_dir: str, n: int) -> list[str]:
    """The first ``n`` SST sentences of the dev and test files (cleaned as for training)."""
    from pal_lightning.data.sources.readers import read_split
    from pal_lightning.tasks.specs import get_task

    spec = get_task("sst")
    texts: list[str] = []
    for split in ("dev", "test"):
        texts += read_split(spec, split, Path(data_dir)).texts[0]
        if len(texts) >= n:
            break
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} SST sentences in {data_dir}, asked for {n}")
    return texts[:n]


def measure(module: Any, sentences: list[str], batch_size: int) -> dict[str, Any]:
    import numpy as np
    import torch

    module.predict("sst", sentences[:8], batch_size=batch_size)  # warm-up
    module.predict("sst", sentences[0])
    sync = torch.cuda.synchronize if module.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    batched = module.predict("sst", sentences, batch_size=batch_size)
    sync()
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    single = [module.predict("sst", [s]).probabilities[0] for s in sentences]
    sync()
    single_s = time.perf_counter() - start
    diff = float(np.abs(np.stack(single) - batched.probabilities).max())
    return {
        "n": len(sentences),
        "batch_size": batch_size,
        "batched_s": batched_s,
        "one_per_call_s": single_s,
        "sentences_per_s_batched": len(sentences) / batched_s,
        "sentences_per_s_one_per_call": len(sentences) / single_s,
        "ratio": single_s / batched_s,
        "target_ratio": TARGET_RATIO,
        "max_abs_prob_diff": diff,
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("PAL_DATA_DIR"), help="default: $PAL_DATA_DIR")
    parser.add_argument("--n", type=int, default=1000, help="sentences to predict")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--encoder", default=None, help="encoder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument(
        "--encoder-config", default=None, help="JSON BertConfig kwargs: a random encoder (tests)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ...")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set PAL_DATA_DIR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from pal_lightning import DEFAULT_ENCODER, MultiTaskModule

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"encoder": args.encoder or DEFAULT_ENCODER, "adapter": {"init": "random"}}
    if args.encoder_config:
        kwargs.update(encoder_config=json.loads(args.encoder_config), adapter={"size": 8, "num_heads": 2})
    module = MultiTaskModule(tasks=["sst", "qqp", "sts"], **kwargs).to(args.device)
    sentences = sst_sentences(args.data_dir, args.n)
    result = {
        "benchmark": "predict_speed",
        "encoder": "random " + args.encoder_config if args.encoder_config else kwargs["encoder"],
        "device": str(module.device),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        **measure(module, sentences, args.batch_size),
    }
    print(
        f"predict on {result['n']} sentences: one call {result['batched_s']:.2f} s "
        f"({result['sentences_per_s_batched']:.0f}/s), one call per sentence {result['one_per_call_s']:.2f} s "
        f"({result['sentences_per_s_one_per_call']:.0f}/s): {result['ratio']:.1f}x faster "
        f"(target >= {TARGET_RATIO:g}x), max abs probability difference {result['max_abs_prob_diff']:.2e}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
