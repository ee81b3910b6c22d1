"""Served answers are predict's: a batch of requests of every task kind (single, cross pair, siamese pair,
regression, an own string-labelled task) answered in one inference-core call, for every kind of per-task
method (PALs, LoRA, bottleneck adapters, the shared encoder alone), equal to ``module.predict`` within 1e-5;
the truncation flag; the task catalogue; the LitServe API's batched and unbatched calls (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pal_lightning import MultiTaskModule, TaskSpec
from pal_lightning.serving.answers import answer_requests, catalogue, predict_all
from pal_lightning.serving.schema import Query, ServeRequest
from pal_lightning.testing import TINY_BERT
from pal_lightning.testing.conformance import move, tiny_options

TOPIC = TaskSpec(name="topic", num_labels=3, text_columns=("sentence",))
SENTENCES = ["a fine film", "dull plot", "the music is fun but the end is long and bad"]
PAIRS = [("how do I cook rice?", "how is rice cooked?"), ("a", "b c d e")]


def tiny(method: str) -> MultiTaskModule:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts", TOPIC],
        encoder_config=TINY_BERT,
        adapter={"method": method, **tiny_options(method)},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    move(module)  # zero-initialised ups would make every task's modules the identity
    module.set_label_names({"topic": ["sports", "politics", "arts"]})
    return module.eval()


def requests() -> list[ServeRequest]:
    return [
        ServeRequest((Query(SENTENCES[0], ("sst", "topic"), True),), listed=False),
        ServeRequest(tuple(Query(p, ("qqp", "sts")) for p in PAIRS), listed=True),
        ServeRequest(tuple(Query(s, ("topic",)) for s in SENTENCES[1:]), listed=True),
    ]


def check_equal(module: MultiTaskModule, answers: list[Any]) -> None:
    flat = [answers[0], *answers[1], *answers[2]]
    texts = [SENTENCES[0], *PAIRS, *SENTENCES[1:]]
    for task in ("sst", "topic", "qqp", "sts"):
        rows = [
            (t, a["predictions"][task]) for t, a in zip(texts, flat, strict=True) if task in a["predictions"]
        ]
        expected = module.predict(task, [t for t, _ in rows])
        if expected.scores is not None:
            np.testing.assert_allclose([a["score"] for _, a in rows], expected.scores, atol=1e-5)
            continue
        assert [a["label"] for _, a in rows] == expected.labels
        assert expected.probabilities is not None
        np.testing.assert_allclose(
            [a["probability"] for _, a in rows], expected.probabilities.max(1), atol=1e-5
        )
    every = flat[0]["predictions"]["topic"]["probabilities"]
    assert list(every) == ["sports", "politics", "arts"] and flat[0]["predictions"]["topic"]["label"] in every


@pytest.mark.parametrize("method", ["pals", "lora", "bottleneck", "none"])
def test_a_mixed_batch_answers_as_predict_for_every_method(method: str) -> None:
    module = tiny(method)
    for rows in (0, 2):  # one forward for the batch, or its rows sorted by length in forwards of two
        answers = answer_requests(module, requests(), rows=rows)
        assert isinstance(answers[0], dict) and [len(answers[1]), len(answers[2])] == [2, 2]
        check_equal(module, answers)


def test_truncation_is_reported_as_predict_cuts() -> None:
    module = tiny("pals")
    module.predict_max_length = 8
    long = "the music is fun but the end is long and bad"  # 11 words: more than 8 tokens
    items: list[tuple[str, str | tuple[str, str]]] = [
        ("sst", "a fine film"),
        ("sst", long),
        ("qqp", ("a", "b")),
        ("qqp", ("a b c", "d e f")),  # [CLS] 3 [SEP] 3 [SEP]: 9 tokens as one cross sequence
        ("sts", ("a b c", "d e f")),  # siamese: 5 tokens on each side
        ("sts", ("a", long)),
    ]
    assert [p.truncated for p in predict_all(module, items)] == [False, True, False, True, False, True]
    (one,) = answer_requests(module, [ServeRequest((Query(long, ("sst", "topic")),), listed=False)])
    assert one["truncated"] is True


def test_the_catalogue_names_kinds_inputs_and_labels() -> None:
    tasks = catalogue(tiny("none"))
    assert list(tasks) == ["sst", "qqp", "sts", "topic"]
    assert tasks["sts"].describe() == {
        "kind": "pair_regression",
        "inputs": 2,
        "labels": None,
        "num_labels": 1,
        "pair_encoding": "siamese",
    }
    assert tasks["qqp"].pair_encoding == "cross" and tasks["qqp"].labels == ("not_duplicate", "duplicate")
    assert tasks["topic"].labels == ("sports", "politics", "arts") and tasks["sst"].inputs == 1


def test_the_litserve_api_answers_a_batch_or_one_request(tmp_path: Path) -> None:
    pytest.importorskip("litserve", reason="the serve extra is not installed")
    from pal_lightning.serving.api import PalAPI

    module = tiny("pals")
    folder = module.save_pretrained(tmp_path / "model")
    api = PalAPI(str(folder), None, max_batch_size=4, batch_timeout=0.0)
    api.setup("cpu")
    batch = [api.decode_request(r.canonical()) for r in requests()]
    answers = [api.encode_response(a) for a in api.predict(batch)]
    check_equal(module, answers)
    check_equal(module, [api.predict(one) for one in batch])  # max_batch_size 1: LitServe passes one request
