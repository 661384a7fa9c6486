"""Apply ``decide``'s forgets back to the memory store, and record them in the log.

Any store plugs in through :class:`MemoryStore` (one method, ``delete``);
:class:`~cmp_bayes.integrations.mem0.CMPMemory` passes Mem0's. Before
anything is deleted the decisions must come from this log and this store:
their ``log_id`` (copied from ``design.json`` into the posterior at fit time,
then into the decisions) must be the session's, and their ``store`` scope the
session's. The log's checksum cannot be the test, since a live log grows
after every fit; it is the test only for decisions without a ``log_id``
(their log checksum must be the log's as it is now). A dry run (the default) changes nothing and says what would happen.

Each forget ends in one status:

``deleted`` / ``would delete``
    The memory is deleted from the store (or would be), and its
    ``deleted_step`` recorded in ``memories.jsonl``.
``already deleted``
    The log records it deleted already (by an earlier apply, or by the user).
``missing from store``
    The store does not hold it any more (deleted outside the log): the deletion
    is recorded in the log, nothing is deleted.
``superseded``
    The memory was updated since the fit: the decision was about an older
    version, the current one is kept (decide again on a refit).
``unknown``
    The log has no such memory (never deleted: a decision for another log).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from cmp_bayes.errors import ConfigError
from cmp_bayes.live.session import LiveSession
from cmp_bayes.text import shorten

FORGET = "forget"


@runtime_checkable
class MemoryStore(Protocol):
    """What a memory system needs to offer for decisions to be applied to it."""

    def delete(self, memory_id: str) -> Any:
        """Delete one memory by the store's own id."""
        ...


