"""GEMCallback under real 2-process gloo DDP: identical parameters and memories on both ranks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pal_lightning.testing import quiet_trainer, write_cs224n_data

pytestmark = pytest.mark.ddp

SCRIPT = Path(__file__).with_name("gem_ddp_script.py")


#: The two fits, run one after the other by one pair of ranks (one interpreter start each, not two):
#: ModernBERT, the family least like BERT (pre-LN, fused projections, local attention), interleaved;
#: then BERT with the sequential schedule and ContinualEvaluation.
FITS = {"interleaved": "modernbert", "continual": "bert"}


@pytest.fixture(scope="module")
def ranks(
    tmp_path_factory: pytest.TempPathFactory, forked_cli: Any
) -> tuple[Path, dict[str, tuple[dict, dict]]]:
    """Run the DDP script (2 gloo ranks) once for every fit of :data:`FITS`, each with a tiny encoder of its
    family, on fresh fixture files; the data folder and each fit's two rank records (and its folder)."""
    root = tmp_path_factory.mktemp("gem_ddp")
    data = write_cs224n_data(root / "data")  # before the ranks start: both see complete files
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    env.pop("LOCAL_RANK", None)
    runs = []
    for mode, model_type in FITS.items():
        (root / mode).mkdir()
        runs += [str(root / mode), mode, model_type]
    proc = forked_cli.run_script(root, SCRIPT, [str(data), *runs], env)  # forked (tests/conftest.py)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = {
        mode: tuple(json.loads((root / mode / f"rank{r}.json").read_text()) for r in (0, 1)) for mode in FITS
    }
    return root, records  # type: ignore[return-value]


def test_gem_two_process_ddp(ranks: tuple[Path, dict[str, tuple[dict, dict]]]) -> None:
    r0, r1 = ranks[1]["interleaved"]  # ModernBERT (FITS); the continual test below reads BERT's fit
    assert r0["world"] == r1["world"] == 2 and r0["steps"] == r1["steps"] == 6
    assert r0["finite"] and r1["finite"]
    # both ranks stored the same global examples: 6 steps x 2 ranks x 3 examples
    assert r0["memory"] == r1["memory"]
    assert sum(r0["memory"]["memory"]["seen"].values()) == 6 * 2 * 3
    # the same decisions every step, and projections really happened
    assert r0["stats"] == r1["stats"]
    assert max(s["gem/constraints"] for s in r0["stats"]) == 2  # two rows: the batched path
    assert r0["memory"]["projections"] >= 1
    # and identical parameters after training
    assert r0["params"] == r1["params"]
    # the memory rows, each rank's share summed across ranks, are those of the whole draw in one process
    assert len(r0["row_errors"]) >= 1 and max(r0["row_errors"] + r1["row_errors"]) <= 1e-5


def test_continual_gem_two_process_ddp_matches_a_single_process_evaluation(
    ranks: tuple[Path, dict[str, tuple[dict, dict]]],
) -> None:
    """Sequential schedule + GEM ("past") + ContinualEvaluation on 2 ranks: the same R on both, and its
    last row equals a single-process validation of the final weights."""
    import torch

    from pal_lightning import MultiTaskDataModule, MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    root, records = ranks
    r0, r1 = records["continual"]
    data = root / "data"
    assert r0["steps"] == r1["steps"] == 6
    assert r0["params"] == r1["params"] and r0["memory"] == r1["memory"]
    assert r0["baseline"] == r1["baseline"] and r0["R"] == r1["R"]
    assert len(r0["R"]) == 3 and all(len(row) == 3 for row in r0["R"])
    # "past": the first phase has nothing to constrain, the later ones do
    assert r0["memory"]["task_order"] == ["sst", "qqp", "sts"]
    assert [s["gem/constraints"] for s in r0["stats"]] == [0, 0, 1, 1, 2, 2]
    # each example scored once across the ranks: one process scoring every example agrees
    model = MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    model.load_state_dict(torch.load(root / "continual" / "final.pt", weights_only=True))
    dm = MultiTaskDataModule(data_dir=data, cache_dir=False, batch_size=3, max_length=32)
    trainer = quiet_trainer()
    trainer.validate(model, datamodule=dm, verbose=False)
    single = model.last_scores["val"]
    expected = [single["val/sst/accuracy"], single["val/qqp/accuracy"], single["val/sts/pearson"]]
    assert r0["R"][-1] == pytest.approx(expected, abs=1e-5)
