"""The rounds of a design: those laid out so far, the current round's plan, each round's accounts.

A fixed design is one round from step 0 (laid out at construction); an
open-ended design (the spec's "Open-ended designs: rounds") appends round
``r`` over steps ``[r*R, (r+1)*R)`` when the scheduler first reaches it, with
seed ``seed + r``, over the memories in the store at that moment.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cmp_bayes.design.deck import BalancedDeck, BernoulliRound, Plan, plan_from_state

EMPTY_ACCOUNTS: dict[str, dict[str, int]] = {"planned": {}, "delivered": {}, "shortfall": {}, "withdrawn": {}}


def lay_out_round(
    assignment: str,
    pool: list[str],
    start: int,
    steps: int,
    seed: int,
    k_pool: int,
    k: int,
    bernoulli_rate: float | None,
) -> tuple[Plan | None, dict[int, int]]:
    """One open-ended round's plan over ``pool`` (every member in the store for the whole round).

    Balanced (and a window design's pool slots, ``k_pool = j``): floor or
    ceil of ``steps * k_pool / |pool|`` exposures each, propensity
    ``n_m / steps``. Bernoulli: rate ``bernoulli_rate``, default
    ``min(1, k / (2 |pool|))``. ``None`` when no slot is dealt over the pool.
    Also returns the exposures that could not be placed (pool index -> count).
    """
    n = len(pool)
    if assignment == "bernoulli":
        rate = min(1.0, k / (2.0 * max(1, n))) if bernoulli_rate is None else bernoulli_rate
        start_a, stop_a = np.full(n, start, np.int64), np.full(n, start + steps, np.int64)
        return BernoulliRound(pool, start, steps, start_a, stop_a, np.full(n, rate)), {}
    if k_pool > 0:
        return BalancedDeck.lay_out(pool, start, steps, k_pool, np.random.default_rng(seed))
    return None, {}


class RoundBook:
    """Rounds in step order (``design.json``'s ``{start, steps, seed, pool}``) and their plans.

    Attributes
    ----------
    rounds : list of dict
        Every round laid out so far, as ``design.json`` writes it.
    plan : BalancedDeck or BernoulliRound or None
        The current (last) round's plan; ``None`` when no slot is dealt over the pool.
    finished : bool
        Whether the current round has ended (its leftover entries counted as shortfall).
    """

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self._accounts: list[dict[str, dict[str, int]] | None] = []
        self.plan: Plan | None = None
        self.finished = False

    @property
    def stop(self) -> int:
        """One past the last step of the last round (0 before the first)."""
        return self.rounds[-1]["start"] + self.rounds[-1]["steps"] if self.rounds else 0

    def open(self, start: int, steps: int, seed: int, plan: Plan | None, pool: dict[str, float] | None = None) -> None:
        """Append a round with its plan (``pool``: its design pool, default the plan's)."""
        if pool is None:
            pool = plan.design_pool() if plan is not None else {}
        self.rounds.append({"start": int(start), "steps": int(steps), "seed": int(seed), "pool": pool})
        self._accounts.append(None)
        self.plan = plan
        self.finished = False

    def close(self) -> dict[int, int]:
        """End the current round; returns its lost entries (pool index -> count)."""
        lost: dict[int, int] = {}
        if isinstance(self.plan, BalancedDeck):
            lost = self.plan.finish()
        elif isinstance(self.plan, BernoulliRound):
            self.plan.finished = True
        self.finished = True
        self._accounts[-1] = self.plan.accounts() if self.plan is not None else EMPTY_ACCOUNTS
        return lost

    def accounts(self, r: int) -> dict[str, dict[str, int]] | None:
        """Round ``r``'s accounts (``None`` when it is not laid out)."""
        if not 0 <= r < len(self.rounds):
            return None
        acc = self._accounts[r]
        if acc is None:
            acc = self.plan.accounts() if self.plan is not None else EMPTY_ACCOUNTS
        return {k: dict(v) for k, v in acc.items()}

    def design_rounds(self) -> list[dict[str, Any]]:
        """The rounds as ``design.json`` writes them (copies)."""
        return [{**r, "pool": dict(r["pool"])} for r in self.rounds]

    def state(self) -> dict[str, Any]:
        """JSON-serialisable snapshot (the current plan whole, earlier rounds as accounts)."""
        return {
            "rounds": self.design_rounds(),
            "accounts": self._accounts,
            "plan": self.plan.state() if self.plan is not None else None,
            "finished": self.finished,
        }

    @classmethod
    def from_state(cls, s: dict[str, Any]) -> RoundBook:
        """The book :meth:`state` describes."""
        out = cls()
        out.rounds = [dict(r) for r in s["rounds"]]
        out._accounts = list(s["accounts"])
        out.plan = plan_from_state(s["plan"]) if s["plan"] is not None else None
        out.finished = bool(s["finished"])
        return out
