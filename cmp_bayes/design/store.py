"""The store as the scheduler sees it: when each memory entered and left, and removals still due.

Without a ``store`` argument to :meth:`~cmp_bayes.design.scheduler.ExposureScheduler.context`
this is the scheduler's only view of the store: a memory is in it at step
``t`` when ``added <= t`` and (``removed`` is ``None`` or ``t < removed``);
memories it has never heard of are taken to be in the store. With a
``store`` argument the store decides presence and a removal recorded here
still counts (a removed memory is never exposed again).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


class Membership:
    """Memory id -> ``[added, removed]`` (insertion order kept: it orders the rounds' pools)."""

    def __init__(self) -> None:
        self.life: dict[str, list[int | None]] = {}
        #: removals whose exposures are still to be withdrawn: memory id -> step
        self.pending: dict[str, int] = {}

    def add(self, memory_id: str, step: int) -> None:
        """``memory_id`` is in the store from ``step`` (a removed memory comes back)."""
        life = self.life.get(memory_id)
        if life is None or life[1] is not None:
            self.life[memory_id] = [int(step), None]
            self.pending.pop(memory_id, None)

    def remove(self, memory_id: str, step: int) -> None:
        """``memory_id`` leaves the store at ``step``; its withdrawal is due from then."""
        life = self.life.setdefault(memory_id, [0, None])
        if life[1] is None or int(life[1]) > step:
            life[1] = int(step)
        self.pending[memory_id] = int(step)

    def due(self, step: int) -> list[str]:
        """The removals due by ``step``, taken off the pending list."""
        out = [m for m, at in self.pending.items() if at <= step]
        for m in out:
            del self.pending[m]
        return out

    def alive(self, memory_id: str, step: int) -> bool:
        """In the store at ``step`` by the recorded lifetimes (unknown memories are)."""
        life = self.life.get(memory_id)
        return life is None or (int(life[0] or 0) <= step and (life[1] is None or step < int(life[1])))

    def in_store(self, memory_id: str, step: int, store: Collection[str] | None) -> bool:
        """In the store at ``step``: ``store`` decides when given, a recorded removal always counts."""
        if store is None:
            return self.alive(memory_id, step)
        life = self.life.get(memory_id)
        return memory_id in store and (life is None or life[1] is None or step < int(life[1]))

    def round_pool(self, start: int, store: Collection[str] | None) -> list[str]:
        """The memories in the store at a round's ``start``, in a reproducible order.

        Known memories in insertion order, then memories of ``store`` seen for
        the first time, sorted (a set's iteration order differs between
        processes, and the pool's order feeds the round's random layout).
        """
        if store is None:
            return [m for m in self.life if self.alive(m, start)]
        known = [m for m in self.life if self.in_store(m, start, store)]
        new = sorted(str(m) for m in store if str(m) not in self.life)
        for m in new:
            self.life[m] = [start, None]
        return known + new

    def state(self) -> dict[str, Any]:
        """JSON-serialisable: ``{"life": [[id, added, removed], ...], "pending": {id: step}}``."""
        return {"life": [[m, a, r] for m, (a, r) in self.life.items()], "pending": dict(self.pending)}

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> Membership:
        """The membership :meth:`state` describes."""
        out = cls()
        out.life = {str(m): [a, r] for m, a, r in s["life"]}
        out.pending = {str(m): int(v) for m, v in s["pending"].items()}
        return out
