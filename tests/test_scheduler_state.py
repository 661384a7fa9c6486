"""ExposureScheduler.state / from_state: JSON round trips that continue exactly."""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pytest

from cmp_bayes.design.scheduler import ExposureScheduler, ExposureShortfallWarning
from cmp_bayes.errors import ConfigError

MEMORIES = [f"m{i:02d}" for i in range(24)]

CONFIGS: dict[str, dict[str, Any]] = {
    "fixed": {"steps": 150, "lifetimes": {"m01": (20, 90), "m05": (0, 40)}},
    "fixed-bernoulli": {"steps": 150, "assignment": "bernoulli", "bernoulli_rate": 0.1},
    "rounds": {"steps": None, "round_steps": 23},
    "rounds-bernoulli": {"steps": None, "round_steps": 30, "assignment": "bernoulli"},
    "window": {"steps": 150, "assignment": "window", "window": 6, "pool_slots": 1},
    "window-rounds": {"steps": None, "round_steps": 40, "assignment": "window", "window": 6, "pool_slots": 1},
    "window-no-pool": {"steps": None, "round_steps": 40, "assignment": "window", "window": 4, "pool_slots": 0},
    "random-positions": {"steps": None, "round_steps": 35, "positions": "random"},
}


def _make(name: str) -> ExposureScheduler:
    cfg = dict(CONFIGS[name])
    steps = cfg.pop("steps")
    pool = MEMORIES[:14] if not (cfg.get("pool_slots") == 0 and cfg.get("assignment") == "window") else []
    return ExposureScheduler(6, 3, pool, steps, seed=13, **cfg)


def _drive(s: ExposureScheduler, steps: int, restarts: set[int]) -> tuple[list, ExposureScheduler]:
    """Run ``steps`` steps with a seeded workload, swapping ``s`` for its JSON-restored copy at ``restarts``."""
    rng = np.random.default_rng(77)
    out: list = []
    for t in range(steps):
        if t in restarts:
            s = ExposureScheduler.from_state(json.loads(json.dumps(s.state())))
        if t == 30:
            s.add_memory("late", t)
        if t == 50:
            s.remove_memory("m03", t)
        store = None if t % 4 else set(MEMORIES[:20]) | {"late"}
        ranking = rng.permutation(MEMORIES).tolist()
        out.append(s.context(t, ranking, store))
    return out, s


@pytest.mark.parametrize("name", list(CONFIGS))
def test_restored_scheduler_continues_exactly(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExposureShortfallWarning)
        ref, s_ref = _drive(_make(name), 150, set())
        for seed in range(3):
            points = set(np.random.default_rng(seed).choice(np.arange(1, 150), size=6, replace=False).tolist())
            got, s = _drive(_make(name), 150, points)
            assert got == ref
            assert s.design() == s_ref.design()
            assert s.shortfall == s_ref.shortfall and s.withdrawn == s_ref.withdrawn
            assert s.capped_steps == s_ref.capped_steps and s.design_version == s_ref.design_version
            assert [s.accounts(r) for r in range(s.design_version)] == [
                s_ref.accounts(r) for r in range(s_ref.design_version)
            ]
            # and a state taken after the restarts is the uninterrupted one's
            assert json.dumps(s.state(), sort_keys=True) == json.dumps(s_ref.state(), sort_keys=True)


def test_state_before_the_first_step_and_the_rng_as_its_state() -> None:
    s = ExposureScheduler(4, 2, MEMORIES[:5], None, seed=1, round_steps=10)
    st = json.loads(json.dumps(s.state()))
    assert st["rng"]["bit_generator"] == "PCG64"
    r = ExposureScheduler.from_state(st)
    assert [r.context(t, ["x"]) for t in range(25)] == [s.context(t, ["x"]) for t in range(25)]


def test_a_state_that_is_not_one_is_refused() -> None:
    s = ExposureScheduler(4, 2, MEMORIES[:5], 10)
    bad = s.state() | {"version": 99}
    with pytest.raises(ConfigError, match="version"):
        ExposureScheduler.from_state(bad)
    with pytest.raises(ConfigError):
        ExposureScheduler.from_state([])  # type: ignore[arg-type]
