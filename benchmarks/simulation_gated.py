"""Validate the relevance-gated pair model against per-pair simulator truth (issue 16, Done-when 2).

The ``locomo-window`` preset (a shared store under a window design: per step one
pool slot dealt balanced over the store and one window slot from the near
misses), cut down to run on a shared 2-core machine (``SIZE``). Per seed:
simulate, ``fit(log, by="query", model=ModelConfig(pair_model="gated"))``, then

* coverage of the pairs' 90% intervals (CI_PROB, equal-tailed over the draws of
  tau) of the labels' ``utility``: over eligible pairs (eligible under the pool or
  the window arm: with ``pool_slots`` 1 that is every pair), over window-eligible
  pairs, over pairs with a randomized exposure, over required pairs;
* pair AUC (required vs not) of the posterior mean of tau against the window
  arm's SNIPW (``estimate(log, by="query")``, ``arm == "window"``), over the pairs
  where that SNIPW is defined;
* memory AUC (required for some query vs not) of the posterior mean of
  ``tau_relevant`` (and of ``p_relevant_any``) against the best pair contrast (a
  memory's largest pair estimate over both arms; a memory without one scores
  below every other).

Writes reports/simulation/gated.md. Priors are the defaults: nothing was tuned
on these seeds.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/simulation_gated.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import pandas as pd

#: the preset's 600 memories x 200 queries cut to what the shared machine fits in minutes
SIZE = {"memories": 200, "queries": 60, "repeats": 10}


def one(seed: int, draws: int, preset: str = "locomo-window", monotone: bool = False) -> dict:
    from cmp_bayes import Costs, decide, estimate
    from cmp_bayes.constants import CI_PROB
    from cmp_bayes.evaluation import auc
    from cmp_bayes.model.config import ModelConfig
    from cmp_bayes.model.fit import fit
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate
    from cmp_bayes.statistics import exposure_stats

    log = simulate(SimulationConfig.preset(preset, **SIZE), seed=seed)
    t0 = time.perf_counter()
    tree = fit(log, model=ModelConfig(pair_model="gated", gate_rank_monotone=monotone), by="query",
               draws=draws, tune=draws,
               chains=2, seed=seed, progressbar=False)
    secs = time.perf_counter() - t0
    post = tree["posterior"]
    obs = tree["observed_data"]
    key = (np.asarray(post["memory_id"].values).astype(str).astype(object) + "\x00"
           + np.asarray(post["query_id"].values).astype(str).astype(object))
    lab = log.labels[log.labels["utility"].notna()]
    lkey = lab["memory_id"].astype(str).to_numpy(dtype=object) + "\x00" + lab["query_id"].astype(str).to_numpy(dtype=object)
    order = np.argsort(key)
    at = order[np.searchsorted(key[order], lkey)]
    found = key[at] == lkey
    at, truth = at[found], lab["utility"].to_numpy(dtype=float)[found]
    req = lab["required"].to_numpy(dtype=bool)[found]
    tau = post["tau"].values.reshape(-1, key.size)[:, at]
    a = (1 - CI_PROB) / 2
    lo, hi = np.quantile(tau, [a, 1 - a], axis=0)
    mean = tau.mean(axis=0)
    cov = (truth >= lo) & (truth <= hi)
    win_elig = obs["window_eligible"].values[at] > 0
    randomized = obs["gated_exposed"].values[at] > 0

    # the pairs' combined contrast (the arms the gated likelihood uses), over randomized pairs
    n1, y1 = obs["gated_exposed"].values[at], obs["gated_exposed_outcome_sum"].values[at]
    n0, y0 = obs["control"].values[at], obs["control_outcome_sum"].values[at]
    with np.errstate(all="ignore"):
        contrast = y1 / n1 - y0 / n0
    rnd = randomized & (n0 > 0)

    est = estimate(log, by="query")
    win = est[(est["arm"] == "window")].copy()
    wkey = win["memory_id"].astype(str).to_numpy(dtype=object) + "\x00" + win["query_id"].astype(str).to_numpy(dtype=object)
    snipw = dict(zip(wkey, win["estimate"].to_numpy(dtype=float), strict=True))
    s = np.array([snipw.get(k, np.nan) for k in lkey[found]])
    ok = np.isfinite(s)

    # memory level: required for some query; best pair contrast over both arms
    mids = np.asarray(post["memory"].values).astype(str)
    lab_f = lab[found]
    req_mem = lab_f.groupby(lab_f["memory_id"].astype(str))["required"].any().reindex(mids, fill_value=False)
    e = est[np.isfinite(est["estimate"].to_numpy(dtype=float))]
    best = e.groupby(e["memory_id"].astype(str))["estimate"].max().reindex(mids)
    best_v = best.to_numpy(dtype=float)
    best_v = np.where(np.isfinite(best_v), best_v, np.nanmin(best_v) - 1.0)
    y_mem = req_mem.to_numpy(dtype=bool)
    tr = post["tau_relevant"].values.reshape(-1, mids.size).mean(axis=0)
    pany = post["p_relevant_any"].values.reshape(-1, mids.size).mean(axis=0)
    pmax = tree["identification"]["p_relevant_max"].values
    # the two memory-level scores a user has without CMP: the best rank any query gave the
    # memory (best first, never ranked last) and the logged success rate while retrieved
    mstats = exposure_stats(log)
    mrank = pd.Series(mstats["rank_best"].values.astype(float), index=mstats["memory"].values.astype(str)).reindex(mids)
    best_rank = np.where(np.isfinite(mrank), -mrank, -np.inf)
    logged = estimate(log, method="logged-success")
    lsucc = logged.set_index(logged["memory_id"].astype(str))["estimate"].reindex(mids).to_numpy(dtype=float)
    lsucc = np.where(np.isfinite(lsucc), lsucc, -np.inf)
    attempts = tree.attrs.get("fit_attempt_kept")
    # harmful memories (the simulator's "misleading content": every pair it is not required for
    # is hurt, about -0.125): a mean effect off its questions below -0.05
    off = lab[~lab["required"].astype(bool)]
    off_mean = off.groupby(off["memory_id"].astype(str))["utility"].mean().reindex(mids).to_numpy(dtype=float)
    harmful = np.nan_to_num(off_mean, nan=0.0) < -0.05
    tau_mem = post["tau_memory"].values.reshape(-1, mids.size).mean(axis=0)
    table = decide(tree, Costs(estimand="relevant", threshold=0.0)).table.set_index("memory_id").reindex(mids)
    forget = (table["action"] == "forget").to_numpy()
    # every labelled pair: the exact posterior means (every draw) and the retriever's rank alone
    pid = tree["pair_identification"]
    tau_mean = pid["tau_mean"].values[at]
    p_rel = pid["p_relevant_mean"].values[at]
    ps = exposure_stats(log, by="pair")
    pkey = (ps["memory_id"].values.astype(str).astype(object) + "\x00" + ps["query_id"].values.astype(str).astype(object))
    rank_of = dict(zip(pkey, ps["rank_best"].values.astype(float), strict=True))
    rank = np.array([rank_of.get(k, np.nan) for k in lkey[found]])
    neg_rank = np.where(np.isfinite(rank), -rank, -np.inf)
    return {
        "seed": seed, "seconds": secs, "pairs": int(truth.size), "window_eligible": int(win_elig.sum()),
        "randomized": int(randomized.sum()), "required_pairs": int(req.sum()),
        "cov_eligible": float(cov.mean()), "cov_window": float(cov[win_elig].mean()),
        "cov_randomized": float(cov[randomized].mean()), "cov_required": float(cov[req].mean()),
        "snipw_pairs": int(ok.sum()), "snipw_required": int((ok & req).sum()),
        "auc_post": auc(mean[ok], req[ok]), "auc_snipw": auc(s[ok], req[ok]),
        "auc_post_all": auc(mean, req),
        "req_window": int((req & win_elig).sum()), "req_randomized": int((req & rnd).sum()),
        "rnd_pairs": int(rnd.sum()),
        "auc_post_rnd": auc(mean[rnd], req[rnd]), "auc_contrast_rnd": auc(contrast[rnd], req[rnd]),
        "mem_required": int(y_mem.sum()), "memories": int(mids.size),
        "auc_tau_relevant": auc(tr, y_mem), "auc_p_any": auc(pany, y_mem), "auc_best_pair": auc(best_v, y_mem),
        "auc_p_max": auc(pmax, y_mem), "auc_mem_rank": auc(best_rank, y_mem), "auc_logged": auc(lsucc, y_mem),
        "divergences": int(np.asarray(tree["sample_stats"]["diverging"].values).sum()),
        "attempt_kept": attempts,
        "auc_tau_mean_all": auc(tau_mean, req), "auc_p_relevant_all": auc(p_rel, req),
        "auc_rank_all": auc(neg_rank, req),
        "harmful": int(harmful.sum()),
        "auc_harm_tau_memory": auc(-tau_mem, harmful),
        "forget_harmful": int((forget & harmful).sum()), "forget_required": int((forget & y_mem).sum()),
        "forget_all": int(forget.sum()),
    }


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - platform without getloadavg
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--preset", default="locomo-window", choices=["locomo-window", "locomo-nearmiss"],
                    help="locomo-nearmiss: the retriever's misses shaped like BM25's on LoCoMo")
    ap.add_argument("--gate-rank-monotone", action=argparse.BooleanOptionalAction, default=True,
                    help="ModelConfig.gate_rank_monotone (the default, True, gives the file name _monotone; "
                         "--no-gate-rank-monotone the free gate)")
    ap.add_argument("--out", default=None, help="default reports/simulation/gated.md (gated_nearmiss.md)")
    args = ap.parse_args()
    stem = "gated" if args.preset == "locomo-window" else "gated_nearmiss"
    out = args.out or f"reports/simulation/{stem}{'_monotone' if args.gate_rank_monotone else ''}.md"
    flag = " --gate-rank-monotone" if args.gate_rank_monotone else " --no-gate-rank-monotone"
    model_text = f"pair_model=\"gated\", gate_rank_monotone={args.gate_rank_monotone}"
    from cmp_bayes.atomic import write_text_atomic

    load_before = _load()
    rows = []
    for seed in args.seeds:
        rows.append(one(seed, args.draws, args.preset, args.gate_rank_monotone))
        print(rows[-1], flush=True)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if isinstance(rows[0][k], float)}
    lines = [
        "# The relevance-gated pair model on the simulator's shared store under a window design",
        "",
        f"`benchmarks/simulation_gated.py --preset {args.preset} --seeds {' '.join(map(str, args.seeds))} "
        f"--draws {args.draws}{flag}`: preset `{args.preset}` cut to {SIZE} (the preset has 600 memories, 200 queries), "
        f"`fit(log, by=\"query\", model=ModelConfig({model_text}))` at default priors, "
        f"2 chains x {args.draws} draws after {args.draws} tuning steps, nutpie. "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
        f"load average before {load_before}, after {_load()} (a shared machine: times are indicative).",
        "",
        "Targets (issue 16): 90% coverage 0.85-0.95 among eligible pairs; posterior pair AUC at least "
        "0.02 above the window SNIPW's; tau_relevant's memory AUC at least 0.05 above the best pair contrast's.",
        "",
        "## Coverage of the pairs' 90% intervals",
        "",
        "| seed | pairs | eligible | window-eligible | randomized | required | fit s | divergences | attempt kept |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['pairs']} | {r['cov_eligible']:.3f} | {r['cov_window']:.3f} ({r['window_eligible']}) "
            f"| {r['cov_randomized']:.3f} ({r['randomized']}) | {r['cov_required']:.3f} ({r['required_pairs']}) "
            f"| {r['seconds']:.0f} | {r['divergences']} | {r['attempt_kept']} |"
        )
    lines.append(
        f"| mean | | {mean['cov_eligible']:.3f} | {mean['cov_window']:.3f} | {mean['cov_randomized']:.3f} "
        f"| {mean['cov_required']:.3f} | | | |"
    )
    lines += [
        "",
        "## Pair AUC (required vs not), pairs with a window SNIPW",
        "",
        "| seed | pairs (required) | posterior mean of tau | window SNIPW | difference | posterior, all pairs |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['snipw_pairs']} ({r['snipw_required']}) | {r['auc_post']:.3f} | {r['auc_snipw']:.3f} "
            f"| {r['auc_post'] - r['auc_snipw']:+.3f} | {r['auc_post_all']:.3f} |"
        )
    lines.append(
        f"| mean | | {mean['auc_post']:.3f} | {mean['auc_snipw']:.3f} | {mean['auc_post'] - mean['auc_snipw']:+.3f} "
        f"| {mean['auc_post_all']:.3f} |"
    )
    lines += [
        "",
        "Required pairs in some window of their query, per seed: "
        + ", ".join(str(r["req_window"]) for r in rows)
        + f" (of {rows[0]['required_pairs']}). Beside it, the pairs with a randomized exposure under either arm and a "
        "control step, scored by the posterior mean of tau and by the pair's own contrast (exposed mean minus "
        "control mean over the arms the gated likelihood uses):",
        "",
        "| seed | pairs (required) | posterior mean of tau | pair contrast | difference |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['rnd_pairs']} ({r['req_randomized']}) | {r['auc_post_rnd']:.3f} "
            f"| {r['auc_contrast_rnd']:.3f} | {r['auc_post_rnd'] - r['auc_contrast_rnd']:+.3f} |"
        )
    lines.append(
        f"| mean | | {mean['auc_post_rnd']:.3f} | {mean['auc_contrast_rnd']:.3f} "
        f"| {mean['auc_post_rnd'] - mean['auc_contrast_rnd']:+.3f} |"
    )
    lines += [
        "",
        "## Memory AUC (required for some query vs not)",
        "",
        "| seed | memories (required) | tau_relevant | p_relevant_any | p_relevant_max | best pair contrast "
        "| tau_relevant - best pair | best rank | logged success |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['memories']} ({r['mem_required']}) | {r['auc_tau_relevant']:.3f} | {r['auc_p_any']:.3f} "
            f"| {r['auc_p_max']:.3f} | {r['auc_best_pair']:.3f} | {r['auc_tau_relevant'] - r['auc_best_pair']:+.3f} "
            f"| {r['auc_mem_rank']:.3f} | {r['auc_logged']:.3f} |"
        )
    lines.append(
        f"| mean | | {mean['auc_tau_relevant']:.3f} | {mean['auc_p_any']:.3f} | {mean['auc_p_max']:.3f} "
        f"| {mean['auc_best_pair']:.3f} | {mean['auc_tau_relevant'] - mean['auc_best_pair']:+.3f} "
        f"| {mean['auc_mem_rank']:.3f} | {mean['auc_logged']:.3f} |"
    )
    lines += [
        "",
        "`p_relevant_max` is `identification.p_relevant_max` (the memory's best pair's P(z = 1 | data)); "
        "best rank and logged success are the scores a memory system has without CMP "
        "(the best rank any query gave the memory; its success rate while retrieved; a memory never "
        "ranked or never retrieved scores last).",
    ]
    lines += [
        "",
        "## Pair AUC over every labelled pair: the posterior's exact means and the rank alone",
        "",
        "`pair_identification.tau_mean` and `p_relevant_mean` (averaged over every draw), against the "
        "retriever's best rank of the memory for the query (best first; never ranked last).",
        "",
        "| seed | pairs (required) | tau_mean | p_relevant_mean | best rank |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['pairs']} ({r['required_pairs']}) | {r['auc_tau_mean_all']:.3f} "
            f"| {r['auc_p_relevant_all']:.3f} | {r['auc_rank_all']:.3f} |"
        )
    lines.append(
        f"| mean | | {mean['auc_tau_mean_all']:.3f} | {mean['auc_p_relevant_all']:.3f} | {mean['auc_rank_all']:.3f} |"
    )
    lines += [
        "",
        "## Harmful memories (hurt every question they are not required for)",
        "",
        "Harmful: a memory whose mean true effect over the questions it is not required for is below "
        "-0.05 (the simulator's misleading memories, about -0.125 at every pair). AUC of harmful against "
        "the rest by minus the posterior mean of `tau_memory`; "
        "`decide(tree, Costs(estimand=\"relevant\", threshold=0.0))`'s forgets.",
        "",
        "| seed | harmful | AUC -tau_memory | forgets | of them harmful | of them required |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['harmful']} | {r['auc_harm_tau_memory']:.3f} "
            f"| {r['forget_all']} | {r['forget_harmful']} | {r['forget_required']} |"
        )
    write_text_atomic(out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
