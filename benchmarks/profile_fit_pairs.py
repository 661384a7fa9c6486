"""Stage by stage: where ``fit(log, by="query")`` with the gated model spends time and memory.

The steps of :func:`cmp_bayes.model.gated_fit.fit_gated`, run one at a time in
this process, each printed with its wall time, the resident memory after it and
the peak so far (``ru_maxrss``). One sampling attempt; used for the stage table of
reports/benchmarks/fit_pairs.md:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/profile_fit_pairs.py /tmp/locomo10_window --draws 500
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings
from pathlib import Path

import numpy as np


def _rss_gib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--draws", type=int, default=500, help="draws and tuning steps per chain (default 500)")
    args = ap.parse_args()
    last = [time.perf_counter()]

    def mark(what: str) -> None:
        now = time.perf_counter()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"{what:44s} {now - last[0]:7.1f} s   rss {_rss_gib():5.2f} GiB   peak {peak:5.2f} GiB", flush=True)
        last[0] = now

    import pymc as pm

    from cmp_bayes.log.read import read_log
    from cmp_bayes.model.config import ModelConfig, SamplerConfig
    from cmp_bayes.model.fit import memory_inputs
    from cmp_bayes.model.gated import build_gated_model, gated_data, gated_hyper_shapes
    from cmp_bayes.model.gated_fit import PAIR_DRAW_CELLS, gated_draws, pair_identification
    from cmp_bayes.model.gated_recover import recover_gated
    from cmp_bayes.model.sampling import sample_until_healthy, thin_step
    from cmp_bayes.statistics import exposure_stats

    mark("imports")
    log = read_log(args.log)
    mark("read the log")
    stats, _, _ = memory_inputs(log)
    mark("memory-level statistics")
    pairs = exposure_stats(log, by="pair")
    mark(f"pair statistics ({pairs.sizes['pair']:,} pairs)")
    config = ModelConfig(pair_model="gated", rank_summary="best")
    scfg = SamplerConfig(draws=args.draws, tune=args.draws, chains=2, seed=0, progressbar=False, max_attempts=1)
    gd = gated_data(stats, pairs, config)
    del pairs
    mark("gated_data")
    model = build_gated_model(gd, config)
    names = list(gated_hyper_shapes(gd, config))
    mark("build the model")
    post, _, _, attempts = sample_until_healthy(model, scfg, names)
    mark(f"sampling (attempt: {attempts[0]['seconds']:.1f} s)")
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    flat = {n: post[n].values.reshape(n_chain * n_draw, *post[n].shape[2:]) for n in names}
    extra = thin_step(n_chain, n_draw, max(n_chain, PAIR_DRAW_CELLS // gd.pair_memory.size))
    kept = np.arange(0, n_draw, extra)
    store = (np.arange(n_chain)[:, None] * n_draw + kept[None, :]).reshape(-1)
    rng = np.random.default_rng(0)
    rec = recover_gated(gd, flat, rng, use_data=True, jitter=config.jitter, store=store)
    mark(f"recovery, posterior ({n_chain * n_draw} draws, {store.size} stored)")
    prior_draws = max(1, min(config.prior_draws, PAIR_DRAW_CELLS // gd.pair_memory.size))
    with model, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The effect of Potentials")
        prior = pm.sample_prior_predictive(draws=prior_draws, var_names=names, random_seed=1)["prior"]
    prior = prior.to_dataset()[names]
    pflat = {n: prior[n].values.reshape(-1, *prior[n].shape[2:]) for n in names}
    prec = recover_gated(gd, pflat, rng, use_data=False, jitter=config.jitter)
    mark(f"prior draws and their recovery ({prior_draws})")
    gated_draws(post.isel(draw=kept), rec, gd)
    gated_draws(prior, prec, gd)
    pair_identification(gd, rec)
    mark("the posterior's groups")


if __name__ == "__main__":
    main()
