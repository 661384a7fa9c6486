"""Small partitioned Parquet logs and cell edits for the reader and scale tests (no session fixtures here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cmp_bayes.log.export import write_log
from cmp_bayes.simulation.simulator import SimulationConfig, simulate


def simulated_log(seed: int = 0, outcomes: str = "fractional", churn: float = 0.3):
    """A simulated log with lifetimes, rankings, groups; fractional outcomes rounded to 1/64.

    Multiples of 1/64 below 1 are exact in binary floating point and so are
    their sums and squares' sums at this size (< 2**53 / 64**2), whatever the
    order of addition: the Dask and pandas engines must then agree bit for bit.
    """
    cfg = SimulationConfig(
        memories=30, queries=6, repeats=12, slots=5, exposure_slots=2, churn=churn,
        ranking_depth=12, groups=3, outcomes=outcomes,
    )
    log = simulate(cfg, seed=seed)
    log.steps["outcome"] = np.round(log.steps["outcome"].to_numpy() * 64) / 64
    # one step without a group, so the "" group is exercised
    log.steps.loc[3, "group"] = None
    return log


def split_parquet(src: Path, dst: Path, n_parts: int, aligned: bool = True) -> Path:
    """Rewrite a single-file Parquet log as ``steps/`` and ``contexts/`` folders of parts.

    ``aligned``: contexts part i holds the slots of steps part i (split by step
    range); otherwise contexts are cut by row count, unrelated to the steps parts.
    """
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("design.json",):
        if (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    for name in ("memories.parquet", "labels.parquet"):
        if (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    steps = pq.read_table(src / "steps.parquet")
    ctx = pq.read_table(src / "contexts.parquet")
    (dst / "steps").mkdir()
    (dst / "contexts").mkdir()
    bounds = np.linspace(0, steps.num_rows, n_parts + 1).astype(int)
    step_vals = steps["step"].to_numpy()
    cstep = ctx["step"].to_numpy()
    for i in range(n_parts):
        part = steps.slice(bounds[i], bounds[i + 1] - bounds[i])
        pq.write_table(part, dst / "steps" / f"part-{i:03d}.parquet", row_group_size=7)
        if aligned:
            lo = step_vals[bounds[i]]
            hi = step_vals[bounds[i + 1] - 1]
            sel = np.flatnonzero((cstep >= lo) & (cstep <= hi))
            cpart = ctx.take(pa.array(sel))
        else:
            cb = np.linspace(0, ctx.num_rows, n_parts + 1).astype(int)
            cpart = ctx.slice(cb[i], cb[i + 1] - cb[i])
        pq.write_table(cpart, dst / "contexts" / f"part-{i:03d}.parquet")
    return dst


def rewrite_cell(file: Path, column: str, row: int, value: object) -> None:
    """Set one cell of a Parquet file in place (the column keeps its type)."""
    t = pq.read_table(file)
    vals = t[column].to_pylist()
    vals[row] = value
    i = t.column_names.index(column)
    pq.write_table(t.set_column(i, column, pa.array(vals, t.schema.field(column).type)), file)


def partitioned_log(tmp: Path, seed: int = 0, n_parts: int = 4, aligned: bool = True, **kw) -> Path:
    """A simulated log written in Parquet form and split into part files; returns its directory."""
    tag = "-".join([str(seed), str(n_parts), str(int(aligned))] + [f"{k}={v}" for k, v in sorted(kw.items())])
    log = simulated_log(seed, **kw)
    single = write_log(log, tmp / f"single-{tag}", format="parquet")
    return split_parquet(single, tmp / f"parts-{tag}", n_parts, aligned)
