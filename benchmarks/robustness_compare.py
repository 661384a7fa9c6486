"""Side by side: robustness-study runs of different models on the same logs.

    .venv/bin/python benchmarks/robustness_compare.py \
        mixture=reports/robustness/mixture/results.json gmodel=reports/robustness/gmodel/results.json \
        -o reports/robustness/comparison.md

Each run is a ``results.json`` of ``benchmarks/robustness.py``. The logs are the
same when the generator, DGPs and seeds are (the generator is seeded; the table
checks the memory and step counts agree). Cells are mean [min, max] over seeds;
"met" counts the seeds on which a Done-when criterion of issue 15 holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cmp_bayes.atomic import write_text_atomic  # noqa: E402

THRESHOLDS = ("0.05", "0.1")


def _agg(values: list[float], fmt: str = ".3f") -> str:
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        return format(v[0], fmt)
    return f"{format(v.mean(), fmt)} [{format(v.min(), fmt)}, {format(v.max(), fmt)}]"


def _runs(doc: dict) -> dict[tuple[str, int], dict]:
    return {(r["dgp"], int(r["seed"])): r for r in doc["runs"]}


def _criteria(r: dict) -> dict[str, bool]:
    """Issue 15's per-seed criteria for one run."""
    out = {
        "coverage 0.85-0.95": 0.85 <= r["coverage"]["model"] <= 0.95,
        "AUC >= Hajek": r["auc"]["model"] >= r["auc"]["hajek"],
        "MSE <= Hajek / 2": r["mse"]["model"] <= 0.5 * r["mse"]["hajek"],
    }
    for u in THRESHOLDS:
        row = r["loss"][u]
        d = row["decide"]["loss"]
        out[f"@{u}: < Hajek, < keep, <= 1.25 oracle"] = (
            d < row["hajek"]["loss"] and d < row["keep"]["loss"] and d <= 1.25 * row["oracle"]["loss"]
        )
    out["@0.02: <= keep"] = r["loss"]["0.02"]["decide"]["loss"] <= r["loss"]["0.02"]["keep"]["loss"]
    return out


def compare(docs: dict[str, dict], notes: str = "") -> str:
    runs = {name: _runs(doc) for name, doc in docs.items()}
    common = sorted(set.intersection(*(set(r) for r in runs.values())))
    names = list(docs)
    # the first run's order of the DGPs (the study's own)
    dgps = [d for d in dict.fromkeys(r["dgp"] for r in docs[names[0]]["runs"]) if any(k[0] == d for k in common)]
    lines = [
        "# Robustness study: models side by side",
        "",
        "Runs (each a `benchmarks/robustness.py` results file):",
        "",
    ]
    for name, doc in docs.items():
        prov = doc["provenance"]
        lines.append(
            f"- **{name}**: `{doc['command']}` at commit `{prov['commit'][:12]}`, "
            f"model {json.dumps({k: v for k, v in doc['settings'].get('model', {}).items() if k in ('prior_family', 'learn_null_mean', 'gmodel_null')}) or 'default'}, "
            f"{prov.get('elapsed_s', float('nan')) / 60:.0f} min on {prov['nproc']} CPUs."
        )
    if notes.strip():
        lines += ["", notes.strip()]
    same = all(
        len({(runs[n][k]["memories"], runs[n][k]["steps"]) for n in names}) == 1 for k in common
    )
    lines += [
        "",
        f"{len(common)} (DGP, seed) pairs in every run; the logs' memory and step counts "
        + ("agree in every pair." if same else "DIFFER somewhere: the logs are not the same."),
        "",
        "## Per DGP",
        "",
        "| DGP | model | coverage | AUC (Hajek) | MSE / Hajek | strict gate ok | loss @0.05: decide | Hajek | keep | oracle "
        "| loss @0.1: decide | Hajek | oracle |",
        "| --- | --- | --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for dgp in dgps:
        keys = [k for k in common if k[0] == dgp]
        for name in names:
            rs = [runs[name][k] for k in keys]
            l5 = [r["loss"]["0.05"] for r in rs]
            l1 = [r["loss"]["0.1"] for r in rs]
            ok = sum(bool(r["loss"]["0.05"]["decide_detail"]["health_ok"]) for r in rs)
            lines.append(
                f"| {dgp} | {name} | {_agg([r['coverage']['model'] for r in rs])} "
                f"| {_agg([r['auc']['model'] for r in rs])} ({_agg([r['auc']['hajek'] for r in rs])}) "
                f"| {_agg([r['mse']['model'] / r['mse']['hajek'] for r in rs], '.2f')} | {ok}/{len(rs)} "
                f"| {_agg([x['decide']['loss'] for x in l5], '.0f')} | {_agg([x['hajek']['loss'] for x in l5], '.0f')} "
                f"| {_agg([x['keep']['loss'] for x in l5], '.0f')} | {_agg([x['oracle']['loss'] for x in l5], '.0f')} "
                f"| {_agg([x['decide']['loss'] for x in l1], '.0f')} | {_agg([x['hajek']['loss'] for x in l1], '.0f')} "
                f"| {_agg([x['oracle']['loss'] for x in l1], '.0f')} |"
            )
    crit = list(_criteria(runs[names[0]][common[0]]))
    lines += [
        "",
        "## Done-when criteria of issue 15: seeds met, per DGP",
        "",
        "| DGP | criterion | " + " | ".join(names) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    for dgp in dgps:
        keys = [k for k in common if k[0] == dgp]
        for c in crit:
            cells = [f"{sum(_criteria(runs[n][k])[c] for k in keys)}/{len(keys)}" for n in names]
            lines.append(f"| {dgp} | {c} | " + " | ".join(cells) + " |")
    totals = [
        sum(v for k in common for v in _criteria(runs[n][k]).values()) for n in names
    ]
    lines += [
        "",
        "Criteria met over all (DGP, seed, criterion): "
        + ", ".join(f"{n} {t} of {len(common) * len(crit)}" for n, t in zip(names, totals, strict=True))
        + ".",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=RESULTS_JSON")
    parser.add_argument("-o", "--out", type=Path, default=None)
    parser.add_argument("--notes", type=Path, default=None, help="Markdown read into the header")
    args = parser.parse_args()
    docs = {}
    for item in args.runs:
        name, _, path = item.partition("=")
        docs[name] = json.loads(Path(path).read_text())
    text = compare(docs, args.notes.read_text() if args.notes else "")
    if args.out:
        write_text_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
