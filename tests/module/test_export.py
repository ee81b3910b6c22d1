"""One task, or every task with ``task_ids`` an input, as a plain torch module, and their ONNX export (checked
with onnxruntime when installed)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pal_lightning import MultiTaskModule, PalUserError
from pal_lightning.module.export import MixedTaskModel, SingleTaskModel, export_onnx

A = ["one", "a much longer sentence with many more words than the others", "three words here"]
B = ["completely different", "short", "a medium sized second sentence"]


def batch_inputs(module: MultiTaskModule, task: str) -> tuple[torch.Tensor, ...]:
    kw: dict[str, Any] = dict(return_tensors="pt", padding=True)
    tok, keys = module.tokenizer, ("input_ids", "attention_mask", "token_type_ids")
    parts = [tok(A, B, **kw)] if task == "qqp" else [tok(A, **kw)]
    if task == "sts":  # siamese: each sentence alone
        parts.append(tok(B, **kw))
    return tuple(part[k] for part in parts for k in keys)


def module_output(module: MultiTaskModule, task: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The multi-task module's own forward on the same tensors (the reference)."""
    keys = ("input_ids", "attention_mask", "token_type_ids")
    if task == "sts":
        batch = {
            f"{k}_{s}": v
            for s, part in (("a", inputs[:3]), ("b", inputs[3:]))
            for k, v in zip(keys, part, strict=True)
        }
    else:
        batch = dict(zip(keys, inputs, strict=True))
    with torch.no_grad():
        return module({**batch, "task": task})


@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_single_task_module_equals_the_multitask_forward(module: MultiTaskModule, task: str) -> None:
    single = SingleTaskModel(module, task)
    assert list(single.encoder.adapters) == [task]  # only its own adapter is kept
    inputs = batch_inputs(module, task)
    with torch.no_grad():
        out = single(*inputs)
    torch.testing.assert_close(out, module_output(module, task, inputs), rtol=0, atol=1e-6)
    assert not any(c.__module__.startswith("lightning") for c in type(single).__mro__)  # plain torch
    # copies: training the multi-task module further does not change the exported one
    assert not any(p is q for p in single.parameters() for q in module.parameters())


@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_onnx_matches_pytorch_on_other_shapes(module: MultiTaskModule, task: str, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    single = SingleTaskModel(module, task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = export_onnx(single, tmp_path / f"{task}.onnx", single.example_inputs(module.tokenizer))
    # the trace's warnings about data-dependent branches are noise on every export: none reach the user
    assert [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)] == []
    session = ort.InferenceSession(str(path))
    inputs = batch_inputs(module, task)  # another batch size and other lengths than the traced ones
    out = session.run(None, {n: t.numpy() for n, t in zip(single.input_names, inputs, strict=True)})[0]
    with torch.no_grad():
        ref = single(*inputs).numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)


def test_export_refuses_inputs_without_padding(module: MultiTaskModule, tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="the export extra is not installed")
    single = SingleTaskModel(module, "sst")
    enc = module.tokenizer(["same length", "same length"], return_tensors="pt", padding=True)
    with pytest.raises(ValueError, match="padding"):
        export_onnx(single, tmp_path / "x.onnx", tuple(enc[k] for k in single.input_names))


def test_a_failed_export_leaves_the_previous_file(
    module: MultiTaskModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnx", reason="the export extra is not installed")
    target = tmp_path / "sst.onnx"
    target.write_bytes(b"previous export")

    def full_disk(model: object, args: object, f: str, **kwargs: object) -> None:
        Path(f).write_bytes(b"half a graph")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.onnx, "export", full_disk)
    single = SingleTaskModel(module, "sst")
    with pytest.raises(OSError, match="No space"):
        export_onnx(single, target, single.example_inputs(module.tokenizer))
    assert target.read_bytes() == b"previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sst.onnx"]  # no temporary file left


