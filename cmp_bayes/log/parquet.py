"""The Parquet form of the log: reading with the same checks as the JSONL form.

Tables: ``steps`` (step, query_id, outcome, group, and our optional
``ranking`` list column), ``contexts`` (one row per slot, in slot order:
step, memory_id, source, rank, propensity), ``memories``, ``labels``. Each is a
single ``NAME.parquet`` or a folder ``NAME/`` of part files read in name
order. Errors name the part file and the row within it (0-based).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.types as pat

from cmp_bayes.errors import LogError
from cmp_bayes.log import validate
from cmp_bayes.log.read import (
    _parquet_source,
    _read_design,
    arrow_list_to_long,
    read_parquet_table,
)
from cmp_bayes.log.schema import (
    CONTEXT_COLUMNS,
    LABEL_COLUMNS,
    MEMORY_COLUMNS,
    RANKING_COLUMNS,
    STEP_COLUMNS,
    ExposureLog,
    coerce,
    empty_frame,
)

_KIND_CHECKS = {
    "int": (pat.is_integer, "an integer"),
    "num": (lambda t: pat.is_integer(t) or pat.is_floating(t), "a number"),
    "str": (lambda t: pat.is_string(t) or pat.is_large_string(t) or pat.is_dictionary(t), "a string"),
    "bool": (pat.is_boolean, "a boolean"),
}


def _check_columns(
    table: pa.Table,
    files: list[Path],
    fidx: np.ndarray,
    ridx: np.ndarray,
    spec: dict[str, tuple[str, bool]],
) -> None:
    """Presence, type and non-null of each column: spec maps name -> (kind, required)."""
    where = files[0] if files else Path("?")
    for name, (kind, required) in spec.items():
        if name not in table.column_names:
            if required:
                raise LogError(where, "missing required column", field=name)
            continue
        col = table[name]
        check, label = _KIND_CHECKS[kind]
        if not (check(col.type) or pat.is_null(col.type)):
            raise LogError(where, f"expected {label} column, got {col.type}", field=name)
        if required and col.null_count:
            i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise LogError(files[fidx[i]], "missing required value (null)", row=int(ridx[i]), field=name)


def _locate(frame: pd.DataFrame, files: list[Path], fidx: np.ndarray, ridx: np.ndarray) -> pd.DataFrame:
    # a categorical keeps one string per part file instead of one per row
    names = list(dict.fromkeys(str(f) for f in files))
    return frame.assign(
        _file=pd.Categorical.from_codes(fidx, categories=names) if len(fidx) else [],
        _kind="row",
        _loc=ridx,
    )


def read_parquet_log(root: Path) -> ExposureLog:
    """Read a Parquet-form log directory (see module docstring)."""
    design = _read_design(root / "design.json")
    design_file = str(root / "design.json")

    files = _parquet_source(root, "steps") or []
    if not files:
        raise LogError(root / "steps", "no Parquet part files")
    table, fidx, ridx = read_parquet_table(files)
    _check_columns(
        table, files, fidx, ridx,
        {"step": ("int", True), "query_id": ("str", True), "outcome": ("num", True), "group": ("str", False)},
    )
    steps_np = table["step"].to_numpy()
    cols = {c: table[c].to_pandas() for c in ("step", "query_id", "outcome", "group") if c in table.column_names}
    steps = coerce(pd.DataFrame(cols), STEP_COLUMNS)
    validate.check_steps(_locate(steps, files, fidx, ridx))
    rankings = None
    if "ranking" in table.column_names and table["ranking"].null_count < table.num_rows:
        rk = table["ranking"]
        if not (pat.is_list(rk.type) or pat.is_large_list(rk.type)):
            raise LogError(files[0], f"expected a list<string> column, got {rk.type}", field="ranking")
        rankings = coerce(arrow_list_to_long(rk, steps_np), RANKING_COLUMNS)
        if rankings.duplicated(["step", "memory_id"]).any():
            st = rankings.loc[rankings.duplicated(["step", "memory_id"]), "step"].iloc[0]
            i = int(np.flatnonzero(steps_np == st)[0])
            raise LogError(files[fidx[i]], "a memory appears twice in the ranking", row=int(ridx[i]), field="ranking")

    cfiles = _parquet_source(root, "contexts") or []
    if cfiles:
        ctable, cfidx, cridx = read_parquet_table(cfiles)
        _check_columns(
            ctable, cfiles, cfidx, cridx,
            {
                "step": ("int", True),
                "memory_id": ("str", True),
                "source": ("str", True),
                "rank": ("int", False),
                "propensity": ("num", False),
            },
        )
        cdf = pd.DataFrame(
            {c: ctable[c].to_pandas() for c in ("step", "memory_id", "source", "rank", "propensity") if c in ctable.column_names}
        )
        # slot order is row order within a step: a stable sort keeps it across part files
        order = np.argsort(cdf["step"].to_numpy(), kind="stable")
        cdf = cdf.iloc[order].reset_index(drop=True)
        cfidx, cridx = cfidx[order], cridx[order]
        cdf["slot"] = cdf.groupby("step").cumcount().astype("int64")
        contexts = coerce(cdf, CONTEXT_COLUMNS)
        validate.check_contexts(_locate(contexts, cfiles, cfidx, cridx), steps, design, design_file)
    else:
        contexts = empty_frame(CONTEXT_COLUMNS)

    memories = _read_simple(
        root, "memories", MEMORY_COLUMNS,
        {"memory_id": ("str", True), "created_step": ("int", True), "deleted_step": ("int", False), "text": ("str", False)},
    )
    if memories is not None:
        memories["meta"] = memories["meta"].map(_parse_meta).astype(object)
        dup = memories.duplicated("memory_id").to_numpy()
        if dup.any():
            raise LogError(root / "memories.parquet", "duplicate memory_id", row=int(np.flatnonzero(dup)[0]), field="memory_id")
    labels = _read_simple(
        root, "labels", LABEL_COLUMNS,
        {"query_id": ("str", True), "memory_id": ("str", True), "required": ("bool", True), "utility": ("num", False)},
    )
    return ExposureLog(steps, contexts, rankings, memories, design, labels, source=root)


def _parse_meta(v: object) -> object:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, str):
        return json.loads(v)
    return v


def _read_simple(
    root: Path, name: str, columns: dict[str, str], spec: dict[str, tuple[str, bool]]
) -> pd.DataFrame | None:
    files = _parquet_source(root, name)
    if not files:
        return None
    table, fidx, ridx = read_parquet_table(files)
    _check_columns(table, files, fidx, ridx, spec)
    frame = pd.DataFrame({c: table[c].to_pandas() for c in table.column_names})
    return coerce(frame, columns)
