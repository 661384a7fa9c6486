"""An independent haystack-style log generator for the robustness study.

Written from the exposure-log spec (shared/spec/exposure-log.md) alone, the way
another team would write a script for their own memory system, and on
purpose NOT with ``cmp_bayes.simulation`` (whose presets set the package's
defaults): stores of memories, queries, a retriever's top ``B - k`` per query,
``k`` exposure slots dealt balanced over the store's pool with exact
propensities, outcomes from an additive reader.

The world, per store (one store = one user's memory, alive for one block of
steps; ``memories.jsonl`` gives the lifetimes):

* every memory has one effect ``tau`` (outcome units): from the null
  component (exactly 0, or Normal(mean, sd)), the useful one
  (Uniform(lo, hi)) or the harmful one (Uniform(lo, hi), negative);
* ``queries_per_store`` queries recur uniformly at random over the block's
  steps; each has a base success probability ``p0_q`` ~ Uniform(0.25, 0.4)
  with its retrieved memories already in it;
* the retriever ranks the store per query by ``z_mq + quality_m`` with
  ``quality_m`` = 1.5 for useful memories and Normal(0, 0.5) otherwise, so the
  rank carries some (not all) information about usefulness;
* the reader: a step's success probability is ``p0_q`` plus the ``tau`` of
  the memories in its exposure slots (clipped to [0, 1]; the clipped share
  is reported); binary outcomes are Bernoulli, fractional outcomes are
  Beta(3 p, 3 (1 - p)) scores with mean p (a token-F1-like score);
* balanced assignment per store: the ``steps * k`` exposure slots are dealt
  over the pool (the memories not retrieved by every query of the store,
  less a ``outside_pool_share`` kept out of the design), each floor or ceil
  of ``steps * k / pool`` times, then swapped until no memory sits
  in an exposure slot at a step where it is retrieved or already exposed.
  Propensity = its exposures / steps of its store (the spec's ``n_m / T_m``).

The truth file (``truth.csv`` beside the log files) lists every memory's
``tau_effect`` (what it adds to the success probability when read),
``tau_true`` (the design estimand the Hajek contrast targets, defined as in
``cmp_bayes.simulation.truth``: the effect of putting the memory in place of
one of a control step's exposures, so it is ``tau_effect`` minus the mean
effect of the exposure it displaces, clipping included; with 10% useful
memories of effect 0.45 a null memory's ``tau_true`` is about -0.045), its
component ``kind`` and ``required`` (= useful component).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: Query kinds written to the steps' ``group`` field.
KINDS: tuple[str, ...] = ("single-hop", "multi-hop", "temporal")


@dataclass(frozen=True)
class DGP:
    """One data-generating process (effects in outcome units, shares of memories).

    Attributes
    ----------
    name : str
    null_mean, null_sd : float
        The null component: Normal(null_mean, null_sd); sd 0 = exactly null_mean.
    useful_low, useful_high : float
        Useful effects ~ Uniform(low, high).
    useful_share, harmful_share : float
        Shares of memories drawn from the useful / harmful components.
    harmful_low, harmful_high : float
        Harmful effects ~ Uniform(low, high) (negative).
    outcome : {"binary", "fractional"}
    exposures : int
        Target exposures per memory: sets the steps per store (a pool smaller than the
        store gets a few more each).
    stores, per_store, queries_per_store : int
        Stores, memories per store, distinct queries per store.
    slots, exposure_slots : int
        ``B`` and ``k``.
    outside_pool_share : float
        Share of memories kept out of the exposure pool (never exposed).
    """

    name: str
    null_mean: float = 0.0
    null_sd: float = 0.0
    useful_low: float = 0.3
    useful_high: float = 0.6
    useful_share: float = 0.10
    harmful_share: float = 0.0
    harmful_low: float = -0.2
    harmful_high: float = -0.05
    outcome: str = "binary"
    exposures: int = 7
    stores: int = 10
    per_store: int = 150
    queries_per_store: int = 12
    slots: int = 10
    exposure_slots: int = 2
    outside_pool_share: float = 0.03

    @property
    def steps_per_store(self) -> int:
        """Steps of each store's block: enough for ``exposures`` per memory."""
        return math.ceil(self.exposures * self.per_store / self.exposure_slots)

    def to_dict(self) -> dict:
        return asdict(self)


