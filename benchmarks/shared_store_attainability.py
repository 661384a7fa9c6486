"""Can the simulator bullet of issue 16 be met? What the window-design logs carry (Done-when 2).

Issue 16 asks, on the simulator's shared-store preset under a window design (3
seeds): pair-level 90% intervals covering 0.85-0.95 of pair truths among
eligible pairs; the posterior's pair AUC at least 0.02 above the window SNIPW's;
``tau_relevant`` ranking memories at least 0.05 AUC above the best pair contrast.
This script measures, per preset and seed, what the log can support.

Part 1, no fit (the preset's full size and the cut the fits use):

* the randomized reach: required memories with a randomized exposure (pool
  arm, or window arm with pi_t < 1) under a question they are required for;
* the ceiling of ``tau_relevant``'s memory AUC. ``tau_relevant`` is a memory's
  effect when relevant, learned from its randomized exposures; its prior is the
  same for every memory (no rank, no retrieval). A required memory that was
  never exposed at random under a question it serves has randomized evidence
  only where its truth is the null, exactly as a memory required by nothing:
  no score of the randomized evidence can tell those apart better than chance.
  Ranking the reached required memories first (perfectly) and the rest tied
  gives AUC ``0.5 + 0.5 * reached / required``: the ceiling;
* the best pair contrast's AUC (a memory's largest pair SNIPW over both arms,
  as ``benchmarks/simulation_gated.py`` scores it) and the target it sets
  (+0.05).

Part 2, one fit per seed (the cut size, the monotone gate, fit's defaults
otherwise): the pairs' coverage as a function of the null's width. Every
posterior draw of the hyperparameters is kept except ``tau_null_sd``, which is
set to ``s``; the exact recovery then gives each pair's posterior draws, so the
coverage at ``s`` is that of a posterior sure the null is ``s`` wide. Beside it
the data's log-likelihood (the gated potential) at ``s``, averaged over the
draws, relative to its best ``s``: how strongly the log says which width is
right. The posterior pair AUC against the window SNIPW with a paired stratified
bootstrap interval says whether a difference of 0.02 is resolvable at all.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/shared_store_attainability.py \\
        --out reports/simulation/attainability.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any

import numpy as np
import pandas as pd

#: the cut benchmarks/simulation_gated.py fits on (the preset: 600 memories, 200 queries)
CUT = {"memories": 200, "queries": 60, "repeats": 10}
#: null widths tried in part 2 (the prior's 95% range is 0.008-0.027)
WIDTHS = (0.004, 0.006, 0.008, 0.010, 0.0125, 0.015, 0.02, 0.03)


def _keys(m: Any, q: Any) -> np.ndarray:
    return np.asarray(m).astype(str).astype(object) + "\x00" + np.asarray(q).astype(str).astype(object)


def reach(log: Any) -> dict:
    """Part 1: randomized reach, tau_relevant's ceiling and the best pair contrast's AUC."""
    from cmp_bayes import estimate
    from cmp_bayes.evaluation import auc
    from cmp_bayes.statistics import exposure_stats

    lab = log.labels[log.labels["utility"].notna()]
    ps = exposure_stats(log, by="pair")
    randomized = (np.asarray(ps["exposed"].values) > 0) | (
        (np.asarray(ps["window_exposed"].values) - np.asarray(ps["window_certain"].values)) > 0)
    rkeys = set(_keys(ps["memory_id"].values, ps["query_id"].values)[randomized])
    req = lab[lab["required"].astype(bool)]
    req_keys = _keys(req["memory_id"], req["query_id"])
    reached_pair = np.array([k in rkeys for k in req_keys], dtype=bool)
    reached_mem = set(req["memory_id"].astype(str)[reached_pair])
    mids = pd.Index(exposure_stats(log)["memory"].values.astype(str))
    y = mids.isin(list(set(req["memory_id"].astype(str))))
    is_reached = mids.isin(list(reached_mem))
    ceiling = auc(is_reached.astype(float), y)
    # generous: the rest ordered by each memory's *true* mean effect off its required questions
    # (harmful memories are rarely required), in whichever direction ranks better
    off = lab[~lab["required"].astype(bool)]
    off_mean = off.groupby(off["memory_id"].astype(str))["utility"].mean().reindex(mids).fillna(0.0).to_numpy()
    big = 10.0 * (np.abs(off_mean).max() + 1.0)
    oracle = max(auc(np.where(is_reached, big, sign * off_mean), y) for sign in (1.0, -1.0))
    est = estimate(log, by="query")
    e = est[np.isfinite(est["estimate"].to_numpy(dtype=float))]
    best = e.groupby(e["memory_id"].astype(str))["estimate"].max().reindex(mids).to_numpy(dtype=float)
    best = np.where(np.isfinite(best), best, np.nanmin(best) - 1.0)
    best_auc = auc(best, y)
    return {
        "memories": int(mids.size), "required": int(y.sum()), "reached": len(reached_mem),
        "required_pairs": int(len(req_keys)), "reached_pairs": int(reached_pair.sum()),
        "ceiling": ceiling, "oracle": oracle, "best_pair": best_auc, "needed": best_auc + 0.05,
    }


def widths(log: Any, seed: int, draws: int) -> dict:
    """Part 2: one gated fit; coverage and log-likelihood with the null's width set to each of WIDTHS."""
    import pytensor.tensor as pt

    from cmp_bayes.constants import CI_PROB
    from cmp_bayes.model.config import ModelConfig
    from cmp_bayes.model.fit import fit
    from cmp_bayes.model.gated import build_gated_model, gated_data
    from cmp_bayes.model.gated_recover import recover_gated
    from cmp_bayes.replicate.experiment import paired_auc_difference
    from cmp_bayes.statistics import exposure_stats

    config = ModelConfig(pair_model="gated", gate_rank_monotone=True)
    t0 = time.perf_counter()
    tree = fit(log, model=config, by="query", draws=draws, tune=draws, chains=2, seed=seed, progressbar=False)
    secs = time.perf_counter() - t0
    gd = gated_data(exposure_stats(log), exposure_stats(log, by="pair"), config)
    model = build_gated_model(gd, config)
    post = tree["posterior"].to_dataset()
    free = [rv.name for rv in model.free_RVs]
    flat = {n: post[n].values.reshape(-1, *post[n].shape[2:]) for n in free}
    if "gate_coef" in post:
        flat["gate_coef"] = post["gate_coef"].values.reshape(-1, *post["gate_coef"].shape[2:])
    s = next(iter(flat.values())).shape[0]

    # the data's log-likelihood given theta: the gated potential, on transformed values
    # compile_logp, not compile_fn: a Potential's graph is written in the random variables,
    # which compile_fn would draw afresh at every call instead of reading the point's values
    loglik = model.compile_logp(vars=[model["tau_gated"]], jacobian=False)
    values = {}
    for rv in model.free_RVs:
        tr = model.rvs_to_transforms.get(rv)
        x = flat[rv.name]
        values[model.rvs_to_values[rv].name] = (
            x if tr is None else tr.forward(pt.as_tensor_variable(x), *rv.owner.inputs).eval())
    null_value = model.rvs_to_values[model["tau_null_sd"]].name

    lab = log.labels[log.labels["utility"].notna()]
    key = _keys(gd.pair_coords["memory_id"][1], gd.pair_coords["query_id"][1])
    order = np.argsort(key)
    lkey = _keys(lab["memory_id"], lab["query_id"])
    at = order[np.searchsorted(key[order], lkey)]
    found = key[at] == lkey
    at, truth = at[found], lab["utility"].to_numpy(dtype=float)[found]
    required = lab["required"].to_numpy(dtype=bool)[found]
    a = (1 - CI_PROB) / 2
    null_truth = truth[~required]
    rows = []
    for w in (None, *WIDTHS):
        hyper = dict(flat)
        vals = dict(values)
        if w is not None:
            hyper["tau_null_sd"] = np.full(s, w)
            vals[null_value] = np.full(s, np.log(w))
        rec = recover_gated(gd, hyper, np.random.default_rng(seed), use_data=True, jitter=config.jitter)
        lo, hi = np.quantile(rec.tau[:, at], [a, 1 - a], axis=0)
        cov = (truth >= lo) & (truth <= hi)
        ll = np.array([float(loglik({k: v[i] for k, v in vals.items()})) for i in range(s)])
        rows.append({"width": w, "coverage": float(cov.mean()), "coverage_null": float(cov[~required].mean()),
                     "coverage_required": float(cov[required].mean()), "loglik": float(ll.mean())})
        del rec
    best = max(r["loglik"] for r in rows if r["width"] is not None)
    for r in rows:
        r["loglik_vs_best"] = r["loglik"] - best

    # the posterior's pair AUC against the window SNIPW, paired bootstrap over the SNIPW's pairs
    from cmp_bayes import estimate

    est = estimate(log, by="query")
    win = est[est["arm"] == "window"]
    snipw = dict(zip(_keys(win["memory_id"], win["query_id"]), win["estimate"].to_numpy(dtype=float),
                     strict=True))
    sv = np.array([snipw.get(k, np.nan) for k in lkey[found]])
    ok = np.isfinite(sv)
    tau_mean = post["tau"].values.reshape(-1, key.size)[:, at].mean(axis=0)
    diff = paired_auc_difference(tau_mean[ok], sv[ok], required[ok], n_boot=2000, seed=seed)
    post_sd = float(np.asarray(post["tau_null_sd"].values).mean())
    return {"seconds": secs, "rows": rows, "null_truth_sd": float(null_truth.std()),
            "null_truth_mean": float(null_truth.mean()), "tau_null_sd_mean": post_sd, "auc_diff": diff,
            "snipw_pairs": int(ok.sum()), "snipw_required": int((ok & required).sum()),
            "n_draws": s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--presets", nargs="+", default=["locomo-window", "locomo-nearmiss"])
    ap.add_argument("--fit-preset", default="locomo-nearmiss")
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--no-fit", action="store_true", help="part 1 only")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from cmp_bayes.simulation.simulator import SimulationConfig, simulate

    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    part1 = []
    for preset in args.presets:
        for size_name, size in (("full", {}), ("cut", CUT)):
            for seed in args.seeds:
                log = simulate(SimulationConfig.preset(preset, **size), seed=seed)
                part1.append({"preset": preset, "size": size_name, "seed": seed, **reach(log)})
                print(part1[-1], flush=True)
    part2 = []
    if not args.no_fit:
        for seed in args.seeds:
            log = simulate(SimulationConfig.preset(args.fit_preset, **CUT), seed=seed)
            part2.append({"seed": seed, **widths(log, seed, args.draws)})
            print({k: v for k, v in part2[-1].items() if k != "rows"}, flush=True)
            for r in part2[-1]["rows"]:
                print(r, flush=True)

    lines = [
        "# Issue 16's simulator bullet: what the window-design logs can support",
        "",
        f"`benchmarks/shared_store_attainability.py --seeds {' '.join(map(str, args.seeds))}`. Presets "
        f"{', '.join(args.presets)} at their full size (600 memories, 200 questions asked 10 times) and at the "
        f"cut the gated fits use ({CUT}). Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}; load average before {load_before}, after "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
        "## 1. tau_relevant's ceiling (no fit)",
        "",
        "Reached: required memories with a randomized exposure under a question they are required for. "
        "Ceiling: the memory AUC of ranking the reached ones first and the rest tied (0.5 + 0.5 x reached / "
        "required), the most any score of the randomized evidence alone can give when the memories it does "
        "not reach look alike. They do not quite: harmful memories are rarely required. Oracle ceiling: the "
        "reached ones first and the rest ordered by each memory's *true* mean effect over the questions it is "
        "not required for (the simulator's labels; in whichever direction ranks better), an upper bound on "
        "what a perfect estimate of a memory's effect off its questions could add. Needed: the best pair "
        "contrast's AUC + 0.05 (the target).",
        "",
        "| preset | size | seed | memories (required) | reached | required pairs (reached) | ceiling | oracle ceiling | best pair contrast | needed | ceiling - needed | oracle - needed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in part1:
        lines.append(
            f"| {r['preset']} | {r['size']} | {r['seed']} | {r['memories']} ({r['required']}) | {r['reached']} "
            f"| {r['required_pairs']} ({r['reached_pairs']}) | {r['ceiling']:.3f} | {r['oracle']:.3f} "
            f"| {r['best_pair']:.3f} | {r['needed']:.3f} | {r['ceiling'] - r['needed']:+.3f} "
            f"| {r['oracle'] - r['needed']:+.3f} |")
    if part2:
        lines += [
            "",
            f"## 2. Coverage against the null's width ({args.fit_preset}, cut size, one fit per seed)",
            "",
            f"`fit(log, by=\"query\", model=ModelConfig(pair_model=\"gated\", gate_rank_monotone=True))`, 2 chains "
            f"x {args.draws} draws. Row 'fit': the posterior as fitted; the other rows: every draw with "
            "`tau_null_sd` set to the width. Log-lik.: the gated potential (the data's likelihood given "
            "the hyperparameters), averaged over the draws, relative to the best width (nats).",
            "",
            "| seed | width | coverage, eligible pairs | null pairs | required pairs | log-lik. vs best |",
            "| ---: | --- | ---: | ---: | ---: | ---: |",
        ]
        for p in part2:
            for r in p["rows"]:
                w = "fit" if r["width"] is None else f"{r['width']:g}"
                lines.append(
                    f"| {p['seed']} | {w} | {r['coverage']:.3f} | {r['coverage_null']:.3f} "
                    f"| {r['coverage_required']:.3f} | {r['loglik_vs_best']:+.1f} |")
        lines += [
            "",
            "| seed | fit s | null pairs' true effects: mean, sd | tau_null_sd posterior mean | SNIPW pairs (required) | posterior - SNIPW pair AUC [90%] |",
            "| ---: | ---: | --- | ---: | ---: | --- |",
        ]
        for p in part2:
            d = p["auc_diff"]
            diff = "n/a" if d["diff"] is None else f"{d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
            lines.append(
                f"| {p['seed']} | {p['seconds']:.0f} | {p['null_truth_mean']:+.4f}, {p['null_truth_sd']:.4f} "
                f"| {p['tau_null_sd_mean']:.4f} | {p['snipw_pairs']} ({p['snipw_required']}) | {diff} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from cmp_bayes.atomic import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
