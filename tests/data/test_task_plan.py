"""One source of truth for the task plan: the tasks the training sampler draws follow the probabilities the
training log shows (``sampling/p_<task>``), for every built-in sampling rule, ``temperature``, a rule
registered by the user and an overridden ``task_probabilities_for_epoch`` (issue 43, item 1).

Each check draws 10,000 steps (or rows) and allows 5 standard errors per task, ``5 sqrt(p (1 - p) / n)``
(0.024 at p = 0.5), plus one draw (round robin's cycle is exact to one step): a wrong plan is off by
far more, and the seeds are fixed, so the checks cannot flicker."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml

from pal_lightning.callbacks.training_log import TrainingLog
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.options import DataConfig
from pal_lightning.data.sampling import schedules
from pal_lightning.data.sampling.mixed import MixedTaskBatchSampler
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler
from pal_lightning.data.sampling.schedules import (
    SamplingSchedule,
    register_sampling_rule,
    sampling_rules,
)

DRAWS = 10_000
#: Tiny fake task sizes: the rules below give each task a clearly different share.
SIZES = {"sst": 5, "qqp": 80, "sts": 15}
BUILT_IN = ("proportional", "sqrt", "uniform", "round_robin", "annealed", "weights", "temperature")


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def guide_block(language: str) -> str:
    """The first ``language`` block of the guide's "Adding a sampling rule" section."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Adding a sampling rule\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match, f"no {language} block in the guide's sampling-rule section"
    return match.group(1)


@pytest.fixture
def user_rule(monkeypatch: pytest.MonkeyPatch) -> str:
    """The guide's rule ``inverse_size``, registered by its own block for one test (the registry restored
    after): ``w_i = N_i^(-(e + 1) / E)``."""
    monkeypatch.setattr(schedules, "_RULES", dict(schedules._RULES))
    exec(compile(guide_block("python"), str(GUIDE), "exec"), {})  # noqa: S102 - the guide's code, as written
    return "inverse_size"


def assert_drawn_as_logged(drawn: np.ndarray, tasks: Sequence[str], logged: Mapping[str, float]) -> None:
    """The share of each task among ``drawn`` (task indices) is ``logged``'s, within 5 standard errors."""
    n = drawn.size
    assert n >= DRAWS and set(logged) == set(tasks)
    for i, t in enumerate(tasks):
        p, share = float(logged[t]), float(np.mean(drawn == i))
        allowed = 5 * math.sqrt(p * (1 - p) / n) + 1 / n
        assert abs(share - p) <= allowed, f"{t}: drawn {share:.4f}, logged {p:.4f} (allowed {allowed:.4f})"


def logged_rows(data: Any, epoch: int) -> list[dict[str, float]]:
    """The rows :class:`TrainingLog` writes at the start of ``epoch``."""
    rows: list[dict[str, float]] = []
    logger = SimpleNamespace(log_metrics=lambda metrics, step: rows.append(dict(metrics)))
    trainer = SimpleNamespace(
        datamodule=data, is_global_zero=True, current_epoch=epoch, global_step=0, loggers=[logger]
    )
    TrainingLog().on_train_epoch_start(trainer, None)  # type: ignore[arg-type]
    return rows


def logged_probabilities(data: Any, epoch: int) -> dict[str, float]:
    """What :class:`TrainingLog` writes as ``sampling/p_<task>`` at the start of ``epoch``."""
    rows = logged_rows(data, epoch)
    assert len(rows) == 1
    return {key.removeprefix("sampling/p_"): value for key, value in rows[0].items()}


def schedule_data(tmp: Path, sampling: str, **options: Any) -> MultiTaskDataModule:
    """A data module over SIZES (set by hand, as ``setup("fit")`` would: no file is read)."""
    weights = {"sst": 3.0, "qqp": 1.0, "sts": 6.0} if sampling == "weights" else None
    dm = MultiTaskDataModule(
        data_dir=str(tmp),
        sampling=sampling,
        task_weights=weights,
        anneal_epochs=3,
        cache_dir=False,
        **options,
    )
    dm.train_sizes = dict(SIZES)
    dm.sampling_schedule = dm.config.sampling_schedule(3)
    return dm


RULES: list[tuple[str, dict[str, Any]]] = [
    *[(name, {}) for name in BUILT_IN],
    ("temperature", {"sampling_temperature": 0.5}),  # p ~ N^2: sharper than proportional
    ("temperature", {"sampling_temperature": 5.0}),
    ("proportional", {"task_multipliers": {"qqp": 0.1}}),
    ("inverse_size", {}),  # the guide's rule, registered by the user_rule fixture
]


