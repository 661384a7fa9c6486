"""Memory text where people read (issue 17, item 5): the start of each memory's text
beside its id in diagnose, estimate, decide, recommend and the report; whole texts in
CSVs; the posterior's ``memory_text`` coordinate through fit, save / load and thinning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from cmp_bayes.cli.main import main
from cmp_bayes.diagnostics.positivity import diagnose
from cmp_bayes.errors import PosteriorError
from cmp_bayes.estimators import estimate
from cmp_bayes.log.read import read_log
from cmp_bayes.posterior.io import check_posterior, load_posterior, save_posterior
from cmp_bayes.posterior.provenance import memory_texts, with_memory_text
from cmp_bayes.testing import synthetic_posterior
from cmp_bayes.testing.posterior import memory_table
from cmp_bayes.text import ELLIPSIS, TEXT_WIDTH, add_text, shorten, texts_from_memories

LONG = "The user moved to Lisbon in March 2024 and works remotely for a Berlin start-up"
PIPE = "likes <b>bold</b> | hates tables"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _retr(m: str, r: int) -> dict:
    return {"memory_id": m, "source": "retriever", "rank": r}


def _expo(m: str, p: float) -> dict:
    return {"memory_id": m, "source": "exposure", "propensity": p}


def hand_log(root: Path, texts: dict[str, object] | None) -> Path:
    """Four memories over four steps; ``texts`` (memory id -> text, None = JSON null,
    missing key = no "text" field) goes into memories.jsonl; None: no texts at all."""
    root.mkdir(parents=True)
    steps = [
        {"step": 0, "query_id": "q1", "outcome": 1, "context": [_retr("m1", 0), _expo("m2", 0.5)]},
        {"step": 1, "query_id": "q2", "outcome": 0, "context": [_retr("m1", 0), _expo("m3", 0.5)]},
        {"step": 2, "query_id": "q1", "outcome": 1, "context": [_retr("m1", 0), _expo("m2", 0.5)]},
        {"step": 3, "query_id": "q2", "outcome": 0, "context": [_retr("m1", 0), _expo("m3", 0.5)]},
    ]
    _write_jsonl(root / "steps.jsonl", steps)
    design = {"slots": 2, "exposure_slots": 1, "assignment": "balanced", "steps": 4, "seed": 1,
              "pool": {"m2": 0.5, "m3": 0.5}}
    (root / "design.json").write_text(json.dumps(design))
    rows = []
    for m in ("m1", "m2", "m3", "m4"):
        row: dict[str, object] = {"memory_id": m, "created_step": 0, "deleted_step": None}
        if texts is not None and m in texts:
            row["text"] = texts[m]
        rows.append(row)
    _write_jsonl(root / "memories.jsonl", rows)
    return root


TEXTS = {"m1": LONG, "m2": PIPE, "m3": None}  # m4: no "text" field


# ------------------------------------------------------------------ the one rule


def test_shorten_cuts_at_60_with_an_ellipsis_on_one_line() -> None:
    assert len(LONG) > TEXT_WIDTH
    short = shorten(LONG)
    assert short == LONG[:TEXT_WIDTH].rstrip() + ELLIPSIS
    assert len(short) <= TEXT_WIDTH + 1
    exact = "x" * TEXT_WIDTH
    assert shorten(exact) == exact  # not cut: no ellipsis
    assert shorten("first line\n\tsecond   line") == "first line second line"
    for missing in (None, pd.NA, float("nan"), "", "   \n"):
        assert shorten(missing) is None


def test_texts_from_memories_none_when_no_memory_has_text() -> None:
    assert texts_from_memories(None) is None
    ids = pd.Series(["a", "b"], dtype="string")
    assert texts_from_memories(pd.DataFrame({"memory_id": ids})) is None
    no_text = pd.DataFrame({"memory_id": ids, "text": pd.Series([pd.NA, ""], dtype="string")})
    assert texts_from_memories(no_text) is None
    some = pd.DataFrame({"memory_id": ids, "text": pd.Series([pd.NA, "hi"], dtype="string")})
    got = texts_from_memories(some)
    assert got is not None and got.isna().tolist() == [True, False] and got["b"] == "hi"


def test_add_text_goes_after_the_key_columns_and_leaves_tables_alone_without_texts() -> None:
    texts = pd.Series({"a": LONG, "b": pd.NA}, dtype="string")
    frame = pd.DataFrame({"memory_id": ["b", "a", "zz"], "query_id": ["q", "q", "q"], "x": [1, 2, 3]})
    out = add_text(frame, texts)
    assert list(out.columns) == ["memory_id", "query_id", "text", "x"]
    assert out["text"].isna().tolist() == [True, False, True]  # no text, and an unknown id
    assert out.loc[1, "text"] == shorten(LONG)
    assert add_text(frame, texts, full=True).loc[1, "text"] == LONG
    assert add_text(frame, None) is frame
    assert list(frame.columns) == ["memory_id", "query_id", "x"]  # the input is untouched


# ------------------------------------------------------------- tables from a log


def test_diagnose_and_estimate_show_text_present_absent_na_long_and_special(tmp_path: Path, capsys) -> None:
    root = hand_log(tmp_path / "log", TEXTS)
    log = read_log(root)
    rep = diagnose(log)
    mem = rep.memories.set_index("memory_id")
    assert list(rep.memories.columns[:2]) == ["memory_id", "text"]
    assert mem.loc["m1", "text"] == shorten(LONG) and mem.loc["m1", "text"].endswith(ELLIPSIS)
    assert mem.loc["m2", "text"] == PIPE
    assert pd.isna(mem.loc["m3", "text"]) and pd.isna(mem.loc["m4", "text"])  # null, absent
    assert list(rep.pairs.columns[:3]) == ["memory_id", "query_id", "text"]
    # the printout lists the memories not identified (m1 retrieved-only, m4 unidentified)
    text = rep.to_text()
    assert shorten(LONG) in text and "  text" in text

    est = estimate(log)
    assert list(est.columns[:2]) == ["memory_id", "text"]
    assert est.set_index("memory_id").loc["m1", "text"] == shorten(LONG)
    by_query = estimate(log, by="query")
    assert list(by_query.columns[:3]) == ["memory_id", "query_id", "text"]

    # CSVs: the whole text, ids still first
    out = tmp_path / "est.csv"
    assert main(["estimate", str(root), "-o", str(out)]) == 0
    back = pd.read_csv(out, dtype=str, keep_default_na=False).set_index("memory_id")
    assert back.loc["m1", "text"] == LONG and back.loc["m2", "text"] == PIPE
    assert back.loc["m3", "text"] == "" and back.loc["m4", "text"] == ""
    diag = tmp_path / "diag.csv"
    capsys.readouterr()
    assert main(["diagnose", str(root), "-o", str(diag)]) == 0
    printed = capsys.readouterr().out
    assert shorten(LONG) in printed and f"wrote {diag}" in printed
    dback = pd.read_csv(diag, dtype=str, keep_default_na=False)
    assert list(dback.columns[:2]) == ["memory_id", "text"]
    assert dback.set_index("memory_id").loc["m1", "text"] == LONG
    # --json keeps stdout one JSON object; the "wrote" line goes to stderr
    assert main(["diagnose", str(root), "--json", "-o", str(diag)]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert "wrote" in captured.err


def test_no_text_column_when_the_log_has_no_texts(tmp_path: Path) -> None:
    for name, texts in (("none", None), ("nulls", {"m1": None, "m2": ""})):
        log = read_log(hand_log(tmp_path / name, texts))
        assert "text" not in diagnose(log).memories
        assert "text" not in diagnose(log).pairs
        assert "text" not in estimate(log)
        assert "  text" not in diagnose(log).to_text()


# ------------------------------------------------------ the posterior coordinate


def _texted(dt: xr.DataTree, texts: list[object]) -> xr.DataTree:
    ids = dt["posterior"]["memory"].to_numpy().astype(str)
    series = pd.Series(texts + [None] * (len(ids) - len(texts)), index=ids, dtype="string")
    dt = dt.copy()
    dt["posterior"] = xr.DataTree(with_memory_text(dt["posterior"].to_dataset(), series))
    return dt


@pytest.fixture(scope="module")
def texted_posterior() -> xr.DataTree:
    dt = synthetic_posterior(memory_table(12, seed=3), chains=2, draws=120, seed=3)
    return _texted(dt, [LONG, PIPE, None, "line one\nline two", *(f"note {i}" for i in range(4, 12))])


def test_memory_text_survives_save_load_and_thinning(texted_posterior, tmp_path: Path) -> None:
    check_posterior(texted_posterior)
    path = save_posterior(texted_posterior, tmp_path / "p.nc", thin=3)
    back = load_posterior(path)
    coord = back["posterior"]["memory_text"]
    assert coord.dims == ("memory",)
    assert back["posterior"].sizes["draw"] == 40  # thinned, the coordinate kept
    got = [str(t) for t in coord.to_numpy()]
    assert got[:5] == [LONG, PIPE, "", "line one\nline two", "note 4"]
    texts = memory_texts(back)
    assert texts is not None and texts.isna().tolist()[:4] == [False, False, True, False]
    # a coordinate along another dim breaks the contract
    bad = back.copy()
    post = bad["posterior"].to_dataset()
    bad["posterior"] = xr.DataTree(
        post.assign_coords(memory_text=("chain", np.array(["a", "b"], dtype=object)))
    )
    with pytest.raises(PosteriorError, match="memory_text"):
        check_posterior(bad)


def test_no_texts_no_coordinate_reader_returns_none(texted_posterior) -> None:
    plain = synthetic_posterior(memory_table(5, seed=1), chains=2, draws=50, seed=1)
    assert memory_texts(plain) is None
    assert memory_texts(_texted(plain, [None, ""])) is None  # all empty: as if absent


def test_decide_recommend_and_the_report_show_text(
    texted_posterior, tmp_path: Path, capsys, no_trace_figures: None
) -> None:
    from cmp_bayes.decision.recommend import recommend_exposures
    from cmp_bayes.decision.rule import COLUMNS, decide
    from cmp_bayes.reporting.html import report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = decide(texted_posterior)
        rec = recommend_exposures(texted_posterior, 3, draws=20)
    t = d.table.set_index("memory_id")
    assert list(d.table.columns) == [COLUMNS[0], "text", *COLUMNS[1:]]
    assert t.loc["m000", "text"] == shorten(LONG) and t.loc["m001", "text"] == PIPE
    assert pd.isna(t.loc["m002", "text"]) and t.loc["m003", "text"] == "line one line two"
    assert list(rec.columns[:3]) == ["rank", "memory_id", "text"]

    out = d.to_csv(tmp_path / "d.csv")
    back = pd.read_csv(out, dtype=str, keep_default_na=False).set_index("memory_id")
    assert back.loc["m000", "text"] == LONG  # the CSV has the whole text
    assert back.loc["m003", "text"] == "line one\nline two"
    assert d.table.loc[0, "text"] == shorten(LONG)  # the table is unchanged by writing

    index = report(texted_posterior, tmp_path / "rep", decisions=d)
    page = index.read_text(encoding="utf-8")
    md = (index.parent / "summary.md").read_text(encoding="utf-8")
    assert "likes &lt;b&gt;bold&lt;/b&gt; | hates tables" in page
    assert "<b>bold" not in page  # a memory's text never becomes markup
    assert "likes \\<b>bold\\</b> \\| hates tables" in md
    assert shorten(LONG) in md and LONG not in md

    # the CLI's summary: the text's start on the id's line, the reason on the next
    path = save_posterior(texted_posterior, tmp_path / "p.nc")
    assert main(["decide", str(path), "--top", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [i for i, line in enumerate(lines) if line.startswith("  m0")]
    assert listed  # some memory is forgotten, deferred or never retrieved
    for i in listed:
        mid = lines[i].split()[0]
        if mid != "m002":  # the memory without a text
            assert f'"{t.loc[mid, "text"]}"' in lines[i]
        assert lines[i + 1].strip() == t.loc[mid, "reason"]


def test_report_takes_texts_from_the_log_when_the_posterior_has_none(
    tmp_path: Path, no_trace_figures: None
) -> None:
    from cmp_bayes.log.schema import MEMORY_COLUMNS, ExposureLog, coerce
    from cmp_bayes.reporting.html import report

    plain = synthetic_posterior(memory_table(6, seed=2), chains=2, draws=60, seed=2)
    ids = plain["posterior"]["memory"].to_numpy().astype(str)
    memories = coerce(
        pd.DataFrame({"memory_id": ids, "created_step": 0, "text": [LONG, *["short"] * 5]}),
        MEMORY_COLUMNS,
    )
    log = ExposureLog(steps=pd.DataFrame(), contexts=pd.DataFrame(), memories=memories)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = report(plain, tmp_path / "rep", log=log)
    md = (index.parent / "summary.md").read_text(encoding="utf-8")
    assert shorten(LONG) in md


# ------------------------------------------------------------- fit: a real log


def test_fit_puts_the_logs_texts_on_the_posterior(tmp_path: Path, mock_sample) -> None:
    # sampling mocked: where the texts go, not the draws, is the point
    from cmp_bayes.model.fit import fit
    from cmp_bayes.simulation.simulator import simulate

    root = tmp_path / "tiny"
    simulate("tiny", out=root, seed=1)
    rows = [json.loads(x) for x in (root / "memories.jsonl").read_text().splitlines()]
    rows[0]["text"] = LONG
    rows[1]["text"] = PIPE
    rows[2]["text"] = None
    _write_jsonl(root / "memories.jsonl", rows)
    tree = fit(read_log(root), draws=20, chains=1, progressbar=False)
    coord = tree["posterior"]["memory_text"]
    assert coord.dims == ("memory",)
    by_id = dict(zip(tree["posterior"]["memory"].to_numpy().astype(str), coord.to_numpy(), strict=True))
    assert by_id[rows[0]["memory_id"]] == LONG and by_id[rows[1]["memory_id"]] == PIPE
    assert by_id[rows[2]["memory_id"]] == "" and by_id[rows[3]["memory_id"]] == ""
    back = load_posterior(save_posterior(tree, tmp_path / "p.nc", thin=2))
    assert [str(t) for t in back["posterior"]["memory_text"].to_numpy()] == [
        str(t) for t in coord.to_numpy()
    ]
    # a log without texts: no coordinate (the contract's "when the log has texts")
    plain = tmp_path / "plain"
    simulate("tiny", out=plain, seed=1)
    assert "memory_text" not in fit(read_log(plain), draws=20, chains=1, progressbar=False)["posterior"].coords
