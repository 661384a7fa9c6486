"""AUCs of a gated posterior against a log's labels (issue 16, Done-when 3).

Memory level: the posterior means of ``tau_relevant``, ``p_relevant_any``,
``tau_memory`` and ``utility_memory`` (required = required for some question).
Pair level: ``pair_identification.tau_mean`` and the stored draws' mean of
``p_relevant``. All through :func:`cmp_bayes.evaluation.evaluate` (bootstrap
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
    pid = tree["pair_identification"]
    pairs = pd.DataFrame({"memory_id": pid["memory_id"].values.astype(str),
                          "query_id": pid["query_id"].values.astype(str),
                          "status": pid["status"].values.astype(str)})
    for name, score in (("pair tau_mean", pid["tau_mean"].values),
                        ("pair p_relevant (stored draws)", post["p_relevant"].mean(("chain", "draw")).values)):
        rows[name] = evaluate(log, pairs.assign(score=score), level="pair", n_boot=args.n_boot)
    keep = ("auc", "ci_low", "ci_high", "n", "n_required")
    table = {k: {f: r[f] for f in keep if f in r} for k, r in rows.items()}
    for k, r in table.items():
        print(f"{k}: AUC {r['auc']:.3f} ({r['ci_low']:.3f}-{r['ci_high']:.3f}), n {r['n']}, required {r['n_required']}")
    if args.out:
        args.out.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
