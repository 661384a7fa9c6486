"""Write an :class:`ExposureLog` in the spec's JSONL or Parquet form, atomically.

The directory appears complete or not at all (it is built beside the target
and renamed into place). Reading back what was written gives the same tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cmp_bayes.atomic import atomic_dir
from cmp_bayes.errors import ConfigError
from cmp_bayes.log.schema import ExposureLog


def write_log(
    log: ExposureLog, path: str | Path, format: Literal["jsonl", "parquet"] = "jsonl"
) -> Path:
    """Write ``log`` to the directory ``path`` (replaced atomically if it exists).

    Parameters
    ----------
    log : ExposureLog
        The log to write.
    path : str or Path
        Target directory.
    format : {"jsonl", "parquet"}
        ``jsonl``: ``steps.jsonl`` (+ ``design.json``, ``memories.jsonl``,
        ``labels.jsonl``). ``parquet``: ``steps.parquet`` (with a
        ``ranking`` list column when the log has rankings),
        ``contexts.parquet`` (with an ``arm`` column when a slot has one), ``memories.parquet``, ``labels.parquet`` and
        ``design.json``.

    Returns
    -------
    Path
        The directory written.
    """
    if format not in ("jsonl", "parquet"):
        raise ConfigError(f"format must be 'jsonl' or 'parquet', got {format!r}")
    target = Path(path)
    with atomic_dir(target) as tmp:
        if log.design is not None:
            (tmp / "design.json").write_text(json.dumps(log.design, indent=1) + "\n", encoding="utf-8")
        if format == "jsonl":
            _write_steps_jsonl(log, tmp / "steps.jsonl")
            if log.memories is not None:
                _write_records(tmp / "memories.jsonl", _memory_records(log.memories))
            if log.labels is not None:
                _write_records(tmp / "labels.jsonl", _label_records(log.labels))
        else:
            _write_parquet(log, tmp)
    return target


def step_records(log: ExposureLog) -> list[dict[str, Any]]:
    """The log's steps as spec JSON objects (one dict per step, in step order)."""
    ctx = log.contexts.sort_values(["step", "slot"], kind="stable")
    by_step: dict[int, list[dict[str, Any]]] = {}
    steps_col = ctx["step"].to_numpy()
    mids = ctx["memory_id"].astype(str).to_numpy()
    srcs = ctx["source"].astype(str).to_numpy()
    ranks = ctx["rank"].to_numpy(dtype=object, na_value=None)
    props = ctx["propensity"].to_numpy(dtype=object, na_value=None)
    arms = _arms(ctx)
    for s, m, src, r, p, a in zip(steps_col, mids, srcs, ranks, props, arms, strict=True):
        slot: dict[str, Any] = {"memory_id": m, "source": src}
        if r is not None:
            slot["rank"] = int(r)
        if p is not None:
            slot["propensity"] = float(p)
        if a is not None:
            slot["arm"] = str(a)
        by_step.setdefault(int(s), []).append(slot)
    rankings: dict[int, list[str]] = {}
    if log.rankings is not None and not log.rankings.empty:
        rk = log.rankings.sort_values(["step", "rank"], kind="stable")
        for s, grp in rk.groupby("step", sort=False)["memory_id"]:
            rankings[int(s)] = grp.astype(str).tolist()
    out = []
    groups = log.steps["group"].to_numpy(dtype=object, na_value=None)
    for s, q, y, g in zip(
        log.steps["step"].to_numpy(), log.steps["query_id"].astype(str).to_numpy(),
        log.steps["outcome"].to_numpy(dtype=float), groups, strict=True,
    ):
        rec: dict[str, Any] = {"step": int(s), "query_id": q, "outcome": _num(y)}
        if g is not None:
            rec["group"] = str(g)
        rec["context"] = by_step.get(int(s), [])
        if int(s) in rankings:
            rec["ranking"] = rankings[int(s)]
        out.append(rec)
    return out


def _arms(ctx: pd.DataFrame) -> np.ndarray:
    """Each slot's ``arm`` (None where it has none: retriever slots, pool slots logged without one)."""
    if "arm" not in ctx.columns:
        return np.full(len(ctx), None, dtype=object)
    return ctx["arm"].astype("string").to_numpy(dtype=object, na_value=None)


