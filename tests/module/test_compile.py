"""``MultiTaskModule(compile=...)``: the compiled encoder trains like the eager one, and falls back to it.

The tests compile with the ``aot_eager`` backend: it runs the whole ``torch.compile`` stack (dynamo's
graph capture with its guards on the task, AOT autograd's joint forward/backward graph) without
generating C++ code, which would cost minutes of a CI machine's CPU; inductor is the same graphs lowered
to kernels.
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.module.compile import EncoderCall, compile_backend, is_compile_failure
from pal_lightning.testing import TINY_BERT, quiet_trainer, without_dropout
from pal_lightning.testing.batches import TinyData, tiny_module


def _pair(**kw: Any) -> tuple[pl.LightningModule, pl.LightningModule]:
    """An eager and a compiled module with the same weights and no dropout."""
    torch.manual_seed(0)
    eager = tiny_module(encoder_config=without_dropout(TINY_BERT), adapter={"init": "random"}, **kw)
    compiled = tiny_module(
        encoder_config=without_dropout(TINY_BERT), adapter={"init": "random"}, compile="aot_eager", **kw
    )
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def test_fit_steps_with_a_compiled_encoder_end_at_the_eager_weights(tmp_path: Any) -> None:
    """Two optimizer steps (an sst batch, then a qqp pair: two tasks' PALs and heads, two graphs)."""
    eager, compiled = _pair(optim={"lr": 1e-3, "head_lr": 1e-2})
    # torch's static-first shapes: dynamo traces them in a third of the time of dynamic ones, and these two
    # steps of two tasks compile once per task either way (the next test checks the default, dynamic)
    compiled._encoder_call.dynamic = None
    start = [p.detach().clone() for p in eager.parameters()]
    for module in (eager, compiled):
        pl.seed_everything(0, verbose=False)
        quiet_trainer(max_steps=2, default_root_dir=tmp_path).fit(module, datamodule=TinyData())
    assert compiled._encoder_call.compiling  # compiled, not fallen back
    assert compiled.state_dict().keys() == eager.state_dict().keys()  # nothing compiled is saved
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=name)
    moved = {n for (n, p), p0 in zip(eager.named_parameters(), start, strict=True) if not torch.equal(p, p0)}
    assert any(n.startswith("encoder.adapters.sst.") for n in moved)
    assert any(n.startswith("encoder.adapters.qqp.") for n in moved)
    assert any(n.startswith("heads.qqp.") for n in moved)


def _failing_backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
    raise RuntimeError("no C compiler here")


