"""Parameters a subclass adds (issue 43, item 4): named at fit start when they fall into a default group,
placeable with ``parameter_group_of``; the table of the optimizer's groups beside the model summary."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import Tensor, nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.registry import METHODS
from pal_lightning.modeling.param_groups import OwnGroup
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.module.optim import unplaced_parameters
from pal_lightning.testing import quiet_trainer
from pal_lightning.testing.batches import PAIR_ENCODING, TINY_BATCH_BERT, TinyData, tiny_module

#: The logger of Lightning's rank_zero_info, which also prints the model summary.
LIGHTNING_INFO = "lightning.pytorch.utilities.rank_zero"


class UncertaintyWeighted(MultiTaskModule):
    """Uncertainty-weighted task losses (Kendall et al., 2018): one learned log-variance per task."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log_vars = nn.Parameter(torch.zeros(len(self.task_specs)))

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        i = list(self.task_specs).index(task)
        return torch.exp(-self.log_vars[i]) * super().compute_loss(task, output, labels) + self.log_vars[i]


class Placed(UncertaintyWeighted):
    """The log-variances in a group of their own: a higher rate, no weight decay."""

    def parameter_group_of(self, name: str, parameter: nn.Parameter) -> Any:
        return OwnGroup("log_vars", lr=1e-2) if name == "log_vars" else None


class Answering(UncertaintyWeighted):
    """Answers ``answer`` for the log-variances (and ``other`` for the sst head's bias)."""

    answer: Any = None
    other: Any = None

    def parameter_group_of(self, name: str, parameter: nn.Parameter) -> Any:
        if name == "log_vars":
            return self.answer
        return self.other if name.startswith("heads.sst.") and name.endswith("bias") else None


def build(cls: type[MultiTaskModule], **kwargs: Any) -> Any:
    torch.manual_seed(0)
    return cls(
        tasks=("sst", "qqp", "sts"),
        encoder_config=TINY_BATCH_BERT,
        adapter={"num_heads": 2},
        pair_encoding=PAIR_ENCODING,
        dropout=0.0,
        **kwargs,
    )


def group_of(module: MultiTaskModule, parameter: nn.Parameter) -> dict[str, Any]:
    (found,) = [g for g in module.parameter_groups() if any(p is parameter for p in g["params"])]
    return found


@contextmanager
def lightning_info() -> Iterator[list[str]]:
    """The messages of Lightning's ``rank_zero_info`` meanwhile (its logger does not reach pytest's)."""
    seen: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(LIGHTNING_INFO)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


class OneStep(TinyData):
    steps = 1


def test_fit_start_prints_the_groups_and_names_the_subclass_parameters() -> None:
    """Today's placement (the heads' group, at head_lr with weight decay), now with a warning naming the
    log-variances and a table of every group, printed with Lightning's model summary."""
    module = build(UncertaintyWeighted, optim={"head_lr": 5e-4, "weight_decay": 0.01})
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0, enable_model_summary=True)
    with lightning_info() as printed, pytest.warns(UserWarning, match="parameter_group_of") as caught:
        trainer.fit(module, datamodule=OneStep())
    (message,) = [str(w.message) for w in caught if "log_vars" in str(w.message)]
    assert "1 trainable parameter(s)" in message
    assert "log_vars (3 values) -> 'heads' (lr 0.0005, weight decay 0.01)" in message
    (table,) = [m for m in printed if m.startswith("Optimizer parameter groups")]
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:]}
    groups = {g["name"]: g for g in trainer.optimizers[0].param_groups}
    assert list(rows) == list(groups)  # one row per group, in the optimizer's order
    for name, group in groups.items():
        tensors, values, lr, decay = rows[name]
        assert int(tensors) == len(group["params"])
        assert int(values.replace(",", "")) == sum(p.numel() for p in group["params"])
        assert float(lr) == pytest.approx(group["initial_lr"], rel=1e-2)  # the peak, not the warmup's
        assert float(decay) == group["weight_decay"]
    assert any(p is module.log_vars for p in groups["heads"]["params"])


