"""pal_lightning.pipeline(folder, task=...)(inputs): a saved tiny model's predictions in transformers' shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pal_lightning  # noqa: E402
from pal_lightning import MultiTaskModule, PalUserError, TaskSpec  # noqa: E402
from pal_lightning.testing import TINY_BERT  # noqa: E402

SENTENCES = ["a fine film", "dull plot", "the music is fun but the end is long and bad", "ok"]
PAIRS = [("how do I cook rice?", "how is rice cooked?"), ("a", "b c d e")]
TOPIC = TaskSpec(name="topic", num_labels=4, text_columns=("sentence",))
TOPICS = ["sports", "politics", "science", "arts"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "sts", TOPIC],
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    module.set_label_names({"topic": TOPICS})
    return module.save_pretrained(tmp_path_factory.mktemp("saved") / "model")


@pytest.fixture(scope="module")
def reference(folder: Path) -> MultiTaskModule:
    return MultiTaskModule.from_pretrained(folder)


def test_one_sentence_gives_a_list_of_one_label_and_score(folder: Path, reference: MultiTaskModule) -> None:
    classify = pal_lightning.pipeline(str(folder), task="sst")
    out = classify("a fine film")
    expected = reference.predict("sst", ["a fine film"])
    assert out == [
        {"label": expected.labels[0], "score": pytest.approx(float(expected.probabilities[0].max()))}
    ]
    assert out[0]["label"] in reference.label_names["sst"]
    assert repr(classify) == "TaskPipeline(task='sst', device='cpu')"


def test_a_list_keeps_its_order_and_names_a_tasks_own_classes(
    folder: Path, reference: MultiTaskModule
) -> None:
    topic = pal_lightning.pipeline(folder, task="topic", device="cpu", batch_size=2)
    out = topic(SENTENCES)
    expected = reference.predict("topic", SENTENCES)
    assert [o["label"] for o in out] == expected.labels
    assert {o["label"] for o in out} <= set(TOPICS)
    np.testing.assert_allclose([o["score"] for o in out], expected.probabilities.max(1), atol=1e-6)
    every = topic(SENTENCES[:2], top_k=None)
    assert [len(e) for e in every] == [4, 4]
    assert sorted(e["label"] for e in every[0]) == sorted(TOPICS)
    scores = [e["score"] for e in every[0]]
    assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1.0, abs=1e-5)
    one = topic("ok", top_k=None)  # one input: its list itself, as transformers gives it
    assert [e["label"] for e in one] == [e["label"] for e in topic(["ok"], top_k=None)[0]]
    assert [e["label"] for e in topic("ok", top_k=2)] == [e["label"] for e in one[:2]]
    assert len(topic("ok")) == 1 and topic("ok")[0]["label"] == one[0]["label"]  # top_k=1: a list of one dict
    assert topic({"text": "ok"}) == topic("ok") and topic([{"text": "ok"}]) == topic(
        ["ok"]
    )  # transformers' form
    with pytest.raises(PalUserError, match=r"keys text \(and text_pair for a pair\), got \['sentence'\]"):
        topic({"sentence": "ok"})
    with pytest.raises(PalUserError, match="Cannot predict a int: pass a sentence"):
        topic(5)


def test_pairs_and_regression_give_scores(folder: Path, reference: MultiTaskModule) -> None:
    sts = pal_lightning.pipeline(folder, task="sts", device=-1)
    out = sts(PAIRS)
    assert out == [{"score": pytest.approx(s, abs=1e-5)} for s in reference.predict("sts", PAIRS).scores]
    assert sts(PAIRS[0]) == out[:1]  # one pair: a tuple
    assert sts({"text": PAIRS[0][0], "text_pair": PAIRS[0][1]}) == out[:1]  # transformers' form


def test_unknown_labels_are_class_indices_and_a_module_in_memory_works() -> None:
    torch.manual_seed(0)
    module = MultiTaskModule(tasks=[TOPIC], encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    out = pal_lightning.pipeline(module)(SENTENCES)  # one task: no need to name it
    assert all(isinstance(o["label"], int) and 0 <= o["label"] < 4 for o in out)


def test_mistakes_are_one_line_errors(folder: Path, reference: MultiTaskModule) -> None:
    with pytest.raises(PalUserError, match="several tasks"):
        pal_lightning.pipeline(reference)
    with pytest.raises(PalUserError, match="Unknown task 'nope'"):
        pal_lightning.pipeline(reference, task="nope")
    for device, message in (("gpu0", "Unknown device 'gpu0'"), (1.5, "Unknown device 1.5. Use 'cpu'")):
        with pytest.raises(PalUserError, match=message) as info:
            pal_lightning.pipeline(reference, task="sst", device=device)
        assert "\n" not in str(info.value)
    absent = f"cuda:{torch.cuda.device_count()}"  # a GPU this machine does not have
    with pytest.raises(PalUserError, match=f"Device '{absent}' is not available.*device='cpu'"):
        pal_lightning.pipeline(reference, task="sst", device=absent)
    with pytest.raises(PalUserError, match="not int"):
        pal_lightning.pipeline(3, task="sst")  # type: ignore[arg-type]
    with pytest.raises(PalUserError, match="top_k must be >= 1"):
        pal_lightning.pipeline(reference, task="sst")("x", top_k=0)
    with pytest.raises(PalUserError, match="takes .sentence1, sentence2. tuples"):
        pal_lightning.pipeline(reference, task="sts")("one sentence")
    with pytest.raises(PalUserError):
        pal_lightning.pipeline(folder / "missing", task="sst")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has an MPS device")
def test_an_absent_device_of_another_kind_is_one_line(reference: MultiTaskModule) -> None:
    # as an absent GPU: not torch's RuntimeError from moving the model
    with pytest.raises(PalUserError, match="Device 'mps' is not available.*device='cpu'") as info:
        pal_lightning.pipeline(reference, task="sst", device="mps")
    assert "\n" not in str(info.value)
    assert reference.device.type == "cpu"


def test_a_new_process_imports_no_torch_until_asked_then_loads_with_no_configuration(
    folder: Path, reference: MultiTaskModule
) -> None:
    script = (
        "import json, sys, pal_lightning\n"
        "print(any(m in sys.modules for m in ('torch', 'pal_lightning.inference.pipeline')))\n"
        "sts = pal_lightning.pipeline(sys.argv[1], task='sts')\n"
        "print(json.dumps(sts([tuple(x) for x in json.loads(sys.argv[2])])))\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    argv = [sys.executable, "-c", script, str(folder), json.dumps(PAIRS)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    lazy, scores = out.stdout.strip().splitlines()[-2:]
    assert lazy == "False"
    assert json.loads(scores) == [{"score": s} for s in reference.predict("sts", PAIRS).scores]


def test_devices_are_named_as_torch_and_transformers_name_them() -> None:
    from pal_lightning.inference.pipeline import torch_device

    assert torch_device(None) == torch_device(-1) == torch_device("cpu") == torch.device("cpu")
    assert torch_device(0) == torch.device("cuda", 0) and torch_device("cuda:1") == torch.device("cuda", 1)
    assert torch_device(torch.device("cuda", 2)) == torch.device("cuda", 2)
