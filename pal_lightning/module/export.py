"""One task, or every task, of a trained model as a plain ``torch.nn.Module``, and its ONNX export.

:class:`SingleTaskModel` maps token tensors (``input_ids, attention_mask, token_type_ids``, plus ``*_b`` for
a siamese pair's second sentence) to what ``MultiTaskModule.forward`` gives. :class:`MixedTaskModel` keeps
every task: each row names its task (``task_ids``); row ``i`` of the ``float [B, W]`` output holds its head's
output in the first ``widths[t]`` columns. Eagerly it routes rows in one encoder pass as ``forward_mixed``
does; a trace gathers each task's rows (plus one spare row: the encoder's reshapes refuse zero rows) and
scatters them back. :func:`export_onnx` needs the ``export`` extra.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pal_lightning.core.batch import ATTENTION_MASK, ENCODING_KEYS, side_keys
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_via
from pal_lightning.modeling.heads import pool
from pal_lightning.module.encoding import mixed_head_outputs, tasks_of_indices
from pal_lightning.module.inference import predict_spec

#: ONNX input names: one sequence, or two for a siamese pair.
SINGLE_INPUTS = ENCODING_KEYS
SIAMESE_INPUTS = (*SINGLE_INPUTS, *side_keys("b"))
#: The input naming each row's task (indices into the model's ``task_names``).
TASK_IDS = "task_ids"
MIXED_INPUTS = (*ENCODING_KEYS, TASK_IDS)
MIXED_SIAMESE_INPUTS = (*MIXED_INPUTS, *side_keys("b"))
#: The example sentences a trace runs on (two lengths, so that every batch has padding).
EXAMPLE_A = ["A gripping and beautifully acted film.", "Too long."]
EXAMPLE_B = ["An absorbing, well acted movie.", "It goes on and on."]


def encoder_of(module: Any, tasks: Sequence[str]) -> Any:
    """A copy of ``module``'s encoder without other tasks' modules (adapters, individual layers)."""
    encoder = copy.deepcopy(module.encoder)
    for other in [name for name in encoder.adapters if name not in tasks]:
        del encoder.adapters[other]
    groups = {getattr(encoder, "task_group", {}).get(t, t) for t in tasks}
    for other in [name for name in getattr(encoder, "individual", {}) if name not in groups]:
        del encoder.individual[other]
    return encoder


class _TaskModel(nn.Module):
    """What both exported models share: the kept tasks' encoder copy and the pooling."""

    def __init__(self, module: Any, tasks: Sequence[str]) -> None:
        super().__init__()
        self.pooling: str = module.hparams.pooling
        self.encoder = encoder_of(module, tasks)

    def _pooled(self, inputs: Sequence[Tensor], task: str) -> Tensor:
        ids, mask, types = inputs
        return pool(self.encoder(ids, mask, types, task=task), mask, self.pooling)

    @staticmethod
    def _second(tasks: list[str], *b: Tensor | None) -> tuple[Tensor, ...]:
        if any(x is None for x in b):
            raise PalUserError(
                f"Task(s) {tasks} encode pairs siamese: pass the second sentences' tensors "
                "(input_ids_b, attention_mask_b, token_type_ids_b)."
            )
        return b  # type: ignore[return-value]


class SingleTaskModel(_TaskModel):
    """One task's encoder (its modules; LoRA merged), pooling and head, as a self-contained module.

    Args:
        module: a :class:`~pal_lightning.module.multitask.MultiTaskModule` (its weights are copied).
        task: the task to keep.

    Raises:
        PalUserError: for a task the module does not have.
    """

    def __init__(self, module: Any, task: str) -> None:
        self.spec = predict_spec(module.task_specs, task)
        super().__init__(module, [task])
        self.task = task
        self.siamese = module._is_siamese(task)
        if task in self.encoder.adapters and hasattr(self.encoder.adapters[task], "weight_delta"):
            self.encoder.merge(task)  # LoRA folded into the weights: the plain layers, no per-task work
        self.head = copy.deepcopy(module.heads[task])
        self.eval()

    @property
    def input_names(self) -> tuple[str, ...]:
        """The forward arguments, in order (and the ONNX input names)."""
        return SIAMESE_INPUTS if self.siamese else SINGLE_INPUTS

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
        u = self._pooled((input_ids, attention_mask, token_type_ids), self.task)
        if not self.siamese:
            return self.head(u)
        second = self._second([self.task], input_ids_b, attention_mask_b, token_type_ids_b)
        return self.head(u, self._pooled(second, self.task))

    def example_inputs(self, tokenizer: Any, max_length: int = 128) -> tuple[Tensor, ...]:
        """Token tensors of two short example inputs, in :attr:`input_names` order (tracing, tests)."""
        firsts, seconds = _example_rows(tokenizer, max_length, self.spec.is_pair, self.siamese)
        first = _padded(tokenizer, firsts)
        return first + _padded(tokenizer, seconds) if self.siamese else first