# mixed batches have no round robin (refused with one line, test_mixed_sampler): its steps are checked per_task
@pytest.mark.parametrize(
    ("mixing", "sampling", "options"),
    [("per_task", *r) for r in RULES] + [("mixed", *r) for r in RULES if r[0] != "round_robin"],
)
def test_every_rule_draws_what_it_logs(
    mixing: str, sampling: str, options: dict[str, Any], user_rule: str, tmp_path: Path
) -> None:
    """Per epoch (0 and the last of 3), the sampler built as the data module builds it draws each task as
    often as the training log says: 10,000 steps (per_task) or rows (mixed) per epoch."""
    dm = schedule_data(tmp_path, sampling, **options)
    tasks = list(SIZES)
    common: dict[str, Any] = {"seed": 3, "probabilities": dm.task_probabilities_for_epoch}
    for epoch in (0, 2):
        logged = logged_probabilities(dm, epoch)
        if mixing == "per_task":
            sampler = MultiTaskBatchSampler(
                SIZES, dm.batch_sizes, dm.sampling_schedule, steps_per_epoch=DRAWS, **common
            )
            drawn = np.asarray(sampler.task_sequence(epoch))
        else:
            sampler = MixedTaskBatchSampler(
                SIZES, dict.fromkeys(tasks, 8), dm.sampling_schedule, steps_per_epoch=DRAWS // 8, **common
            )
            drawn = np.asarray(sampler.row_tasks(epoch))
        assert_drawn_as_logged(drawn, tasks, logged)
    if sampling in ("annealed", "inverse_size"):  # the rules that move: the epochs' plans differ
        assert logged_probabilities(dm, 0)["sst"] < logged_probabilities(dm, 2)["sst"] - 0.05


class Rebalanced(MultiTaskDataModule):
    """A data module with a sampling rule of its own, written as the contract the training log reads."""

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]:
        return {"sst": 0.6, "qqp": 0.1, "sts": 0.3} if epoch == 0 else {"sst": 0.1, "qqp": 0.2, "sts": 0.7}


def test_an_overridden_hook_is_what_the_train_loader_draws(data_dir: Path, tmp_path: Path) -> None:
    """The issue's failure: overriding ``task_probabilities_for_epoch`` changed the log only, while the
    sampler kept drawing by the schedule's name (proportional here: about .30 / .47 / .23)."""
    dm = Rebalanced(data_dir=str(data_dir), sampling="proportional", steps_per_epoch=DRAWS, cache_dir=False)
    dm.setup("fit")
    sampler = dm.train_dataloader().batch_sampler
    assert isinstance(sampler, MultiTaskBatchSampler)
    for epoch in (0, 1):
        logged = logged_probabilities(dm, epoch)
        assert logged == dm.task_probabilities_for_epoch(epoch)
        assert_drawn_as_logged(np.asarray(sampler.task_sequence(epoch)), dm.task_names, logged)
    # the batches are the plan's: each one of the task drawn for its step
    plan = sampler.task_sequence(1)
    sampler.set_epoch(1)
    assert [b.task for _, b in zip(range(50), sampler, strict=False)] == [dm.task_names[i] for i in plan[:50]]


def test_the_sequential_schedule_logs_no_probabilities(tmp_path: Path) -> None:
    """Its phases draw no tasks: the log writes no ``sampling/p_*`` rather than a rule's it does not follow."""
    data = schedule_data(tmp_path, "uniform", schedule="sequential", task_order=list(SIZES))
    with pytest.raises(
        RuntimeError, match="^The sequential schedule trains its phases one task after another"
    ):
        data.task_probabilities_for_epoch(0)
    assert logged_rows(data, 0) == []


def test_the_plan_is_the_same_on_every_rank_and_after_a_resume() -> None:
    """A user's probabilities are a pure function of the epoch: every rank draws the same tasks, and a
    sampler restored mid-epoch yields the batches of the uninterrupted one."""
    tasks = list(SIZES)

    def plan(epoch: int) -> dict[str, float]:
        return dict(zip(tasks, (0.5, 0.2, 0.3) if epoch % 2 else (0.2, 0.2, 0.6), strict=True))

    def make(rank: int) -> MultiTaskBatchSampler:
        schedule = SamplingSchedule("proportional")
        return MultiTaskBatchSampler(
            SIZES,
            dict.fromkeys(tasks, 2),
            schedule,
            40,
            num_replicas=2,
            rank=rank,
            seed=9,
            probabilities=plan,
        )

    ranks = [make(0), make(1)]
    for epoch in (0, 1):
        assert np.array_equal(ranks[0].task_sequence(epoch), ranks[1].task_sequence(epoch))
    whole = ranks[0]
    whole.set_epoch(1)
    expected = list(whole)
    resumed = make(0)
    whole.set_epoch(1)
    stopped = iter(whole)
    for _ in range(13):
        next(stopped)
    resumed.load_state_dict(whole.state_dict())
    assert list(resumed) == expected[13:]


