"""Sufficient statistics of a partitioned Parquet log as a Dask map-reduce.

The same Dataset as :func:`cmp_bayes.statistics.exposure_stats` (pandas
engine), computed without ever holding the log in memory:

* **map, steps parts** (one task per ``steps/`` part file): validate the part
  (column types, outcome range, strictly increasing steps, rankings without
  repeats), then per cell (query / group / everything) the steps' count, outcome
  sum and sum of squares (with a memories file: per memory and cell, over each
  memory's lifetime), the per-query first step and group, and the ranking as
  counts per (memory, cell, rank);
* **map, contexts parts** (one task per ``contexts/`` part file): validate the
  part (the reader's slot rules, memories lifetimes), join each row to its
  step's outcome and cell, and sum per (memory, cell) the retriever, exposure
  and in-context arms;
* **reduce**: partial results are keyed by memory id and cell name (pyarrow
  string arrays, with integer positions into them), so a part knows nothing
  about the others; they are added in a tree (``SPLIT_EVERY`` at a time) and
  turned into dense (memory, cell) arrays once, at the end, by the same
  assembly code as the pandas engine.

Every map task is whole-column numpy / pyarrow work, the same code as the
pandas engine (:mod:`cmp_bayes.log.validate`, :mod:`cmp_bayes.log.columns`,
:mod:`cmp_bayes.statistics.kernels`, :mod:`cmp_bayes.statistics.dataset`): ids are read as Parquet dictionary codes and
summed per distinct id with ``numpy.bincount``; no Python loop runs over rows,
steps, memories or cells (only over part files and partial results).

Modules: :mod:`cmp_bayes.scale.parts` (inputs), :mod:`cmp_bayes.scale.steps_map`
and :mod:`cmp_bayes.scale.contexts_map` (the two maps and their combines); this
module builds the graph, reduces and assembles. ``by="pair"`` runs the
memory-level map-reduce (the checks, the memory index) and then a second graph,
:mod:`cmp_bayes.scale.pairs_map`: a map per steps part and an ordered fold, whose
sums are the pandas engine's bit for bit (the exactness paragraph below is about
the first graph only).

The join and its memory bound. A contexts part needs the outcome and cell of
the steps it names. It reads only the rows of the ``steps/`` parts whose
step-range (from the Parquet footer statistics, read once when the graph is
built) overlaps its own, filtered to its own range. A log written by step range
(as :func:`cmp_bayes.scale.generate.generate` and any writer that appends
steps and contexts together writes it) therefore joins part i with about one
steps part: peak memory per task is O(rows of one contexts part + steps in its
range), independent of the log size. Parts written in an order unrelated to the
steps still give the right answer but each task then scans every steps part
(one at a time, keeping only the rows in range). The partial sums are at most
one row per (memory, cell) seen in a part; the reduce holds ``SPLIT_EVERY`` of
them, and the final arrays are the output's own size (memory x cell).

Exactness. Counts, ranks and medians are exact. Outcome sums are added in a
different order than the pandas engine's (per part, then across parts), so for
outcomes whose sums are exactly representable (binary, or multiples of a power
of two such as 1/64) the Datasets are identical; for arbitrary fractional
outcomes they agree to float rounding (relative ~1e-16 per addition).

Validation (what the pandas reader checks, per part): column presence and
types, nulls, outcome range, steps strictly increasing within and across parts
(in part-file name order), unknown sources, ranks, propensities (range,
exposure without propensity, against ``design.json``), exposure slots beyond
``design.exposure_slots`` and a memory twice in one step's context (both within
a part: a step whose slots straddle two part files is checked per part), slots
naming a step that does not exist, memories outside the memories file or their
lifetime; designs in rounds (a step in no round, each slot against its round's
pool) and window designs (``arm`` on every exposure slot, pool and window slots
per step, every step's ranking long enough, each window slot in its step's
``W_t`` with the window propensity: ``W_t`` from the part's own slots and the
rankings of its steps). Errors name the part file and the 0-based row within it. Map tasks
return their first violation as data rather than raising it, so the error
reported does not depend on which task ran first: as in the pandas reader, a
steps rule before a contexts rule, and within each the first part file in name
order (each part's own rules in the reader's order); a window design's ranking
rules, then its window slots, come after every other rule, as in the reader.

Progress. With a drawing :class:`cmp_bayes.progress.Progress` (a terminal, not
quiet) the run shows a bar over the graph's tasks (the maps over part files and
the reduce), with rate and time left: on a local scheduler through dask's
scheduler callbacks (``dask.diagnostics.ProgressBar`` draws only there, and
on stdout), on a ``dask.distributed`` cluster from the scheduler's own task
counts (the feed ``distributed``'s progress bars read). Without one, the
computation is the plain ``dask.compute`` it always was.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import xarray as xr

from cmp_bayes.errors import ConfigError, LogError
from cmp_bayes.log.design import union_pool, varying_propensity
from cmp_bayes.log.layout import log_checksum, read_design
from cmp_bayes.log.pools import RoundPools
from cmp_bayes.progress import Bar, Progress
from cmp_bayes.scale.contexts_map import (
    ContextsPartial,
    combine_contexts,
    contexts_partial,
    empty_contexts,
)
from cmp_bayes.scale.parts import BLANK, Lifetimes, parts, read_lifetimes, remap, step_range
from cmp_bayes.scale.steps_map import (
    RankCounts,
    StepsPartial,
    combine_steps,
    first_short_ranking,
    steps_partial,
)
from cmp_bayes.statistics.dataset import assemble_dataset, stats_arrays
from cmp_bayes.statistics.groups import main_group
from cmp_bayes.statistics.kernels import (
    ARM_COLS,
    By,
    arrow_strings,
    counted_median_min,
    positions,
    sorted_unique,
    to_index,
)

#: partial results added together per reduce task
SPLIT_EVERY: int = 8


def tree_reduce(items: list[Any], combine: Any, split_every: int = SPLIT_EVERY) -> Any:
    """Combine delayed partials ``split_every`` at a time until one is left."""
    import dask

    comb = dask.delayed(combine, pure=True)
    while len(items) > 1:
        items = [comb(*items[i : i + split_every]) for i in range(0, len(items), split_every)]
    return items[0]


def dask_exposure_stats(
    path: str | Path,
    by: By | Literal["pair"] = None,
    scheduler: object | None = None,
    progress: Progress | None = None,
) -> xr.Dataset:
    """:func:`cmp_bayes.statistics.exposure_stats` of a Parquet-form log, as a Dask map-reduce.

    Parameters
    ----------
    path : str or Path
        A Parquet-form log directory: ``steps/`` and ``contexts/`` folders of
        part files (or single ``steps.parquet`` / ``contexts.parquet``),
        ``design.json``, optional ``memories.parquet`` (or ``memories/``).
    by : {None, "query", "group", "pair"}
        ``"pair"``: the sparse pair statistics, in two passes: the memory-level
        map-reduce above (every rule of the log checked, the memory index, the
        propensities and attributes), then :mod:`cmp_bayes.scale.pairs_map` (a
        map over the steps parts and an ordered fold; identical to the pandas
        engine bit for bit, fractional outcomes included).
    scheduler : None, str or distributed.Client
        See :func:`cmp_bayes.scale.cluster.dask_scheduler`.
    progress : cmp_bayes.progress.Progress, optional
        Where a bar over the tasks draws (default: nowhere); see the module docstring.

    Returns
    -------
    xarray.Dataset
        Exactly the pandas engine's Dataset (floating-point sums: see the module
        docstring; with ``by="pair"`` bit for bit whatever the outcomes),
        ``log_checksum`` included.

    Raises
    ------
    LogError
        The first violation found, naming the part file and row.
    ConfigError
        A log that is not in Parquet form, or an unusable scheduler.
    """
    import dask

    from cmp_bayes.scale.cluster import dask_scheduler

    if by not in (None, "query", "group", "pair"):
        raise ConfigError(f"exposure_stats: by must be None, 'query', 'group' or 'pair', not {by!r}")
    # by="pair" first checks the log and finds its memories with the memory-level pass
    cell_by: By = None if by == "pair" else by
    root = Path(path)
    if not root.is_dir():
        raise LogError(root, "the dask engine reads a Parquet-form log directory; no such directory")
    step_files = parts(root, "steps")
    if not step_files:
        hint = " (this is the JSONL form: convert it with write_log(read_log(p), out, format='parquet'))" if (
            root / "steps.jsonl"
        ).is_file() else ""
        raise ConfigError(f"{root}: no steps.parquet or steps/ part files{hint}")
    design = read_design(root / "design.json")
    design_file = str(root / "design.json")
    life = read_lifetimes(root)
    step_parts = [step_range(f) for f in step_files]
    ctx_files = parts(root, "contexts")

    # shared inputs by explicit key: dask neither walks nor hashes them (the design's pool
    # alone holds one entry per pool memory)
    run = uuid.uuid4().hex
    d_life = dask.delayed(life, name=f"lifetimes-{run}", traverse=False) if life is not None else None
    d_steps = dask.delayed(step_parts, name=f"steps-parts-{run}", traverse=False)
    d_design = dask.delayed(design, name=f"design-{run}", traverse=False)
    d_pool = dask.delayed(RoundPools.of(design), name=f"pool-{run}", traverse=False)
    s_map = [
        dask.delayed(steps_partial, pure=True)(i, str(f), cell_by, d_life, d_design, design_file)
        for i, f in enumerate(step_files)
    ]
    c_map = [
        dask.delayed(contexts_partial, pure=True)(i, str(f), d_steps, cell_by, d_design, design_file, d_life, d_pool)
        for i, f in enumerate(ctx_files)
    ]
    s_red = tree_reduce(s_map, combine_steps)
    c_red = tree_reduce(c_map, combine_contexts) if c_map else None
    what = f"statistics{'' if cell_by is None else ' by ' + cell_by} ({len(step_files)} + {len(ctx_files)} parts)"
    with dask_scheduler(scheduler) as sched:
        if c_red is None:
            (sp,) = _compute([s_red], sched, progress, what)
            cp = empty_contexts()
        else:
            sp, cp = _compute([s_red, c_red], sched, progress, what)
        # the reader's order: the steps (each part's own rules, then their order across parts),
        # then the contexts; within each, the first part file that breaks a rule
        if sp.error is not None:
            raise sp.error.error()
        _check_step_order(sp)
        if cp.error is not None:
            raise cp.error.error()
        ds = _assemble(sp, cp, cell_by, design, life, log_checksum(root))
        # a window design's rankings, as the reader checks them once the whole log is read: the
        # store's size without a memories file is every memory the log names, known only now
        if sp.window_error is not None:
            raise sp.window_error.error()
        short = first_short_ranking(sp.short, ds.sizes["memory"]) if life is None else None
        if short is not None:
            raise short
        if cp.window_error is not None:
            raise cp.window_error.error()
        if by == "pair":
            return _pair_stats(ds, step_files, ctx_files, design, life, sched, progress, run)
    return ds


def _pair_stats(
    base: xr.Dataset,
    step_files: list[Path],
    ctx_files: list[Path],
    design: dict[str, Any] | None,
    life: Lifetimes | None,
    sched: Any,
    progress: Progress | None,
    run: str,
) -> xr.Dataset:
    """The second pass of ``by="pair"`` (:mod:`cmp_bayes.scale.pairs_map`) on a log already
    checked, whose memory-level statistics are ``base``: one map per steps part (in parallel),
    a chain of folds in part order (exact floating-point sums), the assembly."""
    import dask

    from cmp_bayes.scale.pairs_map import MemoryIndex, assemble_pair_stats, fold_pairs, pair_terms

    index = MemoryIndex.of(arrow_strings(base["memory"].to_numpy()), life)
    d_index = dask.delayed(index, name=f"memory-index-{run}", traverse=False)
    d_ctx = dask.delayed([step_range(f) for f in ctx_files], name=f"contexts-parts-{run}", traverse=False)
    d_design = dask.delayed(design, name=f"pair-design-{run}", traverse=False)
    d_pool = dask.delayed(RoundPools.of(design), name=f"pair-pool-{run}", traverse=False)
    acc: Any = None
    steps = []
    for f in step_files:
        terms, part_steps = dask.delayed(pair_terms, pure=True, nout=2)(str(f), d_ctx, d_index, d_design, d_pool)
        # a chain, not a tree: each fold continues the running sums in step order (see pairs_map)
        acc = dask.delayed(fold_pairs, pure=True)(acc, terms)
        steps.append(part_steps)
    acc, *parts_steps = _compute([acc, *steps], sched, progress, f"pair statistics ({len(step_files)} parts)")
    return assemble_pair_stats(acc, parts_steps, base, index)


def _compute(targets: list[Any], sched: Any, progress: Progress | None, what: str) -> tuple[Any, ...]:
    """``dask.compute(*targets)`` on ``sched``, with a bar over its tasks when ``progress`` draws."""
    import dask

    if progress is None or not progress.enabled:
        return tuple(dask.compute(*targets, scheduler=sched))
    from cmp_bayes.scale.cluster import _is_client

    with progress.bar(what, total=None, unit="tasks") as bar:
        if _is_client(sched):
            return _compute_distributed(targets, sched, bar)
        with _task_callback(bar):
            return tuple(dask.compute(*targets, scheduler=sched))


def _task_callback(bar: Bar) -> Any:
    """A dask callback (a context manager) that counts a local scheduler's tasks into ``bar``."""
    from dask.callbacks import Callback

    class TaskCallback(Callback):
        """Counts a local scheduler's tasks into a bar (runs in the scheduling thread)."""

        def __init__(self, bar: Bar) -> None:
            super().__init__()
            self.bar = bar

        def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
            # literal inputs sit in the cache: only what waits or is ready runs
            self.bar.update(total=len(state["ready"]) + len(state["waiting"]), completed=0)

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            self.bar.advance()

    return TaskCallback(bar)


