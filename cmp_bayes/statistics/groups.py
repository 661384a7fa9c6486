"""A memory's main group: the query group of the steps at which it is in the store most often.

The hierarchical model pools memories by this group; the pandas path
(:func:`cmp_bayes.model.fit.memory_inputs`) and the Dask path
(:func:`cmp_bayes.scale.dask_stats.fit_statistics`) both take it from here, so a
log gets the same groups whichever engine computed its statistics.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import xarray as xr

#: the group of steps that name none (see ``exposure_stats(..., by="group")``)
UNGROUPED: str = ""


def is_grouped(groups: Iterable[str]) -> bool:
    """Whether ``groups`` (the names of a log's query groups) hold two or more named groups.

    Steps without a group (:data:`UNGROUPED`) are not a group of their own here:
    a log with one named group and some ungrouped steps has no grouping to pool by.
    """
    return len({str(g) for g in groups} - {UNGROUPED}) >= 2


def main_group(by_group: xr.Dataset) -> np.ndarray | None:
    """Each memory's main group, from the statistics by group.

    Parameters
    ----------
    by_group : xarray.Dataset
        ``exposure_stats(log, by="group")``: ``in_store`` over (memory, group).

    Returns
    -------
    numpy.ndarray of str, shape (memory,), or None
        The group at whose steps each memory is in the store most often (ties:
        the first group in sorted order; ``""`` when that is the ungrouped
        steps). None when the log is not grouped (:func:`is_grouped`).
    """
    groups = np.asarray(by_group["group"].values)
    if not is_grouped(groups):
        return None
    steps = by_group["in_store"].transpose("memory", "group")
    return groups[steps.argmax("group").values].astype(str)
