"""One round's exposure plan: a balanced deck, or a Bernoulli rate, with its bookkeeping.

A fixed design is one round from step 0; an open-ended design is a sequence of
rounds (the spec's "Open-ended designs: rounds"). Each round's plan lives
here: :class:`BalancedDeck` (the planned exposures as a queue in planned
order, taken ``k`` at a time) and :class:`BernoulliRound` (each alive memory
drawn with its rate). Both count what they delivered, lost (a shortfall) and
withdrew (a memory removed from the store mid-round), and turn into a JSON
object and back, so a scheduler restarted from its state continues the same
round exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cmp_bayes.design.balance import balanced_counts, plan_slots, repair


class BalancedDeck:
    """The balanced plan of one round: which memory fills each of its exposure slots.

    Attributes
    ----------
    pool : list of str
        The round's pool memories; indices below are positions in it.
    start, steps : int
        The round covers steps ``start .. start + steps - 1``.
    k : int
        Exposure slots dealt per step by this deck.
    created, deleted : numpy.ndarray of int64, shape (pool,)
        Absolute steps ``[created, deleted)`` at which each memory is planned in the store.
    counts : numpy.ndarray of int64, shape (pool,)
        ``n_m``, the exposures planned per memory.
    propensity : numpy.ndarray of float64, shape (pool,)
        ``n_m / T_m`` (``T_m`` the memory's planned steps in the store within the round).
    delivered, lost, withdrawn : numpy.ndarray of int64, shape (pool,)
        Exposures given out, not deliverable (shortfall), withdrawn by a removal.
    """

    def __init__(
        self,
        pool: Sequence[str],
        start: int,
        steps: int,
        k: int,
        created: np.ndarray,
        deleted: np.ndarray,
        counts: np.ndarray,
        propensity: np.ndarray,
        tok_mem: np.ndarray,
        tok_step: np.ndarray,
        consumed: np.ndarray,
    ) -> None:
        self.pool = list(pool)
        self.index = {m: i for i, m in enumerate(self.pool)}
        self.start, self.steps, self.k = int(start), int(steps), int(k)
        self.created, self.deleted = created, deleted
        self.counts, self.propensity = counts, propensity
        self.tok_mem, self.tok_step, self.consumed = tok_mem, tok_step, consumed
        self.head = 0
        p = len(self.pool)
        self.delivered = np.zeros(p, dtype=np.int64)
        self.lost = np.zeros(p, dtype=np.int64)
        self.withdrawn = np.zeros(p, dtype=np.int64)
        self.finished = False
        self._advance_head()

    @property
    def stop(self) -> int:
        """One past the round's last step."""
        return self.start + self.steps

    @classmethod
    def lay_out(
        cls,
        pool: Sequence[str],
        start: int,
        steps: int,
        k: int,
        rng: np.random.Generator,
        created: np.ndarray | None = None,
        deleted: np.ndarray | None = None,
    ) -> tuple[BalancedDeck, dict[int, int]]:
        """Plan a round: floor/ceil counts, their steps in random order, repairs.

        ``created`` / ``deleted`` are relative to ``start`` (default: the whole
        round). Returns the deck and the exposures that could not be placed at
        all (pool index -> count), which the caller reports as a shortfall.
        """
        p = len(pool)
        created = np.zeros(p, dtype=np.int64) if created is None else np.asarray(created, dtype=np.int64)
        deleted = np.full(p, steps, dtype=np.int64) if deleted is None else np.asarray(deleted, dtype=np.int64)
        in_store = np.maximum(deleted - created, 0)
        counts = balanced_counts(created, deleted, steps, k, rng)
        prop = np.where(in_store > 0, counts / np.maximum(in_store, 1), 0.0)
        tok_mem, tok_step = plan_slots(counts, created, deleted, steps, k, rng)
        lost = repair(tok_mem, tok_step, created, deleted, blocked=None)
        deck = cls(
            pool, start, steps, k, created + start, deleted + start, counts, prop,
            tok_mem, tok_step + start, tok_mem < 0,
        )
        for i, c in lost.items():
            deck.lost[i] += c
        return deck, lost

    # ------------------------------------------------------------------ taking
    def take(self, step: int, eligible: Callable[[int], bool]) -> tuple[list[int], list[int]]:
        """The (up to) ``k`` exposures of ``step``: the first eligible entries of the queue.

        Returns the chosen pool indices and the pool indices of entries lost
        at this step (their memory's planned time in the store is over).
        """
        chosen: list[int] = []
        lost: list[int] = []
        taken: set[int] = set()
        # a full round of the pool ahead is always enough to find k distinct
        # eligible memories when they exist; bounded so a step costs O(pool/k)
        horizon = step + int(np.ceil(len(self.pool) / max(self.k, 1))) + 1
        i = self.head
        n = len(self.tok_mem)
        while i < n and len(chosen) < self.k and self.tok_step[i] <= horizon:
            if not self.consumed[i]:
                m = int(self.tok_mem[i])
                if self.deleted[m] <= step:
                    self.consumed[i] = True
                    self.lost[m] += 1
                    lost.append(m)
                elif m not in taken and eligible(m):
                    chosen.append(m)
                    taken.add(m)
                    self.consumed[i] = True
                    self.delivered[m] += 1
            i += 1
        self._advance_head()
        return chosen, lost

    def withdraw(self, memory_id: str) -> int:
        """Withdraw a memory's remaining exposures (it left the store); returns how many."""
        i = self.index.get(memory_id)
        if i is None:
            return 0
        rest = np.flatnonzero(~self.consumed & (self.tok_mem == i))
        self.consumed[rest] = True
        self.withdrawn[i] += rest.size
        self._advance_head()
        return int(rest.size)

    def finish(self) -> dict[int, int]:
        """End the round: every entry still in the queue is lost (pool index -> count)."""
        self.finished = True
        rest = self.tok_mem[~self.consumed]
        self.consumed[:] = True
        self.head = len(self.tok_mem)
        out: dict[int, int] = {}
        for m in rest.tolist():
            out[m] = out.get(m, 0) + 1
            self.lost[m] += 1
        return out

    def _advance_head(self) -> None:
        n = len(self.tok_mem)
        while self.head < n and self.consumed[self.head]:
            self.head += 1

    # ---------------------------------------------------------------- accounts
    def planned(self) -> dict[str, int]:
        """Exposures planned per pool memory (zeros included)."""
        return dict(zip(self.pool, self.counts.tolist(), strict=True))

    def accounts(self) -> dict[str, dict[str, int]]:
        """``planned``, ``delivered``, ``shortfall``, ``withdrawn``: memory id -> count."""
        return {
            "planned": self.planned(),
            "delivered": _nonzero(self.pool, self.delivered),
            "shortfall": _nonzero(self.pool, self.lost),
            "withdrawn": _nonzero(self.pool, self.withdrawn),
        }

    def design_pool(self) -> dict[str, float]:
        """The round's ``pool`` for ``design.json``: memories with a propensity > 0."""
        return {m: float(self.propensity[i]) for i, m in enumerate(self.pool) if self.propensity[i] > 0}

    # ------------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot; the queue from its head on (what is behind it is spent)."""
        h = self.head
        tail_consumed = np.flatnonzero(self.consumed[h:])
        return {
            "kind": "balanced",
            "pool": self.pool,
            "start": self.start,
            "steps": self.steps,
            "k": self.k,
            "created": self.created.tolist(),
            "deleted": self.deleted.tolist(),
            "counts": self.counts.tolist(),
            "propensity": self.propensity.tolist(),
            "tok_mem": self.tok_mem[h:].tolist(),
            "tok_step": self.tok_step[h:].tolist(),
            "consumed": tail_consumed.tolist(),
            "delivered": self.delivered.tolist(),
            "lost": self.lost.tolist(),
            "withdrawn": self.withdrawn.tolist(),
            "finished": self.finished,
        }

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> BalancedDeck:
        """The deck :meth:`state` describes."""
        tok_mem = np.asarray(s["tok_mem"], dtype=np.int64)
        consumed = np.zeros(tok_mem.size, dtype=bool)
        consumed[np.asarray(s["consumed"], dtype=np.int64)] = True
        deck = cls(
            s["pool"], s["start"], s["steps"], s["k"],
            _ints(s["created"]), _ints(s["deleted"]), _ints(s["counts"]),
            np.asarray(s["propensity"], dtype=np.float64),
            tok_mem, _ints(s["tok_step"]), consumed,
        )
        deck.delivered, deck.lost, deck.withdrawn = _ints(s["delivered"]), _ints(s["lost"]), _ints(s["withdrawn"])
        deck.finished = bool(s["finished"])
        return deck


class BernoulliRound:
    """A Bernoulli round: each alive pool memory is drawn independently with its rate.

    Attributes are as in :class:`BalancedDeck` (``counts`` is absent: nothing
    is planned); ``capped`` counts the round's steps where the ``k``-slot cap bound.
    """

    def __init__(
        self,
        pool: Sequence[str],
        start: int,
        steps: int,
        created: np.ndarray,
        deleted: np.ndarray,
        propensity: np.ndarray,
    ) -> None:
        self.pool = list(pool)
        self.index = {m: i for i, m in enumerate(self.pool)}
        self.start, self.steps = int(start), int(steps)
        self.created, self.deleted, self.propensity = created, deleted, propensity
        self.delivered = np.zeros(len(self.pool), dtype=np.int64)
        self.capped = 0
        self.finished = False

    @property
    def stop(self) -> int:
        """One past the round's last step."""
        return self.start + self.steps

    def take(
        self, step: int, k: int, eligible: Callable[[int], bool], rng: np.random.Generator
    ) -> list[int]:
        """Draw the step's exposures (pool indices), at most ``k`` (a random ``k`` when more)."""
        alive = np.flatnonzero((self.created <= step) & (step < self.deleted))
        drawn = alive[rng.random(alive.size) < self.propensity[alive]]
        draw = [int(i) for i in drawn if eligible(int(i))]
        if len(draw) > k:
            self.capped += 1
            draw = sorted(rng.choice(draw, size=k, replace=False).tolist())
        self.delivered[draw] += 1
        return draw

    def withdraw(self, memory_id: str) -> int:
        """Nothing is planned under Bernoulli: a removal withdraws no count."""
        return 0

    def planned(self) -> dict[str, int]:
        """Nothing is planned under Bernoulli assignment."""
        return {}

    def accounts(self) -> dict[str, dict[str, int]]:
        """As :meth:`BalancedDeck.accounts`; only ``delivered`` can be nonzero."""
        return {"planned": {}, "delivered": _nonzero(self.pool, self.delivered), "shortfall": {}, "withdrawn": {}}

    def design_pool(self) -> dict[str, float]:
        """The round's ``pool`` for ``design.json``."""
        return {m: float(self.propensity[i]) for i, m in enumerate(self.pool) if self.propensity[i] > 0}

    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot."""
        return {
            "kind": "bernoulli",
            "pool": self.pool,
            "start": self.start,
            "steps": self.steps,
            "created": self.created.tolist(),
            "deleted": self.deleted.tolist(),
            "propensity": self.propensity.tolist(),
            "delivered": self.delivered.tolist(),
            "capped": self.capped,
            "finished": self.finished,
        }

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> BernoulliRound:
        """The round :meth:`state` describes."""
        r = cls(
            s["pool"], s["start"], s["steps"], _ints(s["created"]), _ints(s["deleted"]),
            np.asarray(s["propensity"], dtype=np.float64),
        )
        r.delivered, r.capped, r.finished = _ints(s["delivered"]), int(s["capped"]), bool(s["finished"])
        return r


Plan = BalancedDeck | BernoulliRound


def plan_from_state(s: dict[str, Any]) -> Plan:
    """A :class:`BalancedDeck` or :class:`BernoulliRound` from its ``state()``."""
    return BalancedDeck.from_state(s) if s["kind"] == "balanced" else BernoulliRound.from_state(s)


def _ints(v: Sequence[int]) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def _nonzero(pool: list[str], counts: np.ndarray) -> dict[str, int]:
    return {m: int(c) for m, c in zip(pool, counts.tolist(), strict=True) if c}
