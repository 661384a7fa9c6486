"""Time ``decide`` at 10k and 100k memories: today's kernels against the ones they replaced.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decide.py
[--memories 10000 100000] [--out reports/benchmarks/decide.md]``.

Posteriors from :func:`cmp_bayes.testing.synthetic_posterior` (2 chains x 500
draws, ``memory_table`` statuses and targets, default ``Costs``: 20:1 at 0.05
on tau; the prior groups thinned to 2 draws, which decide never reads). Per
size, one timed ``decide`` each way, wall and CPU time (``time.process_time``,
all threads of this process):

* after: decide as it is (:func:`cmp_bayes.posterior.sampling_checks.rank_rhat`,
  the screened :func:`cmp_bayes.decision.preposterior.exposures_to_resolve`,
  :meth:`cmp_bayes.decision.draws.MemoryDraws.summaries`);
* before: the same decide with three parts computed as they were: the
  per-memory R-hat through ``arviz_stats.rhat(method="rank")`` (its kernel
  once per memory from Python), ``exposures_to_resolve`` as the plain scan
  (:func:`plain_scan`: both reweightings of all draws at every try), and
  P(useful) and the posterior mean through xarray (whose NaN-skipping mean
  copies every draw). The vectorised reasons and draw picking of issue 15 stay
  in both columns.

Beside the totals, the CPU time inside the R-hat and the preposterior (both
columns), and ``reasons`` (after column), so what remains is visible; "same
table" checks that both give the same table (R-hat to 1e-10). The machine
(nproc, load average before and after) goes in the header.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.decision import rule
from cmp_bayes.decision.draws import MemoryDraws
from cmp_bayes.decision.preposterior import plain_scan
from cmp_bayes.posterior import sampling_checks
from cmp_bayes.testing import synthetic_posterior
from cmp_bayes.testing.posterior import memory_table

CHAINS, DRAWS = 2, 500


def arviz_memory_rhat(draws: xr.DataArray, memories: np.ndarray) -> np.ndarray:
    """memory_rhat before issue 15: arviz_stats.rhat over the selected memories."""
    if len(memories) == 0 or int(draws.sizes.get("chain", 0)) < 2:
        return np.full(len(memories), np.nan)
    sub = draws.sel(memory=list(memories))
    return sampling_checks.rhat(xr.Dataset({"x": sub}))["x"].to_numpy().astype("float64")


def xarray_summaries(self: MemoryDraws, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """MemoryDraws.summaries before: xarray's reductions (the mean copies every draw)."""
    est = self.estimand
    p = (est > threshold).mean(("chain", "draw")).to_numpy().astype("float64")
    return p, est.mean(("chain", "draw")).to_numpy().astype("float64")


def timed(fn: Callable[..., Any], spent: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn``, adding its CPU seconds to ``spent[key]``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.process_time() - start

    return wrapper


def run_decide(post: xr.DataTree, before: bool) -> tuple[float, float, dict, Any]:
    """One decide, with the replaced kernels if ``before``: wall s, CPU s, CPU by part, table."""
    spent: dict[str, float] = defaultdict(float)
    saved = (rule.memory_rhat, rule.exposures_to_resolve, rule.reason_texts)
    saved_summaries = MemoryDraws.summaries
    rule.memory_rhat = timed(arviz_memory_rhat if before else saved[0], spent, "rhat")
    rule.exposures_to_resolve = timed(plain_scan if before else saved[1], spent, "preposterior")
    rule.reason_texts = timed(saved[2], spent, "reasons")
    if before:
        MemoryDraws.summaries = xarray_summaries  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wall, cpu = time.perf_counter(), time.process_time()
            table = rule.decide(post).table
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        rule.memory_rhat, rule.exposures_to_resolve, rule.reason_texts = saved
        MemoryDraws.summaries = saved_summaries  # type: ignore[method-assign]
    return wall, cpu, dict(spent), table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()

    load_before = os.getloadavg()
    # warm-up: imports (arviz_stats, scipy) and first calls are not decide's compute
    run_decide(synthetic_posterior(n_memories=50, chains=CHAINS, draws=DRAWS), True)
    run_decide(synthetic_posterior(n_memories=50, chains=CHAINS, draws=DRAWS), False)
    rows = []
    for n in args.memories:
        post = synthetic_posterior(
            memory_table(n, seed=0), chains=CHAINS, draws=DRAWS, prior_draws=2, seed=0
        )
        after = run_decide(post, False)
        before = run_decide(post, True)
        a, b = after[3], before[3]
        same = a.drop(columns="rhat").equals(b.drop(columns="rhat")) and bool(
            np.allclose(a["rhat"], b["rhat"], rtol=0, atol=1e-10, equal_nan=True)
        )
        counts = a["action"].value_counts()
        rows.append((n, int(np.isfinite(a["rhat"]).sum()), int(counts.get("forget", 0)),
                     before, after, same))
        del post
        print(f"done {n:,}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    lines = [
        "# decide benchmark",
        "",
        f"Command: `OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decide.py "
        f"--memories {' '.join(str(n) for n in args.memories)}` (one run per cell).",
        "",
        f"Posteriors: `synthetic_posterior(memory_table(n))`, {CHAINS} chains x {DRAWS} draws, "
        "default `Costs` (20:1, threshold 0.05 on tau). Before = decide with the kernels this "
        "benchmark's docstring lists as replaced: the per-memory R-hat through "
        "`arviz_stats.rhat(method=\"rank\")` (one kernel call per memory), `exposures_to_resolve` "
        "as the plain scan (both reweightings of all draws at every try), P(useful) and means "
        "through xarray; after = decide as it is (`rank_rhat`, the screened scan, "
        "`MemoryDraws.summaries`). Everything else identical.",
        "",
        f"Machine: nproc={os.cpu_count()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}; load average "
        f"(1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
        f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after "
        "(the cores are shared with other jobs: wall times are noisy, CPU times less so).",
        "",
        "| memories | R-hat computed | forgotten | before wall / CPU (s) | after wall / CPU (s) "
        "| CPU ratio | R-hat CPU before / after (s) | preposterior CPU before / after (s) "
        "| after: reasons CPU (s) | same table |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for n, n_rhat, n_forget, before, after, same in rows:
        lines.append(
            f"| {n:,} | {n_rhat:,} | {n_forget:,} | {before[0]:.2f} / {before[1]:.2f} | "
            f"{after[0]:.2f} / {after[1]:.2f} | {before[1] / after[1]:.1f}x | "
            f"{before[2].get('rhat', 0.0):.2f} / {after[2].get('rhat', 0.0):.2f} | "
            f"{before[2].get('preposterior', 0.0):.2f} / "
            f"{after[2].get('preposterior', 0.0):.2f} | "
            f"{after[2].get('reasons', 0.0):.2f} | {'yes' if same else 'NO'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
