"""Window designs (spec: "Targeted exposure: window designs"): the readers, W_t, the statistics, diagnose."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from _window_fixtures import SLOTS, J, K, W, slot_row, window_steps, write_jsonl, write_parquet

from cmp_bayes import LogError, read_log, write_log
from cmp_bayes.diagnostics.positivity import diagnose
from cmp_bayes.log.window import window_sets
from cmp_bayes.statistics import exposure_stats


@pytest.fixture
def parts():
    return window_steps(seed=3)


def _window_of(step: dict) -> list[str]:
    """W_t by the spec's rule 3, from the step as logged (every memory here is in the store)."""
    before = {c["memory_id"] for c in step["context"] if c.get("arm") != "window"}
    return [m for m in step["ranking"][SLOTS - K : SLOTS - K + W] if m not in before]


# ------------------------------------------------------------------ a valid window log


@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_window_log_reads_with_arms_and_window_sets(tmp_path, parts, form):
    design, steps, memories = parts
    root = (write_jsonl if form == "jsonl" else write_parquet)(tmp_path / "log", design, steps, memories)
    log = read_log(root)
    assert str(log.contexts["arm"].dtype) == "string"
    arms = log.contexts["arm"].astype(object).where(log.contexts["arm"].notna(), None).tolist()
    want = [c.get("arm") for s in steps for c in s["context"]]
    assert arms == want
    w = window_sets(log)
    assert list(w.columns) == ["step", "memory_id", "propensity"]
    assert str(w["step"].dtype) == "int64" and str(w["memory_id"].dtype) == "string"
    for s in steps:
        got = w[w["step"] == s["step"]]
        win = _window_of(s)
        if s["step"] >= 20:  # m3 left the store at step 20 (it is not ranked there either)
            assert "m3" not in got["memory_id"].tolist()
        assert got["memory_id"].tolist() == win
        np.testing.assert_allclose(got["propensity"].to_numpy(), min(1.0, (K - J) / len(win)), rtol=0)
    # the fixture exercises rule 3's "not already in the context": a pool slot ranked in the window
    assert any(c.get("arm") == "pool" and c["memory_id"] in s["ranking"][SLOTS - K : SLOTS - K + W]
               for s in steps for c in s["context"])
    # every window slot is a member of its step's W_t, with that propensity
    ws = log.contexts[log.contexts["arm"] == "window"]
    merged = ws.merge(w, on=["step", "memory_id"], suffixes=("", "_w"))
    assert len(merged) == len(ws)
    np.testing.assert_allclose(merged["propensity"].astype(float), merged["propensity_w"])


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_write_log_writes_the_arm_back(tmp_path, parts, fmt):
    design, steps, memories = parts
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    back = read_log(write_log(log, tmp_path / f"out-{fmt}", format=fmt))
    pd.testing.assert_frame_equal(back.contexts, log.contexts)
    if fmt == "jsonl":
        lines = (tmp_path / "out-jsonl" / "steps.jsonl").read_text().splitlines()
        assert [c.get("arm") for c in json.loads(lines[0])["context"]] == [c.get("arm") for c in steps[0]["context"]]


def test_write_log_leaves_out_the_arm_column_without_arms(tmp_path, parts):
    import pyarrow.parquet as pq

    design, steps, memories = parts
    design = dict(design, assignment="balanced")
    for s in steps:
        s["context"] = [dict((k, v) for k, v in c.items() if k != "arm") for c in s["context"] if c.get("arm") != "window"]
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    assert log.contexts["arm"].isna().all()
    out = write_log(log, tmp_path / "out", format="parquet")
    assert "arm" not in pq.read_schema(out / "contexts.parquet").names
    assert "arm" not in (write_log(log, tmp_path / "out2") / "steps.jsonl").read_text()


def test_window_slots_are_in_the_context_but_not_in_the_exposed_arm(tmp_path, parts):
    design, steps, memories = parts
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    stats = exposure_stats(log)
    ctx = log.contexts
    pool_n = ctx[ctx["arm"] == "pool"].groupby("memory_id").size()
    exposed = stats["exposed"].to_series()
    assert (exposed.reindex(pool_n.index).to_numpy() == pool_n.to_numpy()).all()
    win = ctx[ctx["arm"] == "window"].groupby("memory_id").size()
    only_window = [m for m in win.index if m not in pool_n.index]
    assert only_window, "the fixture has memories exposed through window slots only"
    for m in only_window:
        s = stats.sel(memory=m)
        assert int(s["exposed"]) == 0
        # the window steps are not control steps: in store, minus retrieved, minus window
        assert int(s["control"]) == int(s["in_store"]) - int(s["retrieved"]) - int(win[m])


