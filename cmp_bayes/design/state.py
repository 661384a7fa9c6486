"""A scheduler's state as one JSON object, and the scheduler rebuilt from it.

A live system saves the state with every step (in the same atomic write as
its pending steps), so after a crash the restored scheduler continues with
exactly the contexts the original would have given: the same place in the
round's queue, the same deferred entries, the same generator. Arrays are
lists and the generator is its ``bit_generator.state`` (Python integers,
which ``json`` keeps exact); floats survive ``json`` exactly too (``repr``
round-trips).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cmp_bayes.design.config import DesignConfig
from cmp_bayes.design.rounds import RoundBook
from cmp_bayes.design.store import Membership
from cmp_bayes.errors import ConfigError

#: version of the state's layout
STATE_VERSION = 1


def scheduler_state(s: Any) -> dict[str, Any]:
    """The state of an :class:`~cmp_bayes.design.scheduler.ExposureScheduler` ``s``."""
    fixed = None
    if s.steps is not None:
        fixed = {
            "created": s.created.tolist(),
            "deleted": s.deleted.tolist(),
            "counts": None if s.counts is None else s.counts.tolist(),
            "propensity": None if s.propensity is None else s.propensity.tolist(),
        }
    return {
        "version": STATE_VERSION,
        "config": s.config.to_dict(),
        "pool": list(s.pool),
        "fixed": fixed,
        "next_step": s._next_step,
        "rng": s._rng.bit_generator.state,
        "store": s._store.state(),
        "book": s._book.state(),
        "shortfall": dict(s.shortfall),
        "withdrawn": dict(s.withdrawn),
        "capped_steps": s.capped_steps,
    }


def restore_scheduler(obj: Any, state: Mapping[str, Any]) -> None:
    """Fill a bare scheduler ``obj`` (made with ``__new__``) from :func:`scheduler_state`'s output."""
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        got = state.get("version") if isinstance(state, Mapping) else type(state).__name__
        raise ConfigError(f"not an ExposureScheduler state of version {STATE_VERSION} (got {got!r})")
    obj._configure(DesignConfig(**state["config"]))
    obj.pool = [str(m) for m in state["pool"]]
    fixed = state["fixed"]
    if fixed is not None:
        obj.created = np.asarray(fixed["created"], dtype=np.int64)
        obj.deleted = np.asarray(fixed["deleted"], dtype=np.int64)
        obj.in_store_steps = np.maximum(obj.deleted - obj.created, 0)
        obj.counts = None if fixed["counts"] is None else np.asarray(fixed["counts"], dtype=np.int64)
        obj.propensity = None if fixed["propensity"] is None else np.asarray(fixed["propensity"], np.float64)
    else:
        obj.counts = obj.propensity = None
    obj._next_step = int(state["next_step"])
    name = state["rng"]["bit_generator"]
    if name not in ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"):
        raise ConfigError(f"unknown bit generator in the scheduler state: {name!r}")
    bit = getattr(np.random, name)()
    bit.state = dict(state["rng"])
    obj._rng = np.random.Generator(bit)
    obj._store = Membership.from_state(state["store"])
    obj._book = RoundBook.from_state(state["book"])
    obj.shortfall = {str(m): int(v) for m, v in state["shortfall"].items()}
    obj.withdrawn = {str(m): int(v) for m, v in state["withdrawn"].items()}
    obj.capped_steps = int(state["capped_steps"])
