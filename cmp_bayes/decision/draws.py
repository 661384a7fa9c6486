"""What decide reads from a posterior: each memory's draws of the estimand and its design status."""

from __future__ import annotations

import warnings
from typing import Final

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.errors import PosteriorError
from cmp_bayes.posterior.contract import TAU_RELEVANT_GRID

_IDENT_REQUIRED: Final[tuple[str, ...]] = ("status", "exposed", "retrieved", "in_store")
#: Booleans per block of :meth:`MemoryDraws.summaries` (4 MB: reused, in cache).
_SUMMARY_CELLS: Final[int] = 1 << 22


class MemoryDraws:
    """The memory-level draws and identification facts the rule reads.

    Attributes
    ----------
    variable : str
        Posterior variable of the estimand (``tau``, ``utility``, or their
        ``_memory`` form in a per-query or gated posterior; ``tau_relevant``;
        ``workload``, computed from the pair draws).
    estimand, tau : xarray.DataArray
        Draws over (chain, draw, memory).
    identification : pandas.DataFrame
        Indexed like ``memory_ids``: status (str), exposed, retrieved,
        in_store (int64), mean_shift (float64, NaN if absent).
    memory_ids : numpy.ndarray
        Memory ids (object array of str), the posterior's order.
    grid : xarray.Dataset or None
        The gated posterior's ``tau_relevant_grid`` group (estimand ``relevant``
        only): :meth:`summaries` then takes P(tau_relevant > threshold) and the
        mean exactly from delta's pmf over the grid, averaged over every draw the
        fit judged, instead of from the stored draws (20 per chain on a shared
        store: a P(useful) in steps of 1/40).
    """

    def __init__(
        self,
        variable: str,
        estimand: xr.DataArray,
        tau: xr.DataArray,
        identification: pd.DataFrame,
        grid: xr.Dataset | None = None,
    ) -> None:
        self.variable = variable
        self.estimand = estimand
        self.tau = tau
        self.identification = identification
        self.memory_ids = np.asarray(estimand["memory"].to_numpy()).astype(str).astype(object)
        self.grid = grid

    @classmethod
    def from_posterior(
        cls, dt: xr.DataTree, estimand: str, workload: pd.Series | None = None
    ) -> MemoryDraws:
        """Pick the memory-level variables of ``estimand`` and align identification.

        ``tau``/``utility``: the variable of that name, or its ``_memory`` form in
        a per-query or gated posterior. ``relevant``: ``tau_relevant`` (gated
        posteriors). ``workload``: computed by
        :func:`cmp_bayes.decision.workload.workload_draws` over ``workload``
        (a mix as :func:`~cmp_bayes.decision.workload.read_mix` returns; None:
        the log's). The ``tau`` beside it (for ``exposures_needed``) is the
        memory-level tau: more exposures would be dealt as the log's were.
        """
        from cmp_bayes.decision.workload import WORKLOAD_VARIABLE, is_gated, workload_draws

        for group in ("posterior", "identification"):
            if group not in dt:
                raise PosteriorError(f"posterior has no '{group}' group (groups: {group_names(dt)})")
        post = dt["posterior"].to_dataset()
        if "tau" not in post:
            raise PosteriorError("posterior group has no 'tau' variable")
        gated = is_gated(dt)
        per_query = gated or "query" in post["tau"].dims
        suffix = "_memory" if per_query else ""
        tau_name = f"tau{suffix}"
        if estimand == "relevant":
            variable = "tau_relevant"
            if variable not in post:
                raise PosteriorError(
                    "estimand 'relevant' needs 'tau_relevant' (a memory's effect when relevant), which "
                    "only the relevance-gated pair model writes: fit(log, by='query', "
                    "model=ModelConfig(pair_model='gated')); this posterior has none"
                )
        elif estimand == WORKLOAD_VARIABLE:
            variable = WORKLOAD_VARIABLE
        else:
            variable = f"{estimand}{suffix}"
        names = (tau_name,) if variable == WORKLOAD_VARIABLE else (variable, tau_name)
        for name in names:
            if name not in post:
                kind = (
                    "a gated posterior" if gated
                    else "a per-query posterior (tau has a query dim)" if per_query
                    else "the posterior"
                )
                raise PosteriorError(f"{kind} has no '{name}' variable in its posterior group")
            dims = set(post[name].dims)
            if dims != {"chain", "draw", "memory"}:
                raise PosteriorError(
                    f"posterior variable '{name}' must be over (chain, draw, memory), "
                    f"has {tuple(post[name].dims)}"
                )
        if variable == WORKLOAD_VARIABLE:
            est = workload_draws(dt, workload)
        else:
            est = post[variable].transpose("chain", "draw", "memory")
        tau = post[tau_name].transpose("chain", "draw", "memory")
        ident = identification_table(dt["identification"].to_dataset(), est["memory"].to_numpy())
        grid = None
        if variable == "tau_relevant" and TAU_RELEVANT_GRID in dt.children:
            grid = dt[TAU_RELEVANT_GRID].to_dataset()
            order = grid.indexes["memory"].get_indexer(est.indexes["memory"])
            if (order < 0).any():
                raise PosteriorError(f"group '{TAU_RELEVANT_GRID}' lacks some of the posterior's memories")
            grid = grid.isel(memory=order)
        return cls(variable, est, tau, ident, grid)

    def summaries(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """P(estimand > ``threshold``) and the posterior mean of the estimand per memory.

        Returns
        -------
        tuple of numpy.ndarray
            Two float64 arrays of shape ``(M,)``: probabilities, and means in
            the estimand's units (NaN draws skipped, as xarray's mean does).
            The same numbers as ``(estimand > threshold).mean(("chain", "draw"))``
            and ``estimand.mean(("chain", "draw"))``, without the copy of every
            draw that xarray's NaN-skipping mean makes (10^8 draws at 100k memories).
            With :attr:`grid`: the same quantities of delta's grid posterior, exact.
        """
        if self.grid is not None:
            return grid_summaries(self.grid, threshold)
        x = self.estimand.to_numpy()
        flat = x.reshape(-1, x.shape[-1])
        p = self._share_above(flat, threshold)
        value = flat.mean(axis=0)
        if np.isnan(value).any():  # only a posterior with a NaN draw pays for the copy
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: NaN, as xarray
                value = np.nanmean(flat, axis=0)
        return p, value.astype("float64")

    @staticmethod
    def _share_above(flat: np.ndarray, threshold: float) -> np.ndarray:
        """Share of each column's draws above ``threshold``: ``(flat > threshold).mean(axis=0)``
        to the bit (counts are exact), counted over blocks of draws into one buffer, as the
        (draws x memories) boolean array would be a fresh 100 MB at 100k memories, whose page
        faults cost more than the comparisons."""
        n, m = flat.shape
        count = np.zeros(m, dtype="int64")
        block = max(1, min(n, _SUMMARY_CELLS // max(m, 1)))
        buffer = np.empty((block, m), dtype=bool)
        for lo in range(0, n, block):
            part = buffer[: min(block, n - lo)]
            np.greater(flat[lo : lo + block], threshold, out=part)
            count += np.add.reduce(part, axis=0, dtype="int64")
        return count / float(n) if n else np.full(m, np.nan)

    def numpy(self, index: np.ndarray, max_draws: int) -> tuple[np.ndarray, np.ndarray]:
        """Estimand and tau draws of memories ``index`` as float64 ``(len(index), D)``,
        D <= ``max_draws`` (evenly thinned over chain x draw). When the estimand is
        tau both are one array (the callers only read them): the gather from the
        memory-last draws is most of the cost at 100k memories."""
        # sample s of stack(sample=("chain", "draw")) is (chain, draw) = divmod(s, draws):
        # pick the thinned samples of the listed memories only, never the whole array
        chains, n_draw, _ = self.estimand.shape
        total = chains * n_draw
        keep = np.unique(np.linspace(0, total - 1, min(total, max_draws)).round().astype(int))
        chain, draw = np.divmod(keep, n_draw)
        pick = (chain[None, :], draw[None, :], np.asarray(index)[:, None])
        e = np.ascontiguousarray(self.estimand.to_numpy()[pick], dtype="float64")
        if self.estimand.name == self.tau.name:
            return e, e
        t = np.ascontiguousarray(self.tau.to_numpy()[pick], dtype="float64")
        return e, t


def grid_summaries(grid: xr.Dataset, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """P(delta > ``threshold``) and E[delta] per memory from a ``tau_relevant_grid`` group.

    ``within_cell = "uniform"``: delta spread evenly over its cell, so a cell that
    straddles the threshold counts with the share of it above; ``"point"``: delta at
    the cell's point. Both float64 ``(M,)``, the group's memory order.
    """
    pmf = grid["pmf"].transpose("memory", "tau_cell").to_numpy()
    lower, upper = grid["tau_cell_lower"].to_numpy(), grid["tau_cell_upper"].to_numpy()
    if grid.attrs.get("within_cell") == "point":
        point = grid["tau_cell_point"].to_numpy()
        above, mid = (point > threshold).astype(np.float64), point
    else:
        above = np.clip((upper - threshold) / (upper - lower), 0.0, 1.0)
        mid = (lower + upper) / 2
    return pmf @ above, pmf @ mid


def identification_table(ds: xr.Dataset, memories: np.ndarray) -> pd.DataFrame:
    """The ``identification`` group's design columns for ``memories``, one row each, in order."""
    missing = [v for v in _IDENT_REQUIRED if v not in ds]
    if missing:
        raise PosteriorError(
            f"identification group lacks {', '.join(missing)} (has: {', '.join(map(str, ds.data_vars))})"
        )
    if "memory" not in ds.dims:
        raise PosteriorError("identification group has no 'memory' dim")
    if "query" in ds.dims:
        # per-query identification: memory-level counts are sums over queries,
        # and the status follows from them by the same rule as the design's
        ds = ds.copy()
        for name in ("exposed", "retrieved", "in_store"):
            ds[name] = ds[name].sum("query")
        exposed, retrieved = ds["exposed"] >= 1, ds["retrieved"] >= 1
        ds["status"] = xr.where(
            exposed, IDENTIFIED, xr.where(retrieved, RETRIEVED_ONLY, UNIDENTIFIED)
        )
        if "mean_shift" in ds and "query" in ds["mean_shift"].dims:
            ds["mean_shift"] = ds["mean_shift"].max("query")
    ident_ids = np.asarray(ds["memory"].to_numpy()).astype(str)
    want = np.asarray(memories).astype(str)
    # one memory order in both groups (what fit writes): no reindex by 100k string labels
    order = None
    if not np.array_equal(ident_ids, want):
        if set(ident_ids) != set(want):
            extra = sorted(set(want) - set(ident_ids))[:3]
            raise PosteriorError(
                "identification and posterior disagree on the memories"
                + (f" (e.g. {', '.join(extra)} missing from identification)" if extra else "")
            )
        order = pd.Index(ident_ids).get_indexer(want)
    columns = {name: np.asarray(ds[name].to_numpy()) for name in _IDENT_REQUIRED}
    columns["mean_shift"] = (
        np.asarray(ds["mean_shift"].to_numpy(), dtype="float64")
        if "mean_shift" in ds
        else np.full(ident_ids.size, np.nan)
    )
    if order is not None:
        columns = {name: values[order] for name, values in columns.items()}
    status = columns["status"].astype(str)
    # the distinct statuses from numpy: iterating a pandas string column costs ~1 us a row
    bad = sorted(set(np.unique(status).tolist()) - {IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED})
    if bad:
        raise PosteriorError(f"identification status has unknown value {bad[0]!r}")
    columns["status"] = status
    for name in ("exposed", "retrieved", "in_store"):
        columns[name] = columns[name].astype("int64")
    return pd.DataFrame(columns, index=pd.Index(want, dtype=object))


def group_names(dt: xr.DataTree) -> str:
    """The groups a tree has, for error messages."""
    return ", ".join(sorted(dt.children)) or "none"