@pytest.mark.parametrize("by", [None, "query", "group"])
def test_engines_identical_on_a_window_log(tmp_path, parts, by):
    pytest.importorskip("dask")
    design, steps, memories = parts
    root = write_parquet(tmp_path / "log", design, steps, memories)
    want = exposure_stats(read_log(root), by=by)
    got = exposure_stats(root, by=by, engine="dask", scheduler="synchronous")
    xr.testing.assert_identical(got, want)


def test_diagnose_reports_eligibility_per_memory_and_pair(tmp_path, parts):
    design, steps, memories = parts
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    rep = diagnose(log)
    mem = rep.memories.set_index("memory_id")
    assert mem["eligible_pool"].dtype == bool and mem["eligible_window"].dtype == bool
    pool = set(design["pool"])
    assert set(mem.index[mem["eligible_pool"]]) == pool
    in_window = {m for s in steps for m in _window_of(s)}
    assert set(mem.index[mem["eligible_window"]]) == in_window
    pairs = rep.pairs.set_index(["memory_id", "query_id"])
    want = {(m, s["query_id"]) for s in steps for m in _window_of(s)}
    assert set(pairs.index[pairs["eligible_window"]]) == want
    assert pairs.loc[pairs.index.get_level_values(0).isin(pool), "eligible_pool"].all()
    assert not pairs.loc[~pairs.index.get_level_values(0).isin(pool), "eligible_pool"].any()
    assert rep.summary["cancelled_steps"] is None


def test_diagnose_counts_cancelled_steps_when_the_file_exists(tmp_path, parts):
    design, steps, memories = parts
    root = write_jsonl(tmp_path / "log", design, steps, memories)
    # not a spec file: lines are counted, whatever they hold
    (root / "cancelled.jsonl").write_text('{"step": 40, "cancelled": "expired"}\n{"step": 41}\nnot json\n')
    rep = diagnose(read_log(root))
    assert rep.summary["cancelled_steps"] == 3
    assert "cancelled steps: 3 " in rep.to_text()  # said where people read, not only counted


def test_short_ranking_passes_when_it_lists_the_whole_store(tmp_path):
    # a store of 5 memories: rankings of all 5 are shorter than B - k + W = 7, and valid
    design = {"slots": 3, "exposure_slots": 1, "assignment": "window", "window": 5, "steps": 2}
    steps = [
        {"step": t, "query_id": "q", "outcome": 1, "ranking": ["a", "b", "c", "d", "e"],
         "context": [{"memory_id": "a", "source": "retriever", "rank": 0},
                     {"memory_id": "b", "source": "retriever", "rank": 1},
                     {"memory_id": "c", "source": "exposure", "arm": "window", "propensity": 1 / 3}]}
        for t in range(2)
    ]
    log = read_log(write_jsonl(tmp_path / "log", design, steps, None))
    assert window_sets(log)["memory_id"].tolist() == ["c", "d", "e"] * 2
    # with a memories file holding more memories the same ranking is too short
    mems = [{"memory_id": m, "created_step": 0} for m in "abcdefgh"]
    with pytest.raises(LogError) as exc:
        read_log(write_jsonl(tmp_path / "log2", design, steps, mems))
    assert (Path(exc.value.file).name, exc.value.line, exc.value.field) == ("steps.jsonl", 1, "ranking")


# ------------------------------------------------------------------ every rejection, JSONL


def _ctx(steps: list[dict], t: int, arm: str) -> int:
    return next(i for i, c in enumerate(steps[t]["context"]) if c.get("arm") == arm)


def _edit_design(**kw):
    def fn(design, steps, memories):
        for k, v in kw.items():
            if v is None:
                design.pop(k, None)
            else:
                design[k] = v
        return None
    return fn


def _no_ranking(design, steps, memories):
    del steps[4]["ranking"]
    return (5, "ranking")


