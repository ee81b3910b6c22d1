"""The inference core on a tiny random encoder with the real offline tokenizer: ``module.predict(task, texts)``,
``module.predict([(task, text), ...])`` (a mixed stream, rows of several tasks per forward) and the mixed
serving benchmark."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pal_lightning import MultiTaskModule, PalUserError, TaskSpec
from pal_lightning.module.inference import predict_items
from pal_lightning.testing import TINY_BERT, write_cs224n_data
from pal_lightning.testing.conformance import move

SENTENCES = [
    "a great, moving film .",
    "dull plot",
    "the music is fun but the end is long and bad and the actors are bored " * 3,
    "ok",
    "story",
]
PAIRS = [("how do I cook rice?", "how is rice cooked?"), ("a", "b c d e f g"), ("same words", "same words")]


def one_by_one(module: MultiTaskModule, task: str, item: object) -> torch.Tensor:
    """The head output of one example, tokenised directly by the tokenizer (a second implementation)."""
    tok = module.tokenizer
    kw = dict(return_tensors="pt", truncation=True, max_length=module.predict_max_length)
    if isinstance(item, str):
        batch = dict(tok(item, **kw))
    elif task == "sts":  # siamese: each sentence alone
        batch = {
            f"{k}_{side}": v
            for side, text in zip("ab", item, strict=True)
            for k, v in tok(text, **kw).items()
        }
    else:
        batch = dict(tok(*item, **kw))
    batch["task"] = task
    module.eval()
    with torch.no_grad():
        return module(batch)[0]


def test_classification_matches_a_direct_forward_and_names_labels(module: MultiTaskModule) -> None:
    out = module.predict("sst", SENTENCES, batch_size=2)
    expected = torch.stack([torch.softmax(one_by_one(module, "sst", s), -1) for s in SENTENCES]).numpy()
    assert out.probabilities.shape == (len(SENTENCES), 5)
    np.testing.assert_allclose(out.probabilities, expected, atol=1e-5)
    np.testing.assert_allclose(out.probabilities.sum(1), 1.0, atol=1e-6)
    assert out.classes == expected.argmax(1).tolist()
    names = ["negative", "somewhat negative", "neutral", "somewhat positive", "positive"]
    assert out.labels == [names[c] for c in out.classes]
    assert out.records()[0]["probabilities"]["neutral"] == pytest.approx(float(expected[0, 2]))
    # truncation at predict_max_length: the long sentence is cut, not an error, and its prediction says so
    assert len(module.tokenizer(SENTENCES[2])["input_ids"]) > module.predict_max_length
    long = SENTENCES[2]
    items = [("sst", s) for s in SENTENCES] + [
        ("sts", ("short", long)),
        ("qqp", ("short", long)),
        ("sts", PAIRS[0]),
    ]
    assert [p.truncated for p in module.predict(items)] == [
        False,
        False,
        True,
        False,
        False,
        True,
        True,
        False,
    ]


def test_pairs_cross_and_siamese_regression(module: MultiTaskModule) -> None:
    qqp = module.predict("qqp", PAIRS)
    expected = torch.stack([torch.softmax(one_by_one(module, "qqp", p), -1) for p in PAIRS]).numpy()
    np.testing.assert_allclose(qqp.probabilities, expected, atol=1e-5)
    assert set(qqp.labels) <= {"duplicate", "not_duplicate"}
    sts = module.predict("sts", PAIRS)
    # the siamese head scores the cosine of the two vectors, mapped from [0, 1] onto 0..5 (clamped)
    cos = [float(one_by_one(module, "sts", p)) for p in PAIRS]
    assert sts.scores == pytest.approx([5 * min(max(c, 0.0), 1.0) for c in cos], abs=1e-5)
    assert sts.scores[2] == pytest.approx(5.0, abs=1e-4)  # identical sentences: cosine 1
    assert sts.classes is None and sts.probabilities is None and sts.labels is None


def test_single_bce_logit_gives_two_probabilities(module: MultiTaskModule) -> None:
    out = module.predict("binary", SENTENCES[:3])
    logits = torch.stack([one_by_one(module, "binary", s).reshape(()) for s in SENTENCES[:3]])
    p = torch.sigmoid(logits).numpy()
    np.testing.assert_allclose(out.probabilities, np.stack([1 - p, p], 1), atol=1e-5)
    assert out.classes == (logits > 0).long().tolist()
    assert out.labels == out.classes  # no names known: the class indices


def test_order_batching_mode_and_gradients(module: MultiTaskModule) -> None:
    module.train()
    full = module.predict("sst", SENTENCES, batch_size=64)
    assert module.training  # the previous mode is restored
    assert all(p.grad is None for p in module.parameters())
    module.eval()
    small = module.predict("sst", SENTENCES[::-1], batch_size=1)
    assert not module.training
    np.testing.assert_allclose(small.probabilities[::-1], full.probabilities, atol=1e-5)
    assert module.predict("sst", "one sentence alone").classes is not None


@pytest.mark.parametrize(
    ("task", "texts", "message"),
    [
        ("nope", ["x"], "Unknown task 'nope': this model predicts sst, qqp, sts, binary"),
        ("sst", [], "holds no sentences"),
        ("qqp", ["only one sentence"], "takes \\(sentence1, sentence2\\) tuples"),
        ("sst", [("a", "b")], "takes single sentences"),
        ("sts", [("a", "b", "c")], "takes \\(sentence1, sentence2\\) tuples"),
        ("sst", 5, "Expected a sentence or a list of sentences, got int 5. Pass e.g. predict\\('sst', \\["),
    ],
)
def test_bad_input_is_one_line(module: MultiTaskModule, task: str, texts: list, message: str) -> None:
    with pytest.raises(PalUserError, match=message) as info:
        module.predict(task, texts)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("names", [["yes", "yes"], ["yes", " "], "ab"])
def test_class_names_set_on_a_module_are_distinct_non_empty_names(names: Any) -> None:
    # as a TaskSpec's label_names: a repeated name would drop a class from records() and the saved label2id
    from pal_lightning.testing.batches import tiny_module

    module = tiny_module(tasks=["qqp"])
    with pytest.raises(PalUserError, match="distinct") as info:
        module.set_label_names({"qqp": names})
    assert "\n" not in str(info.value)
    assert module.label_names["qqp"] == ["not_duplicate", "duplicate"]  # nothing changed


# ---------------------------------------------------------------------------------------------- mixed streams
def test_mixed_predict_equals_each_tasks_own_predict_in_input_order(
    module: MultiTaskModule, items: list[tuple[str, Any]]
) -> None:
    mixed = module.predict(items, batch_size=4)
    assert [p.task for p in mixed] == [task for task, _ in items]
    for task in dict.fromkeys(task for task, _ in items):
        at = [i for i, (t, _) in enumerate(items) if t == task]
        own = module.predict(task, [items[i][1] for i in at])
        for k, i in enumerate(at):
            p = mixed[i]
            if own.scores is not None:
                assert p.score == pytest.approx(own.scores[k], abs=1e-5) and p.label is None
                continue
            assert (p.class_index, p.label, p.label_names) == (own.classes[k], own.labels[k], own.label_names)
            np.testing.assert_allclose(p.probabilities, own.probabilities[k], rtol=0, atol=1e-5)
    assert mixed[0].label in mixed[0].label_names  # sst's names, not class indices
    assert set(mixed[0].record()) == {"task", "label", "probabilities"}
    assert mixed[2].record() == {"task": "sts", "score": mixed[2].score}


def test_mixed_predict_runs_length_sorted_batches_of_several_tasks(
    module: MultiTaskModule, items: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    lengths: list[int] = []
    original = module.forward_mixed

    def spy(batch: dict[str, Any]) -> Any:
        seen.append(list(batch["tasks"]))
        lengths.append(int(batch["attention_mask"].sum(1).max()))
        return original(batch)

    monkeypatch.setattr(module, "forward_mixed", spy)
    module.predict(items, batch_size=4)
    assert len(seen) == math.ceil(len(items) / 4)
    assert all(len(set(tasks)) > 1 for tasks in seen[:2])  # rows of several tasks in one forward
    assert lengths == sorted(lengths)  # short inputs first, as the one-task predict batches them


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([("nope", "hi")], "Unknown task 'nope': this model predicts sst, qqp, sts, binary"),
        ([("sst", "hi"), "just text"], "takes \\(task, text\\) pairs, but input 1"),
        (
            [("sst", "hi"), ("qqp", "one sentence")],
            "Task 'qqp' takes \\(sentence1, sentence2\\) tuples, but input 1",
        ),
        ([], "Nothing to predict"),
    ],
    ids=["unknown-task", "not-a-pair", "pair-task-single-sentence", "empty"],
)
def test_mixed_predict_user_errors(module: MultiTaskModule, items: list[Any], message: str) -> None:
    with pytest.raises(PalUserError, match=message):
        module.predict(items)


# ---------------------------------------------------------------------------------------------- benchmark
def test_benchmark_serves_the_stream_both_ways_and_writes_json(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "benchmark_mixed_serving", Path(__file__).parents[2] / "benchmarks" / "mixed_serving.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = write_cs224n_data(tmp_path / "data")
    out = tmp_path / "mixed.json"
    result = bench.main(["--data-dir", str(data), "--n", "12", "--reps", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    assert [r["batch"] for r in result["results"]] == [8, 32, 128]
    assert sum(result["tasks_in_stream"].values()) == 12 and "load_avg_1m_before" in result
    assert all(r["max_abs_diff"] < 1e-4 and r["ratio"] > 0 for r in result["results"])


TOPIC = TaskSpec(name="topic", num_labels=3, text_columns=("sentence",))
TEXT = "a fine film with a long and dull end"
PAIR = ("how do I cook rice?", "how is rice cooked?")
PREFIX_ITEMS = [
    ("sst", TEXT),
    ("topic", TEXT),
    ("cfimdb", TEXT),
    ("qqp", PAIR),  # cross: one sequence
    ("sts", PAIR),  # siamese: a row per side
    ("sst", PAIR[0]),  # the same row as the siamese pair's first side
]


def test_all_tasks_on_one_input_equal_each_alone_and_run_the_lower_layer_once() -> None:
    """Several tasks on one input run the layers below their modules once per distinct row (single
    sentences, a cross pair's sequence, each side of a siamese pair) and answer as each item alone does;
    ``shared_prefix=False`` runs every row through every layer."""
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts", "cfimdb", TOPIC],
        encoder_config=TINY_BERT,
        adapter={"method": "pals", "size": 8, "num_heads": 2, "num_layers": 1, "placement": "top"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    move(module)  # zero-initialised ups would make every task's modules the identity
    module.set_label_names({"topic": ["sports", "politics", "arts"]})
    rows: list[list[int]] = [[], []]
    for i, layer in enumerate(module.encoder.family.layer_list(module.encoder.backbone)):
        layer.register_forward_pre_hook(lambda m, args, i=i: rows[i].append(args[0].shape[0]))
    together = module.predict(PREFIX_ITEMS)
    # 7 rows (the siamese second side one more) of 4 distinct inputs: layer 0, and layer 1 but for its join
    # norm (the PALs' term joins there), run on the 4
    assert rows == [[4], [4]]
    for item, prediction in zip(PREFIX_ITEMS, together, strict=True):
        (alone,) = module.predict([item])
        assert prediction.task == alone.task and prediction.label == alone.label
        if alone.score is not None:
            assert abs(prediction.score - alone.score) < 1e-5
        else:
            np.testing.assert_allclose(prediction.probabilities, alone.probabilities, atol=1e-5, rtol=0)
    assert module.encoder._prefix_once is False
    rows[:] = [[], []]
    plain = predict_items(module, PREFIX_ITEMS, shared_prefix=False)
    assert rows == [[7], [7]]
    for a, b in zip(together, plain, strict=True):
        assert a.label == b.label
