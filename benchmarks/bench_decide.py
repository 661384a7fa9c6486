"""Time ``decide`` at 10k and 100k memories: the vectorised R-hat against arviz_stats'.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decide.py
[--memories 10000 100000] [--out reports/benchmarks/decide.md]``.

Posteriors from :func:`cmp_bayes.testing.synthetic_posterior` (2 chains x 500
draws, ``memory_table`` statuses and targets, default ``Costs``: 20:1 at 0.05
on tau; the prior groups thinned to 2 draws, which decide never reads). Per
size, one timed ``decide`` each way, wall and CPU time (``time.process_time``,
all threads of this process):

* after: decide as it is (:func:`cmp_bayes.posterior.sampling_checks.rank_rhat`);
* before: the same decide with the per-memory R-hat computed as it was, through
  ``arviz_stats.rhat(method="rank")``, which runs its kernel once per memory
  from Python (the other changes of issue 15's decide path, the vectorised
  reasons and draw picking, stay in both columns, so the ratio is the R-hat's).

Beside the totals, the CPU time inside the R-hat, the preposterior
``exposures_to_resolve`` and ``reasons`` (after column), so what remains is
visible. The machine (nproc, load average before and after) goes in the header.
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


def timed(fn: Callable[..., Any], spent: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn``, adding its CPU seconds to ``spent[key]``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.process_time() - start

    return wrapper


def run_decide(post: xr.DataTree, rhat_fn: Callable[..., Any]) -> tuple[float, float, dict, Any]:
    """One decide with ``rhat_fn`` as its per-memory R-hat: wall s, CPU s, CPU by part, table."""
    spent: dict[str, float] = defaultdict(float)
    saved = (rule.memory_rhat, rule.exposures_to_resolve, rule.reasons)
    rule.memory_rhat = timed(rhat_fn, spent, "rhat")
    rule.exposures_to_resolve = timed(saved[1], spent, "preposterior")
    rule.reasons = timed(saved[2], spent, "reasons")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wall, cpu = time.perf_counter(), time.process_time()
            table = rule.decide(post).table
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        rule.memory_rhat, rule.exposures_to_resolve, rule.reasons = saved
    return wall, cpu, dict(spent), table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()

    load_before = os.getloadavg()
    # warm-up: imports (arviz_stats, scipy) and first calls are not decide's compute
    run_decide(synthetic_posterior(n_memories=50, chains=CHAINS, draws=DRAWS), arviz_memory_rhat)
    run_decide(synthetic_posterior(n_memories=50, chains=CHAINS, draws=DRAWS), rule.memory_rhat)
    rows = []
    for n in args.memories:
        post = synthetic_posterior(
            memory_table(n, seed=0), chains=CHAINS, draws=DRAWS, prior_draws=2, seed=0
        )
        after = run_decide(post, rule.memory_rhat)
        before = run_decide(post, arviz_memory_rhat)
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
        "default `Costs` (20:1, threshold 0.05 on tau). Before = the per-memory R-hat through "
        "`arviz_stats.rhat(method=\"rank\")` (one kernel call per memory); after = "
        "`sampling_checks.rank_rhat` (vectorised over memories). Everything else identical.",
        "",
        f"Machine: nproc={os.cpu_count()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}; load average "
        f"(1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
        f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after "
        "(the cores are shared with other jobs: wall times are noisy, CPU times less so).",
        "",
        "| memories | R-hat computed | forgotten | before wall / CPU (s) | after wall / CPU (s) "
        "| CPU ratio | R-hat CPU before / after (s) | after: preposterior / reasons CPU (s) "
        "| same table |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for n, n_rhat, n_forget, before, after, same in rows:
        lines.append(
            f"| {n:,} | {n_rhat:,} | {n_forget:,} | {before[0]:.2f} / {before[1]:.2f} | "
            f"{after[0]:.2f} / {after[1]:.2f} | {before[1] / after[1]:.1f}x | "
            f"{before[2].get('rhat', 0.0):.2f} / {after[2].get('rhat', 0.0):.2f} | "
            f"{after[2].get('preposterior', 0.0):.2f} / {after[2].get('reasons', 0.0):.2f} | "
            f"{'yes' if same else 'NO'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