def _short_ranking(design, steps, memories):
    steps[6]["ranking"] = steps[6]["ranking"][:6]
    return (7, "ranking")


def _no_arm(design, steps, memories):
    j = _ctx(steps, 2, "pool")
    del steps[2]["context"][j]["arm"]
    return (3, f"context[{j}].arm")


def _not_in_window(design, steps, memories):
    j = _ctx(steps, 5, "window")
    taken = {c["memory_id"] for c in steps[5]["context"]} | set(steps[5]["ranking"])
    steps[5]["context"][j]["memory_id"] = next(m for m in (f"m{i}" for i in range(20)) if m not in taken)
    return (6, f"context[{j}].memory_id")


def _ranked_below_window(design, steps, memories):
    # a memory the ranking lists just below the window (rank B - k + W): not in W_t
    t = 5
    taken = {c["memory_id"] for c in steps[t]["context"]} | set(steps[t]["ranking"])
    below = next(m for m in (f"m{i}" for i in range(20)) if m not in taken)
    steps[t]["ranking"].append(below)
    j = _ctx(steps, t, "window")
    steps[t]["context"][j]["memory_id"] = below
    return (t + 1, f"context[{j}].memory_id")


def _window_propensity_off(design, steps, memories):
    j = _ctx(steps, 8, "window")
    steps[8]["context"][j]["propensity"] *= 1 + 1e-7
    return (9, f"context[{j}].propensity")


def _window_propensity_within_tolerance(design, steps, memories):
    j = _ctx(steps, 8, "window")
    steps[8]["context"][j]["propensity"] *= 1 + 1e-12
    return None  # accepted


def _too_many_window(design, steps, memories):
    ctx = steps[9]["context"]
    w = _window_of(steps[9])
    used = {c["memory_id"] for c in ctx}
    extra = next(m for m in w if m not in used)
    ctx.append({"memory_id": extra, "source": "exposure", "arm": "window", "propensity": ctx[_ctx(steps, 9, "window")]["propensity"]})
    design["exposure_slots"] = K  # k - j = 1 window slot; two now
    # a third exposure slot would break k first: drop the pool slot's place by making it the limit
    ctx.pop(_ctx(steps, 9, "pool"))
    return (10, f"context[{len(ctx) - 1}].arm")


def _too_many_pool(design, steps, memories):
    ctx = steps[11]["context"]
    j = _ctx(steps, 11, "window")
    used = {c["memory_id"] for c in ctx} | set(steps[11]["ranking"][: SLOTS - K])
    m = next(m for m in design["pool"] if m not in used)
    ctx[j] = {"memory_id": m, "source": "exposure", "arm": "pool", "propensity": design["pool"][m]}
    return (12, f"context[{j}].arm")


def _arm_value(design, steps, memories):
    j = _ctx(steps, 1, "window")
    steps[1]["context"][j]["arm"] = "near-miss"
    return (2, f"context[{j}].arm")


def _arm_type(design, steps, memories):
    j = _ctx(steps, 1, "pool")
    steps[1]["context"][j]["arm"] = 1
    return (2, f"context[{j}].arm")


def _arm_on_retriever(design, steps, memories):
    steps[3]["context"][0]["arm"] = "pool"
    return (4, "context[0].arm")


def _pool_propensity_off(design, steps, memories):
    j = _ctx(steps, 7, "pool")
    steps[7]["context"][j]["propensity"] = 0.5
    return (8, f"context[{j}].propensity")


WINDOW_VARIANTS = {
    "no-ranking": _no_ranking,
    "ranking-too-short": _short_ranking,
    "exposure-without-arm": _no_arm,
    "window-slot-not-in-window": _not_in_window,
    "window-slot-ranked-below-window": _ranked_below_window,
    "window-propensity-off": _window_propensity_off,
    "too-many-window-slots": _too_many_window,
    "too-many-pool-slots": _too_many_pool,
    "arm-unknown-value": _arm_value,
    "arm-wrong-type": _arm_type,
    "arm-on-retriever-slot": _arm_on_retriever,
    "pool-slot-propensity-off": _pool_propensity_off,
}