class MixedTaskModel(_TaskModel):
    """The encoder with every kept task's modules, pooling and heads; each row names its task (``task_ids``).

    Args:
        module: a :class:`~pal_lightning.module.multitask.MultiTaskModule` (its weights are copied).
        tasks: the tasks to keep, in the order of their indices (default: all of the module's, in order).

    Raises:
        PalUserError: for a task the module does not have, or no task.
    """

    def __init__(self, module: Any, tasks: Sequence[str] | None = None) -> None:
        names = list(module.task_specs) if tasks is None else list(tasks)
        unknown = [t for t in names if t not in module.task_specs]
        if unknown or not names or len(set(names)) != len(names):
            raise PalUserError(
                f"MixedTaskModel takes distinct tasks of the model ({', '.join(module.task_specs)}); got "
                f"{names}. Pick some of those, or leave tasks out for all."
            )
        super().__init__(module, names)
        self.task_names: tuple[str, ...] = tuple(names)
        self.pairs: tuple[bool, ...] = tuple(bool(module.task_specs[t].is_pair) for t in names)
        self.siamese: tuple[bool, ...] = tuple(module._is_siamese(t) for t in names)
        self.heads = nn.ModuleDict({t: copy.deepcopy(module.heads[t]) for t in names})
        self.eval()
        self.widths: tuple[int, ...] = tuple(
            self._head_width(t, s) for t, s in zip(names, self.siamese, strict=True)
        )

    def _head_width(self, task: str, siamese: bool) -> int:
        """Columns of ``task``'s head output (1 for a score or a single logit), from a forward of zeros."""
        u = torch.zeros(2, int(self.encoder.hidden_size))
        with torch.no_grad():
            out = self.heads[task](u, u.clone()) if siamese else self.heads[task](u)
        return int(out.reshape(2, -1).shape[1])

    @property
    def width(self) -> int:
        """``W``: columns of the padded output (the widest head)."""
        return max(self.widths)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The forward arguments, in order (and the ONNX input names)."""
        return MIXED_SIAMESE_INPUTS if any(self.siamese) else MIXED_INPUTS

    def onnx_metadata(self) -> dict[str, str]:
        """What a server needs to read ``output``: the tasks in index order and each one's width."""
        return {
            "pal_lightning.task_names": ",".join(self.task_names),
            "pal_lightning.widths": ",".join(map(str, self.widths)),
        }

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor,
        task_ids: Tensor,
        input_ids_b: Tensor | None = None,
        attention_mask_b: Tensor | None = None,
        token_type_ids_b: Tensor | None = None,
    ) -> Tensor:
        """``float [B, W]``: each row's head output, padded with zeros (module docstring)."""
        second = None
        if any(self.siamese):
            siamese = [t for t, s in zip(self.task_names, self.siamese, strict=True) if s]
            second = self._second(siamese, input_ids_b, attention_mask_b, token_type_ids_b)
        first = (input_ids, attention_mask, token_type_ids)
        if torch.jit.is_tracing():
            return self._partitioned(first, second, task_ids)
        return self._routed(first, second, task_ids)

    def _routed(self, first: Sequence[Tensor], second: Sequence[Tensor] | None, task_ids: Tensor) -> Tensor:
        """Eager: one encoder pass over every row, routed as ``forward_mixed`` routes it."""
        rows = first[0].shape[0]
        ids = task_ids.reshape(-1).tolist()
        if len(ids) != rows:
            raise PalUserError(f"task_ids has {len(ids)} entries for {rows} rows: give one per row.")
        tasks = tasks_of_indices(ids, self.task_names, "task_ids")
        b = None if second is None else dict(zip(ENCODING_KEYS, second, strict=True))
        first_d = dict(zip(ENCODING_KEYS, first, strict=True))
        outputs = mixed_head_outputs(self.encoder, self.heads, self.pooling, first_d, b, tasks)
        out = first[0].new_zeros(rows, self.width, dtype=torch.float32)
        for task, (index, value) in outputs.items():
            out[index, : self.widths[self.task_names.index(task)]] = value.reshape(len(index), -1).float()
        return out

    def _partitioned(
        self, first: tuple[Tensor, ...], second: tuple[Tensor, ...] | None, task_ids: Tensor
    ) -> Tensor:
        """Traced: per task, its rows gathered, encoded with its modules, headed and scattered back."""
        out = torch.zeros(first[0].shape[0], self.width, dtype=torch.float32, device=first[0].device)
        spare = torch.zeros(1, dtype=torch.long, device=first[0].device)
        for t, task in enumerate(self.task_names):
            index = torch.nonzero(task_ids.reshape(-1) == t)[:, 0]
            # row 0 as a spare after the task's rows: an absent task runs on one row, not on none
            picked = torch.cat([index, spare])
            u = self._pooled([x.index_select(0, picked) for x in first], task)
            if self.siamese[t]:
                assert second is not None
                value = self.heads[task](u, self._pooled([x.index_select(0, picked) for x in second], task))
            else:
                value = self.heads[task](u)
            value = value.reshape(-1, self.widths[t])[:-1].float()  # the spare row's output dropped
            out = out.index_put((index,), F.pad(value, (0, self.width - self.widths[t])))
        return out

    def example_inputs(self, tokenizer: Any, max_length: int = 128) -> tuple[Tensor, ...]:
        """Token tensors of a short and a long row per task, in :attr:`input_names` order (a trace records
        the branches its example takes: every task present and padded)."""
        firsts: list[dict[str, list[int]]] = []
        seconds: list[dict[str, list[int]]] = []
        for pair, siamese in zip(self.pairs, self.siamese, strict=True):
            rows = _example_rows(tokenizer, max_length, pair, siamese)
            firsts += rows[0]
            seconds += rows[1]
        task_ids = torch.arange(len(self.task_names)).repeat_interleave(2)
        result: tuple[Tensor, ...] = (*_padded(tokenizer, firsts), task_ids)
        return result + _padded(tokenizer, seconds) if any(self.siamese) else result


