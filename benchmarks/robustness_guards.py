"""decide's guard settings side by side, on the posteriors a robustness-study run kept.

    .venv/bin/python benchmarks/robustness_guards.py /tmp/cmp_bayes_robustness_gmodel \
        -o reports/robustness/gmodel/guards.md

``benchmarks/robustness.py`` saves each fit as ``<workdir>/<dgp>-<seed>/posterior.nc``
beside its log and ``truth.csv``. This reruns ``decide`` on them with each guard
setting below (nothing is refitted) and scores the realized loss at costs 20:1
against thresholding Hajek estimates and keeping everything, so a guard's price
and what it protects are measured on the same posteriors.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from robustness_dgp import read_truth  # noqa: E402

from cmp_bayes.atomic import write_text_atomic  # noqa: E402
from cmp_bayes.decision.baselines import hajek_threshold, realized_loss  # noqa: E402
from cmp_bayes.decision.costs import Costs  # noqa: E402

#: Guard settings: name -> Costs fields (the threshold is added per column).
SETTINGS: dict[str, dict] = {
    "default": {},
    "defer_few": {"prior_driven": "defer_few"},
    "allow": {"prior_driven": "allow"},
    "strict R-hat gate": {"max_rhat_chainwise": 1.01},
}
THRESHOLDS = (0.02, 0.05, 0.1)


def score(run: Path) -> dict:
    import cmp_bayes
    from cmp_bayes.model.fit import memory_inputs

    post = cmp_bayes.load_posterior(run / "posterior.nc")
    truth = read_truth(run)
    log = cmp_bayes.read_log(run)
    stats, _, _ = memory_inputs(log)
    ids = stats["memory"].to_numpy().astype(str)
    out: dict = {}
    for u in THRESHOLDS:
        row = {}
        for name, extra in SETTINGS.items():
            costs = Costs(threshold=u, **extra)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dec = cmp_bayes.decide(post, costs)
            acts = dec.table.set_index(dec.table["memory_id"].astype(str))["action"].astype(str)
            row[name] = realized_loss(acts.reindex(ids), truth, costs)["loss"]
        costs = Costs(threshold=u)
        row["Hajek"] = realized_loss(hajek_threshold(stats, costs).reindex(ids), truth, costs)["loss"]
        row["keep"] = realized_loss(pd.Series("retain", index=ids), truth, costs)["loss"]
        out[u] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("-o", "--out", type=Path, default=None)
    args = parser.parse_args()
    runs = sorted(p.parent for p in args.workdir.glob("*/posterior.nc"))
    scores = {r.name: score(r) for r in runs}
    cols = [*SETTINGS, "Hajek", "keep"]
    lines = [
        f"# decide's guards on the kept posteriors of `{args.workdir}`",
        "",
        "Written by `benchmarks/robustness_guards.py` (nothing refitted). Realized loss at "
        "costs 20:1 (cost units); **default** = `Costs(threshold=u)`; **defer_few**, **allow** = "
        "`prior_driven` set so; **strict R-hat gate** = `max_rhat_chainwise=1.01` (no chainwise "
        "forgets). Lower is better.",
        "",
    ]
    for u in THRESHOLDS:
        lines += [f"## threshold {u}", "", "| log | " + " | ".join(cols) + " |",
                  "| --- | " + " | ".join("---:" for _ in cols) + " |"]
        for name, sc in scores.items():
            lines.append(f"| {name} | " + " | ".join(f"{sc[u][c]:.0f}" for c in cols) + " |")
        total = {c: float(np.sum([sc[u][c] for sc in scores.values()])) for c in cols}
        lines += ["| **total** | " + " | ".join(f"**{total[c]:.0f}**" for c in cols) + " |", ""]
    text = "\n".join(lines)
    if args.out:
        write_text_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
