"""A conformance check of a per-task method on an encoder family, for the registry's methods and a user's
(``tests/modeling/test_conformance.py`` runs every registered method on every family)::

    from pal_lightning.testing.conformance import check_method, check_method_in_module
    check_method("my_method", "bert", tmp_path)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

from pal_lightning.modeling import MultiTaskEncoder, load_task_weights, save_task_weights
from pal_lightning.modeling.accounting import task_weight_formula
from pal_lightning.modeling.methods import SITES, AdapterConfig, MergeableModule, Where, get_method
from pal_lightning.modeling.methods.inside import InsideMethod
from pal_lightning.testing.encoders import BERT_VOCAB_SIZE, tiny_family_config, without_dropout

if TYPE_CHECKING:
    from pal_lightning.module.multitask import MultiTaskModule

SENTENCES = ["a great, moving film .", "dull plot", "the music is fun but the end is long and bad", "ok"]
PAIRS = [("how do I cook rice?", "how is rice cooked?"), ("a", "b c d e"), ("same words", "same words")]

#: The weights a family's layer has beyond BERT's: ModernBERT's gated FFN has a second d x d_ff input.
EXTRA_LAYER_WEIGHTS = {"modernbert": 32 * 37}


def tiny_options(name: str) -> dict[str, Any]:
    """Small options for any method: d_s 4 (2 heads where headed), every site for a method on sites."""
    method = get_method(name)
    options: dict[str, Any] = {"size": 4} if method.size_at_768 is not None else {}
    if method.headed:
        options["num_heads"] = 2
    if isinstance(method, InsideMethod):
        options["targets"] = list(SITES)
    return options


def build(model_type: str, method: str, seed: int = 0) -> MultiTaskEncoder:
    """A tiny encoder of ``model_type`` without dropout, tasks ``a`` and ``b`` with ``method``'s modules."""
    torch.manual_seed(seed)
    config = without_dropout(tiny_family_config(model_type))
    return MultiTaskEncoder.from_config(
        config, ["a", "b"], adapter=method, attn_implementation="eager", **tiny_options(method)
    ).eval()


