"""Parameter accounting: what is shared, what each task adds (docs/design.md §2)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from torch import nn

from pal_lightning.modeling.methods import AdapterConfig
from pal_lightning.modeling.sharing import FROZEN, layers_with
from pal_lightning.modeling.task_io.state import encoder_and_heads, model_tasks


def _count(params: Iterable[tuple[str, nn.Parameter]]) -> int:
    return sum(p.numel() for _, p in params)


@dataclass(frozen=True)
class ParameterReport:
    """Parameter counts of a :class:`MultiTaskEncoder` (and its heads); ``print()`` it for a table."""

    method: str
    """The per-task method (``AdapterConfig.method``)."""
    adapter_size: int
    """d_s (0 for ``adapter="none"``)."""
    shared: int
    """Pretrained encoder parameters stored once and used by every task (``backbone.*``)."""
    adapter_weights: dict[str, int] = field(default_factory=dict)
    """Per task: weight-matrix parameters of its adapter (tensors of 2 or more dimensions)."""
    adapter_biases: dict[str, int] = field(default_factory=dict)
    """Per task: vector parameters of its adapter (biases, LayerNorm gains)."""
    heads: dict[str, int] = field(default_factory=dict)
    """Per task: parameters of its output head (0 without one)."""
    individual: dict[str, int] = field(default_factory=dict)
    """Per group of tasks (a task alone is a group): parameters of its copies of the I layers."""
    layer_sharing: str = ""
    """The layer-sharing regime (F frozen, S shared, I individual per layer)."""
    frozen: int = 0
    """Parameters of the frozen (F) layers (part of :attr:`shared`)."""
    individual_copy: int = 0
    """Parameters of one copy of the individual (I) layers."""
    other: int = 0
    """Parameters that are neither encoder, adapter nor head (e.g. a learnable loss scale)."""
    trainable: int = 0
    """Parameters with ``requires_grad`` (after freezing, if any)."""

    @property
    def tasks(self) -> tuple[str, ...]:
        """Task names, in order."""
        return tuple(self.adapter_weights)

    @property
    def base_encoder(self) -> int:
        """Size of the base encoder: :attr:`shared` plus one copy of the individual layers."""
        return self.shared + self.individual_copy

    def adapter_params(self, task: str) -> int:
        """Weights plus biases of ``task``'s adapter."""
        return self.adapter_weights[task] + self.adapter_biases[task]

    @property
    def stored_per_task(self) -> dict[str, int]:
        """Per task: adapter, head and its own (not a group's) copies of the individual layers."""
        return {
            t: self.adapter_params(t) + self.individual.get(t, 0) + self.heads.get(t, 0) for t in self.tasks
        }

    @property
    def shared_by_groups(self) -> int:
        """Copies of the individual layers held by groups of several tasks (``task_groups``)."""
        return sum(n for group, n in self.individual.items() if group not in self.tasks)

    @property
    def total(self) -> int:
        """All parameters, each counted once."""
        return self.shared + sum(self.stored_per_task.values()) + self.shared_by_groups + self.other

    @property
    def stored_for_serving(self) -> int:
        """What serving all tasks stores: :attr:`total` (every parameter is stored once)."""
        return self.total

    @property
    def ratio(self) -> float:
        """``total / base_encoder``."""
        return self.total / self.base_encoder if self.base_encoder else float("nan")

    def __str__(self) -> str:
        name_w = max([len("task"), *(len(t) for t in self.tasks)])
        has_individual = any(self.individual.values())
        cols = ("adapter W", "adapter b", *(("individual",) if has_individual else ()), "head", "stored/task")
        regime = set(self.layer_sharing) != {"S"} and self.layer_sharing
        lines = [
            f"Parameters: adapter={self.method}"
            + (f", d_s={self.adapter_size}" if self.adapter_size else "")
            + (f", layer_sharing={self.layer_sharing}" if regime else ""),
            f"  shared pretrained encoder: {self.shared:,}"
            + (f" (frozen layers: {self.frozen:,})" if self.frozen else ""),
            "  " + "task".ljust(name_w) + "".join(c.rjust(14) for c in cols),
        ]
        for t in self.tasks:
            row = (
                self.adapter_weights[t],
                self.adapter_biases[t],
                *((self.individual.get(t, 0),) if has_individual else ()),
                self.heads.get(t, 0),
                self.stored_per_task[t],
            )
            lines.append("  " + t.ljust(name_w) + "".join(f"{v:,}".rjust(14) for v in row))
        for group, n in self.individual.items():
            if group not in self.tasks:
                lines.append(f"  individual layers of the group {group}: {n:,}")
        if self.other:
            lines.append(f"  other: {self.other:,}")
        lines.append(
            f"  total: {self.total:,} ({self.ratio:.3f}x the base encoder), trainable: {self.trainable:,}"
        )
        return "\n".join(lines)


def parameter_report(obj: nn.Module) -> ParameterReport:
    """The :class:`ParameterReport` of a :class:`MultiTaskEncoder` or a module with ``.encoder`` (and ``.heads``)."""
    encoder, heads = encoder_and_heads(obj)
    weights: dict[str, int] = {}
    biases: dict[str, int] = {}
    head_counts: dict[str, int] = {}
    individual: dict[str, int] = {}
    for task in model_tasks(encoder, heads):
        known_task = task in encoder.task_names
        params = list(encoder.adapter_parameters(task)) if known_task else []
        biases[task] = _count((n, p) for n, p in params if p.dim() < 2)
        weights[task] = _count(params) - biases[task]
        group = encoder.task_group.get(task) if known_task else None
        if group is not None and group in encoder.individual and group not in individual:
            individual[group] = _count(encoder.individual_parameters(task))
        head_counts[task] = (
            _count(heads[task].named_parameters()) if heads is not None and task in heads else 0
        )
    shared = _count(encoder.shared_parameters())
    layers = encoder.family.layer_list(encoder.backbone)
    frozen = sum(_count(layers[i].named_parameters()) for i in layers_with(encoder.layer_sharing, FROZEN))
    # count each tensor once even if a module is reachable twice
    all_params = {id(p): p for p in obj.parameters()}
    total = sum(p.numel() for p in all_params.values())
    counted = (weights, biases, head_counts, individual)
    return ParameterReport(
        method=encoder.adapter_config.method,
        adapter_size=encoder.adapter_size,
        shared=shared,
        adapter_weights=weights,
        adapter_biases=biases,
        heads=head_counts,
        individual=individual,
        individual_copy=next(iter(individual.values()), 0),
        layer_sharing=encoder.layer_sharing,
        frozen=frozen,
        other=total - shared - sum(sum(c.values()) for c in counted),
        trainable=sum(p.numel() for p in all_params.values() if p.requires_grad),
    )


def task_weight_formula(
    config: AdapterConfig, hidden_size: int, num_layers: int, intermediate_size: int
) -> int:
    """Weight-matrix parameters one task adds with ``config``, from the shapes alone (no model built)."""
    size = config.resolved_size(hidden_size)
    k = len(config.layer_indices(num_layers))
    return config.adapter_method.weight_formula(config, hidden_size, size, k, intermediate_size)