def _example_rows(
    tokenizer: Any, max_length: int, pair: bool, siamese: bool
) -> tuple[list[dict[str, list[int]]], list[dict[str, list[int]]]]:
    # a task's two example rows, tokenised one by one: the first sequences and (siamese) the second ones
    kw: dict[str, Any] = dict(truncation=True, max_length=max_length)
    cross = pair and not siamese
    firsts = [
        dict(tokenizer(a, b, **kw) if cross else tokenizer(a, **kw))
        for a, b in zip(EXAMPLE_A, EXAMPLE_B, strict=True)
    ]
    return firsts, [dict(tokenizer(b if siamese else "", **kw)) for b in EXAMPLE_B]


def _padded(tokenizer: Any, rows: list[dict[str, list[int]]]) -> tuple[Tensor, Tensor, Tensor]:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def column(key: str, value: int) -> Tensor:
        seqs = [torch.tensor(r.get(key) or [0] * len(r["input_ids"])) for r in rows]
        return nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=value)

    return column("input_ids", pad), column("attention_mask", 0), column("token_type_ids", 0)


def export_onnx(
    model: SingleTaskModel | MixedTaskModel,
    path: str | os.PathLike[str],
    example_inputs: tuple[Tensor, ...],
    opset_version: int = 17,
) -> Path:
    """Write ``model`` as an ONNX file (TorchScript exporter, eager attention) with dynamic batch and sequence
    axes; a :class:`MixedTaskModel`'s tasks and output widths go into its metadata.

    Raises:
        PalUserError: when ``onnx`` is not installed (``pip install "pal-lightning[export]"``).
    """
    try:
        import onnx
    except ImportError:
        raise PalUserError('ONNX export needs onnx: pip install "pal-lightning[export]".') from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    exported = copy.deepcopy(model).eval()
    # the eager attention traces into plain ONNX ops on every runtime (sdpa's fused kernel may not)
    exported.encoder.backbone.set_attn_implementation("eager")
    names = list(model.input_names)
    masks = [t for name, t in zip(names, example_inputs, strict=True) if name.startswith(ATTENTION_MASK)]
    if not all(bool((m == 0).any()) for m in masks):
        # the trace records the branch taken: a batch without padding would drop the padding mask
        raise ValueError("export_onnx needs example inputs with padding (sentences of different lengths).")
    # each sentence of a siamese pair has its own length; a mixed model's task_ids has no sequence axis
    axes: dict[str, dict[int, str]] = {name: {0: "batch"} for name in [*names, "output"]}
    for name, t in zip(names, example_inputs, strict=True):
        if t.dim() > 1:
            axes[name][1] = "sequence_b" if name.endswith("_b") else "sequence"
    metadata = {} if isinstance(model, SingleTaskModel) else model.onnx_metadata()

    def write(tmp: str) -> None:
        # the tracer's warnings (data-dependent branches, advanced indexing, unfoldable slices) are noise:
        # the branch that matters, the padding mask, is the one the check above makes the example take
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            for message in (r"Exporting aten::index operator", r"Constant folding - Only steps=1"):
                warnings.filterwarnings("ignore", message=message)
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
            graph = onnx.load(tmp)
            for key, value in metadata.items():
                entry = graph.metadata_props.add()
                entry.key, entry.value = key, value
            onnx.save(graph, tmp)

    # one file below protobuf's 2 GB limit (no external data files): written whole or not at all
    atomic_write_via(path, write)
    return path
