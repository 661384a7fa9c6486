"""Scale benchmark: statistics of 1M-50M context rows (pandas vs Dask vs bare pyarrow) and a 100k-memory fit.

Run: ``.venv/bin/python benchmarks/bench_scale.py`` (defaults: 1M, 10M and 50M
context rows, 100,000 memories, 10 slots of which 2 exposure slots, 1M rows per
part file; writes ``reports/benchmarks/scale.md``). Logs are generated with
:func:`cmp_bayes.scale.generate.generate` under ``--workdir`` and deleted after.

Each measurement runs in its own subprocess; its peak memory is that process's
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the parent also polls the child's
RSS with psutil and kills it above ``--limit-gib``, reported as such). Methods,
each from the Parquet files on disk to the statistics:

* ``pandas``: ``read_log(path)`` (the full reader, validation included) then
  ``exposure_stats(log)``; the stats step alone is reported beside it;
* ``dask``: ``exposure_stats(path, engine="dask")`` on the local threaded
  scheduler (validation per part included);
* ``pyarrow``: the practical limit: read ``step, memory_id, source`` of the
  contexts and ``step, outcome`` of the steps, attach each row's outcome
  (``take`` by step: the generated steps are 0..T-1), then
  ``Table.group_by(["memory_id", "source"])`` with count, sum and sum of squares.
  No validation, no in-store or control arm.

``--repeat N`` runs every measurement N times, the methods interleaved (all
methods once, then again), and reports each method's fastest run (its peak
memory: the largest of its runs): on a shared machine the ratios of best runs
are the stable numbers.

``--fit-memories N`` (default 100,000) also generates a log in which every pool
memory gets about 6 exposures, computes its statistics with the Dask engine and
runs ``cmp_bayes.model.fit.fit(stats, sampler="advi")``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_exposure_stats import cpu_model  # same machine description in every benchmark report

GIB = 1024**3


# --------------------------------------------------------------------------- workers (subprocess side)


def _peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def worker(method: str, path: str, extra: dict) -> dict:
    # imports first: the timings below are the work, not the interpreter's start-up
    import pyarrow.compute as pc
    import pyarrow.dataset as pds

    from cmp_bayes.log.read import read_log
    from cmp_bayes.statistics import exposure_stats

    if method == "dask":
        import dask  # noqa: F401

        import cmp_bayes.scale.dask_stats  # noqa: F401
    if method == "fit":
        from cmp_bayes.model.fit import fit
    t0 = time.perf_counter()
    out: dict = {}
    if method == "pandas":
        log = read_log(path)
        t1 = time.perf_counter()
        ds = exposure_stats(log)
        out["stats_s"] = time.perf_counter() - t1
        out["read_s"] = t1 - t0
        out["memories"] = ds.sizes["memory"]
    elif method == "dask":
        ds = exposure_stats(path, engine="dask", scheduler=extra.get("scheduler"))
        out["memories"] = ds.sizes["memory"]
    elif method == "pyarrow":
        ctx = pds.dataset(Path(path) / "contexts").to_table(columns=["step", "memory_id", "source"])
        st = pds.dataset(Path(path) / "steps").to_table(columns=["step", "outcome"])
        y = st["outcome"].combine_chunks().take(ctx["step"])
        t = ctx.append_column("y", y).append_column("y2", pc.multiply(y, y))
        res = t.group_by(["memory_id", "source"]).aggregate([("y", "count"), ("y", "sum"), ("y2", "sum")])
        out["groups"] = res.num_rows
    elif method == "fit":
        stats = exposure_stats(path, engine="dask")
        t1 = time.perf_counter()
        out["stats_s"] = t1 - t0
        dt = fit(stats, sampler="advi", progressbar=False, seed=0, **extra.get("fit_kw", {}))
        out["fit_s"] = time.perf_counter() - t1
        out["memories"] = int(dt["posterior"].sizes["memory"])
        out["identified"] = int((dt["identification"]["status"].values == "identified").sum())
    else:
        raise SystemExit(f"unknown method {method}")
    out["wall_s"] = time.perf_counter() - t0
    out["peak_bytes"] = _peak_bytes()
    return out


# --------------------------------------------------------------------------- driver


def run_child(method: str, path: Path, limit_gib: float, timeout_s: float, extra: dict | None = None) -> dict:
    """Run one measurement in a subprocess; kill it above the memory limit or the time limit."""
    import psutil

    cmd = [sys.executable, __file__, "--worker", method, str(path), json.dumps(extra or {})]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak, t0, why = 0, time.perf_counter(), None
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
        except psutil.Error:
            rss = 0
        peak = max(peak, rss)
        if rss > limit_gib * GIB:
            why = f"killed above {limit_gib:g} GiB"
        elif time.perf_counter() - t0 > timeout_s:
            why = f"killed after {timeout_s:.0f} s"
        if why:
            proc.kill()
            proc.wait()
            return {"error": why, "peak_bytes": peak}
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}",
                "peak_bytes": peak}
    res = json.loads(stdout.strip().splitlines()[-1])
    res["polled_peak_bytes"] = peak
    return res


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def fmt_mem(res: dict) -> str:
    return f"{res['peak_bytes'] / GIB:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[1_000_000, 10_000_000, 50_000_000])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--slots", type=int, default=10)
    ap.add_argument("--exposure-slots", type=int, default=2)
    ap.add_argument("--rows-per-part", type=int, default=1_000_000)
    ap.add_argument("--methods", nargs="+", default=["dask", "pyarrow", "pandas"])
    ap.add_argument("--fit-memories", type=int, default=100_000, help="0 skips the fit")
    ap.add_argument("--limit-gib", type=float, default=12.0, help="kill a run whose RSS exceeds this")
    ap.add_argument("--timeout", type=float, default=900.0, help="kill a run after this many seconds")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement, interleaved; the fastest is reported")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/cmp_bayes_bench_scale"))
    ap.add_argument("--out", type=Path, default=Path("reports/benchmarks/scale.md"))
    args = ap.parse_args()

    from cmp_bayes.atomic import write_text_atomic
    from cmp_bayes.scale.generate import generate

    free = shutil.disk_usage(args.workdir.parent if args.workdir.parent.exists() else "/").free
    print(f"free disk under {args.workdir.parent}: {free / GIB:.1f} GiB", flush=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows_out = []
    try:
        for rows in args.rows:
            steps = rows // args.slots
            path = args.workdir / f"log-{rows}"
            t0 = time.perf_counter()
            generate(path, memories=args.memories, steps=steps, slots=args.slots,
                     exposure_slots=args.exposure_slots, rows_per_part=args.rows_per_part, seed=0)
            gen_s = time.perf_counter() - t0
            size = dir_bytes(path)
            print(f"{rows:,} rows: generated in {gen_s:.1f} s, {size / GIB:.2f} GiB on disk", flush=True)
            runs: dict[str, list[dict]] = {m: [] for m in args.methods}
            for _ in range(max(1, args.repeat)):
                for method in args.methods:
                    res = run_child(method, path, args.limit_gib, args.timeout)
                    print(f"  {method}: {res}", flush=True)
                    runs[method].append(res)
            for method in args.methods:
                rows_out.append({"rows": rows, "method": method, "gen_s": gen_s, "disk": size, **best(runs[method])})
                # the table so far, so that an interrupted run still leaves its numbers
                write_text_atomic(args.out, report(rows_out, None, args, partial=True))
            shutil.rmtree(path)
        fit_row = None
        if args.fit_memories:
            m = args.fit_memories
            # ~6 exposures per pool memory: pool ~ (1 - retrieved share) m, so T k / pool = 6
            steps = int(6 * 0.8 * m / args.exposure_slots)
            path = args.workdir / "log-fit"
            generate(path, memories=m, steps=steps, slots=args.slots, exposure_slots=args.exposure_slots,
                     rows_per_part=args.rows_per_part, seed=0)
            fit_row = {"memories": m, "steps": steps, "rows": steps * args.slots,
                       **run_child("fit", path, args.limit_gib, args.timeout)}
            print(f"fit: {fit_row}", flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    write_text_atomic(args.out, report(rows_out, fit_row, args))
    print(f"wrote {args.out}")


def best(runs: list[dict]) -> dict:
    """The fastest successful run (peak memory: the largest over all runs), else the first failure."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = dict(min(ok, key=lambda r: r["wall_s"]))
    out["peak_bytes"] = max(r["peak_bytes"] for r in runs)
    out["runs"] = len(ok)
    return out