def _effects(dgp: DGP, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each memory's component kind and tau, shape (n,)."""
    u = rng.random(n)
    kind = np.where(
        u < dgp.useful_share, "useful",
        np.where(u < dgp.useful_share + dgp.harmful_share, "harmful", "null"),
    )
    tau = dgp.null_mean + dgp.null_sd * rng.standard_normal(n)
    tau = np.where(kind == "useful", rng.uniform(dgp.useful_low, dgp.useful_high, n), tau)
    tau = np.where(kind == "harmful", rng.uniform(dgp.harmful_low, dgp.harmful_high, n), tau)
    return kind, tau


def balanced_counts(pool_size: int, steps: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Exposures per pool memory: floor or ceil of ``steps * k / pool_size``, summing to ``steps * k``."""
    base, extra = divmod(steps * k, pool_size)
    counts = np.full(pool_size, base, dtype=np.int64)
    counts[rng.choice(pool_size, size=extra, replace=False)] += 1
    return counts


def _deal(
    pool: np.ndarray, counts: np.ndarray, steps: int, k: int, blocked: list[set[int]],
    rng: np.random.Generator,
) -> np.ndarray:
    """Balanced dealing: a (steps, k) array of pool memories, memory ``pool[i]`` ``counts[i]`` times.

    ``blocked[t]`` holds the memories retrieved at step t. Conflicts (a memory
    retrieved at its step, or twice in one step) are swapped with random other
    slots until none is left; swaps keep every memory's count.
    """
    cells = np.repeat(pool, counts)
    if cells.size != steps * k:
        raise ValueError("the counts must fill every exposure slot")
    slots = rng.permutation(cells).reshape(steps, k)

    def bad(t: int, j: int) -> bool:
        m = slots[t, j]
        return m in blocked[t] or any(slots[t, i] == m for i in range(k) if i != j)

    for t in range(steps):
        for j in range(k):
            tries = 0
            while bad(t, j):
                t2, j2 = int(rng.integers(steps)), int(rng.integers(k))
                if t2 == t:
                    continue
                slots[t, j], slots[t2, j2] = slots[t2, j2], slots[t, j]
                if bad(t, j) or bad(t2, j2):
                    slots[t, j], slots[t2, j2] = slots[t2, j2], slots[t, j]
                tries += 1
                if tries > 100_000:
                    raise RuntimeError(f"cannot place exposure slot ({t}, {j})")
    return slots


def _design_tau(
    p0: np.ndarray, tau: np.ndarray, dealt: np.ndarray, blocked: list[set[int]]
) -> np.ndarray:
    """Each memory's design estimand, shape (n,): what the Hajek contrast targets.

    As ``cmp_bayes.simulation.truth`` defines it: the mean, over the memory's
    control steps (in the store, not in the context), of the effect on the
    expected outcome of putting it into the context in place of one of that
    step's exposures chosen uniformly, clipping included. Memories with no
    control step keep their own effect.
    """
    p = p0 + tau[dealt].sum(axis=1)  # (T,) before clipping
    x = tau[dealt]  # (T, k)
    base = np.clip(p, 0.0, 1.0)
    swapped = np.clip(p[:, None, None] - x[:, :, None] + tau[None, None, :], 0.0, 1.0)
    effect = swapped.mean(axis=1) - base[:, None]  # (T, n)
    control = np.ones_like(effect, dtype=bool)
    for t, ret in enumerate(blocked):
        control[t, list(ret)] = False
        control[t, dealt[t]] = False
    n_c = control.sum(axis=0)
    mean = np.where(control, effect, 0.0).sum(axis=0) / np.maximum(n_c, 1)
    return np.where(n_c > 0, mean, tau)


def generate(dgp: DGP, seed: int, out: str | Path, ranking_depth: int = 20) -> dict:
    """Write one log (JSONL form) and its ``truth.csv`` to ``out``; return a summary.

    Returns
    -------
    dict
        ``memories``, ``steps``, ``pool``, ``clipped_share`` (share of steps
        whose success probability was clipped into [0, 1]), ``useful``,
        ``harmful``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    k, b = dgp.exposure_slots, dgp.slots
    steps_s = dgp.steps_per_store
    step_lines: list[str] = []
    memories: list[dict] = []
    labels: list[dict] = []
    truth: list[dict] = []
    pool_prop: dict[str, float] = {}
    clipped = 0
    step = 0
    for s in range(dgp.stores):
        n = dgp.per_store
        ids = np.array([f"s{s:02d}m{i:03d}" for i in range(n)])
        kind, tau = _effects(dgp, rng, n)
        quality = np.where(kind == "useful", 1.5, 0.5 * rng.standard_normal(n))
        queries = [f"s{s:02d}q{j:02d}" for j in range(dgp.queries_per_store)]
        qkind = rng.choice(len(KINDS), size=len(queries))
        p0 = rng.uniform(0.25, 0.4, size=len(queries))
        rankings = []
        for _ in queries:
            score = rng.standard_normal(n) + quality
            rankings.append(np.argsort(-score, kind="stable"))
        top = [r[: b - k] for r in rankings]
        # outside the pool: memories every query retrieves (no step to expose them at) and a
        # random share the system keeps out of the design (pinned memories): these must end
        # up retrieved-only or unidentified, never forgotten
        retrieved_by_all = set(top[0]).intersection(*map(set, top[1:]))
        pinned = set(np.flatnonzero(rng.random(n) < dgp.outside_pool_share).tolist())
        pool = np.array(
            [i for i in range(n) if i not in retrieved_by_all and i not in pinned], dtype=np.int64
        )
        q_of_step = rng.integers(len(queries), size=steps_s)
        blocked = [set(top[q].tolist()) for q in q_of_step]
        counts = balanced_counts(pool.size, steps_s, k, rng)
        dealt = _deal(pool, counts, steps_s, k, blocked, rng)
        props = {int(m): int(c) / steps_s for m, c in zip(pool, counts, strict=True)}
        for i, pr in props.items():
            pool_prop[str(ids[i])] = pr
        start = step
        tau_design = _design_tau(p0[q_of_step], tau, dealt, blocked)
        for t in range(steps_s):
            q = int(q_of_step[t])
            exposed = [int(m) for m in dealt[t]]
            p = p0[q] + float(tau[exposed].sum())
            if not 0.0 <= p <= 1.0:
                clipped += 1
            p = min(max(p, 0.0), 1.0)
            if dgp.outcome == "binary":
                y: float = float(rng.random() < p)
            else:
                pc = min(max(p, 1e-3), 1 - 1e-3)
                y = round(float(rng.beta(3 * pc, 3 * (1 - pc))), 6)
            context = [
                {"memory_id": str(ids[m]), "source": "retriever", "rank": r}
                for r, m in enumerate(top[q])
            ] + [{"memory_id": str(ids[m]), "source": "exposure", "propensity": props[m]} for m in exposed]
            step_lines.append(json.dumps({
                "step": step, "query_id": queries[q], "outcome": y, "group": KINDS[qkind[q]],
                "context": context,
                "ranking": [str(ids[m]) for m in rankings[q][:ranking_depth]],
            }))
            step += 1
        for i in range(n):
            memories.append({"memory_id": str(ids[i]), "created_step": start, "deleted_step": step})
            truth.append({
                "memory_id": str(ids[i]), "store": s, "kind": str(kind[i]),
                "tau_true": float(tau_design[i]), "tau_effect": float(tau[i]),
                "required": bool(kind[i] == "useful"),
                "in_pool": bool(str(ids[i]) in pool_prop),
            })
            if kind[i] == "useful":
                labels += [{"query_id": q, "memory_id": str(ids[i]), "required": True} for q in queries]
    design = {
        "slots": b, "exposure_slots": k, "assignment": "balanced", "steps": step, "seed": seed,
        "pool": pool_prop,
    }
    (out / "steps.jsonl").write_text("\n".join(step_lines) + "\n")
    (out / "design.json").write_text(json.dumps(design))
    (out / "memories.jsonl").write_text("\n".join(json.dumps(m) for m in memories) + "\n")
    (out / "labels.jsonl").write_text("\n".join(json.dumps(x) for x in labels) + "\n")
    frame = pd.DataFrame(truth)
    frame.to_csv(out / "truth.csv", index=False)
    return {
        "memories": len(frame),
        "steps": step,
        "pool": len(pool_prop),
        "clipped_share": clipped / max(step, 1),
        "useful": int((frame["kind"] == "useful").sum()),
        "harmful": int((frame["kind"] == "harmful").sum()),
    }


def read_truth(out: str | Path) -> pd.DataFrame:
    """The truth table written by :func:`generate` (memory_id as str)."""
    # "null" is one of the component names: keep pandas from reading it as NaN
    return pd.read_csv(
        Path(out) / "truth.csv", dtype={"memory_id": str, "kind": str},
        keep_default_na=False, na_values={"tau_true": [""], "tau_effect": [""]},
    )