@pytest.mark.parametrize("name", list(WINDOW_VARIANTS))
def test_jsonl_window_rejections_name_file_line_field(tmp_path, parts, name):
    design, steps, memories = copy.deepcopy(parts)
    line, field = WINDOW_VARIANTS[name](design, steps, memories)
    root = write_jsonl(tmp_path / "log", design, steps, memories)
    with pytest.raises(LogError) as exc:
        read_log(root)
    e = exc.value
    assert (Path(e.file).name, e.line, e.field) == ("steps.jsonl", line, field), str(e)


def test_window_propensity_within_relative_1e_9_is_accepted(tmp_path, parts):
    design, steps, memories = copy.deepcopy(parts)
    assert _window_propensity_within_tolerance(design, steps, memories) is None
    read_log(write_jsonl(tmp_path / "log", design, steps, memories))


def test_window_slot_in_a_balanced_design_rejected(tmp_path, parts):
    design, steps, memories = copy.deepcopy(parts)
    design["assignment"] = "balanced"
    with pytest.raises(LogError) as exc:
        read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    e = exc.value
    assert (Path(e.file).name, e.line, e.field) == ("steps.jsonl", 1, f"context[{_ctx(steps, 0, 'window')}].arm")
    assert "not a window design" in e.message


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_edit_design(window=None), "window"),
        (_edit_design(window=0), "window"),
        (_edit_design(window=2.5), "window"),
        (_edit_design(pool_slots=3), "pool_slots"),
        (_edit_design(pool_slots=-1), "pool_slots"),
    ],
    ids=["window-missing", "window-zero", "window-not-int", "pool-slots-above-k", "pool-slots-negative"],
)
def test_window_design_rejections_name_design_field(tmp_path, parts, edit, field):
    design, steps, memories = copy.deepcopy(parts)
    edit(design, steps, memories)
    with pytest.raises(LogError) as exc:
        read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    assert (Path(exc.value.file).name, exc.value.field) == ("design.json", field), str(exc.value)


# ------------------------------------------------------------------ Parquet parts, both engines

PARQUET_WINDOW = ["no-ranking", "ranking-too-short", "exposure-without-arm", "window-slot-not-in-window",
                  "window-propensity-off", "too-many-pool-slots", "arm-unknown-value", "pool-slot-propensity-off"]


@pytest.mark.parametrize("engine", ["pandas", "dask"])
@pytest.mark.parametrize("memories_file", [True, False], ids=["memories", "no-memories"])
@pytest.mark.parametrize("name", PARQUET_WINDOW)
def test_parquet_window_rejections_name_part_row_field(tmp_path, parts, name, engine, memories_file):
    if engine == "dask":
        pytest.importorskip("dask")
    design, steps, memories = copy.deepcopy(parts)
    if not memories_file:  # without a memories file m3 stays in the store: no step may lose it
        memories = None
    line, field = WINDOW_VARIANTS[name](design, steps, memories)
    root = write_parquet(tmp_path / "log", design, steps, memories)
    with pytest.raises(LogError) as exc:
        read_log(root) if engine == "pandas" else exposure_stats(root, engine="dask", scheduler="synchronous")
    e = exc.value
    step = line - 1
    table = "steps" if field == "ranking" else "contexts"
    part = 0 if step < 20 else 1
    if table == "steps":
        row = step - 20 * part
    else:
        row = slot_row(steps, step, int(field.split("[")[1].split("]")[0]))
    assert (Path(e.file).parent.name, Path(e.file).name, e.row, e.field) == (
        table, f"part-{part:03d}.parquet", row, field), str(e)


@pytest.mark.parametrize("engine", ["pandas", "dask"])
def test_parquet_arm_column_of_wrong_type_rejected(tmp_path, parts, engine):
    if engine == "dask":
        pytest.importorskip("dask")
    import pyarrow as pa
    import pyarrow.parquet as pq

    design, steps, memories = parts
    root = write_parquet(tmp_path / "log", design, steps, memories)
    for f in sorted((root / "contexts").iterdir()):  # every part, so the parts' schemas still agree
        t = pq.read_table(f)
        pq.write_table(t.set_column(t.schema.get_field_index("arm"), "arm", pa.array(np.ones(t.num_rows, np.int64))), f)
    with pytest.raises(LogError) as exc:
        read_log(root) if engine == "pandas" else exposure_stats(root, engine="dask", scheduler="synchronous")
    e = exc.value
    assert (Path(e.file).name, e.field) == ("part-000.parquet", "arm") and "string" in e.message, str(e)
