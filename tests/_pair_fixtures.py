"""Window-design logs with KNOWN per-pair effects, for the pair statistics and the window estimator.

Two generators:

* :func:`scheduler_log`: the package's ``ExposureScheduler`` (window design,
  one pool slot, memories created and deleted over time) draws every context,
  a small additive outcome model draws the outcomes; written as JSONL, so the
  reader checks it against the spec.
* :class:`WindowStudy`: a fixed window design (no pool slots, so every step's
  window ``W_t`` is the same in every replication) whose window draws and
  outcomes are redrawn per replication, vectorised, straight from the spec's
  rules (no cmp_bayes code draws them), with each pair's exact truth.

The outcome model: ``P(Y_t = 1) = base + sum of tau(m, q_t) over the memories
in the context``; ``tau`` is nonzero for a few (memory, query) pairs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd


def scheduler_log(root: Path, seed: int = 0) -> tuple[Path, dict[tuple[str, str], float]]:
    """A window-design log (B=6, k=3, j=1, W=6) from the scheduler; returns (path, tau).

    30 memories created over steps 0..99 (some deleted later), 6 queries,
    300 steps: early steps have stores smaller than ``B - k + W`` (windows of
    one or two members, ``pi_t = 1``), the pool slot sometimes takes a window
    member (``|W_t|`` one smaller), so propensities vary within a pair.
    """
    import warnings

    from cmp_bayes.design.scheduler import ExposureScheduler, ExposureShortfallWarning

    rng = np.random.default_rng(seed)
    n_mem, n_q, n_steps, B, k, j, W = 30, 6, 300, 6, 3, 1, 6
    mems = [f"m{i:02d}" for i in range(n_mem)]
    created = {m: int(c) for m, c in zip(mems, np.sort(rng.integers(0, 100, n_mem)), strict=True)}
    created[mems[0]] = created[mems[1]] = 0
    deleted = {m: int(created[m] + rng.integers(100, 250)) for m in mems[20:25]}
    life = {m: (created[m], deleted.get(m)) for m in mems}
    score = rng.normal(size=(n_q, n_mem))
    tau = {(mems[i], f"q{q}"): float(rng.choice([0.2, -0.15])) for q in range(n_q)
           for i in rng.choice(n_mem, 4, replace=False)}
    sched = ExposureScheduler(B, k, mems, n_steps, "window", seed=seed, lifetimes=life, window=W, pool_slots=j)
    steps = []
    for t in range(n_steps):
        q = int(rng.integers(n_q))
        store = [m for m in mems if created[m] <= t and (m not in deleted or t < deleted[m])]
        s = np.array([score[q, mems.index(m)] for m in store]) + 0.3 * rng.normal(size=len(store))
        ranking = [store[i] for i in np.argsort(-s)]
        with warnings.catch_warnings():
            # always-retrieved pool memories lose planned exposures: not what these tests are about
            warnings.simplefilter("ignore", ExposureShortfallWarning)
            ctx = sched.context(t, ranking, set(store))
        p = 0.4 + sum(tau.get((c["memory_id"], f"q{q}"), 0.0) for c in ctx)
        steps.append({"step": t, "query_id": f"q{q}", "outcome": int(rng.random() < p), "context": ctx,
                      "ranking": ranking})
    root.mkdir(parents=True, exist_ok=True)
    (root / "design.json").write_text(json.dumps(sched.design()))
    (root / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (root / "memories.jsonl").write_text("".join(
        json.dumps({"memory_id": m, "created_step": created[m], "deleted_step": deleted.get(m)}) + "\n"
        for m in mems))
    return root, tau


@dataclass
class WindowStudy:
    """A fixed window design (B=3, k=1, j=0, W=8) replicated with fresh window draws and outcomes.

    Each query has two anchor memories (always in the store: the retriever's
    two slots) and eight window candidates with lifetimes, so ``|W_t|`` (the
    candidates in the store) and ``pi_t = 1 / |W_t|`` vary over a query's steps.
    """

    n_queries: int = 30
    steps_per_query: int = 120
    seed: int = 0

    def __post_init__(self) -> None:
        from cmp_bayes.log.design import check_design
        from cmp_bayes.log.schema import MEMORY_COLUMNS, RANKING_COLUMNS, coerce

        rng = np.random.default_rng(self.seed)
        Q, W = self.n_queries, 8
        T = Q * self.steps_per_query
        self.T = T
        anchors = [f"a{i:02d}" for i in range(20)]
        cands = [f"c{i:03d}" for i in range(150)]
        created = {m: 0 for m in anchors} | {m: int(rng.integers(0, T // 2)) for m in cands}
        deleted = {m: int(rng.integers(T // 2, T + T // 4)) for m in cands if rng.random() < 0.4}
        self.query = np.tile(np.arange(Q), self.steps_per_query)
        rng.shuffle(self.query)
        self.anchor = [list(rng.choice(anchors, 2, replace=False)) for _ in range(Q)]
        self.cand = [list(rng.choice(cands, W, replace=False)) for _ in range(Q)]
        self.tau = {(m, q): float(rng.choice([0.25, -0.15, 0.0], p=[0.3, 0.2, 0.5]))
                    for q in range(Q) for m in self.cand[q]}
        t = np.arange(T)
        # in_store[t, i]: candidate i of step t's query is in the store
        cand_t = np.array([self.cand[q] for q in self.query], dtype=object)  # (T, W)
        c_created = np.vectorize(created.get)(cand_t)
        c_deleted = np.vectorize(lambda m: deleted.get(m, T + 1))(cand_t)
        self.in_window = (c_created <= t[:, None]) & (t[:, None] < c_deleted)
        self.cand_t = cand_t
        self.size = self.in_window.sum(axis=1)
        self.design = check_design({"slots": 3, "exposure_slots": 1, "assignment": "window", "window": W,
                                    "pool_slots": 0, "steps": T, "seed": self.seed}, "design.json")
        ranking = [self.anchor[q] + self.cand[q] for q in self.query]
        self.rankings = coerce(pd.DataFrame({
            "step": np.repeat(t, 2 + W), "rank": np.tile(np.arange(2 + W), T),
            "memory_id": [m for r in ranking for m in r]}), RANKING_COLUMNS)
        self.memories = coerce(pd.DataFrame({
            "memory_id": list(created), "created_step": list(created.values()),
            "deleted_step": pd.array([deleted.get(m) for m in created], dtype="Int64")}), MEMORY_COLUMNS)
        self._retr = pd.DataFrame({
            "step": np.repeat(t, 2), "slot": np.tile([0, 1], T),
            "memory_id": [m for q in self.query for m in self.anchor[q]], "source": "retriever",
            "rank": pd.array(np.tile([0, 1], T), dtype="Int64"), "propensity": pd.array([None] * 2 * T, dtype="Float64"),
            "arm": pd.array([None] * 2 * T, dtype="string")})
        tau_t = np.vectorize(lambda m, q: self.tau[(m, q)])(cand_t, self.query[:, None])  # (T, W)
        self.tau_t = np.where(self.in_window, tau_t, 0.0)

    def truth(self) -> dict[tuple[str, str], float]:
        """Each window pair's tau_W: over its eligible steps with 0 < pi_t < 1, the mean of
        ``tau(m, q) - (S_t - tau(m, q)) / (|W_t| - 1)`` (S_t: the window's summed effects;
        exposing m displaces the member that would have filled the slot)."""
        ok = self.in_window & (self.size[:, None] > 1)
        s = self.tau_t.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            contrast = self.tau_t - (s - self.tau_t) / (self.size[:, None] - 1)
        frame = pd.DataFrame({"memory_id": self.cand_t[ok], "query_id": [f"q{q}" for q in
                              np.broadcast_to(self.query[:, None], ok.shape)[ok]], "c": contrast[ok]})
        return frame.groupby(["memory_id", "query_id"])["c"].mean().to_dict()

    def replicate(self, rng: np.random.Generator):
        """One replication as an ``ExposureLog``: a window slot drawn uniformly from ``W_t``, outcomes."""
        from cmp_bayes.log.schema import CONTEXT_COLUMNS, STEP_COLUMNS, ExposureLog, coerce

        T = self.T
        # the k - j = 1 window slot: a uniform member of W_t (its rank order = candidate order)
        u = rng.random(T)
        nth = np.minimum((u * self.size).astype(int), np.maximum(self.size - 1, 0))
        csum = np.cumsum(self.in_window, axis=1)
        pick = np.argmax(csum > nth[:, None], axis=1)
        has = self.size > 0
        # a baseline that moves with |W_t| (so with pi_t): unweighted arm means would be biased
        p = 0.3 + 0.15 * (self.size <= 3) + np.where(has, self.tau_t[np.arange(T), pick], 0.0)
        y = (rng.random(T) < p).astype(np.float64)
        win_t = np.flatnonzero(has)
        window = pd.DataFrame({
            "step": win_t, "slot": 2, "memory_id": self.cand_t[win_t, pick[win_t]], "source": "exposure",
            "rank": pd.array([None] * len(win_t), dtype="Int64"),
            "propensity": pd.array(1.0 / self.size[win_t], dtype="Float64"),
            "arm": pd.array(["window"] * len(win_t), dtype="string")})
        ctx = pd.concat([self._retr, window], ignore_index=True).sort_values(["step", "slot"], kind="mergesort")
        steps = pd.DataFrame({"step": np.arange(T), "query_id": [f"q{q}" for q in self.query], "outcome": y})
        return ExposureLog(steps=coerce(steps, STEP_COLUMNS), contexts=coerce(ctx, CONTEXT_COLUMNS),
                           rankings=self.rankings, memories=self.memories, design=self.design)
