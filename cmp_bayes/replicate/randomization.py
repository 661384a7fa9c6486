"""Store-level randomization on the real stores of the CMP experiment.

How often deleting part of a store changes what the retriever returns, and how
much evicting by an estimate beats evicting at random (the simulator's
:mod:`cmp_bayes.simulation.store_randomization` definitions, on the blocks of
:func:`cmp_bayes.replicate.layout.build_log`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.progress import Progress
from cmp_bayes.replicate.config import ExperimentConfig
from cmp_bayes.replicate.layout import StoreBlock


def block_store_randomization(
    log: ExposureLog,
    blocks: list[StoreBlock],
    config: ExperimentConfig,
    scores: dict[str, pd.DataFrame] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Store-level randomization on the real stores, with the simulator's definitions.

    ``unchanged_share``: each perturbation deletes every memory of a store
    independently with probability ``delete_fraction``; per query the top
    ``B - k`` of what is left (retriever scores of the full store, i.e. BM25
    document frequencies are not recomputed) is compared with the full
    store's; the share of (perturbation, query) pairs whose retrieved set is
    unchanged.

    ``lift``: evict ``evict_fraction`` of each store, then deploy the retriever
    on what is left (all ``B`` slots retrieved). Utility-based eviction removes
    the memories with the fewest logged successes while retrieved (ties at
    random); random eviction a uniform set of the same size (mean of 20 draws).
    Quality = expected reader success (no noise) averaged over the log's steps.
    ``lift = quality(utility-based) / quality(random)``. ``scores`` may add
    other eviction rules (method -> table with ``memory_id`` and ``estimate``:
    lowest evicted first; memories without an estimate are kept, as CMP never
    forgets what it cannot identify).

    ``progress`` (default silent) gets a bar over the stores.
    """
    rng = np.random.default_rng([config.seed, 7])
    nret = config.slots - config.exposure_slots
    reader = config.reader
    unchanged, total = 0, 0
    # logged successes while retrieved
    ctx = log.contexts[log.contexts["source"] == "retriever"][["step", "memory_id"]]
    out = log.steps.set_index("step")["outcome"]
    succ = pd.Series(out.reindex(ctx["step"]).to_numpy(), index=ctx["memory_id"].to_numpy()).groupby(level=0).sum()
    rules: dict[str, pd.Series] = {"logged-successes": succ}
    for name, table in (scores or {}).items():
        rules[name] = table.drop_duplicates("memory_id").set_index("memory_id")["estimate"]
    quality = {name: 0.0 for name in ["full", "random", *rules]}
    n_steps = 0
    for b in (progress or Progress.silent()).track(blocks, "store randomization", unit="stores"):
        m = len(b.memory_ids)
        qs = np.unique(b.step_query)
        weight = np.bincount(b.step_query, minlength=len(b.query_ids)).astype(float)
        for _ in range(config.n_perturbations):
            keep = rng.random(m) >= config.delete_fraction
            for q in qs:
                full = b.order[q, :nret]
                rest = b.order[q][keep[b.order[q]]][:nret]
                unchanged += int(set(full.tolist()) == set(rest.tolist()))
                total += 1
        n_evict = int(round(config.evict_fraction * m))

        def q_of(keep_mask: np.ndarray, b: StoreBlock = b, weight: np.ndarray = weight) -> float:
            tot = 0.0
            for q in np.flatnonzero(weight):
                ctx_q = b.order[q][keep_mask[b.order[q]]][: config.slots]
                n_ev = b.evidence[q].sum()
                share = b.evidence[q, ctx_q].sum() / n_ev if n_ev else 0.0
                tot += weight[q] * float(reader.probability(np.array(b.base[q]), np.array(share)))
            return tot

        quality["full"] += q_of(np.ones(m, dtype=bool))
        rand = 0.0
        for _ in range(20):
            k = np.ones(m, dtype=bool)
            k[rng.choice(m, size=n_evict, replace=False)] = False
            rand += q_of(k) / 20
        quality["random"] += rand
        for name, s in rules.items():
            val = s.reindex(b.memory_ids).to_numpy(np.float64)
            if name == "logged-successes":
                val = np.nan_to_num(val, nan=0.0)
            finite = np.flatnonzero(np.isfinite(val))
            tie = rng.random(len(finite))
            order = finite[np.lexsort((tie, val[finite]))][:n_evict]
            k = np.ones(m, dtype=bool)
            k[order] = False
            quality[name] += q_of(k)
        n_steps += b.steps
    quality = {k: v / n_steps for k, v in quality.items()}
    res: dict[str, Any] = {
        "unchanged_share": unchanged / total if total else float("nan"),
        "perturbations": total,
        "delete_fraction": config.delete_fraction,
        "evict_fraction": config.evict_fraction,
        "quality": quality,
        "lift": quality["logged-successes"] / quality["random"],
    }
    res["lift_by_rule"] = {k: quality[k] / quality["random"] for k in rules}
    return res