def decisions_frame(decisions: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The decision table and its provenance, from a ``Decisions``, a DataFrame or a CSV path."""
    if isinstance(decisions, str | Path):
        from cmp_bayes.decision.decisions import read_decisions_csv

        table = read_decisions_csv(decisions)
        prov = {
            "log_id": _one(table, "log_id", decisions),
            "log_checksum": _one(table, "log_checksum", decisions),
            "store": None,
            "source": str(decisions),
        }
        return table, prov
    if isinstance(decisions, pd.DataFrame):
        prov = {"log_id": _one(decisions, "log_id", "decisions"), "log_checksum": _one(decisions, "log_checksum", "decisions")}
        return decisions, {**prov, "store": None, "source": "DataFrame"}
    table = getattr(decisions, "table", None)
    if not isinstance(table, pd.DataFrame):
        raise ConfigError(f"cannot apply {type(decisions).__name__}: pass a Decisions, a DataFrame or a CSV path")
    prov = {
        "log_id": getattr(decisions, "log_id", None) or None,
        "log_checksum": getattr(decisions, "log_checksum", None) or None,
        "store": getattr(decisions, "store", None) or None,
        "source": "Decisions",
    }
    return table, prov


def apply_decisions(
    session: LiveSession,
    decisions: Any,
    store: MemoryStore | None,
    *,
    dry_run: bool = True,
    in_store: Collection[str] | None = None,
    allow_unverified: bool = False,
    echo: Callable[[str], None] | None = print,
) -> pd.DataFrame:
    """Delete the memories decided ``forget`` from ``store`` and record it in the log.

    Parameters
    ----------
    session : LiveSession
        The live log the decisions were fitted on.
    decisions : Decisions, pandas.DataFrame or path
        ``decide``'s result, its table, or its CSV (``memory_id``, ``action``,
        ``log_id``, ``log_checksum`` columns).
    store : MemoryStore or None
        Where to delete (None: record in the log only, for a store the caller
        deletes from itself).
    dry_run : bool
        Say what would happen and change nothing (default).
    in_store : collection of str, optional
        The store's ids of every memory in scope now; forgets outside it are
        ``missing from store``. None: not checked.
    allow_unverified : bool
        Apply decisions that carry no ``log_id`` (made before logs had one).
    echo : callable or None
        Where to print each line (None: silent).

    Returns
    -------
    pandas.DataFrame
        One row per forget: ``memory_id`` (log id), ``store_id``, ``text``
        (the memory's text in ``memories.jsonl``; None without one), ``status``.

    Raises
    ------
    ConfigError
        Decisions from another log or store, or without provenance.
    """
    table, prov = decisions_frame(decisions)
    _check_origin(session, prov, allow_unverified)
    for col in ("memory_id", "action"):
        if col not in table.columns:
            raise ConfigError(f"{prov['source']}: decisions need a '{col}' column")
    forgets = table.loc[table["action"].astype(str) == FORGET, "memory_id"].astype(str).tolist()
    scope = None if in_store is None else {str(m) for m in in_store}
    rows = []
    for lid in forgets:
        sid = session.store_id(lid)
        status = _status(session, lid, sid, scope)
        if status in ("delete", "missing from store"):
            if not dry_run:
                if status == "delete" and store is not None:
                    store.delete(sid)
                session.delete(sid)
            status = ("deleted" if not dry_run else "would delete") if status == "delete" else status
        rows.append({"memory_id": lid, "store_id": sid, "text": _text(session, lid), "status": status})
    out = pd.DataFrame(rows, columns=["memory_id", "store_id", "text", "status"])
    if echo is not None:
        for r in rows:
            echo(f"{r['status']:>18}  {r['memory_id']}" + (f'  "{shorten(r["text"])}"' if r["text"] else ""))
        counts = out["status"].value_counts().to_dict() if len(out) else {}
        what = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to do"
        echo(f"{'dry run: ' if dry_run else ''}{len(forgets)} forget decisions: {what}")
    return out


def _text(session: LiveSession, log_id: str) -> str | None:
    w = session.writer
    return w.memory_text(log_id) if w.has_memories and w.memory_known(log_id) else None


def _status(session: LiveSession, lid: str, sid: str, scope: set[str] | None) -> str:
    w = session.writer
    if w.has_memories and not w.memory_known(lid):
        return "unknown"
    if not session.is_current(lid):
        return "superseded"
    if w.has_memories and not w.memory_alive(lid, w.next_step):
        return "already deleted"
    if scope is not None and sid not in scope:
        return "missing from store"
    return "delete"


def _check_origin(session: LiveSession, prov: dict[str, Any], allow_unverified: bool) -> None:
    got = prov.get("log_id")
    if got:
        if session.log_id and got != session.log_id:
            raise ConfigError(
                f"{prov['source']}: these decisions were made from log {got}, not from this log "
                f"({session.log_id} at {session.path}); refusing to delete"
            )
    elif not allow_unverified and not _same_log(session, prov.get("log_checksum")):
        raise ConfigError(
            f"{prov['source']}: these decisions carry no log_id and their log checksum is not this "
            "log's; decide again from a posterior fitted on this log, or pass allow_unverified=True"
        )
    want_store = session.store
    got_store = prov.get("store")
    if got_store and want_store and dict(got_store) != dict(want_store):
        raise ConfigError(
            f"{prov['source']}: these decisions are for the store {dict(got_store)}, "
            f"this log is for {dict(want_store)}; refusing to delete"
        )


def _same_log(session: LiveSession, checksum: str | None) -> bool:
    """Whether ``checksum`` is the log's as it is now (a log without a ``log_id`` that has not
    grown since the fit)."""
    if not checksum:
        return False
    from cmp_bayes.log.layout import log_checksum

    return log_checksum(session.path) == checksum


def _one(table: pd.DataFrame, column: str, source: Any) -> str | None:
    if column not in table.columns:
        return None
    vals = table[column].dropna().astype(str).unique().tolist()
    if len(vals) > 1:
        raise ConfigError(f"{source}: column '{column}' holds {len(vals)} different values; one decision run per file")
    return vals[0] if vals else None
