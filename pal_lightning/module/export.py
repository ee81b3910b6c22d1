"""One task of a trained model as a plain ``torch.nn.Module``, and its ONNX export.

:class:`SingleTaskModel` holds copies of the encoder (with only that task's adapter), the pooling and
the task's head; it needs neither Lightning nor the rest of the multi-task module, and maps token
tensors straight to the head's output::

    single:  model(input_ids, attention_mask, token_type_ids) -> logits [B, C]
    cross pair: the same, with both sentences in one sequence (token types 0/1)
    siamese pair: model(input_ids, attention_mask, token_type_ids,
                        input_ids_b, attention_mask_b, token_type_ids_b) -> logits or score [B]

The output is what ``MultiTaskModule.forward`` gives for a batch of that task (logits, or a score in
0..1 for regression: the task's scale is ``low + clamp(score, 0, 1) * (high - low)``).

:func:`export_onnx` writes it with ``torch.onnx.export`` (the TorchScript exporter: it traces the
eager attention, so the file runs on any ONNX runtime) with dynamic batch and sequence axes. The
``export`` extra (``pip install "pal-lightning[export]"``) installs ``onnx`` and ``onnxruntime``.
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from pal_lightning.core.batch import ATTENTION_MASK, ENCODING_KEYS, side_keys
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_via
from pal_lightning.modeling.heads import pool

if TYPE_CHECKING:
    from pal_lightning.module.mixed_export import MixedTaskModel

#: ONNX input names: one sequence, or two for a siamese pair.
SINGLE_INPUTS = ENCODING_KEYS
SIAMESE_INPUTS = (*SINGLE_INPUTS, *side_keys("b"))


class SingleTaskModel(nn.Module):
    """Encoder with one task's adapter, pooling and that task's head, as a self-contained module.

    Args:
        module: a :class:`~pal_lightning.module.multitask.MultiTaskModule` (its weights are copied, not shared).
        task: the task to keep.

    Raises:
        PalUserError: for a task the module does not have.
    """

    def __init__(self, module: Any, task: str) -> None:
        super().__init__()
        if task not in module.task_specs:
            raise PalUserError(
                f"Unknown task {task!r}: the model has {', '.join(module.task_specs)}. Pick one of those."
            )
        self.task = task
        self.spec = module.task_specs[task]
        self.pooling: str = module.hparams.pooling
        self.siamese = bool(getattr(module.heads[task], "siamese", False))
        encoder = copy.deepcopy(module.encoder)
        # other tasks' adapters are dead weight here
        for other in [name for name in encoder.adapters if name != task]:
            del encoder.adapters[other]
        group = getattr(encoder, "task_group", {}).get(task, task)
        for other in [name for name in getattr(encoder, "individual", {}) if name != group]:
            del encoder.individual[other]  # other tasks' copies of individual layers, likewise
        if task in encoder.adapters and hasattr(encoder.adapters[task], "weight_delta"):
            encoder.merge(task)  # LoRA folded into the weights: the plain layers, no per-task work
        self.encoder = encoder
        self.head = copy.deepcopy(module.heads[task])
        self.eval()

    @property
    def input_names(self) -> tuple[str, ...]:
        """The forward arguments, in order (and the ONNX input names)."""
        return SIAMESE_INPUTS if self.siamese else SINGLE_INPUTS

    def _pooled(self, ids: Tensor, mask: Tensor, types: Tensor) -> Tensor:
        return pool(self.encoder(ids, mask, types, task=self.task), mask, self.pooling)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor,
        input_ids_b: Tensor | None = None,
        attention_mask_b: Tensor | None = None,
        token_type_ids_b: Tensor | None = None,
    ) -> Tensor:
        """The head's output for one batch (see the module docstring)."""
        u = self._pooled(input_ids, attention_mask, token_type_ids)
        if not self.siamese:
            return self.head(u)
        if input_ids_b is None or attention_mask_b is None or token_type_ids_b is None:
            raise PalUserError(
                f"Task {self.task!r} encodes pairs siamese: pass the second sentence's tensors."
            )
        v = self._pooled(input_ids_b, attention_mask_b, token_type_ids_b)
        return self.head(u, v)

    def example_inputs(self, tokenizer: Any, max_length: int = 128) -> tuple[Tensor, ...]:
        """Token tensors of two short example inputs, in :attr:`input_names` order (tracing, tests)."""
        kw: dict[str, Any] = dict(return_tensors="pt", padding=True, truncation=True, max_length=max_length)
        a = ["A gripping and beautifully acted film.", "Too long."]
        b = ["An absorbing, well acted movie.", "It goes on and on."]
        if self.spec.is_pair and not self.siamese:
            enc = tokenizer(a, b, **kw)
            return tuple(enc[k] for k in SINGLE_INPUTS)
        first = tokenizer(a, **kw)
        out = tuple(first[k] for k in SINGLE_INPUTS)
        if self.siamese:
            second = tokenizer(b, **kw)
            out += tuple(second[k] for k in SINGLE_INPUTS)
        return out


