"""What a posterior keeps of its log beside the draws: memory texts, the log id, the store.

``fit`` writes them (:func:`log_provenance`, :func:`with_memory_text`,
:func:`provenance_attrs`); ``decide`` and the report read them
(:func:`memory_texts`, :func:`provenance`). The names are the contract's
(:data:`cmp_bayes.posterior.contract.MEMORY_TEXT`, ``OPTIONAL_ATTRS``).

* ``memory_text``: a non-dimension coordinate along ``memory`` of the
  ``posterior`` group, each memory's text from the log's ``memories.jsonl``
  ("" for none), so that every table downstream can show what a memory says,
  not only its id.
* ``log_id`` and ``store``: root attributes copied from ``design.json``'s
  top-level fields of the same names (written by live sessions: a uuid4 hex
  and the memory system's scope, e.g. Mem0 filters), so that decisions made
  from the posterior can be checked against the store they are applied to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from cmp_bayes.posterior.contract import MEMORY_TEXT

if TYPE_CHECKING:
    from cmp_bayes.log.schema import ExposureLog


def log_provenance(log: ExposureLog) -> dict[str, Any]:
    """The texts, ``log_id`` and ``store`` of a log, as ``fit``'s metadata.

    Returns
    -------
    dict
        ``memory_text`` (pandas Series, memory id -> text) when some memory has
        a text; ``log_id`` (str) and ``store`` (any JSON value) when
        ``design.json`` has them. Keys are absent otherwise.
    """
    from cmp_bayes.text import texts_from_memories

    out: dict[str, Any] = {}
    texts = texts_from_memories(log.memories)
    if texts is not None:
        out["memory_text"] = texts
    design = log.design or {}
    if design.get("log_id") is not None:
        out["log_id"] = str(design["log_id"])
    if design.get("store") is not None:
        out["store"] = design["store"]
    return out


def provenance_attrs(meta: Mapping[str, Any]) -> dict[str, str]:
    """Root attributes ``log_id`` and ``store`` (JSON) for the keys ``meta`` has."""
    out: dict[str, str] = {}
    if meta.get("log_id") is not None:
        out["log_id"] = str(meta["log_id"])
    if meta.get("store") is not None:
        # NetCDF attributes are flat: a filters mapping travels as JSON text
        out["store"] = json.dumps(meta["store"], sort_keys=True)
    return out


def with_memory_text(post: xr.Dataset, texts: pd.Series) -> xr.Dataset:
    """``post`` with the ``memory_text`` coordinate along ``memory``.

    Parameters
    ----------
    post : xarray.Dataset
        A group with a ``memory`` dim (the posterior).
    texts : pandas.Series
        Memory id -> text; ids it lacks, and <NA>, get "" (NetCDF strings have
        no missing value).
    """
    ids = np.asarray(post["memory"].values).astype(str)
    looked_up = texts.reindex(ids).to_numpy(dtype=object, na_value="")
    values = np.array([str(t) for t in looked_up], dtype=object)
    return post.assign_coords({MEMORY_TEXT: ("memory", values)})


def memory_texts(dt: xr.DataTree) -> pd.Series | None:
    """Each memory's text from the posterior's ``memory_text`` coordinate.

    Returns
    -------
    pandas.Series or None
        Memory id (str) -> text (``string`` dtype; <NA> where the coordinate
        holds ""), in the posterior's memory order; None when the posterior
        has no such coordinate or no memory has a text.
    """
    if "posterior" not in dt.children:
        return None
    post = dt["posterior"]
    if MEMORY_TEXT not in post.coords:
        return None
    ids = np.asarray(post["memory"].values).astype(str)
    text = pd.Series(np.asarray(post[MEMORY_TEXT].values).astype(str), index=ids, dtype="string")
    text = text.where(text.str.len() > 0)
    return text if text.notna().any() else None


def provenance(attrs: Mapping[Any, Any]) -> dict[str, Any]:  # Any keys: xarray's attrs (see is_gated)
    """Where a posterior's data came from: ``log_checksum``, ``log_id``, ``store``.

    Parameters
    ----------
    attrs : mapping
        The DataTree's root attributes.

    Returns
    -------
    dict
        ``log_checksum`` (str, "" when unknown), ``log_id`` (str, or None
        without one), ``store`` (decoded from JSON; a value that is not JSON
        is kept as its text; None without one).
    """
    log_id = attrs.get("log_id")
    store = attrs.get("store")
    if store is not None:
        try:
            store = json.loads(str(store))
        except json.JSONDecodeError:
            store = str(store)  # written by hand: kept as the text it is
    return {
        "log_checksum": str(attrs.get("log_checksum", "") or ""),
        "log_id": None if log_id is None or str(log_id) == "" else str(log_id),
        "store": store,
    }
