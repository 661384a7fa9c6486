"""Frequentist estimators of each memory's conditional utility, on the sufficient statistics.

``estimate(log, by, method)`` is the entry point; each method lives in its own
module (``hajek``, ``ipw``, ``logged``) and maps an ``exposure_stats``
Dataset to (estimate, std_error) arrays. A window design's window arm has its
own estimator (``window``: the per-pair self-normalized IPW over the sparse pair
statistics), reported beside the pool arm by ``estimate(log, by="query")``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import xarray as xr

    from cmp_bayes.log.schema import ExposureLog

Method = Literal["hajek", "ipw", "logged-success", "logged-diff"]
METHODS: tuple[str, ...] = ("hajek", "ipw", "logged-success", "logged-diff")
#: columns of every estimates table, in order (``query_id`` / ``group`` after memory_id with by)
COLUMNS: tuple[str, ...] = (
    "memory_id",
    "status",
    "retrieved",
    "exposed",
    "control",
    "in_store",
    "estimate",
    "std_error",
    "method",
)
#: the arms of ``estimate(log, by="query")``'s ``arm`` column
ARMS: tuple[str, ...] = ("pool", "window")


def _method(method: str, balanced: bool) -> Callable[[xr.Dataset], tuple[np.ndarray, np.ndarray]]:
    from cmp_bayes.errors import ConfigError
    from cmp_bayes.estimators.hajek import hajek
    from cmp_bayes.estimators.ipw import ipw
    from cmp_bayes.estimators.logged import logged_diff, logged_success

    table = {
        "hajek": lambda s: hajek(s, balanced=balanced),
        "ipw": ipw,
        "logged-success": logged_success,
        "logged-diff": logged_diff,
    }
    if method not in table:
        raise ConfigError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return table[method]


def estimate_from_stats(stats: xr.Dataset, method: Method = "hajek", balanced: bool = True) -> pd.DataFrame:
    """The estimates table from precomputed ``exposure_stats`` (see :func:`estimate`)."""
    import numpy as np
    import pandas as pd

    from cmp_bayes.diagnostics.positivity import identification_status

    est, se = _method(method, balanced)(stats)
    status = identification_status(stats).to_numpy()
    memory = stats["memory"].to_numpy()
    cell_dim = next((d for d in stats["exposed"].dims if d != "memory"), None)
    cols = {
        "status": status,
        "retrieved": stats["retrieved"].to_numpy(),
        "exposed": stats["exposed"].to_numpy(),
        "control": stats["control"].to_numpy(),
        "in_store": stats["in_store"].to_numpy(),
        "estimate": est,
        "std_error": se,
    }
    if cell_dim is None:
        frame = pd.DataFrame({"memory_id": memory, **cols})
    else:
        # only cells where the memory was in the store at some step of the query / group
        mi, ci = np.nonzero(stats["in_store"].to_numpy() > 0)
        key = "query_id" if cell_dim == "query" else "group"
        frame = pd.DataFrame(
            {
                "memory_id": memory[mi],
                key: stats[cell_dim].to_numpy()[ci],
                **{k: v[mi, ci] for k, v in cols.items()},
            }
        )
    frame["method"] = method
    types = {"memory_id": "string", "status": "string", "method": "string"}
    if cell_dim == "query":
        frame["arm"] = "pool"
        types["arm"] = "string"
    return frame.astype(types)


def window_table(pair_stats: xr.Dataset) -> pd.DataFrame:
    """The window arm's rows of ``estimate(log, by="query")`` from ``exposure_stats(log, by="pair")``.

    One row per pair that was ever in a step's window ``W_t``: ``exposed``
    and ``control`` are the window arm's (exposed steps, including those with
    ``pi_t = 1``; eligible steps not exposed), ``status`` is ``identified``
    with a randomized window exposure (``pi_t < 1``), else ``retrieved-only``
    when the memory was retrieved under the query, else ``unidentified``;
    ``estimate`` / ``std_error``: :func:`cmp_bayes.estimators.window.window_snipw`.
    """
    import numpy as np
    import pandas as pd

    from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
    from cmp_bayes.estimators.window import window_exposed, window_snipw

    est, se = window_snipw(pair_stats)
    keep = pair_stats["window_eligible"].to_numpy() > 0
    retrieved = pair_stats["retrieved"].to_numpy()
    status = np.where(window_exposed(pair_stats) >= 1, IDENTIFIED,
                      np.where(retrieved >= 1, RETRIEVED_ONLY, UNIDENTIFIED))
    frame = pd.DataFrame({
        "memory_id": pair_stats["memory_id"].to_numpy()[keep],
        "query_id": pair_stats["query_id"].to_numpy()[keep],
        "status": status[keep],
        "retrieved": retrieved[keep],
        "exposed": pair_stats["window_exposed"].to_numpy()[keep],
        "control": pair_stats["window_control"].to_numpy()[keep],
        "in_store": pair_stats["in_store"].to_numpy()[keep],
        "estimate": est[keep],
        "std_error": se[keep],
        "method": "hajek",
        "arm": "window",
    })
    return frame.astype({"memory_id": "string", "query_id": "object", "status": "string", "method": "string",
                         "arm": "string"})


def estimate(log: ExposureLog, by: Literal["query", "group"] | None = None, method: Method = "hajek") -> pd.DataFrame:
    """Estimate each memory's (or memory-query / memory-group cell's) conditional utility.

    Parameters
    ----------
    log : ExposureLog
        The log (``cmp_bayes.read_log``).
    by : {None, "query", "group"}
        Estimate per memory, per (memory, query) or per (memory, group); with
        ``by`` only cells with the memory in the store at some step appear.
    method : {"hajek", "ipw", "logged-success", "logged-diff"}
        ``hajek``: exposed-arm mean minus control-arm mean, exact variance
        under balanced assignment, conservative otherwise
        (:mod:`cmp_bayes.estimators.hajek`); ``ipw``: Horvitz-Thompson with
        the design propensity (:mod:`cmp_bayes.estimators.ipw`);
        ``logged-success`` / ``logged-diff``: the baselines of systems without
        CMP (:mod:`cmp_bayes.estimators.logged`).

    Returns
    -------
    pandas.DataFrame
        Columns ``memory_id`` [``query_id`` | ``group``], ``status``
        (identification status of the cell), ``retrieved``, ``exposed``,
        ``control``, ``in_store`` (numbers of steps), ``estimate`` (outcome
        units; NaN where the method is undefined, e.g. no exposure),
        ``std_error`` (same units; NaN where undefined), ``method``; when the
        log's memories have texts, ``text`` after the key columns (the first
        60 characters; <NA> for a memory without one).

        With ``by="query"`` also ``arm`` (after ``method``): ``"pool"`` for
        the rows above (the pool arm, as without a window design), and, for a
        window design with ``method="hajek"``, one ``"window"`` row per pair
        that was ever in a step's window ``W_t``: the window arm's
        self-normalized IPW contrast (:mod:`cmp_bayes.estimators.window`; its
        ``exposed`` / ``control`` are the window arm's steps,
        :func:`window_table`). Rows sorted by (memory_id, query_id, arm).
        The other methods have no window-arm form (pool rows only).
    """
    from cmp_bayes.log.design import is_window
    from cmp_bayes.statistics import exposure_stats
    from cmp_bayes.text import add_text, texts_from_memories

    balanced = (log.design or {}).get("assignment") == "balanced"
    table = estimate_from_stats(exposure_stats(log, by=by), method=method, balanced=balanced)
    if by == "query" and method == "hajek" and is_window(log.design):
        import pandas as pd

        win = window_table(exposure_stats(log, by="pair"))
        table = pd.concat([table, win.astype({"query_id": table["query_id"].dtype})], ignore_index=True)
        table = table.sort_values(["memory_id", "query_id", "arm"], kind="mergesort", ignore_index=True)
    return add_text(table, texts_from_memories(log.memories))


__all__ = ["ARMS", "COLUMNS", "METHODS", "estimate", "estimate_from_stats", "window_table"]