def report(rows: list[dict], fit_row: dict | None, args: argparse.Namespace, partial: bool = False) -> str:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    try:
        import dask

        dask_v = dask.__version__
    except ImportError:  # pragma: no cover
        dask_v = "absent"
    cmd = " ".join(["`.venv/bin/python benchmarks/bench_scale.py", *sys.argv[1:]]).rstrip() + "`"
    lines = [
        "# Scale benchmark: statistics at 1M-50M context rows, fit at 100k memories",
        "",
        f"Command: {cmd}",
        "",
        f"Machine: nproc={os.cpu_count()}, CPU: {cpu_model()}, Python {platform.python_version()}, "
        f"pyarrow {pa.__version__}, pandas {pd.__version__}, numpy {np.__version__}, dask {dask_v}. "
        f"1-minute load average when the report was written: {os.getloadavg()[0]:.1f} "
        "(each run is one process; compare the ratios within a run).",
        "",
        f"Logs: `cmp_bayes.scale.generate.generate` with {args.memories:,} memories, {args.slots} slots "
        f"({args.exposure_slots} exposure), {args.rows_per_part:,} context rows per part file, binary outcomes, "
        "no rankings, no memories file. Each run is one subprocess reading the Parquet files from disk; "
        "peak memory = its `ru_maxrss`. "
        + (f"Each method ran {args.repeat} times, interleaved; the table shows its fastest run and its "
           "largest peak memory. " if args.repeat > 1 else "")
        + "Throughput = context rows / wall time of the whole run "
        "(read, validate, aggregate). pandas: `read_log` + `exposure_stats`; 'stats only' is the "
        "`exposure_stats` call on the loaded log. dask: `exposure_stats(path, engine='dask')`, local "
        "threaded scheduler. pyarrow: bare read + outcome take + `group_by(memory_id, source)` "
        "(no validation, no in-store/control arms): the practical limit.",
        "",
        "| context rows | method | wall (s) | rows/s | peak memory (GiB) | note |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['rows']:,} | {r['method']} | - | - | >= {fmt_mem(r)} | {r['error']} |")
            continue
        note = ""
        if r["method"] == "pandas":
            note = f"read+validate {r['read_s']:.1f} s, stats only {r['stats_s']:.1f} s"
        lines.append(
            f"| {r['rows']:,} | {r['method']} | {r['wall_s']:.1f} | {r['rows'] / r['wall_s']:,.0f} | "
            f"{fmt_mem(r)} | {note} |"
        )
    lines += ["", "Ratios to bare pyarrow (wall time; target: pandas within 2x):", ""]
    by = {(r["rows"], r["method"]): r for r in rows}
    for n in sorted({r["rows"] for r in rows}):
        base = by.get((n, "pyarrow"))
        if not base or "error" in base:
            continue
        parts = []
        for m in ("pandas", "dask"):
            r = by.get((n, m))
            if r and "error" not in r:
                parts.append(f"{m} {r['wall_s'] / base['wall_s']:.2f}x")
                if m == "pandas":
                    parts.append(f"pandas stats only {r['stats_s'] / base['wall_s']:.2f}x")
        lines.append(f"* {n:,} rows: " + ", ".join(parts))
    if partial:
        lines += ["", "(run in progress or interrupted: the rows above are all that finished)"]
    lines += ["", "## Fit at scale", ""]
    if fit_row is None:
        lines.append("Not run.")
    elif "error" in fit_row:
        lines.append(f"{fit_row['memories']:,} memories: **failed** ({fit_row['error']}).")
    else:
        lines += [
            "| memories | steps | context rows | stats, dask (s) | fit, ADVI (s) | peak memory (GiB) | identified |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {fit_row['memories']:,} | {fit_row['steps']:,} | {fit_row['rows']:,} | {fit_row['stats_s']:.1f} | "
            f"{fit_row['fit_s']:.1f} | {fmt_mem(fit_row)} | {fit_row['identified']:,} |",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))))
    else:
        main()
