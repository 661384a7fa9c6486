"""Time ``decide`` at 10k and 100k memories: the stored R-hat, today's kernels, the ones they replaced.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decide.py
[--memories 10000 100000] [--out reports/benchmarks/decide.md]``.

Posteriors from :func:`cmp_bayes.testing.synthetic_posterior` (2 chains x 500
draws, ``memory_table`` statuses and targets, default ``Costs``: 20:1 at 0.05
on tau; the prior groups thinned to 2 draws, which decide never reads). Per
size, one timed ``decide`` each way, wall and CPU time (``time.process_time``,
all threads of this process):

* stored: decide on the posterior as ``fit`` writes it, with the
  ``memory_diagnostics`` group (each memory's R-hat computed at fit time,
  :mod:`cmp_bayes.posterior.memory_diagnostics`): the R-hat of the memories
  about to be forgotten is read, after one pass that checks the draws are still
  the ones it describes;
* after: the same posterior without that group (as saved before it existed):
  the R-hat computed in decide
  (:func:`cmp_bayes.posterior.sampling_checks.memory_rhat`, i.e. ``rank_rhat``);
  everything else as in "stored" (the screened
  :func:`cmp_bayes.decision.preposterior.exposures_to_resolve`,
  :meth:`cmp_bayes.decision.draws.MemoryDraws.summaries`);
* before: "after" with three parts computed as they were: the per-memory R-hat
  through ``arviz_stats.rhat(method="rank")`` (its kernel once per memory from
  Python), ``exposures_to_resolve`` as the plain scan (:func:`plain_scan`: both
  reweightings of all draws at every try), and P(useful) and the posterior mean
  through xarray (whose NaN-skipping mean copies every draw).

Beside the totals, the CPU time inside the R-hat (``rule._memory_rhat``: the
stored lookup and its check, or the computation) and the preposterior (each
column), and ``reasons`` (stored column), so what remains is visible; "same
table" checks that all three give the same table (R-hat to 1e-10). The machine
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
from cmp_bayes.posterior.memory_diagnostics import GROUP
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
    saved = (rule.memory_rhat, rule.exposures_to_resolve, rule.reason_texts, rule._memory_rhat)
    saved_summaries = MemoryDraws.summaries
    if before:
        rule.memory_rhat = arviz_memory_rhat
    rule._memory_rhat = timed(saved[3], spent, "rhat")
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
        rule.memory_rhat, rule.exposures_to_resolve, rule.reason_texts, rule._memory_rhat = saved
        MemoryDraws.summaries = saved_summaries  # type: ignore[method-assign]
    return wall, cpu, dict(spent), table


def without_stored(post: xr.DataTree) -> xr.DataTree:
    """``post`` without its ``memory_diagnostics`` group (a posterior saved before it existed)."""
    out = post.copy()
    if GROUP in out.children:
        del out[GROUP]
    return out


def same_table(a: Any, b: Any) -> bool:
    """Equal tables, R-hat to 1e-10 (arviz_stats' R-hat and the kernel differ by rounding)."""
    return a.drop(columns="rhat").equals(b.drop(columns="rhat")) and bool(
        np.allclose(a["rhat"], b["rhat"], rtol=0, atol=1e-10, equal_nan=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()

    load_before = os.getloadavg()
    # warm-up: imports (arviz_stats, scipy) and first calls are not decide's compute
    small = synthetic_posterior(n_memories=50, chains=CHAINS, draws=DRAWS)
    for warm, before in ((without_stored(small), True), (without_stored(small), False), (small, False)):
        run_decide(warm, before)
    rows = []
    for n in args.memories:
        post = synthetic_posterior(
            memory_table(n, seed=0), chains=CHAINS, draws=DRAWS, prior_draws=2, seed=0
        )
        plain = without_stored(post)
        stored = run_decide(post, False)
        after = run_decide(plain, False)
        before = run_decide(plain, True)
        a = stored[3]
        same = same_table(a, after[3]) and same_table(a, before[3])
        counts = a["action"].value_counts()
        rows.append((n, int(np.isfinite(a["rhat"]).sum()), int(counts.get("forget", 0)),
                     before, after, stored, same))
        del post, plain
        print(f"done {n:,}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    lines = [
        "# decide benchmark",
        "",
        f"Command: `OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decide.py "
        f"--memories {' '.join(str(n) for n in args.memories)}` (one run per cell).",
        "",
        f"Posteriors: `synthetic_posterior(memory_table(n))`, {CHAINS} chains x {DRAWS} draws, "
        "default `Costs` (20:1, threshold 0.05 on tau). Stored = decide on the posterior as "
        "`fit` writes it, with the `memory_diagnostics` group (each memory's R-hat computed at "
        "fit time; decide reads those of the memories about to be forgotten after one pass "
        "checking that the draws are the ones they describe); after = the same posterior "
        "without that group, so decide computes those R-hats (`rank_rhat`); before = after "
        "with the kernels this benchmark's docstring lists as replaced: the per-memory R-hat "
        "through `arviz_stats.rhat(method=\"rank\")` (one kernel call per memory), "
        "`exposures_to_resolve` as the plain scan (both reweightings of all draws at every "
        "try), P(useful) and means through xarray. Everything else identical; all three in "
        "the same run.",
        "",
        f"Machine: nproc={os.cpu_count()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}; load average "
        f"(1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
        f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after "
        "(the cores are shared with other jobs: wall times are noisy, CPU times less so).",
        "",
        "| memories | R-hat needed | forgotten | before wall / CPU (s) | after wall / CPU (s) "
        "| stored wall / CPU (s) | CPU ratio before / stored, after / stored "
        "| R-hat CPU before / after / stored (s) | preposterior CPU before / after / stored (s) "
        "| stored: reasons CPU (s) | same table |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for n, n_rhat, n_forget, before, after, stored, same in rows:
        parts = (before[2], after[2], stored[2])
        lines.append(
            f"| {n:,} | {n_rhat:,} | {n_forget:,} | {before[0]:.2f} / {before[1]:.2f} | "
            f"{after[0]:.2f} / {after[1]:.2f} | {stored[0]:.2f} / {stored[1]:.2f} | "
            f"{before[1] / stored[1]:.1f}x, {after[1] / stored[1]:.1f}x | "
            + " / ".join(f"{p.get('rhat', 0.0):.2f}" for p in parts) + " | "
            + " / ".join(f"{p.get('preposterior', 0.0):.2f}" for p in parts) + " | "
            f"{stored[2].get('reasons', 0.0):.2f} | {'yes' if same else 'NO'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
