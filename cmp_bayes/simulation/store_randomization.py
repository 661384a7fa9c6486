"""Store-level randomization, the baseline CMP replaces (paper: 52.2% unchanged, lift 0.97).

Two measurements on a simulated world (its retriever re-run on perturbed stores):

``unchanged_share``
    Each perturbation deletes every memory independently with probability
    ``delete_fraction``; for every query the retriever is re-run on what is
    left. A (perturbation, query) pair is *unchanged* when the retrieved
    context (the set of the top ``B - k`` memories) is the same as with the
    full store: the deletion could not have changed the answer, so it carries
    no information about any memory's utility. ``unchanged_share`` is the share
    of such pairs.

``lift``
    Evict ``evict_fraction`` of the store two ways and deploy the retriever on
    what is left (all ``B`` slots retrieved, no exposures). *Utility-based*
    eviction removes the memories with the fewest logged successes while
    retrieved (sum of outcomes of the steps where the retriever put them in the
    context: the signal systems use today; ties broken at random). *Random*
    eviction removes a uniformly random set of the same size (averaged over
    ``n_random`` draws). Quality = the expected task success under the reader
    model averaged over the log's query mix. ``lift = quality(utility-based) /
    quality(random)``: 1 means no better than chance. ``lift_oracle`` uses the
    true ``utility_true`` instead of logged successes, for reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cmp_bayes.log.schema import ExposureLog


def store_randomization(
    log_or_sim: ExposureLog | str,
    n_perturbations: int = 200,
    delete_fraction: float = 0.1,
    evict_fraction: float = 0.1,
    n_random: int = 50,
    seed: int = 0,
) -> dict[str, Any]:
    """Unchanged-context share of random deletions and lift of utility-based eviction.

    Parameters
    ----------
    log_or_sim : ExposureLog or str
        A simulated log (in memory, or read from a directory with
        ``simulation.json``), or a preset name to simulate (seed ``seed``).
    n_perturbations : int
        Random deletion sets.
    delete_fraction, evict_fraction : float
        Per-memory deletion probability; share of the store evicted.
    n_random : int
        Random evictions averaged for the baseline.
    seed : int

    Returns
    -------
    dict
        ``unchanged_share``, ``lift``, ``lift_oracle``, ``quality_full``,
        ``quality_utility``, ``quality_random``, ``quality_oracle`` and the settings.
    """
    from cmp_bayes.simulation.simulator import load_world, simulate
    from cmp_bayes.simulation.truth import memory_truth

    log = simulate(log_or_sim, seed=seed) if isinstance(log_or_sim, str) else log_or_sim
    w = load_world(log)
    rng = np.random.default_rng([seed, 99])
    cfg = w.config
    nret = cfg.slots - cfg.exposure_slots
    order = w.retriever.order()
    ranked = np.take_along_axis(w.retriever.cand, order, axis=1)  # (query, candidate) memories best first
    nq = ranked.shape[0]
    qfreq = np.bincount(w.step_query, minlength=nq) / len(w.step_query)

    def top(keep: np.ndarray, n: int) -> np.ndarray:
        ok = keep[np.maximum(ranked, 0)] & (ranked >= 0)
        pos = np.cumsum(ok, axis=1) - 1
        return np.where(ok & (pos < n), ranked, -1)

    full = top(np.ones(w.n_memories, bool), nret)
    unchanged = []
    for _ in range(n_perturbations):
        keep = rng.random(w.n_memories) >= delete_fraction
        got = top(keep, nret)
        unchanged.append(np.all(np.sort(got, axis=1) == np.sort(full, axis=1), axis=1))
    unchanged_share = float(np.mean(unchanged))

    def quality(keep: np.ndarray) -> float:
        ctx = top(keep, cfg.slots)
        u = np.where(ctx >= 0, w.util[np.arange(nq)[:, None], w.col[np.maximum(ctx, 0)]], 0.0)
        return float(np.sum(qfreq * w.reader.mean(w.base + u.sum(axis=1))))

    n_evict = int(round(evict_fraction * w.n_memories))
    ids = np.asarray(w.memory_ids)
    c = log.contexts
    ret = c[c["source"] == "retriever"].merge(log.steps[["step", "outcome"]], on="step")
    succ = ret.groupby(ret["memory_id"].astype(str))["outcome"].sum().reindex(ids, fill_value=0.0).to_numpy()

    def evict_lowest(score: np.ndarray) -> np.ndarray:
        keep = np.ones(w.n_memories, bool)
        keep[np.lexsort((rng.random(w.n_memories), score))[:n_evict]] = False
        return keep

    q_util = quality(evict_lowest(succ))
    truth = memory_truth(log).set_index("memory_id")["utility_true"].reindex(ids).fillna(0).to_numpy()
    q_oracle = quality(evict_lowest(truth))
    q_rand = float(np.mean([
        quality(~np.isin(np.arange(w.n_memories), rng.choice(w.n_memories, n_evict, replace=False)))
        for _ in range(n_random)
    ]))
    return {
        "unchanged_share": unchanged_share, "lift": q_util / q_rand, "lift_oracle": q_oracle / q_rand,
        "quality_full": quality(np.ones(w.n_memories, bool)), "quality_utility": q_util,
        "quality_random": q_rand, "quality_oracle": q_oracle, "n_perturbations": n_perturbations,
        "delete_fraction": delete_fraction, "evict_fraction": evict_fraction, "n_evicted": n_evict,
    }
