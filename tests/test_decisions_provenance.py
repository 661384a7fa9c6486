"""Decisions that know where they came from (issue 17, items 4 and 7): the log checksum,
log id and store from the posterior, in the table, the CSV and ``to_dict``;
``read_decisions_csv`` reading a CSV back and refusing a bad one; ``recommend``'s pool file."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

from cmp_bayes.cli.main import main
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import RULE_COLUMNS, Decisions, read_decisions_csv
from cmp_bayes.decision.rule import COLUMNS, decide
from cmp_bayes.errors import ConfigError
from cmp_bayes.posterior.io import load_posterior, save_posterior
from cmp_bayes.posterior.provenance import provenance, with_memory_text
from cmp_bayes.testing import synthetic_posterior
from cmp_bayes.testing.posterior import memory_table

LOG_ID = "5f0c3c7e9a2b4d1e8f6a7b8c9d0e1f2a"
STORE = {"user_id": "alice", "agent_id": "travel"}


def _quiet_decide(dt: xr.DataTree) -> Decisions:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return decide(dt)


@pytest.fixture(scope="module")
def live_posterior() -> xr.DataTree:
    """A posterior as fit writes it for a live session's log: log_id and store attributes."""
    dt = synthetic_posterior(memory_table(20, seed=4), chains=2, draws=150, seed=4)
    dt.attrs["log_checksum"] = "ab" * 32
    dt.attrs["log_id"] = LOG_ID
    dt.attrs["store"] = json.dumps(STORE, sort_keys=True)
    return dt


def test_decisions_carry_the_posteriors_provenance(live_posterior) -> None:
    d = _quiet_decide(live_posterior)
    assert (d.log_checksum, d.log_id, d.store) == ("ab" * 32, LOG_ID, STORE)
    assert list(d.table.columns) == list(COLUMNS)
    assert list(COLUMNS[-2:]) == ["log_checksum", "log_id"]
    assert set(d.table["log_checksum"]) == {"ab" * 32} and set(d.table["log_id"]) == {LOG_ID}
    doc = d.to_dict()
    assert (doc["log_checksum"], doc["log_id"], doc["store"]) == ("ab" * 32, LOG_ID, STORE)
    json.dumps(doc)  # plain values
    # the provenance columns survive what pandas does to a table (attrs would not)
    merged = d.forgets.merge(d.table[["memory_id"]], on="memory_id").set_index("memory_id")
    assert (merged["log_checksum"] == "ab" * 32).all()
    html = d._repr_html_()
    assert LOG_ID in html and "<table" in html


def test_without_a_log_id_the_column_is_na_and_the_field_none() -> None:
    dt = synthetic_posterior(memory_table(8, seed=1), chains=2, draws=80, seed=1)
    d = _quiet_decide(dt)
    assert d.log_id is None and d.store is None and d.log_checksum == dt.attrs["log_checksum"]
    assert d.table["log_id"].isna().all()
    assert provenance({"log_checksum": "x", "store": "not json {"})["store"] == "not json {"


def test_csv_round_trip_with_provenance_and_text(live_posterior, tmp_path: Path) -> None:
    d = _quiet_decide(live_posterior)
    back = read_decisions_csv(d.to_csv(tmp_path / "d.csv"))
    # the CSV is the table, then the rule it was decided under (RULE_COLUMNS)
    assert list(back.columns) == [*d.table.columns, *RULE_COLUMNS]
    pd.testing.assert_frame_equal(back[list(d.table.columns)], d.table, check_exact=False, rtol=1e-12)
    pd.testing.assert_frame_equal(back, d.csv_table(), check_exact=False, rtol=1e-12)

    # with texts: the CSV's text is the whole one, multi-line texts included
    ids = live_posterior["posterior"]["memory"].to_numpy().astype(str)
    texts = pd.Series(["multi\nline, \"quoted\" text " * 5, "a | b < c", *[None] * (len(ids) - 2)],
                      index=ids, dtype="string")
    tree = live_posterior.copy()
    tree["posterior"] = xr.DataTree(with_memory_text(tree["posterior"].to_dataset(), texts))
    dt_text = _quiet_decide(tree)
    back = read_decisions_csv(dt_text.to_csv(tmp_path / "t.csv"))
    assert back["text"].tolist()[:2] == texts.tolist()[:2] and back["text"].iloc[2:].isna().all()
    short = dt_text.table.drop(columns="text")
    pd.testing.assert_frame_equal(
        back.drop(columns=["text", *RULE_COLUMNS]), short, check_exact=False, rtol=1e-12
    )