def export_onnx(
    model: SingleTaskModel | MixedTaskModel,
    path: str | os.PathLike[str],
    example_inputs: tuple[Tensor, ...],
    opset_version: int = 17,
) -> Path:
    """Write ``model`` as an ONNX file with dynamic batch and sequence axes.

    A :class:`~pal_lightning.module.mixed_export.MixedTaskModel` gives one file for every task (each row's
    task an input, ``task_ids``); its tasks and output widths go into the file's metadata.

    Raises:
        PalUserError: when ``onnx`` is not installed (``pip install "pal-lightning[export]"``).
    """
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError:
        raise PalUserError(
            'ONNX export needs the onnx package: pip install "pal-lightning[export]".'
        ) from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    exported = copy.deepcopy(model).eval()
    # the eager attention traces into plain ONNX ops on every runtime (sdpa's fused kernel may not)
    exported.encoder.bert.set_attn_implementation("eager")
    names = list(model.input_names)
    masks = [t for name, t in zip(names, example_inputs, strict=True) if name.startswith(ATTENTION_MASK)]
    if not all(bool((m == 0).any()) for m in masks):
        # the trace records the branch taken: a batch without padding would drop the padding mask
        raise ValueError("export_onnx needs example inputs with padding (sentences of different lengths).")
    # each sentence of a siamese pair has its own length; a mixed model's task_ids has no sequence axis
    axes: dict[str, dict[int, str]] = {
        name: {0: "batch", 1: "sequence_b" if name.endswith("_b") else "sequence"}
        if t.dim() > 1
        else {0: "batch"}
        for name, t in zip(names, example_inputs, strict=True)
    }
    axes["output"] = {0: "batch"}
    metadata = {} if isinstance(model, SingleTaskModel) else model.onnx_metadata()

    def write(tmp: str) -> None:
        # The tracer warns about every data-dependent branch it records; the one branch that matters (the
        # padding mask) is the one the check above makes the example inputs take, so the warnings are noise
        # on every export (the tests compare onnxruntime with PyTorch on other shapes).
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message=r"Exporting aten::index operator of advanced indexing")
            # a mixed model's per-task gathers leave slices the exporter cannot fold: slower to fold, not wrong
            warnings.filterwarnings(
                "ignore", message=r"Constant folding - Only steps=1 can be constant folded"
            )
            torch.onnx.export(
                exported,
                example_inputs,
                tmp,
                input_names=names,
                output_names=["output"],
                dynamic_axes=axes,
                opset_version=opset_version,
                dynamo=False,
            )
        if metadata:
            _add_metadata(tmp, metadata)

    # one file below protobuf's 2 GB limit (no external data files): written whole or not at all
    atomic_write_via(path, write)
    return path


def _add_metadata(path: str, metadata: dict[str, str]) -> None:
    """Add ``metadata`` to the ONNX file at ``path`` (its ``metadata_props``), in place."""
    import onnx

    graph = onnx.load(path)
    for key, value in metadata.items():
        entry = graph.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(graph, path)
