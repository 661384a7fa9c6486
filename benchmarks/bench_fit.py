"""Fit time and ESS per second versus the number of memories, per sampler.

Data: synthetic memory-level statistics (tests/_model_fixtures.synthetic_stats:
6 exposures per pool memory, 400 in-store steps), so the cost measured is the
model's, not the log reader's. Writes reports/benchmarks/fit.md.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fit.py \
        --memories 1000 10000 100000 --samplers nutpie pymc advi
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def run_one(m: int, sampler: str, draws: int) -> dict:
    import arviz_stats as azs
    from _model_fixtures import synthetic_stats

    from cmp_bayes.model.config import SamplerConfig
    from cmp_bayes.model.fit import fit

    stats, _ = synthetic_stats(m, seed=1)
    cfg = SamplerConfig(sampler=sampler, draws=draws, tune=draws, chains=2, progressbar=False)
    t0 = time.perf_counter()
    tree = fit(stats, sampler_config=cfg)
    secs = time.perf_counter() - t0
    post = tree["posterior"]
    hyper = [v for v in post.data_vars if "memory" not in post[v].dims]
    if sampler != "advi":
        rh = azs.rhat(tree, var_names=hyper)
        ess = azs.ess(tree, var_names=hyper)
        max_rhat = max(float(rh[v].max()) for v in rh.data_vars)
        min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    else:
        max_rhat, min_ess = float("nan"), float("nan")
    return {"memories": m, "sampler": sampler, "seconds": secs, "max_rhat": max_rhat,
            "min_ess": min_ess, "min_ess_per_s": min_ess / secs,
            "divergences": int(tree["sample_stats"]["diverging"].sum())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--samplers", nargs="+", default=["nutpie", "pymc", "advi"])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--out", default="reports/benchmarks/fit.md")
    args = ap.parse_args()
    from cmp_bayes.atomic import write_text_atomic

    rows = []
    for m in args.memories:
        for s in args.samplers:
            r = run_one(m, s, args.draws)
            print(r, flush=True)
            rows.append(r)
            # rewritten after every run so a long sweep cut short keeps what finished
            write_text_atomic(args.out, render(rows, args))
    print(f"wrote {args.out}")


def render(rows: list[dict], args: argparse.Namespace) -> str:
    """The Markdown report of the runs so far."""
    head = "| memories | sampler | seconds (incl. compile) | max R-hat | min ESS | min ESS/s | divergences |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r['memories']} | {r['sampler']} | {r['seconds']:.1f} | {r['max_rhat']:.3f} | "
        f"{r['min_ess']:.0f} | {r['min_ess_per_s']:.2f} | {r['divergences']} |"
        for r in rows
    ]
    text = f"""# Fit benchmark

Machine: {platform.node()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}),
shared with other jobs while measured. 2 chains x {args.draws} draws after {args.draws}
tuning steps; R-hat and ESS over the hyperparameters (the only sampled variables).

{chr(10).join(lines)}

Command:

    OPENBLAS_NUM_THREADS=1 .venv/bin/python {' '.join(sys.argv)}
"""
    return text


if __name__ == "__main__":
    main()