def test_quiet_trainer_prints_no_table_but_still_warns() -> None:
    """Without the model summary (quiet_trainer) the table is off; the warning is not."""
    module = build(UncertaintyWeighted)
    module.trainer = quiet_trainer()
    module.trainer.optimizers = [torch.optim.AdamW(module.parameter_groups())]
    with lightning_info() as printed, pytest.warns(UserWarning, match="log_vars"):
        module.on_fit_start()
    assert printed == []
    placed = build(Placed)
    placed.trainer = quiet_trainer(enable_model_summary=True)
    placed.trainer.optimizers = [torch.optim.AdamW(placed.parameter_groups())]
    with lightning_info() as printed, warnings.catch_warnings():
        warnings.simplefilter("error")  # placed: nothing to warn about
        placed.on_fit_start()
    assert len(printed) == 1 and "log_vars" in printed[0]


def test_parameter_group_of_places_them() -> None:
    placed = build(Placed, optim={"head_lr": 5e-4, "weight_decay": 0.01})
    own = group_of(placed, placed.log_vars)
    assert own == {"name": "log_vars", "params": [placed.log_vars], "lr": 1e-2, "weight_decay": 0.0}
    assert placed.parameter_groups()[-1]["name"] == "log_vars"  # after the library's groups
    assert unplaced_parameters(placed, placed.encoder) == []
    # every other parameter stays where the library puts it
    plain = tiny_module()
    assert [g["name"] for g in placed.parameter_groups()[:-1]] == [
        g["name"] for g in plain.parameter_groups()
    ]

    # a kind's name joins that group (its rate; weight decay by the parameter's name), a mapping is a group
    answering = build(Answering, optim={"lr": 1e-4, "weight_decay": 0.05})
    answering.answer = "pretrained"
    assert group_of(answering, answering.log_vars)["name"] == "pretrained"
    answering.answer = {"name": "uncertainty", "lr": 3e-3, "weight_decay": 0.001}
    assert group_of(answering, answering.log_vars)["lr"] == 3e-3
    answering.other = "adapters"  # a library parameter can be moved too
    moved = [p for n, p in answering.named_parameters() if n.startswith("heads.sst.") and n.endswith("bias")]
    assert moved and all(group_of(answering, p)["name"] == "adapters_no_decay" for p in moved)


@pytest.mark.parametrize(
    ("answer", "other", "match"),
    [
        ("encoder", None, "return None .*'pretrained', 'adapters', 'heads'"),
        (OwnGroup("heads", lr=1e-3), None, "return the string 'heads'"),
        ({"name": "u"}, None, "needs 'name' and 'lr'"),
        ({"name": "u", "lr": 1.0, "decay": 0.0}, None, r"not \['decay'\]"),
        (OwnGroup("u", lr=1e-3), OwnGroup("u", lr=1e-2), "two settings"),
    ],
)
def test_bad_answers_are_one_user_error(answer: Any, other: Any, match: str) -> None:
    module = build(Answering)
    module.answer, module.other = answer, other
    with pytest.raises(PalUserError, match=match):
        module.parameter_groups()


def test_no_built_in_model_has_unplaced_parameters() -> None:
    """The warning is for subclasses: every built-in method, SimCSE and the layer copies are known parts."""
    for method in METHODS:
        module = tiny_module(method)
        assert unplaced_parameters(module, module.encoder) == [], method
    for extra in (
        {"simcse": {"weight": 0.1}},
        {"layer_sharing": "SI"},
        {"heads": {"sts": "cosine_rescaled"}},
    ):
        module = tiny_module(**extra)
        assert unplaced_parameters(module, module.encoder) == [], extra


def test_a_built_in_fit_warns_nothing() -> None:
    pl.seed_everything(0, verbose=False)
    module = tiny_module()
    module.trainer = quiet_trainer()
    module.trainer.optimizers = [torch.optim.AdamW(module.parameter_groups())]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.on_fit_start()