def batch(model_type: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three sequences of 9 random ids, two of them padded (with the family's padding id)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (3, 9), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 1 if model_type in ("roberta", "xlm-roberta", "mpnet") else 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def plain_output(model: MultiTaskEncoder, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The family's own transformers model with the encoder's weights (no hooks, no per-task module)."""
    plain = AutoModel.from_config(AutoConfig.for_model(**model.config.to_dict()), attn_implementation="eager")
    missing, _ = plain.load_state_dict(model.backbone.state_dict(), strict=False)
    assert all(k.startswith("pooler.") for k in missing), missing
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if model.family.token_types else [])
    with torch.no_grad():
        return plain.eval()(**{k: inputs[k] for k in keys}).last_hidden_state


def run(model: MultiTaskEncoder, inputs: dict[str, torch.Tensor], task: str) -> torch.Tensor:
    """``task``'s last hidden state, without gradients."""
    with torch.no_grad():
        return model(**inputs, task=task)


def move(module: torch.nn.Module, scale: float = 0.2) -> None:
    """Move every parameter of ``module`` away from its start (zero-initialised ups would hide a loss)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * scale)


def predictions(module: MultiTaskModule) -> dict[str, Any]:
    """The module's sst, qqp and sts predictions of fixed sentences."""
    sst, qqp, sts = (
        cast(Any, module.predict(t, x)) for t, x in (("sst", SENTENCES), ("qqp", PAIRS), ("sts", PAIRS))
    )
    return {"sst": sst.probabilities.tolist(), "qqp": qqp.probabilities.tolist(), "sts": sts.scores}


def check_round_trips(
    model: MultiTaskEncoder, model_type: str, method: str, inputs: dict[str, torch.Tensor], folder: Path
) -> None:
    """``model``'s whole state through safetensors into a moved twin, and task ``a``'s weights alone into
    another encoder (task ``b`` there untouched)."""
    moved = run(model, inputs, "a")
    # the whole state through safetensors (which refuses shared tensors), into a zeroed twin
    save_file(model.state_dict(), str(folder / "all.safetensors"))
    twin = build(model_type, method, seed=1)
    move(twin, 1.0)
    twin.load_state_dict(load_file(str(folder / "all.safetensors")))
    assert torch.equal(run(twin, inputs, "a"), moved)
    # task-only weights: only task a's modules travel
    path = save_task_weights(model, folder / "a.safetensors", tasks=["a"])
    other = build(model_type, method, seed=2)
    other.backbone.load_state_dict(model.backbone.state_dict())
    move(other.adapters)
    b_before = run(other, inputs, "b")
    assert load_task_weights(other, path) == ["a"]
    assert torch.equal(run(other, inputs, "a"), moved)
    assert torch.equal(run(other, inputs, "b"), b_before)


def check_method(method: str, model_type: str, folder: Path) -> None:
    """Method ``method`` on a tiny encoder of ``model_type``: a new task is the plain family model (unless
    the method says it starts elsewhere), moved modules act on their task's rows only and not through
    padding, the weights are the method's formula, the state and the task-only weights round-trip (files
    under ``folder``), a frozen encoder trains the task's modules only, a mergeable module folds in."""
    model = build(model_type, method)
    inputs = batch(model_type)
    # the weight matrices one task adds are the method's formula
    counted = sum(p.numel() for _, p in model.adapter_parameters("a") if p.ndim == 2)
    d_ff = int(model.config.intermediate_size)
    formula = task_weight_formula(model.adapter_config, model.hidden_size, model.num_layers, d_ff)
    whole_layer = get_method(method).where is Where.TOP and get_method(method).size_at_768 is None
    family_extra = EXTRA_LAYER_WEIGHTS.get(model_type, 0) if whole_layer else 0
    assert counted == formula + family_extra  # the formula counts BERT's layer for a whole layer on top
    # a new task is the plain family model (a method that starts elsewhere says so)
    start = run(model, inputs, "a")
    if get_method(method).starts_as_encoder:
        torch.testing.assert_close(start, plain_output(model, inputs), atol=1e-6, rtol=0)
    torch.testing.assert_close(run(model, inputs, "b"), start, atol=1e-6, rtol=0)
    if not len(list(model.adapter_parameters("a"))):
        return  # nothing task-specific: nothing more to check
    move(model.adapters["a"])
    moved = run(model, inputs, "a")
    assert (moved - start).abs().max() > 1e-3  # the hooks carry the moved modules
    assert torch.equal(run(model, inputs, "b"), start)
    # other ids at padded positions change nothing at the real ones
    altered = {k: v.clone() for k, v in inputs.items()}
    altered["input_ids"][2, 4:] = torch.arange(5, 10)
    torch.testing.assert_close(run(model, altered, "a")[2, :4], moved[2, :4], atol=1e-5, rtol=0)

    check_round_trips(model, model_type, method, inputs, folder)

    # steps with a frozen encoder move task a's modules only, and no gradient reaches task b's
    model.train()
    for _, p in model.pretrained_parameters():
        p.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD([p for _, p in model.adapter_parameters("a")], lr=0.5)
    for seed in range(2):
        optimizer.zero_grad()
        model(**batch(model_type, seed), task="a").pow(2).mean().backward()
        optimizer.step()
    assert all(p.grad is None for p in model.adapters["b"].parameters())
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(n.startswith("adapters.a.") for n in changed), sorted(changed)

    # a module linear in the weights folds into them: the plain layers then compute what the hooks did
    if isinstance(model.adapters["a"], MergeableModule):
        model.eval()
        unmerged = run(model, inputs, "a")
        model.merge("a")
        assert len(model.adapters) == 0
        torch.testing.assert_close(run(model, inputs, "a"), unmerged, atol=1e-5, rtol=0)


def check_method_in_module(method: str, model_type: str, folder: Path) -> None:
    """Method ``method`` through a ``MultiTaskModule`` on a tiny ``model_type`` encoder with the packaged
    tokenizer: ``save_pretrained``/``from_pretrained`` give identical predictions, and the single-task
    ONNX graph (needs ``onnxruntime``) computes what the module does."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    from pal_lightning.module.export import SingleTaskModel, export_onnx
    from pal_lightning.module.multitask import MultiTaskModule

    torch.manual_seed(0)
    module = MultiTaskModule(
        encoder_config=tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128),
        adapter=AdapterConfig.coerce({"method": method, "init": "random", **tiny_options(method)}),
        pair_encoding={"sts": "siamese", "default": "cross"},
    ).eval()
    move(module.encoder.adapters, 0.1)

    before = predictions(module)
    loaded = MultiTaskModule.from_pretrained(module.save_pretrained(folder / "model"))
    assert loaded.encoder.family.name == model_type
    assert loaded.encoder.adapter_config == module.encoder.adapter_config
    assert predictions(loaded) == before  # identical, not close

    single = SingleTaskModel(module, "sst")
    path = export_onnx(single, folder / "sst.onnx", single.example_inputs(module.tokenizer))
    enc = module.tokenizer(SENTENCES, return_tensors="pt", padding=True)  # other shapes than the trace
    with torch.no_grad():
        ref = single(*(enc[k] for k in single.input_names))
        batch = {k: enc[k] for k in single.input_names}
        torch.testing.assert_close(ref, module({**batch, "task": "sst"}), atol=1e-5, rtol=0)
    session = ort.InferenceSession(str(path))
    # docs/models.md: an encoder that ignores token types leaves them out of the file
    types = module.encoder.takes_token_types
    assert [i.name for i in session.get_inputs()] == [
        n for n in single.input_names if types or "token_type" not in n
    ]
    out = session.run(None, {i.name: enc[i.name].numpy() for i in session.get_inputs()})[0]
    np.testing.assert_allclose(out, ref.numpy(), rtol=0, atol=1e-4)