def test_csv_records_the_costs_and_threshold_used(live_posterior, tmp_path: Path) -> None:
    costs = Costs(forget_cost=7.0, retain_cost=2.0, threshold=0.03)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = decide(live_posterior, costs)
    back = read_decisions_csv(d.to_csv(tmp_path / "c.csv"))
    assert back["estimand"].tolist() == ["tau"] * len(d)
    assert (back["threshold"] == 0.03).all() and (back["forget_cost"] == 7.0).all()
    assert (back["retain_cost"] == 2.0).all()
    assert back["forget_below"].to_numpy() == pytest.approx(2.0 / 9.0)
    assert back["forget_below"].dtype == "float64"
    assert list(d.table.columns) == list(COLUMNS)  # writing leaves the table as it was


def test_read_decisions_csv_refuses_bad_rows_naming_file_line_and_column(
    live_posterior, tmp_path: Path
) -> None:
    d = _quiet_decide(live_posterior)
    table = d.table.copy()
    # a multi-line cell in row 0: row 1 starts on line 4 of the file, not 3
    table.loc[0, "reason"] = "first line\nsecond line"
    good = tmp_path / "good.csv"
    table.to_csv(good, index=False)
    assert len(read_decisions_csv(good)) == len(table)

    def broken(name: str, edit) -> Path:
        t = table.copy()
        edit(t)
        path = tmp_path / name
        t.to_csv(path, index=False)
        return path

    def with_cell(col: str, value: object):
        def edit(t: pd.DataFrame) -> None:
            t[col] = t[col].astype(object)
            t.loc[1, col] = value
        return edit

    cases = [
        (broken("action.csv", with_cell("action", "delete")), r"line 4, column 'action': unknown action 'delete'"),
        (broken("id.csv", with_cell("memory_id", "")), r"line 4, column 'memory_id': missing memory id"),
        (broken("dup.csv", with_cell("memory_id", table.loc[0, "memory_id"])), r"line 4, .*already on line 2"),
        (broken("num.csv", with_cell("p_useful", "high")), r"line 4, column 'p_useful': expected a number"),
        (broken("int.csv", with_cell("exposed", "2.5")), r"line 4, column 'exposed': expected a whole number"),
        (broken("bool.csv", with_cell("forgettable", "maybe")), r"column 'forgettable': expected True or False"),
        (broken("mixed.csv", with_cell("log_checksum", "cd" * 32)), r"line 4, column 'log_checksum': rows from more than one log"),
        (broken("nocol.csv", lambda t: t.pop("action")), r"line 1: no column 'action'"),
    ]
    for path, match in cases:
        with pytest.raises(ConfigError, match=match) as exc:
            read_decisions_csv(path)
        assert str(path) in str(exc.value)
    short_row = tmp_path / "short.csv"
    short_row.write_text("memory_id,action\nm1,retain\nm2\n")
    with pytest.raises(ConfigError, match=r"line 3: 1 fields, the header has 2"):
        read_decisions_csv(short_row)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ConfigError, match="empty file"):
        read_decisions_csv(tmp_path / "empty.csv")
    with pytest.raises(ConfigError, match="no such decisions CSV"):
        read_decisions_csv(tmp_path / "missing.csv")
    # the least a CSV needs: memory_id and action (provenance absent: a caller checks for it)
    minimal = tmp_path / "minimal.csv"
    minimal.write_text("memory_id,action\nNA,forget\nnull,retain\n")
    got = read_decisions_csv(minimal)
    assert got["memory_id"].tolist() == ["NA", "null"]  # ids are never read as missing values
    assert "log_checksum" not in got


