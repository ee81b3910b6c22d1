"""Layer-sharing regimes: frozen (F), shared (S) and individual (I) layers, alone and with PALs."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder, load_task_weights, parameter_report, save_task_weights
from pal_lightning.modeling.sharing import parse_layer_sharing, resolve_task_groups, stored_parameters
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY
from pal_lightning.testing import without_dropout

TINY_NO_DROPOUT = without_dropout(TINY)

D, L, D_FF = TINY["hidden_size"], TINY["num_hidden_layers"], TINY["intermediate_size"]
# one BERT layer by hand: Q, K, V, attention output (weights and biases), FFN in and out, two LayerNorms
LAYER = 4 * (D * D + D) + (D * D_FF + D_FF) + (D_FF * D + D) + 2 * 2 * D
EMBEDDINGS = (TINY["vocab_size"] + TINY["max_position_embeddings"] + 2) * D + 2 * D
TASKS = ["a", "b", "c"]


def _donor() -> MultiTaskEncoder:
    """A 'pretrained' encoder: random, then shifted, so a copy is distinguishable from a fresh layer."""
    torch.manual_seed(1)
    donor = MultiTaskEncoder.from_config(TINY_NO_DROPOUT, ["x"], adapter="none")
    with torch.no_grad():
        for p in donor.backbone.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return donor


def _model(spec: str | None, adapter: str = "none", tasks=TASKS, **kw) -> MultiTaskEncoder:
    torch.manual_seed(0)
    model = MultiTaskEncoder.from_config(TINY_NO_DROPOUT, tasks, adapter=adapter, layer_sharing=spec, **kw)
    model.load_pretrained_state(_donor().backbone.state_dict())
    return model.eval()


def _out(model: MultiTaskEncoder, batch, task: str) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch, task=task)


LETTERS_FIX = "use F (frozen), S (shared) or I (individual: a copy per task), one per layer."


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("SS", "layer_sharing 'SS' has 2 letters but the encoder has 3 layers: give one letter per layer, "),
        (
            "SSSS",
            "layer_sharing 'SSSS' has 4 letters but the encoder has 3 layers: give one letter per layer, ",
        ),
        ("SXS", f"layer_sharing 'SXS' has unknown letter(s) ['X']: {LETTERS_FIX}"),
        (3, "layer_sharing must be a string of F/S/I letters, one per layer, got 3; e.g. FSI."),
    ],
    ids=["short", "long", "letter", "not-a-string"],
)
def test_bad_specs_name_the_problem(spec, message):
    if isinstance(spec, str) and "X" not in spec:
        message += "bottom first (e.g. SSI)."
    with pytest.raises(PalUserError) as err:
        parse_layer_sharing(spec, 3)
    assert str(err.value) == message
    with pytest.raises(PalUserError) as err:
        MultiTaskEncoder.from_config(TINY, ["a"], layer_sharing=spec)
    assert str(err.value) == message


def test_spec_parsing():
    assert parse_layer_sharing(None, 4) == "SSSS"
    assert parse_layer_sharing("ff-s_i", 4) == "FFSI"
    # the examples in the messages follow the depth: a third of each letter, the rest individual
    with pytest.raises(PalUserError, match=r"e\.g\. FFFFFSSSSSIIIIII\.$"):
        parse_layer_sharing(16, 16)
    with pytest.raises(PalUserError, match=r"\(e\.g\. SSSSSSSSSSSSSSSI\)\.$"):
        parse_layer_sharing("S", 16)
    # stored once per layer, T times per individual layer, by hand: 5 + 1 + 10 + 3 * 100
    assert stored_parameters("FSI", [1, 10, 100], 5, 3) == 316
    assert stored_parameters("FSI", 7, 5, 3) == 5 + 7 + 7 + 21
    with pytest.raises(ValueError, match=r"^2 layer sizes for a regime of 3 layers$"):
        stored_parameters("FSI", [1, 10], 5, 3)
    # a group may be given as one task name (not as its letters)
    assert resolve_task_groups(["sst"], ["sst", "qqp"], "SSI") == {"sst": "sst", "qqp": "qqp"}
    assert resolve_task_groups([["qqp", "sst"]], ["sst", "qqp"], "SSI") == {
        "sst": "qqp+sst",
        "qqp": "qqp+sst",
    }


def test_individual_layers_start_as_the_pretrained_layer_and_step_0_is_the_shared_model(batch):
    donor = _donor()
    model = _model("FSI")
    assert model.loading_info is not None and model.loading_info.unexpected == []
    assert model.loading_info.source == "<state dict>"  # load_pretrained_state's default name
    pretrained = donor.backbone.encoder.layer[2].state_dict()
    for task in TASKS:
        copy = model.individual[task]["2"].state_dict()
        assert all(torch.equal(copy[k], pretrained[k]) for k in pretrained)
    assert not list(model.backbone.encoder.layer[2].parameters())  # the slot holds nothing
    shared = _model(None)
    for task in TASKS:
        assert torch.equal(_out(model, batch, task), _out(shared, batch, task))
    # the slot has no weights of its own: without a task it cannot run
    with pytest.raises(
        RuntimeError, match=r"^layer 2 is individual: call MultiTaskEncoder with task=\.\.\.$"
    ):
        model.backbone(**batch)


def test_frozen_layers_do_not_train_and_individual_layers_train_for_their_task_only(batch):
    model = _model("FSI").train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    b_before = _out(model, batch, "b")
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    model(**batch, task="a").pow(2).mean().backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert not any(n.startswith("backbone.encoder.layer.0.") for n in changed)  # F
    assert any(n.startswith("backbone.encoder.layer.1.") for n in changed)  # S
    assert any(n.startswith("individual.a.2.") for n in changed)  # a's own I copy
    assert not any(n.startswith(("individual.b.", "individual.c.")) for n in changed)
    assert all(not p.requires_grad for p in model.backbone.encoder.layer[0].parameters())
    # with the other layers and the embeddings (shared, outside the spec) frozen, task b's output does
    # not move when task a trains
    fi = _model("FFI").train()
    fi.backbone.embeddings.requires_grad_(False)
    b_before = _out(fi, batch, "b")
    opt = torch.optim.SGD([p for p in fi.parameters() if p.requires_grad], lr=0.5)
    fi.train()
    fi(**batch, task="a").pow(2).mean().backward()
    opt.step()
    assert torch.equal(_out(fi, batch, "b"), b_before)
    assert not torch.equal(_out(fi, batch, "a"), _out(_model("FFI"), batch, "a"))


def test_all_individual_equals_separate_single_task_models(batch):
    """Three tasks on 'III' (embeddings frozen) trained with SGD at a constant rate on interleaved batches
    give the weights and outputs of three single-task models each trained on its own batches."""
    gen = torch.Generator().manual_seed(3)
    steps = [(TASKS[i % 3], torch.randn(3, 7, D, generator=gen)) for i in range(6)]

    def train(model: MultiTaskEncoder, schedule) -> MultiTaskEncoder:
        model.backbone.embeddings.requires_grad_(False)
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
        model.train()
        for task, target in schedule:
            opt.zero_grad()
            (model(**batch, task=task) - target).pow(2).mean().backward()
            opt.step()
        return model.eval()

    joint = train(_model("III"), steps)
    for task in TASKS:
        alone = train(_model(None, tasks=[task]), [(t, y) for t, y in steps if t == task])
        for i in range(L):
            mine = joint.individual[task][str(i)].state_dict()
            theirs = alone.backbone.encoder.layer[i].state_dict()
            for key, value in theirs.items():
                torch.testing.assert_close(mine[key], value, rtol=0, atol=1e-6)
        torch.testing.assert_close(_out(joint, batch, task), _out(alone, batch, task), rtol=0, atol=1e-5)


def test_pals_inside_individual_layers(batch):
    """With random PALs, 'SIS' at step 0 equals 'SSS' carrying the same PAL weights: the I copy applies its
    task's PAL exactly like the shared layer does."""
    mixed = _model("SIS", adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    shared = _model(None, adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    shared.adapters.load_state_dict(mixed.adapters.state_dict())
    plain = _model("SIS")
    for task in TASKS:
        out = _out(mixed, batch, task)
        assert torch.equal(out, _out(shared, batch, task))
        assert not torch.allclose(out, _out(plain, batch, task), atol=1e-4)  # the PALs act


def test_bert_layer_on_top_copies_an_individual_last_layer(batch):
    model = _model("SSI", adapter="bert_layer_on_top")
    last = _donor().backbone.encoder.layer[L - 1].state_dict()
    top = model.adapters["b"].layer.state_dict()
    assert all(torch.equal(top[k], last[k]) for k in last)


def test_accounting_of_a_regime_is_what_serving_all_tasks_stores():
    model = _model("FSI", adapter={"method": "pals", "size": 8}, num_heads=2)
    report = parameter_report(model)
    assert report.layer_sharing == "FSI"
    assert report.shared == EMBEDDINGS + 2 * LAYER  # embeddings, the F and the S layer
    assert report.frozen == LAYER
    assert report.individual == {t: LAYER for t in TASKS}
    pals = 2 * D * 8 + L * 3 * 8 * 8 + (8 + D + L * 3 * 8)
    assert report.stored_per_task == {t: LAYER + pals for t in TASKS}
    assert report.total == EMBEDDINGS + 2 * LAYER + 3 * (LAYER + pals)
    assert report.total == sum(p.numel() for p in model.parameters())
    assert stored_parameters("FSI", LAYER, EMBEDDINGS, 3) + 3 * pals == report.total
    assert "layer_sharing=FSI" in str(report) and "individual" in str(report)
    # all individual for three tasks: three copies of every layer, the embeddings once
    assert (
        parameter_report(_model("III")).total
        == EMBEDDINGS + 3 * L * LAYER
        == stored_parameters("III", LAYER, EMBEDDINGS, 3)
    )


def test_task_weights_carry_a_tasks_individual_layers(batch, tmp_path):
    model = _model("SSI", adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    with torch.no_grad():
        for p in model.individual["a"].parameters():
            p.add_(0.1)
    path = save_task_weights(model, tmp_path / "a.safetensors", tasks=["a"])
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
    assert any(k.startswith("individual.a.2.") for k in keys)
    assert not any(k.startswith(("individual.b", "individual.c")) for k in keys)
    fresh = _model("SSI", adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    assert not torch.equal(_out(fresh, batch, "a"), _out(model, batch, "a"))
    load_task_weights(fresh, path)
    assert torch.equal(_out(fresh, batch, "a"), _out(model, batch, "a"))
    # a model with another regime refuses the file
    with pytest.raises(PalUserError, match="was saved for"):
        load_task_weights(_model("SIS", adapter={"method": "pals", "size": 8}, num_heads=2), path)


def test_state_dict_round_trip_and_parameter_names(tmp_path, batch):
    from safetensors.torch import load_file, save_file

    model = _model("FIS", adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    save_file(model.state_dict(), str(tmp_path / "m.safetensors"))  # no shared tensors
    twin = MultiTaskEncoder.from_config(TINY_NO_DROPOUT, TASKS, layer_sharing="FIS", size=8, num_heads=2)
    twin.load_state_dict(load_file(str(tmp_path / "m.safetensors")))
    for task in TASKS:
        assert torch.equal(_out(twin.eval(), batch, task), _out(model, batch, task))
    names = {n for n, _ in model.pretrained_parameters()}
    assert {n for n, _ in model.shared_parameters()} < names
    assert any(n.startswith("individual.c.1.") for n in names)


def test_all_shared_is_todays_shared_model(batch):
    spelled = _model("SSS", adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    default = _model(None, adapter={"method": "pals", "size": 8}, num_heads=2, init="random")
    assert spelled.layer_sharing == default.layer_sharing == "SSS"
    assert spelled.state_dict().keys() == default.state_dict().keys()
    assert not any(k.startswith("individual.") for k in spelled.state_dict())
    for task in TASKS:
        assert torch.equal(_out(spelled, batch, task), _out(default, batch, task))


def test_task_groups_share_individual_layers_within_a_group_only(batch, tmp_path):
    model = _model("SFI", task_groups=[["a", "b"]])
    assert list(model.individual) == ["a+b", "c"]
    assert model.individual["a+b"] is not model.individual["c"]
    model.backbone.embeddings.requires_grad_(False)
    model.backbone.encoder.layer[0].requires_grad_(False)
    before = {t: _out(model, batch, t) for t in TASKS}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    model(**batch, task="a").pow(2).mean().backward()
    opt.step()
    assert not torch.equal(_out(model, batch, "b"), before["b"])  # b uses the copy a trained
    assert torch.equal(_out(model, batch, "c"), before["c"])  # c has its own
    # accounting: one copy for the group, one for c
    report = parameter_report(model)
    assert report.individual == {"a+b": LAYER, "c": LAYER}
    assert report.total == EMBEDDINGS + 2 * LAYER + 2 * LAYER == sum(p.numel() for p in model.parameters())
    assert "group a+b" in str(report)
    # task-only weights of b carry the group's copies
    path = save_task_weights(model, tmp_path / "b.safetensors", tasks=["b"])
    with safe_open(str(path), framework="pt") as f:
        assert any(k.startswith("individual.a+b.2.") for k in f.keys())
    fresh = _model("SFI", task_groups=[["a", "b"]])
    load_task_weights(fresh, path)
    assert torch.equal(_out(fresh, batch, "b"), _out(model.eval(), batch, "b"))


@pytest.mark.parametrize(
    ("spec", "groups", "message"),
    [
        (
            "SSI",
            [["a", "z"]],
            "task_groups names task(s) ['z'] that the model does not have (tasks: a, b, c).",
        ),
        ("SSI", [["a", "b"], ["b"]], "task_groups lists task(s) ['b'] twice: put each task in one group."),
        ("SSI", [["a", "a"]], "task_groups lists task(s) ['a'] twice: put each task in one group."),
        ("SSI", [[]], "task_groups has an empty group: list the tasks of each group, e.g. [[sst, qqp]]."),
        (
            "SSS",
            [["a", "b"]],
            "task_groups [['a', 'b']] share individual (I) layers, but layer_sharing 'SSS' has none: "
            "mark the layers to share within groups with I, or drop task_groups.",
        ),
    ],
    ids=["unknown", "in-two-groups", "twice-in-a-group", "empty", "no-individual-layer"],
)
def test_bad_task_groups_name_the_problem(spec, groups, message):
    with pytest.raises(PalUserError) as err:
        MultiTaskEncoder.from_config(TINY, TASKS, layer_sharing=spec, task_groups=groups)
    assert str(err.value) == message


def test_individual_layers_follow_the_encoders_attention_implementation(batch):
    model = _model("SSI")
    sdpa = _out(model, batch, "a")
    model.backbone.set_attn_implementation("eager")
    assert model.individual["a"]["2"].attention.self.config._attn_implementation == "eager"
    torch.testing.assert_close(_out(model, batch, "a"), sdpa, rtol=0, atol=1e-5)


def test_the_ratio_is_against_one_whole_encoder():
    plain = parameter_report(_model(None))
    for spec, copies in (("FSI", 3), ("III", 3)):
        report = parameter_report(_model(spec))
        assert report.base_encoder == plain.total == EMBEDDINGS + L * LAYER
        individual_layers = spec.count("I")
        expected = (EMBEDDINGS + L * LAYER + (copies - 1) * individual_layers * LAYER) / plain.total
        assert report.ratio == pytest.approx(expected)


def test_merging_lora_folds_the_tasks_delta_into_its_individual_copy_too(batch):
    """``merge`` with an I layer: the delta goes into the backbone's layers and into the task's copy of the
    individual one, so the single-task encoder computes what the hooks did, the top layer included."""
    model = _model("SSI", adapter="lora", init="random", size=2)  # random: A and B both drawn, deltas act
    hooked = _out(model, batch, "a")
    model.merge("a")
    assert len(model.adapters) == 0
    torch.testing.assert_close(_out(model, batch, "a"), hooked, atol=1e-5, rtol=0)
    # the copies started equal (the donor's layer): a's delta reached a's copy alone
    assert not torch.allclose(_out(model, batch, "b"), hooked, atol=1e-4)
