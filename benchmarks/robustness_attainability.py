"""Which of issue 15's "Done when" criteria does the oracle prior itself meet? (from a study's results JSON)

The robustness study (benchmarks/robustness.py) scores, beside the default model,
an **oracle**: each memory's grid posterior under the package's likelihood with
the histogram of every memory's true tau as the prior, and its Bayes rule. It
knows the effect distribution, which no user does. A criterion the oracle
misses on a seed is one that knowing the effect distribution does not deliver
there (it may still be reachable with another likelihood: the oracle shares the
package's); a criterion the model misses while the oracle meets it is one a
better prior could reach. For each DGP and criterion this prints seeds met by
decide (default guards) and by the oracle, from the study's ``results.json``:

    .venv/bin/python benchmarks/robustness_attainability.py reports/robustness/gmodel/results.json \\
        --out reports/robustness/attainability.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

#: (criterion, test on one run for a method, the method's name in the run's tables)
Check = Callable[[dict, str], bool]


def _loss(run: dict, threshold: str, who: str) -> float:
    return float(run["loss"][threshold][who]["loss"])


def _criteria() -> list[tuple[str, Check]]:
    out: list[tuple[str, Check]] = [
        ("90% intervals cover 0.85-0.95", lambda r, w: 0.85 <= r["coverage"][w] <= 0.95),
        ("AUC >= Hajek's", lambda r, w: r["auc"][w] >= r["auc"]["hajek"]),
        ("MSE <= 0.5 Hajek's", lambda r, w: r["mse"][w] <= 0.5 * r["mse"]["hajek"]),
    ]
    for t in ("0.05", "0.1"):
        out.append((f"loss < Hajek threshold at {t}", lambda r, w, t=t: _loss(r, t, w) < _loss(r, t, "hajek")))
        out.append((f"loss < keep all at {t}", lambda r, w, t=t: _loss(r, t, w) < _loss(r, t, "keep")))
    out.append(("loss <= keep all at 0.02", lambda r, w: _loss(r, "0.02", w) <= _loss(r, "0.02", "keep")))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="a robustness study's results.json")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    runs: dict[str, list[dict]] = {}
    for r in doc["runs"]:
        runs.setdefault(r["dgp"], []).append(r)
    lines = [
        "# Issue 15's criteria against the oracle prior",
        "",
        f"`benchmarks/robustness_attainability.py {args.results}`: per DGP of the robustness study, "
        "seeds on which decide (the model, default guards; coverage, AUC and MSE of the model's "
        "posterior) and the oracle prior (the true effect distribution as prior, the package's "
        "likelihood, its Bayes rule) meet each criterion. Rows where both meet it on every seed "
        "are left out.",
        "",
        "| DGP | criterion | decide / model | oracle | reading |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for dgp, rs in runs.items():
        for name, check in _criteria():
            model_who = "model" if name.startswith(("90%", "AUC", "MSE")) else "decide"
            m = sum(check(r, model_who) for r in rs)
            o = sum(check(r, "oracle") for r in rs)
            if m == o == len(rs):
                continue
            if m == len(rs):
                reading = "decide meets it; the oracle does not"
            elif o < len(rs):
                reading = "missed; the oracle misses it too"
            else:
                reading = "missed; met by knowing the effect distribution"
            lines.append(f"| {dgp} | {name} | {m}/{len(rs)} | {o}/{len(rs)} | {reading} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from cmp_bayes.atomic import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