def test_fit_copies_log_id_and_store_and_the_csv_names_the_log(tmp_path: Path, mock_sample, capsys) -> None:
    # sampling mocked: the provenance, not the draws, is the point
    from cmp_bayes.log.read import read_log
    from cmp_bayes.model.fit import fit
    from cmp_bayes.simulation.simulator import simulate

    root = tmp_path / "live"
    simulate("tiny", out=root, seed=2)
    design = json.loads((root / "design.json").read_text())
    (root / "design.json").write_text(json.dumps({**design, "log_id": LOG_ID, "store": STORE}))
    log = read_log(root)
    tree = fit(log, draws=20, chains=1, progressbar=False)
    assert tree.attrs["log_id"] == LOG_ID and json.loads(tree.attrs["store"]) == STORE
    path = save_posterior(tree, tmp_path / "live.nc")
    assert load_posterior(path).attrs["log_id"] == LOG_ID
    out = tmp_path / "decisions.csv"
    assert main(["decide", str(path), "-o", str(out)]) == 0
    back = read_decisions_csv(out)
    assert set(back["log_checksum"]) == {log.checksum} and set(back["log_id"]) == {LOG_ID}

    # a log without them: no attributes (not empty strings); fit's attributes are these
    # two functions' output (a second fit would only compile the same graph again)
    from cmp_bayes.posterior.provenance import log_provenance, provenance_attrs

    assert provenance_attrs(log_provenance(log)) == {"log_id": LOG_ID, "store": tree.attrs["store"]}
    plain = tmp_path / "plain"
    simulate("tiny", out=plain, seed=2)
    assert provenance_attrs(log_provenance(read_log(plain))) == {}


# ------------------------------------------------------------------ recommend's pool


def test_recommend_without_o_says_where_it_wrote_and_what_reads_it(
    live_posterior, tmp_path: Path, monkeypatch, capsys
) -> None:
    from cmp_bayes.design.scheduler import ExposureScheduler

    post = tmp_path / "post.nc"
    save_posterior(live_posterior, post)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["recommend", str(post), "--budget", "4", "--draws", "20"]) == 0
    printed = capsys.readouterr().out
    pool_file = work / "pool.json"
    assert pool_file.is_file()  # the default name, in the current directory (a contract)
    assert f"wrote {pool_file.resolve()}" in printed
    assert "ExposureScheduler(" in printed and "['pool']" in printed
    doc = json.loads(pool_file.read_text())
    assert (doc["log_checksum"], doc["log_id"]) == ("ab" * 32, LOG_ID)
    sched = ExposureScheduler(slots=4, exposure_slots=1, pool=doc["pool"], steps=20)
    assert sched.pool == doc["pool"] and len(doc["pool"]) == 4

    with pytest.raises(SystemExit) as exc:
        main(["recommend", "--help"])
    assert exc.value.code == 0
    helptext = " ".join(capsys.readouterr().out.split())
    assert "pool.json in the current directory" in helptext
    assert "The next exposure design takes the list as its pool" in helptext


@pytest.mark.parametrize("verb", ["decide", "recommend"])
def test_a_reader_that_closes_the_pipe_early_loses_nothing(verb, tmp_path: Path) -> None:
    # `cmp-bayes decide POST -o out.csv | head -1`: the summary is far longer than a pipe's
    # buffer, so the reader's exit ends the process at a print; the file must exist by then
    import subprocess
    import sys

    dt = synthetic_posterior(memory_table(600, seed=2), chains=2, draws=60, seed=2)
    post = tmp_path / "post.nc"
    save_posterior(dt, post)
    out = tmp_path / ("decisions.csv" if verb == "decide" else "pool.json")
    extra = ["--budget", "400"] if verb == "recommend" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "cmp_bayes.cli.main", "-q", verb, str(post), "-o", str(out), "--top", "600", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does after its line
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=120)
    assert first  # it did start printing
    assert out.exists() and out.stat().st_size > 0
    assert rc in (0, 141), err  # 141: ended by the closed pipe, as a SIGPIPE would
    assert "error" not in err and "Traceback" not in err
    if verb == "decide":
        assert len(read_decisions_csv(out)) == 600