def _compute_distributed(targets: list[Any], client: Any, bar: Bar) -> tuple[Any, ...]:
    """Compute on a ``dask.distributed`` client while the scheduler's task counts feed ``bar``."""
    from distributed.diagnostics.progressbar import ProgressBar

    class Feed(ProgressBar):
        """``distributed``'s progress feed (all / remaining tasks), drawn on our bar."""

        def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:  # noqa: A002 - the feed's name
            bar.update(total=all, completed=all - remaining)

    futures = client.compute(targets)
    # the bar is a courtesy: a broken feed must not cost the result
    with contextlib.suppress(Exception):
        client.sync(Feed(futures, scheduler=client.scheduler.address).listen)
    return tuple(client.gather(futures))


def _check_step_order(sp: StepsPartial) -> None:
    """Steps strictly increasing across part files (within each part is checked by its task)."""
    meta = sorted(sp.meta)
    prev = None
    for _, file, n, first, last in meta:
        if n == 0:
            continue
        if prev is not None and first <= prev:
            what = "repeats" if first == prev else "goes backwards from"
            raise LogError(
                file,
                f"step {first} {what} the previous step {prev} (end of the previous part file); "
                "steps must be unique and strictly increasing",
                row=0,
                field="step",
            )
        prev = last


def _assemble(
    sp: StepsPartial,
    cp: ContextsPartial,
    by: By,
    design: dict[str, Any] | None,
    life: Lifetimes | None,
    checksum: str,
) -> xr.Dataset:
    pool = union_pool(design)
    # memory index: the memories file, else every memory named anywhere (as ExposureLog.memory_ids)
    if life is not None:
        memory_arr = life.memory
    else:
        named = [_named(cp.memory, cp.mem_idx)]
        if pool:
            named.append(pa.array(list(pool), pa.large_string()))
        if sp.ranks is not None:
            named.append(_named(sp.ranks.memory, sp.ranks.mem_idx))
        memory_arr = sorted_unique(*named)
    memory = to_index(memory_arr, "memory")
    m = len(memory)
    if by is None:
        cells = None
        cell_arr = BLANK
    else:
        cell_arr = sorted_unique(sp.cell_names)
        cells = to_index(cell_arr, by)
    nc = len(cell_arr)
    shape = (m, nc)
    order = positions(cell_arr, sp.cell_names)  # index in sp.cell_names of each final cell (-1: none)

    def per_cell(a: np.ndarray) -> np.ndarray:
        return np.where(order >= 0, a[np.maximum(order, 0)] if len(a) else 0, 0).astype(a.dtype)

    if life is None:
        in_store = np.broadcast_to(per_cell(sp.cell_count), shape).copy()
        store_sum = np.broadcast_to(per_cell(sp.cell_sum), shape).copy()
        store_sumsq = np.broadcast_to(per_cell(sp.cell_sumsq), shape).copy()
    else:
        # life.memory is the sorted memory index itself
        st = sp.store[:, :, order] if sp.store is not None else np.zeros((3, m, nc))
        in_store = st[0].astype(np.int64)
        store_sum, store_sumsq = st[1], st[2]

    mi = remap(cp.memory, memory_arr, cp.mem_idx)
    ci = remap(cp.cells, cell_arr, cp.cell_idx)
    known = mi >= 0
    n_unknown = int(cp.values[~known, -1].sum())
    arms = {}
    for j, col in enumerate(ARM_COLS):
        out = np.zeros(shape, dtype=np.int64 if col.endswith("_n") else np.float64)
        out[mi[known], ci[known]] = cp.values[known, j]
        arms[col] = out
    data = stats_arrays(in_store, store_sum, store_sumsq, arms, *_rank_stats(sp.ranks, memory_arr, cell_arr))
    query_group = query_steps = None
    if by == "query":
        # the steps map fills query_group whenever it keeps per-query cells
        assert sp.query_group is not None
        qpos = positions(cell_arr, sp.query_names)
        query_group = sp.query_group.take(pa.array(qpos)).to_numpy(zero_copy_only=False).astype(object)
        query_steps = per_cell(sp.cell_count).astype(np.int64)
    n_steps = int(sum(x[2] for x in sp.meta))
    return assemble_dataset(
        data,
        memory,
        cells,
        by,
        pool=pool,
        varying=varying_propensity(design),
        query_group=query_group,
        query_steps=query_steps,
        attrs={
            "n_steps": n_steps,
            "outcome_kind": "binary" if sp.binary else "fractional",
            "log_checksum": checksum,
            "n_unknown_context_rows": n_unknown,
        },
    )


