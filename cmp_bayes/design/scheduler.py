"""The CMP exposure scheduler: which pool memory fills each exposure slot.

Of the ``B`` context slots the top ``B - k`` come from the retriever and ``k``
hold pool memories dealt by the design. Two assignments:

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
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from cmp_bayes.constants import EXPOSURE, RETRIEVER
from cmp_bayes.design.balance import alive_counts, balanced_counts, plan_slots, repair
from cmp_bayes.errors import ConfigError

Assignment = Literal["balanced", "bernoulli"]


class ExposureShortfallWarning(UserWarning):
    """Some planned exposures could not be delivered (deferred past a memory's last step)."""


class ExposureScheduler:
    """Deal the ``k`` exposure slots of ``steps`` contexts over a pool of memories.

    Parameters
    ----------
    slots : int
        ``B``, the context size.
    exposure_slots : int
        ``k`` (``0 <= k <= B``), slots reserved for randomized exposure.
    pool : sequence of str
        The exposure pool (memory ids, unique).
    steps : int
        ``T``, the number of steps the design is laid out for.
    assignment : {"balanced", "bernoulli"}
        See the module docstring.
    seed : int
        Seed of the assignment.
    lifetimes : mapping of str to (int, int or None), optional
        ``memory_id -> (created_step, deleted_step)`` for pool memories that
        are not in the store at every step (``deleted_step`` ``None`` = never).
        Missing ids are in the store throughout.
    bernoulli_rate : float, optional
        Per-step inclusion probability under ``bernoulli`` (default above).
    """

    def __init__(
        self,
        slots: int,
        exposure_slots: int,
        pool: Sequence[str],
        steps: int,
        assignment: Assignment = "balanced",
        seed: int = 0,
        *,
        lifetimes: Mapping[str, tuple[int, int | None]] | None = None,
        bernoulli_rate: float | None = None,
    ) -> None:
        if not (isinstance(slots, int | np.integer) and slots >= 1):
            raise ConfigError(f"slots must be a positive integer, got {slots!r}")
        if not (0 <= exposure_slots <= slots):
            raise ConfigError(f"exposure_slots must be in [0, slots={slots}], got {exposure_slots!r}")
        if steps < 1:
            raise ConfigError(f"steps must be >= 1, got {steps!r}")
        if assignment not in ("balanced", "bernoulli"):
            raise ConfigError(f"assignment must be 'balanced' or 'bernoulli', got {assignment!r}")
        pool = [str(m) for m in pool]
        if len(set(pool)) != len(pool):
            raise ConfigError("pool memory ids must be unique")
        if exposure_slots > 0 and not pool:
            raise ConfigError("exposure_slots > 0 needs a non-empty pool")
        self.slots = int(slots)
        self.exposure_slots = int(exposure_slots)
        self.steps = int(steps)
        self.assignment: Assignment = assignment
        self.seed = int(seed)
        self.pool: list[str] = pool
        self._index = {m: i for i, m in enumerate(pool)}
        p = len(pool)
        created = np.zeros(p, dtype=np.int64)
        deleted = np.full(p, self.steps, dtype=np.int64)
        for m, (c, d) in (lifetimes or {}).items():
            if m in self._index:
                i = self._index[m]
                created[i] = max(0, int(c))
                deleted[i] = self.steps if d is None else min(self.steps, int(d))
        self.created, self.deleted = created, deleted
        #: T_m: design steps at which each pool memory is in the store
        self.in_store_steps = np.maximum(deleted - created, 0)
        self._rng = np.random.default_rng(self.seed)
        self.shortfall: dict[str, int] = {}
        self.capped_steps = 0
        self._next_step = 0
        self._last_step = -1
        if assignment == "balanced":
            self.counts = balanced_counts(
                created, deleted, self.steps, self.exposure_slots, self._rng
            )
            prop = np.where(self.in_store_steps > 0, self.counts / np.maximum(self.in_store_steps, 1), 0.0)
            self.tok_mem, self.tok_step = plan_slots(
                self.counts, created, deleted, self.steps, self.exposure_slots, self._rng
            )
            lost = repair(self.tok_mem, self.tok_step, created, deleted, blocked=None)
            if lost:
                self._report_lost(lost)
            self._consumed = self.tok_mem < 0
            self._head = 0
        else:
            alive = alive_counts(created, deleted, self.steps)
            mean_alive = max(1.0, float(alive.mean()))
            rate = min(1.0, self.exposure_slots / (2.0 * mean_alive)) if bernoulli_rate is None else float(bernoulli_rate)
            if not (0.0 < rate <= 1.0):
                raise ConfigError(f"bernoulli_rate must be in (0, 1], got {rate!r}")
            prop = np.full(p, rate)
            self.counts = None
        self.propensity: np.ndarray = prop

    # ------------------------------------------------------------------ design
    def design(self) -> dict[str, Any]:
        """The content of ``design.json`` (spec field names).

        Pool memories that can never be exposed (propensity 0: no step in the
        store, or no share of the capacity) are left out of ``pool``, since the
        spec's propensities are in ``(0, 1]``.
        """
        pool = {
            m: float(self.propensity[i]) for i, m in enumerate(self.pool) if self.propensity[i] > 0
        }
        return {
            "slots": self.slots,
            "exposure_slots": self.exposure_slots,
            "assignment": self.assignment,
            "steps": self.steps,
            "seed": self.seed,
            "pool": pool,
        }

    # -------------------------------------------------------------------- live
    def context(
        self, step: int, ranking: Sequence[str], store: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        """The context of one step, as the spec's slot objects.

        Parameters
        ----------
        step : int
            The step, ``0 <= step < steps``; steps must be increasing (a skipped
            step's planned exposures are deferred like collisions).
        ranking : sequence of str
            The retriever's ranking for this step's query, best first.
        store : collection of str, optional
            The memories in the store at this step; pool memories outside it are
            not exposed (deferred). ``None``: use the lifetimes only.

        Returns
        -------
        list of dict
            ``B - k`` retriever slots ``{"memory_id", "source": "retriever", "rank"}``
            (fewer if the ranking is shorter) followed by up to ``k`` exposure
            slots ``{"memory_id", "source": "exposure", "propensity"}``.
        """
        step = int(step)
        if step < self._next_step:
            raise ConfigError(f"steps must increase: got {step} after {self._next_step - 1}")
        if step >= self.steps:
            raise ConfigError(
                f"step {step} is past the design's {self.steps} steps; lay out a new design"
            )
        self._next_step = step + 1
        retrieved: list[str] = []
        seen: set[str] = set()
        for m in ranking:
            m = str(m)
            if m in seen:
                continue
            seen.add(m)
            retrieved.append(m)
            if len(retrieved) == self.slots - self.exposure_slots:
                break
        rank_of = {}
        for r, m in enumerate(ranking):
            rank_of.setdefault(str(m), r)
        out: list[dict[str, Any]] = [
            {"memory_id": m, "source": RETRIEVER, "rank": rank_of[m]} for m in retrieved
        ]
        if self.exposure_slots:
            blocked = set(retrieved)
            if self.assignment == "balanced":
                chosen = self._take_balanced(step, blocked, store)
            else:
                chosen = self._take_bernoulli(step, blocked, store)
            out += [
                {"memory_id": self.pool[i], "source": EXPOSURE, "propensity": float(self.propensity[i])}
                for i in chosen
            ]
        if step == self.steps - 1:
            self._finish()
        return out

    def _eligible(self, i: int, step: int, blocked: set[str], store: Collection[str] | None) -> bool:
        m = self.pool[i]
        return (
            self.created[i] <= step < self.deleted[i]
            and m not in blocked
            and (store is None or m in store)
        )

    def _take_balanced(self, step: int, blocked: set[str], store: Collection[str] | None) -> list[int]:
        k = self.exposure_slots
        chosen: list[int] = []
        taken: set[int] = set()
        # a full round of the pool ahead is always enough to find k distinct
        # eligible memories when they exist; bounded so a step costs O(pool/k)
        horizon = step + int(np.ceil(len(self.pool) / max(k, 1))) + 1
        i = self._head
        n = len(self.tok_mem)
        while i < n and len(chosen) < k and self.tok_step[i] <= horizon:
            if not self._consumed[i]:
                m = int(self.tok_mem[i])
                if self.deleted[m] <= step:
                    self._lose(i)
                elif m not in taken and self._eligible(m, step, blocked, store):
                    chosen.append(m)
                    taken.add(m)
                    self._consumed[i] = True
            i += 1
        while self._head < n and self._consumed[self._head]:
            self._head += 1
        return chosen

    def _take_bernoulli(self, step: int, blocked: set[str], store: Collection[str] | None) -> list[int]:
        alive = np.flatnonzero((self.created <= step) & (step < self.deleted))
        draw = alive[self._rng.random(alive.size) < self.propensity[alive]]
        draw = [int(i) for i in draw if self._eligible(int(i), step, blocked, store)]
        if len(draw) > self.exposure_slots:
            self.capped_steps += 1
            draw = sorted(self._rng.choice(draw, size=self.exposure_slots, replace=False).tolist())
        return draw

    def _lose(self, i: int) -> None:
        self._consumed[i] = True
        m = self.pool[int(self.tok_mem[i])]
        self.shortfall[m] = self.shortfall.get(m, 0) + 1
        warnings.warn(
            f"exposure of {m!r} deferred past its last step in the store: not delivered "
            "(its logged propensity overstates its exposures)",
            ExposureShortfallWarning,
            stacklevel=4,
        )

    def _finish(self) -> None:
        if self.assignment == "balanced":
            for i in np.flatnonzero(~self._consumed):
                self._lose(int(i))
        elif self.capped_steps > 0.01 * self.steps:
            warnings.warn(
                f"the k-slot cap bound at {self.capped_steps} of {self.steps} steps: realised "
                "exposure probabilities are below the logged propensities; lower bernoulli_rate",
                ExposureShortfallWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------- batch
    def deal(self, retrieved: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every step's exposures at once, given every step's retrieved pool memories.

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
        if self.exposure_slots == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.assignment == "bernoulli":
            return self._deal_bernoulli(retrieved)
        rng = np.random.default_rng(self.seed)
        counts = balanced_counts(self.created, self.deleted, self.steps, self.exposure_slots, rng)
        tok_mem, tok_step = plan_slots(counts, self.created, self.deleted, self.steps, self.exposure_slots, rng)
        lost = repair(tok_mem, tok_step, self.created, self.deleted, blocked=retrieved)
        if lost:
            self._report_lost(lost)
        keep = tok_mem >= 0
        return tok_step[keep], tok_mem[keep]

    def _report_lost(self, lost: dict[int, int]) -> None:
        for i, c in lost.items():
            self.shortfall[self.pool[i]] = self.shortfall.get(self.pool[i], 0) + c
        warnings.warn(
            f"{sum(lost.values())} planned exposures of {len(lost)} memories could not be placed "
            "(ineligible at every step of their lifetime)",
            ExposureShortfallWarning,
            stacklevel=3,
        )

    def _deal_bernoulli(self, retrieved: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        n = rng.binomial(self.in_store_steps, self.propensity)
        mem = np.repeat(np.arange(len(self.pool)), n)
        # n draws without replacement from each memory's lifetime [created, deleted)
        u = rng.random(mem.size)
        order = np.lexsort((u, mem))
        mem = mem[order]
        start = np.r_[0, np.cumsum(n)[:-1]]
        j = np.arange(mem.size) - np.repeat(start, n)
        # stratified positions are distinct within a memory: j-th of n_m strata
        span = self.in_store_steps[mem]
        lo = (j * span) // np.maximum(n[mem], 1)
        hi = ((j + 1) * span) // np.maximum(n[mem], 1)
        step = self.created[mem] + lo + (rng.random(mem.size) * (hi - lo)).astype(np.int64)
        if retrieved is not None and mem.size:
            hit = (retrieved[step] == mem[:, None]).any(axis=1)
            mem, step = mem[~hit], step[~hit]
        order = np.lexsort((rng.random(mem.size), step))
        mem, step = mem[order], step[order]
        first = np.r_[0, np.flatnonzero(np.diff(step)) + 1] if step.size else np.zeros(0, np.int64)
        within = np.arange(step.size) - np.repeat(first, np.diff(np.r_[first, step.size]))
        keep = within < self.exposure_slots
        self.capped_steps = int(np.unique(step[~keep]).size)
        # the stratified draw is not exactly Bernoulli per step; it keeps the
        # per-memory count Binomial(T_m, p) and spreads it uniformly over the lifetime
        return step[keep], mem[keep]
