"""How far can a memory-level ranking go on a shared-store log? Ceilings from the log alone (issue 16).

Issue 16 asks the gated model to rank required memories (required by some
question) at 0.72 AUC on all ten LoCoMo conversations at today's exposure
slots, above logged success (0.682). This script measures, on a log with labels
and no fit, what the evidence in the log can support:

* the scores a memory system has without CMP: logged success (success rate
  while retrieved), "ever retrieved", and the memory's best rank over the
  questions asked (never ranked: last);
* the randomized reach: required memories with a randomized exposure (pool
  arm, or window arm with pi_t < 1) under a question they are required for.
  Only those can show their effect where it matters; the others' randomized
  exposures all fall under questions they cannot help;
* ceiling 1: a perfect use of the randomized evidence (every reached required
  memory ranked first) with the best rank elsewhere, and the same with logged
  success elsewhere;
* ceiling 2: a pair-level logistic regression of "required" fitted **on the
  labels** (log rank, retrieved, the question's success rate, their product) and
  aggregated to memories by the max (and by noisy-or): not a method, an upper
  bound on what those signals carry together;
* ceiling 3: both at once, the reached required memories first and the
  label-fitted regression elsewhere.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/shared_store_ceiling.py /tmp/locomo10_window \\
        --out reports/replication/shared_store_ceiling.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from cmp_bayes.evaluation import auc, auc_interval
from cmp_bayes.log.read import read_log
from cmp_bayes.statistics import exposure_stats


def _logistic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fitted probabilities of a logistic regression of y on standardised columns of x (maximum likelihood)."""
    z = np.column_stack([np.ones(len(x)), (x - x.mean(axis=0)) / x.std(axis=0)])
    yf = y.astype(np.float64)

    def nll(b: np.ndarray) -> tuple[float, np.ndarray]:
        eta = z @ b
        return float(np.sum(np.logaddexp(0.0, eta) - yf * eta)), z.T @ (1.0 / (1.0 + np.exp(-eta)) - yf)

    b = minimize(nll, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B").x
    return 1.0 / (1.0 + np.exp(-(z @ b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", type=Path, help="a log with labels.jsonl (replicate experiment --log-out)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--n-boot", type=int, default=1000)
    args = ap.parse_args()
    log = read_log(args.log)
    labels = log.labels
    if labels is None:
        raise SystemExit(f"{args.log}: no labels.jsonl")
    req = labels[labels["required"].astype(bool)]
    req_mem = set(req["memory_id"].astype(str))
    req_pair = set(zip(req["memory_id"].astype(str), req["query_id"].astype(str), strict=True))
    ps = exposure_stats(log, by="pair")
    mids = pd.Index(exposure_stats(log)["memory"].values.astype(str))
    y = mids.isin(list(req_mem))

    def col(name: str) -> np.ndarray:
        return np.asarray(ps[name].values)

    pairs = pd.DataFrame({
        "m": col("memory_id").astype(str), "q": col("query_id").astype(str),
        "retrieved": col("retrieved"), "retrieved_sum": col("retrieved_outcome_sum"),
        "rank_best": col("rank_best").astype(float),
        "randomized": (col("exposed") > 0) | ((col("window_exposed") - col("window_certain")) > 0),
    })
    pairs["required"] = [(m, q) in req_pair for m, q in zip(pairs["m"], pairs["q"], strict=True)]
    q_success = log.steps.groupby(log.steps["query_id"].astype(str))["outcome"].mean()
    pairs["q_success"] = pairs["q"].map(q_success).to_numpy(np.float64)

    def per_memory(series: pd.Series, fill: float) -> np.ndarray:
        return series.reindex(mids).fillna(fill).to_numpy(np.float64)

    ret = pairs[pairs["retrieved"] > 0]
    logged = per_memory(ret.groupby("m")["retrieved_sum"].sum() / ret.groupby("m")["retrieved"].sum(), -1.0)
    ever = per_memory(ret.groupby("m").size().astype(float).clip(upper=1.0), 0.0)
    deepest = np.nanmax(pairs["rank_best"].to_numpy())
    best_rank = -per_memory(pairs.groupby("m")["rank_best"].min(), deepest + 1.0)
    reached = set(pairs.loc[pairs["randomized"] & pairs["required"], "m"])
    is_reached = mids.isin(list(reached))
    top = 1e9

    pairs["log_rank"] = np.log1p(pairs["rank_best"].fillna(deepest + 1.0))
    pairs["is_retrieved"] = (pairs["retrieved"] > 0).astype(np.float64)
    x = pairs[["log_rank", "is_retrieved", "q_success"]].to_numpy(np.float64)
    x = np.column_stack([x, x[:, 1] * x[:, 2]])
    p_pair = _logistic(x, pairs["required"].to_numpy(bool))
    pairs["p_fit"] = p_pair
    fit_max = per_memory(pairs.groupby("m")["p_fit"].max(), 0.0)
    fit_any = per_memory(pairs.groupby("m")["p_fit"].apply(lambda v: 1.0 - np.prod(1.0 - v.to_numpy())), 0.0)

    rows = [
        ("logged success (while retrieved; never retrieved last)", logged),
        ("ever retrieved", ever),
        ("best rank over the questions asked", best_rank),
        ("ceiling 1: reached required memories first, best rank elsewhere", np.where(is_reached, top, best_rank)),
        ("ceiling 1: reached required memories first, logged success elsewhere", np.where(is_reached, top, logged)),
        ("ceiling 2: label-fitted pair regression, max over pairs", fit_max),
        ("ceiling 2: label-fitted pair regression, noisy-or over pairs", fit_any),
        ("ceiling 3: reached required memories first, label-fitted regression elsewhere",
         np.where(is_reached, top, fit_max)),
    ]
    n_req_pairs = int(pairs["required"].sum())
    lines = [
        "# Shared stores: how far the log's evidence can rank memories (no fit)",
        "",
        f"`benchmarks/shared_store_ceiling.py {args.log.name}`: {log.n_steps:,} steps, {len(mids):,} memories "
        f"({int(y.sum()):,} required by some question), {len(pairs):,} pairs ({n_req_pairs:,} required). "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}. "
        "AUC of required memories against the rest, with stratified-bootstrap 90% intervals.",
        "",
        f"Randomized reach: {len(reached):,} of {int(y.sum()):,} required memories "
        f"({len(reached) / max(int(y.sum()), 1):.1%}) have a randomized exposure under a question they are "
        f"required for ({int((pairs['randomized'] & pairs['required']).sum()):,} of {n_req_pairs:,} required "
        f"pairs); {int((pairs['retrieved'] > 0).sum()):,} pairs were retrieved, "
        f"{int(((pairs['retrieved'] > 0) & pairs['required']).sum()):,} of them required. "
        f"Pair AUC of the rank alone {auc(-pairs['log_rank'].to_numpy(), pairs['required'].to_numpy()):.3f}, "
        f"of the label-fitted regression {auc(p_pair, pairs['required'].to_numpy()):.3f}.",
        "",
        "| memory score | AUC | 90% interval |",
        "| --- | ---: | --- |",
    ]
    for name, score in rows:
        point, lo, hi = auc_interval(score, y, n_boot=args.n_boot, seed=0)
        lines.append(f"| {name} | {point:.3f} | {lo:.3f}-{hi:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from cmp_bayes.atomic import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