def _num(y: float) -> int | float:
    # integral outcomes are written as 0 / 1, as in the spec's example
    return int(y) if float(y).is_integer() else float(y)


def _write_steps_jsonl(log: ExposureLog, file: Path) -> None:
    with file.open("w", encoding="utf-8") as fh:
        for rec in step_records(log):
            fh.write(json.dumps(rec, ensure_ascii=False, separators=(", ", ": ")) + "\n")


def _write_records(file: Path, records: list[dict[str, Any]]) -> None:
    with file.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def _memory_records(mem: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in mem.to_dict("records"):
        rec: dict[str, Any] = {
            "memory_id": str(row["memory_id"]),
            "created_step": int(row["created_step"]),
            "deleted_step": None if _missing(row["deleted_step"]) else int(row["deleted_step"]),
        }
        if not _missing(row.get("text")):
            rec["text"] = str(row["text"])
        if isinstance(row.get("meta"), dict):
            rec["meta"] = row["meta"]
        out.append(rec)
    return out


def _label_records(labels: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in labels.to_dict("records"):
        rec: dict[str, Any] = {
            "query_id": str(row["query_id"]),
            "memory_id": str(row["memory_id"]),
            "required": bool(row["required"]),
        }
        if not _missing(row.get("utility")):
            rec["utility"] = float(row["utility"])
        out.append(rec)
    return out


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _write_parquet(log: ExposureLog, root: Path) -> None:
    steps = log.steps
    cols: dict[str, pa.Array] = {
        "step": pa.array(steps["step"].to_numpy(dtype=np.int64)),
        "query_id": pa.array(steps["query_id"].astype(str).to_numpy(), pa.string()),
        "outcome": pa.array(steps["outcome"].to_numpy(dtype=float)),
        "group": pa.array(steps["group"].to_numpy(dtype=object, na_value=None), pa.string()),
    }
    if log.rankings is not None:
        rk = log.rankings.sort_values(["step", "rank"], kind="stable")
        lists = rk.groupby("step", sort=True)["memory_id"].agg(lambda s: s.astype(str).tolist())
        cols["ranking"] = pa.array(
            [lists.get(int(s)) for s in steps["step"].to_numpy()], pa.list_(pa.string())
        )
    pq.write_table(pa.table(cols), root / "steps.parquet")
    ctx = log.contexts.sort_values(["step", "slot"], kind="stable")
    ccols = {
        "step": pa.array(ctx["step"].to_numpy(dtype=np.int64)),
        "memory_id": pa.array(ctx["memory_id"].astype(str).to_numpy(), pa.string()),
        "source": pa.array(ctx["source"].astype(str).to_numpy(), pa.string()),
        "rank": pa.array(ctx["rank"].to_numpy(dtype=object, na_value=None), pa.int64()),
        "propensity": pa.array(ctx["propensity"].to_numpy(dtype=object, na_value=None), pa.float64()),
    }
    arms = _arms(ctx)
    if any(a is not None for a in arms):  # the spec's optional column, only where a slot has an arm
        ccols["arm"] = pa.array(arms, pa.string())
    pq.write_table(pa.table(ccols), root / "contexts.parquet")
    if log.memories is not None:
        m = log.memories
        pq.write_table(
            pa.table(
                {
                    "memory_id": pa.array(m["memory_id"].astype(str).to_numpy(), pa.string()),
                    "created_step": pa.array(m["created_step"].to_numpy(dtype=np.int64)),
                    "deleted_step": pa.array(m["deleted_step"].to_numpy(dtype=object, na_value=None), pa.int64()),
                    "text": pa.array(m["text"].to_numpy(dtype=object, na_value=None), pa.string()),
                    "meta": pa.array(
                        [json.dumps(v) if isinstance(v, dict) else None for v in m["meta"]], pa.string()
                    ),
                }
            ),
            root / "memories.parquet",
        )
    if log.labels is not None:
        lb = log.labels
        pq.write_table(
            pa.table(
                {
                    "query_id": pa.array(lb["query_id"].astype(str).to_numpy(), pa.string()),
                    "memory_id": pa.array(lb["memory_id"].astype(str).to_numpy(), pa.string()),
                    "required": pa.array(lb["required"].to_numpy(dtype=bool)),
                    "utility": pa.array(lb["utility"].to_numpy(dtype=object, na_value=None), pa.float64()),
                }
            ),
            root / "labels.parquet",
        )
