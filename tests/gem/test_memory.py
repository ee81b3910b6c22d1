"""EpisodicMemory: reservoir sampling by the documented hash, draws, and its state."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from pal_lightning.gem import EpisodicMemory
from pal_lightning.gem import memory as memory_module


def test_reservoir_is_deterministic_bounded_and_uniform() -> None:
    a, b = EpisodicMemory(8, seed=3), EpisodicMemory(8, seed=3)
    for start in range(0, 200, 7):  # batches of 7
        a.add("sst", range(start, min(start + 7, 200)))
    b.add("sst", range(200))  # one call: the same draws (they depend on (seed, task, count) only)
    assert a == b and len(a.buffers["sst"]) == 8 and a.seen == {"sst": 200}
    assert len(set(a.buffers["sst"])) == 8
    assert a.buffers["sst"] != list(range(8))  # later examples replaced early ones
    # one counter per task: another task does not disturb sst's draws
    c = EpisodicMemory(8, seed=3)
    for start in range(0, 200, 7):
        c.add("qqp", range(1000 + start, 1007 + start))
        c.add("sst", range(start, min(start + 7, 200)))
    assert c.buffers["sst"] == a.buffers["sst"]
    d = EpisodicMemory(8, seed=4)
    d.add("sst", range(200))
    assert d.buffers["sst"] != a.buffers["sst"]
    assert d != a and a != "sst"  # equality compares the whole state, and only with another memory
    # uniform: over many seeds, early and late examples are kept equally often (8/200 each)
    hits = np.zeros(200)
    for seed in range(400):
        m = EpisodicMemory(8, seed=seed)
        m.add("t", range(200))
        hits[m.buffers["t"]] += 1
    first, last = hits[:100].sum(), hits[100:].sum()
    assert abs(first - last) / (first + last) < 0.05


def test_memory_sample_and_state_round_trip(tmp_path: Path) -> None:
    m = EpisodicMemory(5, seed=1)
    m.add("sst", [10, 11, 12])
    assert sorted(m.sample("sst", 16, step=3)) == [10, 11, 12]  # fewer than asked: all it has
    assert len(m.sample("sst", 1, step=3)) == 1 and m.sample("sst", 0, step=3) == []
    other_seed = EpisodicMemory(5, seed=2)
    other_seed.add("sst", [10, 11, 12])
    draws = [tuple(mem.sample("sst", 2, step=s)) for mem in (m, other_seed) for s in range(8)]
    assert draws[:8] != draws[8:]  # the seed enters the draws
    assert m.sample("sst", 2, step=3) == m.sample("sst", 2, step=3)
    assert m.sample("qqp", 4, step=0) == []
    state = m.state_dict()
    assert state == {"size": 5, "seed": 1, "buffers": {"sst": [10, 11, 12]}, "seen": {"sst": 3}}
    torch.save(state, tmp_path / "state.pt")
    assert torch.load(tmp_path / "state.pt", weights_only=True) == state
    n = EpisodicMemory(5, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same size and seed: no warning
        n.load_state_dict(state)
        n.load_state_dict({"buffers": state["buffers"], "seen": state["seen"]})  # no size/seed saved
    assert n == m
    assert repr(n) == "EpisodicMemory(size=5, seed=1, stored={'sst': 3}, seen={'sst': 3})"


def test_memory_loaded_into_another_size_or_seed_warns_and_keeps_the_first_slots() -> None:
    m = EpisodicMemory(2, seed=7)
    state = {"size": 4, "seed": 1, "buffers": {"sst": [np.int64(4), 5, 6, 7]}, "seen": {"sst": np.int64(9)}}
    message = (
        "Episodic memory saved with size=4, seed=1 is loaded into one with size=2, seed=7: "
        "the memories will not match an uninterrupted run."
    )
    with pytest.warns(UserWarning, match=re.escape(message)) as caught:
        m.load_state_dict(state)
    # reported at the caller's line (stacklevel=2), not inside the memory (not checked against this
    # file: under mutation testing a trampoline stands between the two)
    assert Path(caught[0].filename).resolve() != Path(memory_module.__file__).resolve()
    assert m.buffers == {"sst": [4, 5]} and m.seen == {"sst": 9}
    assert type(m.buffers["sst"][0]) is int and type(m.seen["sst"]) is int  # plain ints for weights_only
    for other in ({**state, "size": 2}, {**state, "seed": 7}):  # one of the two differing is enough
        with pytest.warns(UserWarning, match="is loaded into one with size=2, seed=7"):
            EpisodicMemory(2, seed=7).load_state_dict(other)


def test_reservoir_follows_algorithm_r_with_the_documented_hash() -> None:
    """Written out here: slot j = mix(base ^ n) mod (n + 1) replaced when j < size, base =
    mix(seed ^ crc32(task) << 32), mix = SplitMix64's finaliser (its own implementation below).
    The exact draws are what makes a resumed run's memories those of the uninterrupted run."""
    import zlib

    mask = 2**64 - 1

    def mix(x: int) -> int:
        z = (x + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    for seed, task in ((0, "sst"), (5, "qqp")):
        base = mix(seed ^ (zlib.crc32(task.encode()) << 32))
        expected = list(range(4))
        for n in range(4, 60):
            j = mix(base ^ n) % (n + 1)
            if j < 4:
                expected[j] = n
        m = EpisodicMemory(4, seed=seed)
        m.add(task, range(60))
        assert m.buffers[task] == expected
    a, b = EpisodicMemory(4), EpisodicMemory(4)
    a.add("sst", range(60))
    b.add("qqp", range(60))
    assert a.buffers["sst"] != b.buffers["qqp"]  # the task enters the draws


def test_mix64_is_splitmix64() -> None:
    """The reservoir's hash is SplitMix64's: its first three outputs from state 0 (published values).
    A different hash would still sample uniformly, but checkpoints' memories would not resume exactly."""
    gamma = 0x9E3779B97F4A7C15
    assert [memory_module._mix64(k * gamma % 2**64) for k in range(3)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


def test_memory_loaded_into_a_larger_size_keeps_filling_without_crashing() -> None:
    """A memory saved with ``size=4`` after 10 examples, resumed with ``memory_size=8``: its buffer has 4 of
    8 slots, so the next examples fill the free slots first instead of writing past the end (IndexError)."""
    small = EpisodicMemory(4, seed=1)
    small.add("sst", range(10))
    large = EpisodicMemory(8, seed=1)
    with pytest.warns(UserWarning, match="is loaded into one with size=8"):
        large.load_state_dict(small.state_dict())
    large.add("sst", range(10, 40))
    assert len(large.buffers["sst"]) == 8 and large.seen == {"sst": 40}
    assert set(large.buffers["sst"]) <= set(range(40))
    assert len(set(large.buffers["sst"])) == 8
