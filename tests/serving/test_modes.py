"""The server's load-test modes, in-process (no server started): ``--batching per_task`` answers as the mixed
batch does, one forward per task; ``--tasks`` serves some tasks, drops the others' weights and has the request
checks refuse them as unknown; the batch counters behind ``GET /stats``; the options' one-line mistakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.serving.answers import answer_requests, catalogue
from pal_lightning.serving.command import options
from pal_lightning.serving.schema import BadRequest, Query, ServeRequest, parse_body
from pal_lightning.serving.stats import BatchCounters, difference
from pal_lightning.serving.subset import keep_tasks, parse_task_list
from tests.serving.test_answers import check_equal, requests, tiny


def flat_scores(answers: list[Any]) -> list[float]:
    rows = [answers[0], *answers[1], *answers[2]]
    return [v.get("score", v.get("probability")) for a in rows for _, v in sorted(a["predictions"].items())]


@pytest.mark.parametrize("method", ["pals", "lora"])
def test_per_task_batching_answers_as_the_mixed_batch(method: str) -> None:
    module = tiny(method)
    per_task = answer_requests(module, requests(), per_task=True)
    check_equal(module, per_task)
    np.testing.assert_allclose(
        flat_scores(per_task), flat_scores(answer_requests(module, requests())), atol=1e-5
    )


def test_keeping_one_task_drops_the_others_weights_and_keeps_its_answers() -> None:
    module = tiny("pals")
    full = sum(p.numel() for p in module.parameters())
    expected = module.predict("qqp", [("how do I cook rice?", "how is rice cooked?"), ("a", "b c")])
    shared = sum(p.numel() for _, p in module.encoder.shared_parameters())
    qqp = sum(p.numel() for _, p in module.encoder.task_parameters("qqp"))
    qqp += sum(p.numel() for p in module.heads["qqp"].parameters())
    keep_tasks(module, ["qqp"])
    assert sum(p.numel() for p in module.parameters()) == shared + qqp < full
    assert list(module.encoder.adapters) == list(module.heads) == list(module.task_specs) == ["qqp"]
    got = module.predict("qqp", [("how do I cook rice?", "how is rice cooked?"), ("a", "b c")])
    assert got.probabilities is not None and expected.probabilities is not None
    np.testing.assert_allclose(got.probabilities, expected.probabilities, atol=1e-6)
    served = catalogue(module)
    assert list(served) == ["qqp"]
    with pytest.raises(BadRequest, match="sst") as err:  # the guard's check: an unknown task
        parse_body(b'{"task": "sst", "text": "a fine film"}', served, 64)
    assert 400 <= err.value.status < 500
    with pytest.raises(PalUserError, match="task 'sts'"):
        module.predict("sts", [("a", "b")])  # nothing left to answer it with


def test_an_unknown_task_to_keep_is_one_line() -> None:
    with pytest.raises(PalUserError, match=r"no task 'nope'; its tasks are sst, qqp, sts, topic\.$"):
        keep_tasks(tiny("none"), ["sst", "nope"])


def test_the_api_serves_the_tasks_kept_and_counts_its_batches(tmp_path: Path) -> None:
    pytest.importorskip("litserve", reason="the serve extra is not installed")
    import multiprocessing

    from pal_lightning.serving.api import CPU_ROWS_PER_FORWARD, PalAPI

    module = tiny("pals")
    folder = module.save_pretrained(tmp_path / "model")
    announce = multiprocessing.get_context("spawn").SimpleQueue()
    counters = BatchCounters(max_batch_size=4)
    api = PalAPI(
        str(folder),
        None,
        4,
        0.0,
        announce=announce,
        batching="per_task",
        tasks=["sst", "topic"],
        counters=counters,
    )
    api.setup("cpu")
    assert api.rows_per_forward == CPU_ROWS_PER_FORWARD  # 0 given: the CPU's rows per forward pass
    kind, tasks = announce.get()
    assert kind == "tasks" and list(tasks) == ["sst", "topic"]
    before = counters.snapshot()
    batch = [ServeRequest((Query("a fine film", ("sst", "topic")),), listed=False)] * 3
    answers = api.predict(batch)
    expected = module.predict("topic", ["a fine film"])
    assert expected.probabilities is not None
    assert answers[2]["predictions"]["topic"]["probability"] == pytest.approx(
        float(expected.probabilities.max()), abs=1e-5
    )
    api.predict(batch[0])  # one request: a batch of one
    done = difference(before, counters.snapshot())
    assert {k: done[k] for k in ("batches", "requests", "inputs", "forwards")} == {
        "batches": 2,
        "requests": 4,
        "inputs": 8,
        "forwards": 4,  # per task: two tasks, two forwards, in each batch
    }
    assert done["batch_sizes"] == {"3": 1, "1": 1} and done["tasks_per_batch"] == {"2": 2}
    assert done["mean_batch_size"] == 2.0 and done["mean_tasks_per_batch"] == 2.0
    assert done["busy_seconds"] > 0


def test_the_counters_histograms_and_difference() -> None:
    counters = BatchCounters(max_batch_size=2)
    empty = counters.snapshot()
    assert difference(empty, empty)["mean_batch_size"] is None
    counters.record(requests=2, inputs=5, tasks=3, forwards=1, seconds=0.5)
    counters.record(requests=9, inputs=9, tasks=99, forwards=1, seconds=0.25)  # over the slots: the last
    now = counters.snapshot()
    assert now["batch_sizes"] == {"2": 2} and now["tasks_per_batch"] == {"3": 1, "64": 1}
    assert (now["batches"], now["requests"], now["inputs"], now["busy_seconds"]) == (2, 11, 14, 0.75)


def test_the_mode_options_and_their_mistakes() -> None:
    o = options(["m", "--batching", "per_task", "--tasks", "sst,qqp"], environ={})
    assert o.batching == "per_task" and parse_task_list(o.tasks) == ("sst", "qqp")
    assert options(["m"], environ={}).batching == "mixed" and parse_task_list(None) is None
    with pytest.raises(PalUserError, match=r"^Invalid --batching 'each': use mixed or per_task\.$"):
        options(["m", "--batching", "each"], environ={})
    assert options(["m"], environ={}).rows_per_forward == 0  # automatic: the worker's device decides
    assert options(["m", "--rows_per_forward", "16"], environ={}).rows_per_forward == 16
    with pytest.raises(PalUserError, match=r"^Invalid --rows_per_forward -1: use 0 \(automatic\) or more\.$"):
        options(["m", "--rows_per_forward", "-1"], environ={})
    for bad in ("sst,,qqp", "sst,sst", ""):
        with pytest.raises(PalUserError, match=r"Invalid --tasks .*each once"):
            options(["m", "--tasks", bad], environ={})