def test_temperature_is_n_to_the_one_over_t_and_refuses_a_bad_t() -> None:
    """``p_i ~ N_i^(1/T)``: T = 1 is proportional, T = 2 (the default) square root, bit for bit."""
    for t, same_as in ((1.0, "proportional"), (2.0, "sqrt")):
        assert SamplingSchedule("temperature", temperature=t).probabilities(SIZES, 0) == SamplingSchedule(
            same_as
        ).probabilities(SIZES, 0)
    p = SamplingSchedule("temperature", temperature=4.0).probabilities(SIZES, 5)
    assert p["qqp"] / p["sst"] == pytest.approx(16**0.25, rel=1e-12)
    assert DataConfig().sampling_temperature == 2.0
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(PalUserError, match=r"sampling_temperature must be finite and > 0") as err:
            DataConfig(sampling="temperature", sampling_temperature=bad)
        assert "\n" not in str(err.value)


def test_a_registered_rule_is_named_in_messages_and_checked(user_rule: str, tmp_path: Path) -> None:
    assert sampling_rules()[: len(BUILT_IN)] == BUILT_IN and user_rule in sampling_rules()
    with pytest.raises(
        PalUserError, match=r"Unknown sampling 'nope'\. Choose one of .*temperature, inverse_size"
    ):
        DataConfig(sampling="nope")
    with pytest.raises(ValueError, match="'proportional' is a built-in sampling rule"):
        register_sampling_rule("proportional", lambda sizes, epoch, schedule: dict(sizes))
    with pytest.raises(ValueError, match="already registered; pass overwrite=True"):
        register_sampling_rule(user_rule, lambda sizes, epoch, schedule: dict(sizes))
    with pytest.raises(ValueError, match=r"called as rule\(sizes, epoch, schedule\)"):
        register_sampling_rule("two_args", lambda sizes, epoch: dict(sizes))  # type: ignore[arg-type,misc]
    # a rule's weights must fit the tasks; an override's probabilities too
    register_sampling_rule("forgets_one", lambda sizes, epoch, schedule: {"sst": 1.0})
    with pytest.raises(PalUserError, match=r"Sampling rule 'forgets_one' must give a weight to exactly"):
        MultiTaskDataModule(data_dir=str(tmp_path), sampling="forgets_one", cache_dir=False)
    bad = MultiTaskBatchSampler(
        SIZES,
        dict.fromkeys(SIZES, 2),
        SamplingSchedule(),
        10,
        probabilities=lambda e: {"sst": -1.0, "qqp": 1.0, "sts": 1.0},
    )
    with pytest.raises(
        PalUserError, match=r"task_probabilities_for_epoch must give finite probabilities >= 0"
    ):
        bad.task_sequence(0)


def test_a_registered_rule_is_chosen_from_yaml(
    user_rule: str, tiny_yaml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's config (``data.init_args.sampling: inverse_size``) over a tiny one: the CLI's data module
    draws by the rule, as the log shows it."""
    from pal_lightning.cli.fit import PalLightningCLI

    overlay = tmp_path / "rule.yaml"
    config = yaml.safe_load(guide_block("yaml"))
    assert config == {"data": {"init_args": {"sampling": user_rule}}}
    config["data"]["init_args"]["steps_per_epoch"] = DRAWS
    overlay.write_text(yaml.safe_dump(config), encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["pal-lightning"])
    cli = PalLightningCLI(args=["--config", str(tiny_yaml), "--config", str(overlay)], run=False)
    dm = cli.datamodule
    assert dm.config.sampling == user_rule
    dm.setup("fit")
    sampler = dm.train_dataloader().batch_sampler
    assert isinstance(sampler, MultiTaskBatchSampler)
    logged = logged_probabilities(dm, 0)
    by_hand = {t: n ** (-1 / dm.sampling_schedule.num_epochs) for t, n in dm.train_sizes.items()}
    assert logged == pytest.approx({t: w / sum(by_hand.values()) for t, w in by_hand.items()}, rel=1e-12)
    assert_drawn_as_logged(np.asarray(sampler.task_sequence(0)), dm.task_names, logged)
