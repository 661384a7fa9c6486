"""Fit time and ESS per second versus the number of memories, per sampler.

Data: synthetic memory-level statistics (cmp_bayes.testing.synthetic_stats:
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


def run_one(m: int, sampler: str, draws: int, keep_draws: int, family: str = "mixture") -> dict:
    import arviz_stats as azs

    from cmp_bayes.model.config import ModelConfig, SamplerConfig
    from cmp_bayes.model.fit import fit
    from cmp_bayes.testing import synthetic_stats

    stats, _ = synthetic_stats(m, seed=1)
    cfg = SamplerConfig(
        sampler=sampler, draws=draws, tune=draws, chains=2, progressbar=False, keep_draws=keep_draws
    )
    t0 = time.perf_counter()
    # the two models of the robustness study: the earlier default, and the g-model with
    # the null's location learned
    model = ModelConfig(prior_family=family, learn_null_mean=family == "gmodel")
    tree = fit(stats, model=model, sampler=cfg)
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
    return {"memories": m, "sampler": sampler, "model": family, "seconds": secs, "load": os.getloadavg()[0], "max_rhat": max_rhat,
            "min_ess": min_ess, "min_ess_per_s": min_ess / secs,
            "divergences": int(tree["sample_stats"]["diverging"].sum())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memories", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--samplers", nargs="+", default=["nutpie", "pymc", "advi"])
    ap.add_argument("--large", type=int, default=100_000,
                    help="from this many memories on, run only --large-samplers")
    ap.add_argument("--large-samplers", nargs="+", default=["advi"])
    ap.add_argument("--keep-draws", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--out", default="reports/benchmarks/fit.md")
    ap.add_argument("--prior-families", nargs="+", default=["mixture"], choices=["mixture", "gmodel"],
                    help="mixture = ModelConfig(prior_family='mixture', learn_null_mean=False), gmodel = "
                         "ModelConfig(prior_family='gmodel', learn_null_mean=True); several: a time ratio to the first")
    args = ap.parse_args()
    from cmp_bayes.atomic import write_text_atomic

    rows = []
    for m in args.memories:
        for s in (args.large_samplers if m >= args.large else args.samplers):
            for family in args.prior_families:
                r = run_one(m, s, args.draws, args.keep_draws, family)
                print(r, flush=True)
                rows.append(r)
            # rewritten after every run so a long sweep cut short keeps what finished
            write_text_atomic(args.out, render(rows, args))
    print(f"wrote {args.out}")


def render(rows: list[dict], args: argparse.Namespace) -> str:
    """The Markdown report of the runs so far."""
    head = ("| memories | sampler | prior family | seconds (incl. compile) | time / first family | "
            "load avg | max R-hat | min ESS | min ESS/s | divergences |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    first: dict[tuple[int, str], float] = {}
    for r in rows:
        key = (r["memories"], r["sampler"])
        first.setdefault(key, r["seconds"])
        lines.append(
            f"| {r['memories']} | {r['sampler']} | {r.get('model', 'mixture')} | {r['seconds']:.1f} "
            f"| {r['seconds'] / first[key]:.2f} | {r['load']:.1f} | {r['max_rhat']:.3f} | "
            f"{r['min_ess']:.0f} | {r['min_ess_per_s']:.2f} | {r['divergences']} |"
        )
    text = f"""# Fit benchmark

Machine: {platform.node()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()});
"load avg" is the 1-minute load average when each fit ended (2 = both cores busy with
this fit alone). 2 chains x {args.draws} draws after {args.draws} tuning steps (ADVI:
{{advi}} iterations, then 2 x {args.draws} draws); at most {args.keep_draws} draws kept
for the per-memory variables. R-hat and ESS over the hyperparameters (the only sampled
variables). Seconds are the whole `fit` call: graph compilation, sampling, the per-draw
recovery of every memory's tau and rho, the prior and the predictive groups.

{chr(10).join(lines)}

Command:

    OPENBLAS_NUM_THREADS=1 .venv/bin/python {' '.join(sys.argv)}
"""
    from cmp_bayes.model.config import SamplerConfig

    return text.replace("{advi}", f"{SamplerConfig().advi_iterations:,}")


if __name__ == "__main__":
    main()