class _Routed(torch.nn.Module):
    """A stand-in for the encoder (EncoderCall wraps any module): a task-routed layer, a PalUserError for
    an unknown task; a few operations for dynamo to trace instead of a whole encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 4), "b": torch.nn.Linear(4, 4)})

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        if task not in self.layers:
            raise PalUserError(f"Unknown task {task!r}")
        return torch.tanh(self.layers[task](x))


def test_a_failing_compiler_warns_once_and_runs_the_eager_encoder() -> None:
    torch.manual_seed(0)
    module, x = _Routed(), torch.randn(2, 4)
    call = EncoderCall(module, _failing_backend)
    with pytest.warns(RuntimeWarning, match="torch.compile of the encoder failed.*eager encoder"):
        out = call(x, task="a")
    assert call.fell_back and not call.compiling
    torch.testing.assert_close(out, module(x, task="a"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        call(x, task="a")


def test_errors_of_the_model_are_not_taken_for_compile_failures() -> None:
    call = EncoderCall(_Routed(), "aot_eager")
    with pytest.raises(PalUserError, match="Unknown task"):
        call(torch.randn(2, 4), task="nope")
    assert not call.fell_back
    assert not is_compile_failure(PalUserError("x")) and not is_compile_failure(RuntimeError("x"))
    assert (compile_backend(False), compile_backend(True), compile_backend("x")) == (None, "inductor", "x")


def _encoder(adapter: str) -> Any:
    from pal_lightning.modeling import MultiTaskEncoder

    torch.manual_seed(0)
    return MultiTaskEncoder.from_config(without_dropout(TINY_BERT), ["a", "b"], adapter=adapter).train()


def _batch(size: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, 90, (size, length))
    mask = torch.ones_like(ids)
    mask[0, length // 2 :] = 0  # padding, as batches padded to their longest example have
    return ids, mask


def test_each_task_compiles_once_and_alternating_tasks_recompile_nothing() -> None:
    """Two tasks, alternating, with batch sizes and lengths changing every step: one graph per task (a
    backend that counts what it is given; one for the first call: no graph break anywhere in the forward,
    embeddings, every layer and its PAL), the same numbers as the eager encoder."""
    encoder = _encoder("pals")
    graphs: list[str] = []

    def counting(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(graph.code)
        return graph.forward

    torch._dynamo.reset()  # no graph of another test's module in the cache
    call = EncoderCall(encoder, counting)
    for step, (task, size, length) in enumerate(
        [("a", 2, 8), ("b", 3, 12), ("a", 3, 16), ("b", 2, 10), ("a", 4, 9), ("b", 2, 7)]
    ):
        ids, mask = _batch(size, length)
        out = call(ids, mask, task=task)
        out.sum().backward()
        torch.testing.assert_close(out, encoder(ids, mask, task=task), msg=f"step {step}")
        if step == 0:  # a graph break would hand the backend two graphs (or leave a piece eager)
            assert len(graphs) == 1, graphs
    assert call.compiling and len(graphs) == 2, f"{len(graphs)} graphs compiled"


def test_compile_mode_is_checked_against_torch_and_the_backend() -> None:
    from pal_lightning.module.compile import COMPILE_MODES, check_compile_options

    assert set(COMPILE_MODES) <= set(torch._inductor.list_mode_options())  # torch's own names
    check_compile_options(True, "reduce-overhead")
    check_compile_options("inductor", "max-autotune")
    check_compile_options(False, None)
    with pytest.raises(PalUserError, match="'fast' is not a torch.compile mode.*reduce-overhead"):
        check_compile_options(True, "fast")
    with pytest.raises(PalUserError, match="model.compile is false.*Set model.compile true"):
        check_compile_options(False, "reduce-overhead")
    with pytest.raises(PalUserError, match="names the 'aot_eager' backend: only inductor applies a mode"):
        check_compile_options("aot_eager", "reduce-overhead")
    with pytest.raises(
        PalUserError, match="compile_mode 'reduce-overhead' is set but model.compile is false"
    ):
        tiny_module(encoder_config=TINY_BERT, compile_mode="reduce-overhead")


def test_compile_mode_reaches_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's ``compile_mode`` is the ``mode`` torch.compile is called with (inductor itself would
    spend minutes of CPU here; the call's arguments are what this option sets)."""
    seen: list[dict[str, Any]] = []

    def fake_compile(module: torch.nn.Module, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    module = tiny_module(encoder_config=TINY_BERT, compile=True, compile_mode="reduce-overhead")
    assert module.hparams["compile_mode"] == "reduce-overhead"
    ids, mask = _batch(2, 8)
    module._encoder_call(ids, mask, task="sst")
    assert seen == [{"backend": "inductor", "dynamic": True, "mode": "reduce-overhead"}]


def test_cuda_graphs_over_unbucketed_lengths_warn_at_setup() -> None:
    from types import SimpleNamespace

    from pal_lightning.module.compile import cuda_graph_padding_warning, warn_cuda_graphs_without_buckets

    assert "pad_to_multiple_of" in (cuda_graph_padding_warning("reduce-overhead", 1, on_cuda=True) or "")
    # not this library's data module: no pad_to_multiple_of to read, so the warning stands
    assert cuda_graph_padding_warning("reduce-overhead", None, on_cuda=True) is not None
    assert cuda_graph_padding_warning("reduce-overhead", 16, on_cuda=True) is None  # lengths bucketed
    assert cuda_graph_padding_warning("reduce-overhead", 1, on_cuda=False) is None  # no CUDA graphs on a CPU
    assert cuda_graph_padding_warning("max-autotune-no-cudagraphs", 1, on_cuda=True) is None
    assert cuda_graph_padding_warning(None, 1, on_cuda=True) is None

    module = tiny_module(encoder_config=TINY_BERT, compile=True, compile_mode="reduce-overhead")

    def attach(pad: int, device: str, global_zero: bool = True) -> None:
        module._trainer = SimpleNamespace(  # type: ignore[assignment]
            is_global_zero=global_zero,
            strategy=SimpleNamespace(root_device=torch.device(device)),
            datamodule=SimpleNamespace(config=SimpleNamespace(pad_to_multiple_of=pad)),
        )

    attach(1, "cuda")
    with pytest.warns(UserWarning, match="CUDA graph per distinct batch shape"):
        warn_cuda_graphs_without_buckets(module._trainer, module._encoder_call)
    for pad, device, global_zero in ((16, "cuda", True), (1, "cpu", True), (1, "cuda", False)):
        attach(pad, device, global_zero)  # bucketed, on a CPU, or another rank than 0: no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warn_cuda_graphs_without_buckets(module._trainer, module._encoder_call)


def test_cuda_graph_outputs_are_copied_only_where_the_next_call_would_overwrite_them() -> None:
    from pal_lightning.module.compile import owns_its_output

    assert owns_its_output("reduce-overhead", grad_enabled=False, on_cuda=True)  # evaluation on a GPU
    assert owns_its_output("max-autotune", grad_enabled=False, on_cuda=True)
    assert not owns_its_output("reduce-overhead", grad_enabled=True, on_cuda=True)  # a backward pending
    assert not owns_its_output("reduce-overhead", grad_enabled=False, on_cuda=False)  # no CUDA graphs
    assert not owns_its_output("max-autotune-no-cudagraphs", grad_enabled=False, on_cuda=True)
    assert not owns_its_output(None, grad_enabled=False, on_cuda=True)
