"""Open-ended designs in rounds (spec: "Open-ended designs: rounds"): readers, statistics, diagnose."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from _window_fixtures import rounds_steps, slot_row, write_jsonl, write_parquet

from cmp_bayes import LogError, read_log
from cmp_bayes.diagnostics.positivity import diagnose
from cmp_bayes.log.design import pool_at, round_index
from cmp_bayes.statistics import exposure_stats


@pytest.fixture
def parts():
    return rounds_steps(seed=5)


def _exposure(steps: list[dict], t: int) -> int:
    return next(i for i, c in enumerate(steps[t]["context"]) if c["source"] == "exposure")


def test_fixture_changes_the_pool_between_rounds(parts):
    design, steps, memories = parts
    r0, r1 = (r["pool"] for r in design["rounds"])
    assert "m15" not in r0 and "m15" in r1  # created at step 10: joins round 1
    assert {round(p, 12) for p in r0.values()} == {0.2}
    assert {round(p, 12) for p in r1.values()} == {0.15, 0.2}
    assert any(s["context"][_exposure(steps, s["step"])]["memory_id"] == "m15" for s in steps[20:])


@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_rounds_log_reads_and_propensities_follow_the_round(tmp_path, parts, form):
    design, steps, memories = parts
    root = (write_jsonl if form == "jsonl" else write_parquet)(tmp_path / "log", design, steps, memories)
    log = read_log(root)
    exp = log.contexts[log.contexts["source"] == "exposure"]
    r = round_index(log.design, exp["step"].to_numpy())
    assert set(r.tolist()) == {0, 1}
    want = [pool_at(log.design, int(s))[m] for s, m in zip(exp["step"], exp["memory_id"], strict=True)]
    np.testing.assert_array_equal(exp["propensity"].to_numpy(float), want)
    # memory ids come from every round's pool (no top-level pool in this form)
    assert "m15" in set(log.memory_ids())


@pytest.mark.parametrize("by", [None, "query"])
def test_engines_identical_on_a_rounds_log(tmp_path, parts, by):
    pytest.importorskip("dask")
    design, steps, memories = parts
    root = write_parquet(tmp_path / "log", design, steps, memories)
    want = exposure_stats(read_log(root), by=by)
    got = exposure_stats(root, by=by, engine="dask", scheduler="synchronous")
    xr.testing.assert_identical(got, want)
    # the Dataset's pool is every round's (the last round's propensity where they differ)
    assert bool(want["in_pool"].sel(memory="m15")) and not bool(want["in_pool"].sel(memory="m0"))
    np.testing.assert_allclose(float(want["propensity"].sel(memory="m15")), design["rounds"][1]["pool"]["m15"])


def test_diagnose_eligible_pool_follows_rounds_and_lifetimes(tmp_path, parts):
    design, steps, memories = parts
    # m15 joins in round 1 (created mid round 0); a memory in round 1's pool that is
    # created only after the round ends was never in a pool while in the store
    memories = copy.deepcopy(memories) + [{"memory_id": "m16", "created_step": 45, "deleted_step": None}]
    design = copy.deepcopy(design)
    design["rounds"][1]["pool"]["m16"] = 0.05
    rep = diagnose(read_log(write_jsonl(tmp_path / "log", design, steps, memories)))
    mem = rep.memories.set_index("memory_id")
    assert mem.loc["m15", "eligible_pool"] and mem.loc["m10", "eligible_pool"]
    assert not mem.loc["m0", "eligible_pool"]
    assert not mem.loc["m16", "eligible_pool"]  # round 1 ends at step 40, m16 arrives at 45
    assert not mem["eligible_window"].any()
    pairs = rep.pairs.set_index(["memory_id", "query_id"])
    assert pairs.loc[("m15", "q0"), "eligible_pool"]
    assert not pairs.loc[("m1", "q0"), "eligible_pool"]


# ------------------------------------------------------------------ rejections


def _wrong_round(design, steps, memories):
    # step 25 is in round 1: a memory dealt 4 times there has 0.2, one dealt 3 times 0.15
    t = 25
    j = _exposure(steps, t)
    m = steps[t]["context"][j]["memory_id"]
    other = 0.15 if abs(design["rounds"][1]["pool"][m] - 0.2) < 1e-12 else 0.2
    steps[t]["context"][j]["propensity"] = other
    return ("steps.jsonl", t + 1, f"context[{j}].propensity", "round 1")


def _joins_too_early(design, steps, memories):
    # m15 (created at step 10) is in no pool of round 0
    t = 12
    j = _exposure(steps, t)
    steps[t]["context"][j].update(memory_id="m15", propensity=0.2)
    return ("steps.jsonl", t + 1, f"context[{j}].memory_id", "round 0")


def _step_in_no_round(design, steps, memories):
    steps.append(dict(steps[-1], step=40))
    return ("steps.jsonl", 41, "step", "no round")


@pytest.mark.parametrize("edit", [_wrong_round, _joins_too_early, _step_in_no_round],
                         ids=["propensity-of-another-round", "memory-before-its-round", "step-in-no-round"])
def test_jsonl_rounds_rejections_name_file_line_field(tmp_path, parts, edit):
    design, steps, memories = copy.deepcopy(parts)
    file, line, field, words = edit(design, steps, memories)
    with pytest.raises(LogError) as exc:
        read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    e = exc.value
    assert (Path(e.file).name, e.line, e.field) == (file, line, field), str(e)
    assert words in e.message


@pytest.mark.parametrize("engine", ["pandas", "dask"])
@pytest.mark.parametrize("edit", [_wrong_round, _joins_too_early, _step_in_no_round],
                         ids=["propensity-of-another-round", "memory-before-its-round", "step-in-no-round"])
def test_parquet_rounds_rejections_name_part_row_field(tmp_path, parts, edit, engine):
    if engine == "dask":
        pytest.importorskip("dask")
    design, steps, memories = copy.deepcopy(parts)
    _, line, field, words = edit(design, steps, memories)
    steps = steps[:40] + ([steps[40]] if len(steps) > 40 else [])
    root = write_parquet(tmp_path / "log", design, steps, memories)
    with pytest.raises(LogError) as exc:
        read_log(root) if engine == "pandas" else exposure_stats(root, engine="dask", scheduler="synchronous")
    e = exc.value
    step = line - 1
    half = len(steps) // 2
    part = 0 if step < half else 1
    if field == "step":
        want = ("steps", f"part-{part:03d}.parquet", step - half * part)
    else:
        want = ("contexts", f"part-{part:03d}.parquet", slot_row(steps, step, int(field[8])))
    assert (Path(e.file).parent.name, Path(e.file).name, e.row) == want, str(e)
    assert e.field == field and words in e.message, str(e)


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda d: d["rounds"][1].update(start=19), "rounds[1].start", "overlaps"),
        (lambda d: d["rounds"][1].update(start=21), "rounds[1].start", "gap"),
        (lambda d: d["rounds"][0].update(start=1), "rounds[0].start", "step 0"),
        (lambda d: d.update(pool={"m10": 0.2}), "pool", "replaces"),
        (lambda d: d.update(steps=40), "steps", "replaces"),
    ],
    ids=["overlap", "gap", "not-from-0", "top-level-pool", "top-level-steps"],
)
def test_rounds_design_rejections_name_design_field(tmp_path, parts, edit, field, words):
    design, steps, memories = copy.deepcopy(parts)
    edit(design)
    with pytest.raises(LogError) as exc:
        read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    e = exc.value
    assert (Path(e.file).name, e.field) == ("design.json", field), str(e)
    assert words in e.message, str(e)


def test_window_design_in_rounds(tmp_path):
    # window and pool_slots stay at the top level; every round has its own pool
    from _window_fixtures import window_steps

    design, steps, memories = window_steps(seed=1)
    pool = design.pop("pool")
    design.pop("steps"), design.pop("seed")
    design["rounds"] = [{"start": 0, "steps": 20, "seed": 1, "pool": pool},
                        {"start": 20, "steps": 20, "seed": 2, "pool": pool}]
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    assert (log.contexts["arm"] == "window").sum() == 40
    design["rounds"][1]["pool"] = {m: p * 2 for m, p in pool.items() if p * 2 <= 1}
    t = 20  # the first step of round 1, whose pool values no longer match
    j = next(i for i, c in enumerate(steps[t]["context"]) if c.get("arm") == "pool")
    with pytest.raises(LogError) as exc:
        read_log(write_jsonl(tmp_path / "log2", design, steps, memories))
    assert (exc.value.line, exc.value.field) == (t + 1, f"context[{j}].propensity"), str(exc.value)


def test_a_propensity_that_changes_between_rounds_has_no_single_value(tmp_path, parts):
    from cmp_bayes.estimators import estimate
    from cmp_bayes.log.design import varying_propensity

    design, steps, memories = parts
    log = read_log(write_jsonl(tmp_path / "log", design, steps, memories))
    r0, r1 = (r["pool"] for r in design["rounds"])
    changed = {m for m in r0 if m in r1 and abs(r0[m] - r1[m]) > 1e-12}
    assert changed and varying_propensity(log.design) == changed
    stats = exposure_stats(log)
    for m in changed:  # still a pool memory, but no one propensity: IPW is undefined, Hajek is not
        assert bool(stats["in_pool"].sel(memory=m)) and np.isnan(float(stats["propensity"].sel(memory=m)))
    same = sorted(set(r0) & set(r1) - changed) + ["m15"]
    assert all(np.isfinite(float(stats["propensity"].sel(memory=m))) for m in same)
    ipw = estimate(log, method="ipw").set_index("memory_id")
    hajek = estimate(log, method="hajek").set_index("memory_id")
    exposed = {m for m in changed if int(stats["exposed"].sel(memory=m)) > 1}
    assert exposed and all(np.isnan(ipw.loc[m, "estimate"]) for m in exposed)
    assert all(np.isfinite(hajek.loc[m, "estimate"]) for m in exposed)