# ---------------------------------------------------------------------------------------------- every task
def _batch(
    module: MultiTaskModule, items: list[tuple[str, Any]], model: MixedTaskModel
) -> tuple[torch.Tensor, ...]:
    """Padded inputs of ``items`` in ``model.input_names`` order (a cross pair in one sequence)."""
    tok, rows_a, rows_b = module.tokenizer, [], []
    for task, text in items:
        siamese = model.siamese[model.task_names.index(task)]
        if isinstance(text, tuple) and not siamese:
            rows_a.append(dict(tok(*text)))
            rows_b.append(dict(tok("")))
        else:
            rows_a.append(dict(tok(text[0] if siamese else text)))
            rows_b.append(dict(tok(text[1] if siamese else "")))
    a, b = tok.pad(rows_a, return_tensors="pt"), tok.pad(rows_b, return_tensors="pt")
    keys = ("input_ids", "attention_mask", "token_type_ids")
    ids = torch.tensor([model.task_names.index(task) for task, _ in items])
    return (*(a[k] for k in keys), ids, *(b[k] for k in keys))


def _single_task_rows(
    module: MultiTaskModule, model: MixedTaskModel, inputs: tuple[torch.Tensor, ...]
) -> dict[int, torch.Tensor]:
    """Each row's output from its own task's SingleTaskModel (the reference)."""
    out = {}
    for t, task in enumerate(model.task_names):
        rows = torch.nonzero(inputs[3] == t)[:, 0]
        if len(rows):
            single = SingleTaskModel(module, task)
            args = [x[rows] for x in inputs[:3]] + ([x[rows] for x in inputs[4:]] if model.siamese[t] else [])
            with torch.no_grad():
                value = single(*args).reshape(len(rows), -1)
            out.update({int(r): v for r, v in zip(rows, value, strict=True)})
    return out


@pytest.fixture(scope="module")
def mixed_onnx(
    module: MultiTaskModule, tmp_path_factory: pytest.TempPathFactory
) -> tuple[MixedTaskModel, Path]:
    pytest.importorskip("onnx", reason="the export extra is not installed")
    model = MixedTaskModel(module)
    path = export_onnx(
        model, tmp_path_factory.mktemp("onnx") / "all.onnx", model.example_inputs(module.tokenizer)
    )
    return model, path


@pytest.mark.parametrize("rows", [None, [2, 0, 5]], ids=["all-tasks", "two-tasks-absent"])
def test_mixed_onnx_equals_each_rows_single_task_model(
    module: MultiTaskModule,
    mixed_onnx: tuple[MixedTaskModel, Path],
    items: list[tuple[str, Any]],
    rows: list[int] | None,
) -> None:
    items = items if rows is None else [items[i] for i in rows]
    ort = pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    model, path = mixed_onnx
    assert model.input_names[3] == "task_ids" and model.widths == (5, 2, 1, 1)
    session = ort.InferenceSession(str(path))
    assert session.get_modelmeta().custom_metadata_map == model.onnx_metadata()
    inputs = _batch(module, items, model)  # other rows, order and lengths than the traced example
    out = session.run(None, {n: t.numpy() for n, t in zip(model.input_names, inputs, strict=True)})[0]
    with torch.no_grad():
        eager = model(*inputs)  # the routed one-pass forward
    assert out.shape == (len(items), 5)
    for row, ref in _single_task_rows(module, model, inputs).items():
        width = model.widths[int(inputs[3][row])]
        np.testing.assert_allclose(out[row, :width], ref.numpy(), rtol=0, atol=1e-4)
        np.testing.assert_allclose(eager[row, :width].numpy(), ref.numpy(), rtol=0, atol=1e-5)
        assert not out[row, width:].any()  # zeros after the task's own columns


def test_user_errors(module: MultiTaskModule, items: list[tuple[str, Any]]) -> None:
    with pytest.raises(PalUserError, match="Unknown task 'nope'"):
        SingleTaskModel(module, "nope")
    with pytest.raises(PalUserError, match="distinct tasks of the model"):
        MixedTaskModel(module, ["sst", "nope"])
    model = MixedTaskModel(module, ["sts", "sst"])  # a subset, in its own index order
    inputs = _batch(module, [items[0], items[2]], model)
    with pytest.raises(PalUserError, match="task_ids \\[7\\] are out of range: .* 0=sts, 1=sst"):
        model(*inputs[:3], torch.tensor([1, 7]), *inputs[4:])
    with pytest.raises(PalUserError, match="pass the second sentences"):
        model(*inputs[:4])
