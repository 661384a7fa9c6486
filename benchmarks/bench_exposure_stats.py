"""Time ``exposure_stats`` against a bare pyarrow group-by over the same context rows.

Run: ``.venv/bin/python benchmarks/bench_exposure_stats.py [--rows 1000000 10000000]``.
Generates a synthetic log in memory (10 slots per step, 2 of them exposure
slots, 50,000 memories, 500 queries, binary outcomes), then times, best of
``--repeat`` runs each:

* ``exposure_stats(log)``: everything, from the ExposureLog's pandas columns
  (memory-id lookup, outcome join by step, counts, sums, sums of squares,
  in-store and control arms);
* the baseline: ``pyarrow.Table.group_by(["memory_id", "source"])`` with count,
  sum and sum of squares of the outcome, on a table that already holds each
  row's outcome (the join is not timed for the baseline).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pandas as pd
import pyarrow as pa

from cmp_bayes.log.schema import CONTEXT_COLUMNS, STEP_COLUMNS, ExposureLog, coerce
from cmp_bayes.statistics import exposure_stats

SLOTS, EXPOSURE_SLOTS, MEMORIES, QUERIES = 10, 2, 50_000, 500


def make_log(rows: int, seed: int = 0) -> ExposureLog:
    rng = np.random.default_rng(seed)
    n_steps = rows // SLOTS
    ids = np.array([f"m{i:06d}" for i in range(MEMORIES)], dtype=object)
    steps = pd.DataFrame(
        {
            "step": np.arange(n_steps),
            "query_id": pd.array(np.char.add("q", rng.integers(0, QUERIES, n_steps).astype(str)), dtype="string"),
            "outcome": rng.integers(0, 2, n_steps).astype(np.float64),
            "group": pd.array([None] * n_steps, dtype="string"),
        }
    )
    mem = rng.integers(0, MEMORIES, rows)  # duplicates inside a step do not matter for timing
    slot = np.tile(np.arange(SLOTS), n_steps)
    exposure = slot >= SLOTS - EXPOSURE_SLOTS
    ctx = pd.DataFrame(
        {
            "step": np.repeat(np.arange(n_steps), SLOTS),
            "slot": slot,
            "memory_id": pd.array(ids[mem], dtype="string"),
            "source": pd.array(np.where(exposure, "exposure", "retriever"), dtype="string"),
            "rank": pd.array(np.where(exposure, -1, slot), dtype="Int64"),
            "propensity": pd.array(np.where(exposure, 0.01, np.nan), dtype="Float64"),
        }
    )
    pool = {str(m): 0.01 for m in ids}
    return ExposureLog(
        steps=coerce(steps, STEP_COLUMNS),
        contexts=coerce(ctx, CONTEXT_COLUMNS),
        design={"slots": SLOTS, "exposure_slots": EXPOSURE_SLOTS, "assignment": "balanced",
                "steps": n_steps, "pool": pool},
    )


def baseline_table(log: ExposureLog) -> pa.Table:
    y = log.steps["outcome"].to_numpy()[log.contexts["step"].to_numpy()]
    return pa.table(
        {
            "memory_id": pa.array(log.contexts["memory_id"]),
            "source": pa.array(log.contexts["source"]),
            "y": y,
            "y2": y * y,
        }
    )


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: nproc={os.cpu_count()}, CPU: {cpu_model()}, python {platform.python_version()}, "
          f"pyarrow {pa.__version__}, pandas {pd.__version__}, numpy {np.__version__}")
    print(f"{'context rows':>14} {'exposure_stats (s)':>19} {'pyarrow group-by (s)':>21} {'ratio':>7}")
    for rows in args.rows:
        log = make_log(rows)
        table = baseline_table(log)
        t_stats = best_of(lambda log=log: exposure_stats(log), args.repeat)
        t_base = best_of(
            lambda table=table: table.group_by(["memory_id", "source"]).aggregate(
                [("y", "count"), ("y", "sum"), ("y2", "sum")]
            ),
            args.repeat,
        )
        print(f"{rows:>14,} {t_stats:>19.3f} {t_base:>21.3f} {t_stats / t_base:>7.2f}")
        del log, table


if __name__ == "__main__":
    main()
