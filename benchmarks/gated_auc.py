"""AUCs of a gated posterior against a log's labels (issue 16, Done-when 3).

Memory level: the posterior means of ``tau_relevant``, ``p_relevant_any``,
``tau_memory`` and ``utility_memory``, and ``identification.p_relevant_max``
(required = required for some question).
Pair level: ``pair_identification.tau_mean`` and ``p_relevant_mean``, the
stored draws' mean of ``p_relevant``, and the retriever's best rank alone. All through :func:`cmp_bayes.evaluation.evaluate` (bootstrap
intervals). Used for reports/benchmarks/fit_pairs.md:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/gated_auc.py /tmp/locomo10_window \\
        /tmp/fit_pairs_gated.nc --out /tmp/auc.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from cmp_bayes.evaluation import evaluate
from cmp_bayes.log.read import read_log
from cmp_bayes.posterior.io import load_posterior


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("posterior", type=Path)
    ap.add_argument("--n-boot", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    log, tree = read_log(args.log), load_posterior(args.posterior)
    post = tree["posterior"]
    rows = {}
    status = tree["identification"]["status"].values.astype(str)
    for v in ("tau_relevant", "p_relevant_any", "tau_memory", "utility_memory"):
        frame = pd.DataFrame({"memory_id": post["memory"].values.astype(str),
                              "score": post[v].mean(("chain", "draw")).values, "status": status})
        rows[f"memory {v}"] = evaluate(log, frame, level="memory", n_boot=args.n_boot)
    if "p_relevant_max" in tree["identification"]:
        frame = pd.DataFrame({"memory_id": post["memory"].values.astype(str),
                              "score": tree["identification"]["p_relevant_max"].values, "status": status})
        rows["memory p_relevant_max"] = evaluate(log, frame, level="memory", n_boot=args.n_boot)
    pid = tree["pair_identification"]
    pairs = pd.DataFrame({"memory_id": pid["memory_id"].values.astype(str),
                          "query_id": pid["query_id"].values.astype(str),
                          "status": pid["status"].values.astype(str)})
    scores = [("pair tau_mean", pid["tau_mean"].values)]
    if "p_relevant_mean" in pid:  # exact, over every draw (fits since the hyper_diagnostics change)
        scores.append(("pair p_relevant_mean", pid["p_relevant_mean"].values))
    scores.append(("pair p_relevant (stored draws)", post["p_relevant"].mean(("chain", "draw")).values))
    # the retriever's rank alone: best 0-based rank of the memory for the question (unranked: NaN, last)
    from cmp_bayes.statistics import exposure_stats

    ps = exposure_stats(log, by="pair")
    rank = pd.DataFrame({"memory_id": ps["memory_id"].values.astype(str), "query_id": ps["query_id"].values.astype(str),
                         "rank": ps["rank_best"].values.astype(float)})
    rank.loc[ps["ranked"].values <= 0, "rank"] = float("nan")
    at = pairs.merge(rank, on=["memory_id", "query_id"], how="left")["rank"].to_numpy()
    scores.append(("pair best rank alone", -at))
    for name, score in scores:
        rows[name] = evaluate(log, pairs.assign(score=score), level="pair", n_boot=args.n_boot)
    keep = ("auc", "ci_low", "ci_high", "n", "n_required")
    table = {k: {f: r[f] for f in keep if f in r} for k, r in rows.items()}
    for k, r in table.items():
        print(f"{k}: AUC {r['auc']:.3f} ({r['ci_low']:.3f}-{r['ci_high']:.3f}), n {r['n']}, required {r['n_required']}")
    if args.out:
        args.out.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
