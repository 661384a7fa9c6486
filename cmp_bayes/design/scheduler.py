"""The CMP exposure scheduler: which memory fills each exposure slot, with its exact propensity.

Of the ``B`` context slots the top ``B - k`` come from the retriever and ``k``
are exposure slots. Assignments:

``balanced`` (the paper's design)
    Each pool memory ``m`` gets a fixed number ``n_m`` of exposures, dealt in
    random order over the steps at which it is in the store. Without lifetimes
    ``n_m`` is exactly ``floor`` or ``ceil`` of ``T*k/|pool|`` and the counts
    add up to ``T*k``. With per-memory lifetimes (a memory in the store on
    ``[created, deleted)``) the capacity of step ``t`` is ``c_t = min(k, A_t)``
    (``A_t`` pool memories alive) and is shared evenly among them, so memory
    ``m``'s fair share is ``s_m = sum over its alive steps of c_t / A_t``;
    ``n_m`` is ``floor`` or ``ceil`` of ``s_m`` (systematic rounding over the
    memories ordered by lifetime, so a block of memories that share a lifetime,
    as in a per-query haystack, receives exactly its block's capacity) and the
    counts add up to ``sum_t c_t`` (``T*k`` when ``A_t >= k`` throughout).
    The propensity is ``n_m / T_m`` with ``T_m`` the number of design steps at
    which ``m`` is in the store (the spec's ``n_m / T`` when it always is).

    Collisions: an exposure whose memory is retrieved at that step (or not in
    the store, or already exposed there) is *deferred*, never dropped. Live
    (:meth:`ExposureScheduler.context`): the planned exposures form a queue in
    planned order; each step takes the first ``k`` eligible entries, so a
    deferred entry stays at the head and is served at the next step where it
    is eligible, while the slot it vacated goes to the next entry pulled
    forward from later in the queue (counts never change, the total per step
    stays ``k``). Batch (:meth:`ExposureScheduler.deal`, for simulators that
    know every step's retrieved set in advance): a colliding exposure swaps
    places with the nearest later exposure (earlier only if no later one fits)
    for which both memories are eligible at their new steps: same counts, no
    loop over steps.

    Deferral past the end: an entry can only be lost when it stays ineligible
    at every remaining step of its lifetime (for example a memory the
    retriever returns at every step it is in the store). That cannot be
    prevented by construction for an arbitrary live retriever, so it is
    reported loudly: a :class:`ExposureShortfallWarning` when it happens, and
    :attr:`ExposureScheduler.shortfall` (memory id -> exposures not
    delivered). Simulators avoid it by leaving out of the pool memories that
    are retrieved at every step they exist.

``bernoulli``
    At every step each alive pool memory that is neither retrieved nor outside
    the store is drawn independently with its propensity ``p_m``. The ``k``-slot
    cap: when more than ``k`` are drawn, a uniformly random ``k`` of them are
    kept (the rest are not deferred: deferral would break independence). The
    realised inclusion probability is then below ``p_m``; the number of steps
    where the cap bound is kept in :attr:`ExposureScheduler.capped_steps` and
    warned about when it exceeds 1% of the steps. The default rate
    ``p = min(1, k / (2 * mean alive pool size))`` fills about half the
    exposure slots on average so the cap rarely binds.

``window`` (the spec's "Targeted exposure: window designs")
    The first ``j = pool_slots`` exposure slots of every step are dealt over
    the pool exactly as under ``balanced`` (with ``j`` slots per step); the
    other ``k - j`` are drawn uniformly without replacement from the step's
    window ``W_t`` (ranks ``B - k .. B - k + W - 1`` of the step's full
    ranking, in the store, not already in the context), each with propensity
    ``min(1, (k - j) / |W_t|)`` (:mod:`cmp_bayes.design.window`). Every
    exposure slot carries ``"arm": "pool"`` or ``"arm": "window"``; the caller
    must log the very ranking it passed, since a reader recomputes ``W_t`` from it.

Open-ended designs (``steps=None``, ``round_steps=R``; the spec's rounds)
    Round ``r`` covers steps ``[r*R, (r+1)*R)`` and is laid out when
    :meth:`~ExposureScheduler.context` first reaches it, as a balanced design
    of its own (seed ``seed + r``) over the memories in the store at that
    moment: the ``store`` passed to that call when given, else the pool as
    changed by :meth:`~ExposureScheduler.add_memory` /
    :meth:`~ExposureScheduler.remove_memory`. Each memory gets floor or ceil
    of ``R*k/|pool_r|`` exposures and propensity ``n_m / R``. A memory added
    mid-round joins the next round. A memory removed mid-round has its
    remaining exposures *withdrawn* (counted in
    :attr:`~ExposureScheduler.withdrawn`, no warning) while its logged
    propensity stays ``n_m / R``: the round's deck is a uniformly random
    order of its exposures, so at every step before the removal the
    probability that the memory is exposed was still ``n_m / R``; the steps
    after it are not in the store, where no propensity is claimed. Entries
    still deferred when a round ends are that round's shortfall (warned).
    :attr:`~ExposureScheduler.design_version` moves with every new round, so
    the caller rewrites ``design.json`` before logging that step.

Slot positions (``positions``)
    ``"end"``: exposure slots follow the retriever slots. ``"random"``: they
    take uniformly random positions in the context (drawn from the
    scheduler's generator, so they are part of its state) and the retriever
    slots keep their order in the others. Readers weigh positions unequally;
    with ``"end"`` an agent that reads only its top results is never affected
    by an exposure, and a memory's measured effect is the effect of being
    read last. The position logged is the slot's index in the context array.

State (:meth:`~ExposureScheduler.state` / :meth:`~ExposureScheduler.from_state`)
    Everything a scheduler needs to continue exactly (its place in the
    round's queue, the deferred entries, the generator) as one JSON object,
    so a live system that saves it with each step continues after a crash
    with the same contexts it would have given.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.design.balance import alive_counts
from cmp_bayes.design.batch import deal_balanced, deal_bernoulli
from cmp_bayes.design.config import Assignment, DesignConfig, Positions
from cmp_bayes.design.deck import BalancedDeck, BernoulliRound
from cmp_bayes.design.rounds import RoundBook, lay_out_round
from cmp_bayes.design.state import restore_scheduler, scheduler_state
from cmp_bayes.design.store import Membership
from cmp_bayes.design.window import draw_window, place, window_members
from cmp_bayes.errors import ConfigError


class ExposureShortfallWarning(UserWarning):
    """Some planned exposures could not be delivered (deferred past a memory's last step)."""


class ExposureScheduler:
    """Deal the ``k`` exposure slots of each context (module docstring for the designs).

    Parameters
    ----------
    slots : int
        ``B``, the context size.
    exposure_slots : int
        ``k`` (``0 <= k <= B``), slots reserved for randomized exposure.
    pool : sequence of str
        The exposure pool (memory ids, unique); in an open-ended design, the
        store at the start (changed later by ``add_memory`` / ``remove_memory``).
    steps : int or None
        ``T`` of a fixed design; ``None``: open-ended, in rounds of ``round_steps``.
    assignment : {"balanced", "bernoulli", "window"}
        See the module docstring.
    seed : int
        Seed of the assignment (round ``r`` of an open-ended design: ``seed + r``).
    lifetimes : mapping of str to (int, int or None), optional
        ``memory_id -> (created_step, deleted_step)`` for pool memories not in
        the store at every step (``None`` = never deleted); missing ids are in
        it throughout. Open-ended designs: ``add_memory`` / ``remove_memory`` at those steps.
    bernoulli_rate : float, optional
        Per-step inclusion probability under ``bernoulli`` (default above).
    round_steps : int, optional
        ``R``, the length of each round of an open-ended design.
    window : int, optional
        ``W >= 1`` for ``assignment="window"``.
    pool_slots : int
        ``j``, ``0 <= j <= k``: a window design's exposure slots per step dealt over the pool.
    positions : {"end", "random"}
        Where the exposure slots go in the context.

    Attributes
    ----------
    shortfall, withdrawn : dict of str to int
        Planned exposures not delivered / withdrawn by a removal, over all rounds.
    capped_steps : int
        Bernoulli: steps where the ``k``-slot cap bound.
    counts, propensity : numpy.ndarray, shape (pool,)
        Fixed designs: ``n_m`` (``None`` under bernoulli) and each pool
        memory's per-step propensity; ``None`` in open-ended designs (see
        :meth:`planned` and :meth:`design`).
    """

    def __init__(
        self,
        slots: int,
        exposure_slots: int,
        pool: Sequence[str],
        steps: int | None,
        assignment: Assignment = "balanced",
        seed: int = 0,
        *,
        lifetimes: Mapping[str, tuple[int, int | None]] | None = None,
        bernoulli_rate: float | None = None,
        round_steps: int | None = None,
        window: int | None = None,
        pool_slots: int = 0,
        positions: Positions = "end",
    ) -> None:
        self._configure(
            DesignConfig(
                slots, exposure_slots, steps, assignment, seed, bernoulli_rate, round_steps, window, pool_slots,
                positions,
            )
        )
        pool = [str(m) for m in pool]
        if len(set(pool)) != len(pool):
            raise ConfigError("pool memory ids must be unique")
        if self.steps is not None and self._k_pool > 0 and not pool:
            raise ConfigError("exposure_slots > 0 needs a non-empty pool")
        self.pool: list[str] = pool
        self.shortfall: dict[str, int] = {}
        self.withdrawn: dict[str, int] = {}
        self.capped_steps = 0
        self._next_step = 0
        self._store = Membership()
        self._book = RoundBook()
        if self.steps is None:
            self._start_open(lifetimes or {})
        else:
            self._start_fixed(lifetimes or {})

    def _configure(self, config: DesignConfig) -> None:
        self.config = config
        self.slots, self.exposure_slots, self.steps = config.slots, config.exposure_slots, config.steps
        self.round_steps, self.seed = config.round_steps, config.seed
        self.assignment: Assignment = config.assignment
        self.bernoulli_rate, self.window, self.pool_slots = config.bernoulli_rate, config.window, config.pool_slots
        self.positions: Positions = config.positions
        self._k_pool = config.pool_k

    def _start_fixed(self, lifetimes: Mapping[str, tuple[int, int | None]]) -> None:
        steps = int(self.steps or 0)
        index = {m: i for i, m in enumerate(self.pool)}
        p = len(self.pool)
        created = np.zeros(p, dtype=np.int64)
        deleted = np.full(p, steps, dtype=np.int64)
        for m, (c, d) in lifetimes.items():
            if m in index:
                i = index[m]
                created[i] = max(0, int(c))
                deleted[i] = steps if d is None else min(steps, int(d))
        self.created, self.deleted = created, deleted
        #: T_m: design steps at which each pool memory is in the store
        self.in_store_steps = np.maximum(deleted - created, 0)
        for i, m in enumerate(self.pool):
            self._store.life[m] = [int(created[i]), None if deleted[i] >= steps else int(deleted[i])]
        self._rng = np.random.default_rng(self.seed)
        plan: BalancedDeck | BernoulliRound | None = None
        if self.assignment == "bernoulli":
            alive = alive_counts(created, deleted, steps)
            mean_alive = max(1.0, float(alive.mean()))
            rate = (
                min(1.0, self.exposure_slots / (2.0 * mean_alive)) if self.bernoulli_rate is None else self.bernoulli_rate
            )
            prop = np.full(p, rate)
            self.counts: np.ndarray | None = None
            plan = BernoulliRound(self.pool, 0, steps, created, deleted, prop)
        elif self._k_pool > 0:
            plan, lost = BalancedDeck.lay_out(self.pool, 0, steps, self._k_pool, self._rng, created, deleted)
            if lost:
                self._report_lost(lost, self.pool)
            self.counts, prop = plan.counts, plan.propensity
        else:  # a window design without pool slots
            self.counts, prop = np.zeros(p, dtype=np.int64), np.zeros(p)
        self.propensity: np.ndarray | None = prop
        pool = {m: float(prop[i]) for i, m in enumerate(self.pool) if prop[i] > 0}
        self._book.open(0, steps, self.seed, plan, pool)

    def _start_open(self, lifetimes: Mapping[str, tuple[int, int | None]]) -> None:
        self.counts = self.propensity = None
        for m in self.pool:
            self._store.add(m, 0)
        for m, (c, d) in lifetimes.items():
            self._store.life[str(m)] = [max(0, int(c)), None]
            if d is not None:
                self._store.remove(str(m), int(d))
        # round layouts draw from their own seeds (seed + r); the per-step draws
        # (Bernoulli, window slots, positions) from a stream independent of them
        self._rng = np.random.default_rng([self.seed, 1])

    # ------------------------------------------------------------------ design
    def design(self) -> dict[str, Any]:
        """The content of ``design.json`` (spec field names).

        Fixed designs: ``steps``, ``seed``, ``pool``. Open-ended designs: the
        spec's ``rounds`` form, every round laid out so far (the current one
        included; none before the first :meth:`context`). Pool memories that
        can never be exposed (propensity 0: no step in the store, or no share
        of the capacity) are left out of a ``pool``, since the spec's
        propensities are in ``(0, 1]``.
        """
        out: dict[str, Any] = {
            "slots": self.slots,
            "exposure_slots": self.exposure_slots,
            "assignment": self.assignment,
        }
        if self.assignment == "window":
            out["window"] = self.window
            out["pool_slots"] = self.pool_slots
        rounds = self._book.design_rounds()
        if self.steps is not None:
            out.update({"steps": self.steps, "seed": self.seed, "pool": rounds[0]["pool"]})
        else:
            out["rounds"] = rounds
        return out

    @property
    def design_version(self) -> int:
        """Moves whenever :meth:`design` changes (a new round): rewrite ``design.json`` then."""
        return len(self._book.rounds)

    # ------------------------------------------------------------------- store
    def add_memory(self, memory_id: str, step: int) -> None:
        """A memory enters the store at ``step``; it joins the next round that starts at or after it.

        In a fixed design it only counts as in the store (a window's candidate):
        the pool of a fixed design is laid out once.
        """
        self._store.add(str(memory_id), int(step))

    def members(self) -> set[str]:
        """The memories the scheduler counts as in the store now (added, not removed)."""
        return {m for m, life in self._store.life.items() if life[1] is None}

    def remove_memory(self, memory_id: str, step: int) -> None:
        """A memory leaves the store at ``step``: its remaining exposures are withdrawn (no warning).

        A step already scheduled counts as the next one (the contexts given
        out stand). The withdrawn count is in :attr:`withdrawn`.
        """
        self._store.remove(str(memory_id), max(int(step), self._next_step))
        self._apply_removals(self._next_step)

    def _apply_removals(self, step: int) -> None:
        for m in self._store.due(step):
            if self._book.plan is not None and not self._book.finished:
                n = self._book.plan.withdraw(m)
                if n:
                    self.withdrawn[m] = self.withdrawn.get(m, 0) + n

    # ------------------------------------------------------------------ rounds
    def _reach(self, step: int, store: Collection[str] | None) -> None:
        """Lay out rounds until one holds ``step`` (a skipped round is laid out and ended)."""
        while step >= self._book.stop:
            if self._book.rounds and not self._book.finished:
                self._finish_round()
            r, R = len(self._book.rounds), int(self.round_steps or 0)
            pool = self._store.round_pool(r * R, store)
            plan, lost = lay_out_round(
                self.assignment, pool, r * R, R, self.seed + r, self._k_pool, self.exposure_slots, self.bernoulli_rate
            )
            if lost:
                self._report_lost(lost, pool)
            self._book.open(r * R, R, self.seed + r, plan)

    def _finish_round(self) -> None:
        plan = self._book.plan
        lost = self._book.close()
        if plan is not None:  # lost entries come from a plan's deck only
            for i, c in lost.items():
                for _ in range(c):
                    self._warn_lost(plan.pool[i])
        steps = self._book.rounds[-1]["steps"]
        if isinstance(plan, BernoulliRound) and plan.capped > 0.01 * steps:
            warnings.warn(
                f"the k-slot cap bound at {plan.capped} of {steps} steps: realised "
                "exposure probabilities are below the logged propensities; lower bernoulli_rate",
                ExposureShortfallWarning,
                stacklevel=4,
            )

    def planned(self, round_index: int) -> dict[str, int]:
        """Exposures planned per memory in a round (every member of its pool, zeros included).

        Balanced and window pool slots: floor or ceil of the round's share;
        empty under Bernoulli (nothing is planned). A fixed design is round 0.
        """
        return self.accounts(round_index)["planned"]

    def delivered(self, round_index: int) -> dict[str, int]:
        """Pool exposures given out per memory in a round so far (memories with none left out)."""
        return self.accounts(round_index)["delivered"]

    def accounts(self, round_index: int) -> dict[str, dict[str, int]]:
        """A round's ``planned``, ``delivered``, ``shortfall`` and ``withdrawn`` (memory id -> count).

        Once the round has ended, ``planned = delivered + shortfall + withdrawn``
        per memory (pool slots only: window slots are not planned).
        """
        acc = self._book.accounts(int(round_index))
        if acc is None:
            raise ConfigError(f"round {round_index} is not laid out ({len(self._book.rounds)} so far)")
        return acc

    # -------------------------------------------------------------------- live
    def context(
        self, step: int, ranking: Sequence[str], store: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        """The context of one step, as the spec's slot objects.

        Parameters
        ----------
        step : int
            The step; steps must increase (a skipped step's planned exposures
            are deferred like collisions); below ``steps`` in a fixed design.
        ranking : sequence of str
            The retriever's ranking for this step's query, best first. Window
            designs: the full ranking, at least ``B - k + W`` long (or the whole
            store), and logged as given (a reader recomputes ``W_t`` from it).
        store : collection of str, optional
            The memories in the store at this step; memories outside it are
            not exposed (pool exposures are deferred). ``None``: the lifetimes
            and ``add_memory`` / ``remove_memory`` decide.

        Returns
        -------
        list of dict
            ``B - k`` retriever slots ``{"memory_id", "source": "retriever", "rank"}``
            (fewer if the ranking is shorter) and up to ``k`` exposure slots
            ``{"memory_id", "source": "exposure", "propensity"}`` (with ``"arm"``
            in window designs): last, or at random positions (``positions``).
        """
        step = int(step)
        if step < self._next_step:
            raise ConfigError(f"steps must increase: got {step} after {self._next_step - 1}")
        if self.steps is not None and step >= self.steps:
            raise ConfigError(
                f"step {step} is past the design's {self.steps} steps; lay out a new design"
            )
        if store is not None and not isinstance(store, set | frozenset | dict):
            store = set(map(str, store))
        if self.steps is None:
            self._reach(step, store)
        self._next_step = step + 1
        self._apply_removals(step)
        ranking = [str(m) for m in ranking]
        cut = self.slots - self.exposure_slots
        retrieved = list(dict.fromkeys(ranking))[:cut]
        rank_of: dict[str, int] = {}
        for r, m in enumerate(ranking):
            rank_of.setdefault(m, r)
        out: list[dict[str, Any]] = [
            {"memory_id": m, "source": RETRIEVER, "rank": rank_of[m]} for m in retrieved
        ]
        exposure: list[dict[str, Any]] = []
        if self.exposure_slots:
            blocked = set(retrieved)
            exposure = self._pool_slots(step, blocked, store)
            if self.assignment == "window":
                for slot in exposure:
                    slot["arm"] = "pool"
                exposure += self._window_slots(step, ranking, blocked | {s["memory_id"] for s in exposure}, store)
        out = place(out, exposure, self._rng) if self.positions == "random" else out + exposure
        if step == self._book.stop - 1:
            self._finish_round()
        return out

    def _pool_slots(self, step: int, blocked: set[str], store: Collection[str] | None) -> list[dict[str, Any]]:
        plan = self._book.plan
        if plan is None or self._book.finished:
            return []

        def eligible(i: int) -> bool:
            m = plan.pool[i]
            return plan.created[i] <= step < plan.deleted[i] and m not in blocked and self._store.in_store(m, step, store)

        if isinstance(plan, BernoulliRound):
            before = plan.capped
            chosen = plan.take(step, self.exposure_slots, eligible, self._rng)
            self.capped_steps += plan.capped - before
        else:
            chosen, lost = plan.take(step, eligible)
            for i in lost:
                self._warn_lost(plan.pool[i])
        return [
            {"memory_id": plan.pool[i], "source": EXPOSURE, "propensity": float(plan.propensity[i])} for i in chosen
        ]

    def _window_slots(
        self, step: int, ranking: list[str], in_context: set[str], store: Collection[str] | None
    ) -> list[dict[str, Any]]:
        cut = self.slots - self.exposure_slots
        need = cut + int(self.window or 0)
        if store is not None and len(ranking) < need and len(store) > len(ranking):
            raise ConfigError(
                f"step {step}: a window design needs a ranking of {need} memories (B - k + W) "
                f"or of the whole store ({len(store)}); got {len(ranking)}"
            )
        members = window_members(
            ranking, cut, int(self.window or 0), in_context, lambda m: self._store.in_store(m, step, store)
        )
        drawn, p = draw_window(members, self.exposure_slots - self.pool_slots, self._rng)
        return [{"memory_id": m, "source": EXPOSURE, "propensity": p, "arm": "window"} for m in drawn]

    def _warn_lost(self, m: str) -> None:
        self.shortfall[m] = self.shortfall.get(m, 0) + 1
        warnings.warn(
            f"exposure of {m!r} deferred past its last step in the store: not delivered "
            "(its logged propensity overstates its exposures)",
            ExposureShortfallWarning,
            stacklevel=4,
        )

    def _report_lost(self, lost: dict[int, int], pool: list[str]) -> None:
        for i, c in lost.items():
            self.shortfall[pool[i]] = self.shortfall.get(pool[i], 0) + c
        warnings.warn(
            f"{sum(lost.values())} planned exposures of {len(lost)} memories could not be placed "
            "(ineligible at every step of their lifetime)",
            ExposureShortfallWarning,
            stacklevel=3,
        )

    # ------------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly, as a JSON-serialisable dict (``json.dumps`` works).

        Arrays are lists, the generator is its ``bit_generator.state``
        (:mod:`cmp_bayes.design.state`). Save it with each step (e.g. as
        :class:`~cmp_bayes.log.append.LogWriter`'s ``state_hook``): :meth:`from_state`
        then continues with the contexts this scheduler would have given.
        """
        return scheduler_state(self)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ExposureScheduler:
        """The scheduler a :meth:`state` describes (also after a ``json.dumps`` / ``json.loads`` round trip)."""
        obj = cls.__new__(cls)
        restore_scheduler(obj, state)
        return obj

    # ------------------------------------------------------------------- batch
    def deal(self, retrieved: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every step's exposures at once, given every step's retrieved pool memories.

        Fixed balanced and Bernoulli designs only (:mod:`cmp_bayes.design.batch`).

        Parameters
        ----------
        retrieved : numpy.ndarray of int, shape (steps, r), optional
            Row ``t`` holds the pool indices (positions in ``pool``) of the memories
            the retriever puts in the context at step ``t``; ``-1`` pads.

        Returns
        -------
        steps, memories : numpy.ndarray of int64, shape (n_exposures,)
            One entry per delivered exposure, sorted by step; ``memories`` are pool
            indices. Under ``balanced`` every memory's count equals ``counts`` unless
            a shortfall is reported (see module docstring).
        """
        if self.steps is None or self.assignment == "window":
            raise ConfigError(
                "deal is for fixed balanced or bernoulli designs; window and open-ended designs "
                "need each step's ranking and store: use context"
            )
        if self.exposure_slots == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.assignment == "bernoulli":
            assert self.propensity is not None
            step, mem, self.capped_steps = deal_bernoulli(
                self.created, self.in_store_steps, self.propensity, self.exposure_slots, self.seed, retrieved
            )
            return step, mem
        step, mem, lost = deal_balanced(
            self.created, self.deleted, self.steps, self.exposure_slots, self.seed, retrieved
        )
        if lost:
            self._report_lost(lost, self.pool)
        return step, mem
