"""Sufficient statistics of an exposure log, per memory (and per memory x query / group).

Everything downstream (diagnostics, estimators, the PyMC model) reads these
aggregates instead of the log, so the cost of a fit grows with the log once
(here) and afterwards only with the number of memories.

Layers, each importing only those below it (as arviz-stats' ``base/`` ->
``accessors`` -> user functions):

* :mod:`~cmp_bayes.statistics.kernels`: numpy / pyarrow aggregation kernels
  (ids, in-store sums, arm sums, grouped medians); no log reading, no Dataset;
* :mod:`~cmp_bayes.statistics.dataset`: the Dataset's variable names and its
  assembly from dense arrays, shared by both engines;
* :mod:`~cmp_bayes.statistics.pandas_engine` (the whole log in memory) and
  :mod:`cmp_bayes.scale.dask_stats` (a map-reduce over Parquet part files):
  the two engines, built on the two layers above;
* :mod:`~cmp_bayes.statistics.groups`: a memory's main group, from the
  statistics by group (for the model);
* :mod:`~cmp_bayes.statistics.pairs`: the sparse pair statistics (``by="pair"``)
  with the pandas engine, and the helpers :mod:`cmp_bayes.scale.pairs_map` (the
  Dask engine's) builds the same pairs with;
* this module: :func:`exposure_stats`, the public entry that picks an engine.
  It imports the Dask engine only when asked for it (dask is an optional
  extra), and nothing the engines import imports this dispatch back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import xarray as xr

from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import ExposureLog
from cmp_bayes.statistics.dataset import COUNT_VARS, SUM_VARS
from cmp_bayes.statistics.kernels import ARM_COLS, ARMS, By
from cmp_bayes.statistics.pandas_engine import pandas_exposure_stats

Engine = Literal["pandas", "dask"]

__all__ = ["ARMS", "ARM_COLS", "COUNT_VARS", "SUM_VARS", "By", "Engine", "exposure_stats"]


def exposure_stats(
    log: ExposureLog | str | Path,
    by: By | Literal["pair"] = None,
    engine: Engine = "pandas",
    scheduler: object | None = None,
) -> xr.Dataset:
    """Sufficient statistics of ``log`` per memory, optionally split by query or group.

    Parameters
    ----------
    log : ExposureLog, str or Path
        The log (``cmp_bayes.read_log``), or the path of one. With
        ``engine="dask"`` it must be the path of a Parquet-form log.
    by : {None, "query", "group", "pair"}
        Add a second dimension ``query`` (coordinate = ``log.query_ids()``) or
        ``group`` (the sorted group names; steps without a group form the group
        ``""``, so sums over groups equal the memory-level statistics).
        ``"pair"``: the sparse form of ``"query"``, one dimension ``pair`` (see
        Returns).
    engine : {"pandas", "dask"}
        ``"pandas"``: the whole log in memory
        (:func:`cmp_bayes.statistics.pandas_engine.pandas_exposure_stats`). ``"dask"``: a
        map-reduce over the Parquet part files
        (:func:`cmp_bayes.scale.dask_stats.dask_exposure_stats`), memory bounded
        by the part size; same Dataset (see that function for the exactness of
        floating-point sums).
    scheduler : str or distributed.Client, optional
        Dask engine only: ``None`` / ``"threads"`` (local threads),
        ``"synchronous"``, ``"processes"``, a ``dask.distributed`` scheduler
        address (``"tcp://host:8786"``) or a ``Client``.

    Returns
    -------
    xarray.Dataset
        Dims ``memory`` (coordinate ``log.memory_ids()``) [x ``query`` | ``group``].
        Counts are numbers of steps (int64); outcome sums are in outcome units
        (float64). Over memory [x cell]:

        ``in_store``: steps at which the memory is in the store;
        ``retrieved`` / ``exposed``: steps it was in the context via a
        retriever / exposure slot, with ``*_outcome_sum`` and ``*_outcome_sumsq``
        over those steps; ``control``: steps in the store and not in the
        context (a context row at a step where the memory is not in the store
        counts as retrieved/exposed but is never subtracted from control);
        ``ranked``: steps whose ``ranking`` lists the memory; ``rank_median``
        and ``rank_best``: median and smallest 0-based rank over those steps
        (float64; NaN if never ranked).

        Over memory only: ``propensity`` (the design pool's per-step
        propensity; NaN outside the pool) and ``in_pool`` (bool).

        With ``by="query"``: coordinates ``query_group`` (the query's group at
        its first step, ``""`` if none) and ``query_steps`` on dim ``query``.

        Attributes: ``n_steps``, ``outcome_kind`` (``"binary"`` when every
        outcome is 0 or 1, else ``"fractional"``), ``log_checksum`` (``""``
        when the log has none), ``n_unknown_context_rows`` (context rows naming
        a memory absent from the memories file; left out of every count).

        With ``by="pair"``: one dimension ``pair``, one entry per (memory,
        query) that was ever eligible (in some round's pool while in the store
        at a step of the query, or in the window ``W_t`` of such a step) or in a
        context at a step of the query, sorted by (memory_id, query_id); no
        array of size memory x query is built. Coordinates along ``pair``:
        ``memory_id``, ``query_id``, ``query_group``, ``query_steps``. Variables
        along ``pair``: every variable of ``by="query"`` (the same numbers as
        that cell; ``propensity`` and ``in_pool`` of the pair's memory), plus
        the window arm (:data:`cmp_bayes.statistics.dataset.WINDOW_COUNT_VARS`
        and :data:`~cmp_bayes.statistics.dataset.WINDOW_SUM_VARS`, units
        there; all 0 outside window designs). Both engines: the Dask engine
        (:mod:`cmp_bayes.scale.pairs_map`) gives the pandas engine's Dataset bit
        for bit, fractional outcomes included (an ordered fold of the sums over
        the steps parts; each query's outcomes are gathered for the in-store sums).
    """
    if by not in (None, "query", "group", "pair"):
        raise ConfigError(f"exposure_stats: by must be None, 'query', 'group' or 'pair', not {by!r}")
    if engine == "dask":
        if not isinstance(log, str | Path):
            raise ConfigError(
                "exposure_stats: engine='dask' reads the log from disk; pass the path of a "
                "Parquet-form log (write one with write_log(log, path, format='parquet'))"
            )
        from cmp_bayes.scale.dask_stats import dask_exposure_stats

        return dask_exposure_stats(log, by=by, scheduler=scheduler)
    if engine != "pandas":
        raise ConfigError(f"exposure_stats: engine must be 'pandas' or 'dask', not {engine!r}")
    if scheduler is not None:
        raise ConfigError("exposure_stats: scheduler applies to engine='dask' only")
    if isinstance(log, str | Path):
        from cmp_bayes.log.read import read_log

        log = read_log(log)
    if by == "pair":
        from cmp_bayes.statistics.pairs import pandas_pair_stats

        return pandas_pair_stats(log)
    return pandas_exposure_stats(log, by)