def _named(names: pa.Array, idx: np.ndarray) -> pa.Array:
    """The entries of ``names`` that ``idx`` points at."""
    used = np.zeros(len(names), dtype=bool)
    used[idx] = True
    return names.filter(pa.array(used))


def _rank_stats(
    ranks: RankCounts | None, memory: pa.Array, cells: pa.Array
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ranked``, ``rank_median`` and ``rank_best`` (memory, cell) from counts per (memory, cell, rank)."""
    m, nc = len(memory), len(cells)
    if ranks is None or len(ranks.mem_idx) == 0:
        return np.zeros((m, nc), dtype=np.int64), np.full((m, nc), np.nan), np.full((m, nc), np.nan)
    mi = remap(ranks.memory, memory, ranks.mem_idx)
    ci = remap(ranks.cells, cells, ranks.cell_idx)
    keep = mi >= 0
    total, med, low = counted_median_min((mi * nc + ci)[keep], ranks.rank[keep], ranks.count[keep], m * nc)
    return total.reshape(m, nc), med.reshape(m, nc), low.reshape(m, nc)


def fit_statistics(
    path: str | Path, scheduler: object | None = None, progress: Progress | None = None
) -> xr.Dataset:
    """The memory-level statistics ``cmp_bayes.model.fit.fit`` takes, computed with Dask.

    The same inputs ``fit(read_log(path))`` derives in memory
    (:func:`cmp_bayes.model.fit.memory_inputs`): ``exposure_stats(path)`` plus,
    when the log has two or more named query groups, a ``memory_group`` variable
    (:func:`cmp_bayes.statistics.groups.main_group`), and the
    attribute ``log_path``. Two passes over the log (memory level, then by group),
    each with its bar when ``progress`` draws (see :func:`dask_exposure_stats`).

    Returns
    -------
    xarray.Dataset
        Pass it to ``fit(stats, ...)``.
    """
    stats = dask_exposure_stats(path, scheduler=scheduler, progress=progress)
    by_group = dask_exposure_stats(path, by="group", scheduler=scheduler, progress=progress)
    group = main_group(by_group)
    if group is not None:
        stats["memory_group"] = ("memory", group)
    stats.attrs["log_path"] = str(path)
    return stats
