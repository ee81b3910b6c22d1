"""Every encoder family through the whole module: save_pretrained/from_pretrained/predict, the plain
single-task module and its ONNX graph; one per-task method per family, so that every method meets a
family other than BERT (tests/modeling/test_families.py crosses every method with every family)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule  # noqa: E402
from pal_lightning.module.export import SingleTaskModel, export_onnx  # noqa: E402
from pal_lightning.testing import BERT_VOCAB_SIZE, FAMILY_TYPES, tiny_family_config  # noqa: E402

#: The method each family is run with here.
METHOD = {
    "bert": "lora",
    "roberta": "pals",
    "xlm-roberta": "houlsby",
    "electra": "low_rank",
    "distilbert": "lora",
    "mpnet": "pals",
    "deberta-v2": "pfeiffer",
    "modernbert": "pals",
}
SIZES = {
    "pals": {"size": 8, "num_heads": 2},
    "low_rank": {"size": 8},
    "lora": {"size": 4},
    "houlsby": {"size": 4},
    "pfeiffer": {"size": 4},
}
SENTENCES = ["a great, moving film .", "dull plot", "the music is fun but the end is long and bad", "ok"]
PAIRS = [("how do I cook rice?", "how is rice cooked?"), ("a", "b c d e"), ("same words", "same words")]


def family_module(model_type: str) -> MultiTaskModule:
    torch.manual_seed(0)
    method = METHOD[model_type]
    module = MultiTaskModule(
        bert_config=tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128),
        adapter={"method": method, "init": "random", **SIZES[method]},
        pair_encoding={"sts": "siamese", "default": "cross"},
    ).eval()
    with torch.no_grad():  # zero-initialised modules (LoRA's B, adapters' up) would hide a lost weight
        for _, p in module.encoder.new_parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module


def predictions(module: MultiTaskModule) -> dict[str, list]:
    sst, qqp, sts = (module.predict(t, x) for t, x in (("sst", SENTENCES), ("qqp", PAIRS), ("sts", PAIRS)))
    return {"sst": sst.probabilities.tolist(), "qqp": qqp.probabilities.tolist(), "sts": sts.scores}


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_save_load_predict_and_onnx(model_type: str, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    module = family_module(model_type)
    assert module.encoder.family.name == model_type
    before = predictions(module)
    loaded = MultiTaskModule.from_pretrained(module.save_pretrained(tmp_path / "model"))
    assert loaded.encoder.family.name == model_type
    assert predictions(loaded) == before  # identical, not close

    single = SingleTaskModel(module, "sst")
    path = export_onnx(single, tmp_path / "sst.onnx", single.example_inputs(module.tokenizer))
    enc = module.tokenizer(SENTENCES, return_tensors="pt", padding=True)  # other shapes than the trace
    inputs = tuple(enc[k] for k in single.input_names)
    with torch.no_grad():
        ref = single(*inputs)
        batch = {k: enc[k] for k in single.input_names}
        torch.testing.assert_close(ref, module({**batch, "task": "sst"}), atol=1e-5, rtol=0)
    session = ort.InferenceSession(str(path))
    feeds = {i.name: enc[i.name].numpy() for i in session.get_inputs()}
    out = session.run(None, feeds)[0]
    np.testing.assert_allclose(out, ref.numpy(), rtol=0, atol=1e-4)
