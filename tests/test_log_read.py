"""The log reader follows the spec to the letter: every rejection, and lossless round trips."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _scale_fixtures import rewrite_cell, split_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmp_bayes import ExposureLog, LogError, read_log, write_log
from cmp_bayes.cli.main import main
from cmp_bayes.errors import TornLineWarning

DESIGN = {
    "slots": 3,
    "exposure_slots": 1,
    "assignment": "balanced",
    "steps": 4,
    "seed": 7,
    "pool": {"m1": 0.25, "m2": 0.25, "m3": 0.5},
}


def _steps() -> list[dict]:
    return [
        {
            "step": 0,
            "query_id": "q1",
            "outcome": 1,
            "group": "g",
            "context": [
                {"memory_id": "m0", "source": "retriever", "rank": 0},
                {"memory_id": "m1", "source": "exposure", "propensity": 0.25},
            ],
        },
        {
            "step": 1,
            "query_id": "q2",
            "outcome": 0,
            "context": [
                {"memory_id": "m0", "source": "retriever", "rank": 0},
                {"memory_id": "m3", "source": "exposure", "propensity": 0.5},
            ],
        },
        {
            "step": 2,
            "query_id": "q1",
            "outcome": 0.5,
            "context": [
                {"memory_id": "m4", "source": "retriever", "rank": 0},
                {"memory_id": "m2", "source": "exposure", "propensity": 0.25},
            ],
            "ranking": ["m4", "m0", "m5"],
        },
        {
            "step": 3,
            "query_id": "q2",
            "outcome": 1,
            "context": [
                {"memory_id": "m0", "source": "retriever", "rank": 0},
                {"memory_id": "m3", "source": "exposure", "propensity": 0.5},
            ],
        },
    ]


def make_log_dir(
    root: Path,
    steps: list[dict] | None = None,
    design: dict | None = DESIGN,
    raw_lines: list[str] | None = None,
) -> Path:
    """A JSONL log written by plain json.dumps, independent of our writer."""
    root.mkdir(parents=True, exist_ok=True)
    lines = raw_lines if raw_lines is not None else [json.dumps(s) for s in (steps or _steps())]
    (root / "steps.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if design is not None:
        (root / "design.json").write_text(json.dumps(design), encoding="utf-8")
    return root


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _mutate(index: int, fn) -> list[dict]:
    steps = _steps()
    fn(steps[index])
    return steps


def _del(key):
    return lambda s: s.pop(key)


def _set(key, value):
    return lambda s: s.__setitem__(key, value)


def _slot(j, key, value=None, delete=False):
    def fn(s):
        if delete:
            s["context"][j].pop(key)
        else:
            s["context"][j][key] = value

    return fn


# (id, steps or raw lines, design, expected line, expected field fragment, message fragment)
VARIANTS = [
    (
        "malformed-json",
        None,
        ['{"step": 0, "query_id": "q1"', *[json.dumps(s) for s in _steps()[1:]]],
        DESIGN,
        1,
        None,
        "malformed JSON",
    ),
    ("missing-step", _mutate(1, _del("step")), None, DESIGN, 2, "step", "missing"),
    ("missing-query", _mutate(2, _del("query_id")), None, DESIGN, 3, "query_id", "missing"),
    ("missing-outcome", _mutate(0, _del("outcome")), None, DESIGN, 1, "outcome", "missing"),
    ("missing-context", _mutate(3, _del("context")), None, DESIGN, 4, "context", "missing"),
    (
        "missing-memory-id",
        _mutate(1, _slot(0, "memory_id", delete=True)),
        None,
        DESIGN,
        2,
        "context[0].memory_id",
        "missing",
    ),
    (
        "missing-source",
        _mutate(1, _slot(1, "source", delete=True)),
        None,
        DESIGN,
        2,
        "context[1].source",
        "missing",
    ),
    ("type-step-string", _mutate(1, _set("step", "1")), None, DESIGN, 2, "step", "integer"),
    ("type-step-float", _mutate(1, _set("step", 1.5)), None, DESIGN, 2, "step", "integer"),
    ("type-outcome-string", _mutate(2, _set("outcome", "1")), None, DESIGN, 3, "outcome", "number"),
    ("type-outcome-bool", _mutate(2, _set("outcome", True)), None, DESIGN, 3, "outcome", "number"),
    ("type-query-int", _mutate(0, _set("query_id", 5)), None, DESIGN, 1, "query_id", "string"),
    ("type-context-object", _mutate(0, _set("context", {})), None, DESIGN, 1, "context", "array"),
    (
        "type-rank-string",
        _mutate(0, _slot(0, "rank", "0")),
        None,
        DESIGN,
        1,
        "context[0].rank",
        "integer",
    ),
    ("type-group-int", _mutate(0, _set("group", 3)), None, DESIGN, 1, "group", "string"),
    ("outcome-above-1", _mutate(3, _set("outcome", 1.5)), None, DESIGN, 4, "outcome", "[0, 1]"),
    ("outcome-negative", _mutate(1, _set("outcome", -0.1)), None, DESIGN, 2, "outcome", "[0, 1]"),
    (
        "outcome-nan",
        None,
        [json.dumps(s) for s in _steps()[:2]]
        + [
            json.dumps(_steps()[2]).replace('"outcome": 0.5', '"outcome": NaN'),
            json.dumps(_steps()[3]),
        ],
        DESIGN,
        3,
        "outcome",
        "finite",
    ),
    (
        "outcome-infinity",
        None,
        [json.dumps(s) for s in _steps()[:3]]
        + [json.dumps(_steps()[3]).replace('"outcome": 1', '"outcome": Infinity')],
        DESIGN,
        4,
        "outcome",
        "finite",
    ),
    ("step-repeats", _mutate(2, _set("step", 1)), None, DESIGN, 3, "step", "repeats"),
    ("step-backwards", _mutate(3, _set("step", 0)), None, DESIGN, 4, "step", "backwards"),
    (
        "memory-twice",
        _mutate(1, _slot(1, "memory_id", "m0")),
        None,
        DESIGN,
        2,
        "context[1].memory_id",
        "twice",
    ),
    (
        "unknown-source",
        _mutate(0, _slot(0, "source", "oracle")),
        None,
        DESIGN,
        1,
        "context[0].source",
        "unknown source",
    ),
    (
        "exposure-no-propensity",
        _mutate(2, _slot(1, "propensity", delete=True)),
        None,
        DESIGN,
        3,
        "context[1].propensity",
        "no propensity",
    ),
    (
        "propensity-zero",
        _mutate(2, _slot(1, "propensity", 0)),
        None,
        DESIGN,
        3,
        "context[1].propensity",
        "(0, 1]",
    ),
    (
        "propensity-above-1",
        _mutate(2, _slot(1, "propensity", 1.5)),
        None,
        DESIGN,
        3,
        "context[1].propensity",
        "(0, 1]",
    ),
    (
        "propensity-disagrees",
        _mutate(3, _slot(1, "propensity", 0.25)),
        None,
        DESIGN,
        4,
        "context[1].propensity",
        "disagrees",
    ),
    (
        "exposure-not-in-pool",
        _mutate(3, _slot(1, "memory_id", "m9")),
        None,
        DESIGN,
        4,
        "context[1].memory_id",
        "not in the pool",
    ),
    ("exposure-without-design", None, None, None, 1, "context[1].source", "no design.json"),
    (
        "too-many-exposures",
        _mutate(
            0,
            lambda s: s["context"].append(
                {"memory_id": "m3", "source": "exposure", "propensity": 0.5}
            ),
        ),
        None,
        DESIGN,
        1,
        "context",
        "more exposure slots",
    ),
]


@pytest.mark.parametrize(
    ("steps", "raw", "design", "line", "field", "fragment"),
    [v[1:] for v in VARIANTS],
    ids=[v[0] for v in VARIANTS],
)
def test_cli_rejects_each_malformed_variant(
    tmp_path, capsys, steps, raw, design, line, field, fragment
):
    root = make_log_dir(tmp_path / "log", steps=steps, design=design, raw_lines=raw)
    before = _digest(root)
    status = main(["diagnose", str(root)])
    err = capsys.readouterr().err
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert str(root / "steps.jsonl") in lines[0]
    assert f"line {line}" in lines[0]
    if field is not None:
        assert f"field '{field}'" in lines[0]
    assert fragment in lines[0]
    assert _digest(root) == before  # input byte-identical, nothing added or removed


def test_console_script_prints_one_line_no_traceback(tmp_path):
    root = make_log_dir(tmp_path / "log", steps=_mutate(1, _set("outcome", 2)))
    exe = Path(sys.executable).with_name("cmp-bayes")
    proc = subprocess.run([str(exe), "diagnose", str(root)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "line 2" in proc.stderr and "outcome" in proc.stderr


def test_blank_line_in_middle_rejected(tmp_path):
    lines = [json.dumps(s) for s in _steps()]
    root = make_log_dir(tmp_path / "log", raw_lines=[lines[0], "", *lines[1:]])
    with pytest.raises(LogError, match="line 2.*blank line"):
        read_log(root)


def test_torn_last_line_is_set_aside_with_warning(tmp_path):
    lines = [json.dumps(s) for s in _steps()]
    root = make_log_dir(tmp_path / "log")
    (root / "steps.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:25], encoding="utf-8")
    with pytest.warns(TornLineWarning, match="line 4"):
        log = read_log(root)
    assert log.steps["step"].tolist() == [0, 1, 2]


def test_malformed_last_line_with_newline_is_an_error(tmp_path):
    lines = [json.dumps(s) for s in _steps()]
    root = make_log_dir(tmp_path / "log", raw_lines=[*lines[:3], lines[3][:25]])
    with pytest.raises(LogError, match="line 4.*malformed JSON"):
        read_log(root)


def test_design_errors_name_field(tmp_path):
    bad = dict(DESIGN, assignment="roundrobin")
    root = make_log_dir(tmp_path / "log", design=bad)
    with pytest.raises(LogError, match=r"design\.json.*field 'assignment'"):
        read_log(root)
    bad = dict(DESIGN, pool={"m1": 0})
    root = make_log_dir(tmp_path / "log2", design=bad)
    with pytest.raises(LogError, match=r"field 'pool\.m1'"):
        read_log(root)


def test_memories_file_rules(tmp_path):
    root = make_log_dir(tmp_path / "log")
    mem = [{"memory_id": f"m{i}", "created_step": 0, "deleted_step": None} for i in range(6)]
    mem[4]["created_step"] = 3  # m4 is in the context at step 2, before it exists
    (root / "memories.jsonl").write_text("\n".join(json.dumps(m) for m in mem) + "\n")
    with pytest.raises(LogError, match="m4.*not in the store"):
        read_log(root)
    mem[4]["created_step"] = "0"
    (root / "memories.jsonl").write_text("\n".join(json.dumps(m) for m in mem) + "\n")
    with pytest.raises(LogError, match=r"memories\.jsonl, line 5, field 'created_step'"):
        read_log(root)


def test_labels_type_error(tmp_path):
    root = make_log_dir(tmp_path / "log")
    (root / "labels.jsonl").write_text('{"query_id": "q1", "memory_id": "m1", "required": "yes"}\n')
    with pytest.raises(LogError, match=r"labels\.jsonl, line 1, field 'required'"):
        read_log(root)


def test_bare_steps_file_and_memory_ids(tmp_path):
    steps = [s for s in _steps()]
    for s in steps:
        s["context"] = [c for c in s["context"] if c["source"] == "retriever"]
    root = make_log_dir(tmp_path / "log", steps=steps, design=None)
    log = read_log(root / "steps.jsonl")
    assert log.design is None and log.memories is None and log.labels is None
    assert list(log.memory_ids()) == ["m0", "m4", "m5"]  # contexts + ranking
    assert log.checksum.startswith("sha256:")


# ------------------------------------------------------------------ Parquet


def _parquet_log(
    root: Path, outcome_type: pa.DataType | None = None, outcomes=(1, 0, 0.5, 1)
) -> Path:
    outcome_type = outcome_type or pa.float64()
    log = read_log(make_log_dir(root.parent / (root.name + "_src")))
    write_log(log, root, format="parquet")
    t = pq.read_table(root / "steps.parquet")
    t = t.set_column(
        t.schema.get_field_index("outcome"), "outcome", pa.array(list(outcomes), outcome_type)
    )
    pq.write_table(t, root / "steps.parquet")
    return root


def test_parquet_rejection_names_row_and_field(tmp_path):
    root = _parquet_log(tmp_path / "pq", outcomes=(1, 0, 7.0, 1))
    with pytest.raises(LogError) as exc:
        read_log(root)
    assert exc.value.row == 2 and exc.value.field == "outcome"
    assert "steps.parquet" in exc.value.file


def test_parquet_wrong_column_type(tmp_path):
    root = _parquet_log(tmp_path / "pq", outcome_type=pa.string(), outcomes=("1", "0", "1", "1"))
    with pytest.raises(LogError, match="field 'outcome'.*number column"):
        read_log(root)


def test_parquet_part_files_error_names_part_and_row(tmp_path):
    log = read_log(make_log_dir(tmp_path / "src"))
    write_log(log, tmp_path / "pq", format="parquet")
    ctx = pq.read_table(tmp_path / "pq" / "contexts.parquet")
    (tmp_path / "pq" / "contexts.parquet").unlink()
    (tmp_path / "pq" / "contexts").mkdir()
    pq.write_table(ctx.slice(0, 4), tmp_path / "pq" / "contexts" / "part-000.parquet")
    tail = ctx.slice(4).to_pandas()
    tail.loc[1, "source"] = "oracle"
    pq.write_table(
        pa.Table.from_pandas(tail, schema=ctx.schema, preserve_index=False),
        tmp_path / "pq" / "contexts" / "part-001.parquet",
    )
    with pytest.raises(LogError) as exc:
        read_log(tmp_path / "pq")
    assert exc.value.file.endswith("part-001.parquet") and exc.value.row == 1
    assert exc.value.field == "context[1].source"  # row 5 overall: step 2, second slot


# ------------------------------------------------------------------ round trips

ids = st.sampled_from([f"m{i}" for i in range(12)])


@st.composite
def random_logs(draw) -> ExposureLog:
    n = draw(st.integers(1, 12))
    step_ids = sorted(draw(st.sets(st.integers(0, 100), min_size=n, max_size=n)))
    pool = {f"m{i}": draw(st.sampled_from([0.1, 0.25, 1 / 3, 0.5])) for i in range(6)}
    k = draw(st.integers(1, 2))
    steps, ctx, ranks = [], [], []
    for s in step_ids:
        y = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1)))
        g = draw(st.one_of(st.none(), st.sampled_from(["a", "b"])))
        steps.append(
            {
                "step": s,
                "query_id": draw(st.sampled_from(["q1", "q2", "q3"])),
                "outcome": y,
                "group": g,
            }
        )
        members = draw(st.lists(ids, unique=True, max_size=5))
        n_exp = 0
        for j, m in enumerate(members):
            if m in pool and n_exp < k and draw(st.booleans()):
                ctx.append(
                    {
                        "step": s,
                        "slot": j,
                        "memory_id": m,
                        "source": "exposure",
                        "rank": None,
                        "propensity": pool[m],
                    }
                )
                n_exp += 1
            else:
                ctx.append(
                    {
                        "step": s,
                        "slot": j,
                        "memory_id": m,
                        "source": "retriever",
                        "rank": draw(st.one_of(st.none(), st.integers(0, 50))),
                        "propensity": None,
                    }
                )
        if draw(st.booleans()):
            rk = draw(st.lists(ids, unique=True, max_size=6))
            ranks += [{"step": s, "rank": r, "memory_id": m} for r, m in enumerate(rk)]
    from cmp_bayes.log.schema import (
        CONTEXT_COLUMNS,
        LABEL_COLUMNS,
        MEMORY_COLUMNS,
        RANKING_COLUMNS,
        STEP_COLUMNS,
        coerce,
        empty_frame,
    )

    mem = coerce(
        pd.DataFrame(
            [
                {
                    "memory_id": f"m{i}",
                    "created_step": 0,
                    "deleted_step": None if i % 2 else 1000,
                    "text": 't\u00e9xt "q"' if i % 3 == 0 else None,
                    "meta": {"i": i} if i % 4 == 0 else None,
                }
                for i in range(12)
            ]
        ),
        MEMORY_COLUMNS,
    )
    mem["meta"] = mem["meta"].astype(object)
    labels = coerce(
        pd.DataFrame(
            [
                {"query_id": "q1", "memory_id": "m2", "required": True, "utility": 0.3},
                {"query_id": "q2", "memory_id": "m5", "required": False, "utility": None},
            ]
        ),
        LABEL_COLUMNS,
    )
    return ExposureLog(
        steps=coerce(pd.DataFrame(steps), STEP_COLUMNS),
        contexts=coerce(pd.DataFrame(ctx), CONTEXT_COLUMNS)
        if ctx
        else empty_frame(CONTEXT_COLUMNS),
        rankings=coerce(pd.DataFrame(ranks), RANKING_COLUMNS) if ranks else None,
        memories=mem,
        design={
            "slots": 8,
            "exposure_slots": k,
            "assignment": "balanced",
            "steps": 101,
            "seed": 1,
            "pool": pool,
        },
        labels=labels,
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(log=random_logs())
def test_round_trip_is_lossless(tmp_path_factory, fmt, log):
    out = tmp_path_factory.mktemp("rt") / "log"
    write_log(log, out, format=fmt)
    back = read_log(out)
    for name in ("steps", "contexts", "rankings", "memories", "labels"):
        a, b = getattr(log, name), getattr(back, name)
        if a is None:
            assert b is None, name
        else:
            pd.testing.assert_frame_equal(a.reset_index(drop=True), b, check_exact=True, obj=name)
    assert back.design == log.design
    # writing what was read gives the same bytes: the form is canonical
    write_log(back, out.with_name("again"), format=fmt)
    if fmt == "jsonl":
        assert (out / "steps.jsonl").read_bytes() == (
            out.with_name("again") / "steps.jsonl"
        ).read_bytes()


def test_write_log_is_atomic_on_failure(tmp_path, monkeypatch):
    log = read_log(make_log_dir(tmp_path / "src"))
    target = tmp_path / "out"
    write_log(log, target)
    before = _digest(target)

    import cmp_bayes.log.export as w

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(w, "_write_steps_jsonl", boom)
    with pytest.raises(RuntimeError):
        write_log(log, target)
    assert _digest(target) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_float_outcomes_survive_exactly(tmp_path):
    steps = _steps()
    steps[2]["outcome"] = 1 / 3
    log = read_log(make_log_dir(tmp_path / "src", steps=steps))
    write_log(log, tmp_path / "o")
    back = read_log(tmp_path / "o")
    assert back.steps["outcome"][2] == 1 / 3
    assert not math.isnan(back.steps["outcome"].sum())
    assert np.array_equal(back.contexts["propensity"].isna(), log.contexts["propensity"].isna())


def test_reader_never_touches_input_even_when_it_warns(tmp_path):
    root = make_log_dir(tmp_path / "log")
    path = root / "steps.jsonl"
    path.write_text(path.read_text() + '{"step": 9', encoding="utf-8")
    before = _digest(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        read_log(root)
    assert _digest(root) == before
    shutil.rmtree(root)


# ------------------------------------------------------------------ Parquet part files: every rule
#
# The standard 4-step log (two slots per step) as Parquet part files of two steps
# each: steps/part-00{0,1} hold steps 0-1 and 2-3, contexts/part-00{0,1} their 4
# slots each. Each variant edits one cell; the error must name the part file, the
# 0-based row within it and the field, from the pandas reader and the Dask engine.


def _parts_log(root: Path) -> Path:
    log = read_log(make_log_dir(root.parent / (root.name + "_src")))
    single = write_log(log, root.parent / (root.name + "_single"), format="parquet")
    return split_parquet(single, root, 2, aligned=False)


def _design(root: Path, **changes) -> None:
    d = dict(DESIGN, **changes)
    (root / "design.json").write_text(json.dumps(d))


# (id, edits [(table, part, column, row, value)], design edit, expected (table, part, row, field, fragment))
PARQUET_VARIANTS = [
    ("unknown-source", [("contexts", 1, "source", 1, "oracle")], None, ("contexts", 1, 1, "context[1].source", "unknown source")),
    ("negative-rank", [("contexts", 0, "rank", 2, -1)], None, ("contexts", 0, 2, "context[0].rank", "rank must be")),
    ("memory-twice", [("contexts", 1, "memory_id", 1, "m4")], None, ("contexts", 1, 1, "context[1].memory_id", "twice")),
    ("no-propensity", [("contexts", 1, "propensity", 3, None)], None, ("contexts", 1, 3, "context[1].propensity", "no propensity")),
    ("propensity-zero", [("contexts", 0, "propensity", 1, 0.0)], None, ("contexts", 0, 1, "context[1].propensity", "(0, 1]")),
    ("propensity-nan", [("contexts", 0, "propensity", 3, float("nan"))], None, ("contexts", 0, 3, "context[1].propensity", "no propensity")),
    ("retriever-propensity-above-1", [("contexts", 1, "propensity", 0, 1.5)], None, ("contexts", 1, 0, "context[0].propensity", "(0, 1]")),
    ("disagrees", [("contexts", 0, "propensity", 3, 0.25)], None, ("contexts", 0, 3, "context[1].propensity", "disagrees")),
    ("not-in-pool", [("contexts", 1, "memory_id", 3, "m9")], None, ("contexts", 1, 3, "context[1].memory_id", "not in the pool")),
    ("no-design", [], "delete", ("contexts", 0, 1, "context[1].source", "no design.json")),
    # a step the steps table lacks: the reader sorts slots by step, the error still names part and row
    ("unknown-step", [("contexts", 1, "step", 0, 9)], None, ("contexts", 1, 0, "step", "not in steps")),
    (
        "too-many-exposures",
        [("contexts", 0, "source", 0, "exposure"), ("contexts", 0, "propensity", 0, 0.25)],
        {"pool": {**DESIGN["pool"], "m0": 0.25}},
        ("contexts", 0, 1, "context", "more exposure slots"),
    ),
    ("outcome-above-1", [("steps", 1, "outcome", 1, 1.5)], None, ("steps", 1, 1, "outcome", "[0, 1]")),
    ("outcome-nan", [("steps", 0, "outcome", 1, float("nan"))], None, ("steps", 0, 1, "outcome", "finite")),
    ("step-repeats", [("steps", 1, "step", 0, 1)], None, ("steps", 1, 0, "step", "repeats")),
    ("query-null", [("steps", 1, "query_id", 1, None)], None, ("steps", 1, 1, "query_id", "missing required value")),
]


@pytest.mark.parametrize("engine", ["pandas", "dask"])
@pytest.mark.parametrize(
    ("edits", "design", "expected"), [v[1:] for v in PARQUET_VARIANTS], ids=[v[0] for v in PARQUET_VARIANTS]
)
def test_parquet_parts_reject_each_variant(tmp_path, engine, edits, design, expected):
    if engine == "dask":
        pytest.importorskip("dask")
    root = _parts_log(tmp_path / "log")
    for table, part, column, row, value in edits:
        rewrite_cell(root / table / f"part-{part:03d}.parquet", column, row, value)
    if design == "delete":
        (root / "design.json").unlink()
    elif design is not None:
        _design(root, **design)
    before = _digest(root)
    from cmp_bayes.statistics import exposure_stats

    with pytest.raises(LogError) as exc:
        read_log(root) if engine == "pandas" else exposure_stats(root, engine="dask", scheduler="synchronous")
    table, part, row, field, fragment = expected
    e = exc.value
    assert Path(e.file).name == f"part-{part:03d}.parquet" and Path(e.file).parent.name == table, str(e)
    assert (e.row, e.field) == (row, field), str(e)
    assert fragment in e.message, str(e)
    # numbers print as the log holds them (a step is 3, not 3.0)
    assert ".0]" not in str(e) and not any(f"step {s}.0" in str(e) for s in range(10)), str(e)
    assert _digest(root) == before


def test_parquet_string_encodings_read_alike(tmp_path):
    # memory_id as a Parquet dictionary column in one part and plain large strings in
    # the other: the same log as the single-file form, read from either encoding
    root = _parts_log(tmp_path / "parts")
    a, b = root / "contexts" / "part-000.parquet", root / "contexts" / "part-001.parquet"
    ta, tb = pq.read_table(a), pq.read_table(b)
    i = ta.column_names.index("memory_id")
    pq.write_table(ta.set_column(i, "memory_id", pc.dictionary_encode(ta["memory_id"])), a)
    pq.write_table(tb.set_column(i, "memory_id", tb["memory_id"].cast(pa.large_string())), b)
    got = read_log(root)
    want = read_log(_parquet_log(tmp_path / "pq", outcomes=(1, 0, 0.5, 1)))
    for name in ("steps", "contexts"):
        pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True, obj=name)


def test_dictionary_codes_merge_row_groups():
    # two row groups' dictionaries (one listing a value twice) merge into one code per value
    from cmp_bayes.log.codes import from_dictionary

    d1 = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 2], pa.int32()), pa.array(["a", "b", "a"]))
    d2 = pa.DictionaryArray.from_arrays(pa.array([1, 0, 0], pa.int32()), pa.array(["c", "b"]))
    values, codes = from_dictionary(pa.chunked_array([d1, d2]))
    want = ["a", "b", None, "a", "b", "c", "c"]
    assert values.to_pylist() == want
    decoded = [None if i < 0 else codes.dictionary[int(i)].as_py() for i in codes.indices]
    assert decoded == want
    assert len(set(codes.dictionary.to_pylist())) == len(codes.dictionary)  # one code per value


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    codes=st.lists(st.integers(-1, 5), min_size=40, max_size=40),
    wide=st.booleans(),
)
def test_step_runs_match_pandas(steps, codes, wide):
    # the vectorised per-step rules against pandas' groupby / duplicated, in any row order
    from cmp_bayes.log.validate import _DENSE_MAX_SLOTS, StepRuns

    step = np.asarray(steps * (_DENSE_MAX_SLOTS if wide else 1), dtype=np.int64)
    code = np.resize(np.asarray(codes), len(step))
    runs = StepRuns.of(step)
    frame = pd.DataFrame({"s": step, "c": code})
    assert runs.any_repeat(code) == bool(frame.duplicated().any())
    np.testing.assert_array_equal(runs.slot(), frame.groupby("s").cumcount().to_numpy())
    mask = code > 2
    want = pd.Series(mask).groupby(step).sum().to_numpy()
    np.testing.assert_array_equal(runs.per_run_count(mask), want)
