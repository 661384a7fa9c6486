"""``cmp-bayes demo``: the whole pipeline on the bundled example, with the real fit.

One session-scoped demo run (nutpie, default draws) is shared by every test;
the tests check that the posterior, the report and the decisions exist AND
are right.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cmp_bayes.cli.main import main
from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.data import EXAMPLE_NAME, example_log_path, make_example
from cmp_bayes.posterior.io import load_posterior
from cmp_bayes.reporting.blocks import SECTION_IDS


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(
            [
                "demo",
                "--out-models",
                str(root / "models"),
                "--out-reports",
                str(root / "reports"),
                "--no-progress",
            ]
        )
    return {
        "status": status,
        "stdout": out.getvalue(),
        "posterior": root / "models" / f"{EXAMPLE_NAME}.nc",
        "report": root / "reports" / EXAMPLE_NAME,
    }


@pytest.fixture(scope="session")
def example_log():
    from cmp_bayes.log.read import read_log

    return read_log(example_log_path())


@pytest.fixture(scope="session")
def design_status(example_log) -> pd.Series:
    from cmp_bayes.diagnostics.positivity import identification_status
    from cmp_bayes.statistics import exposure_stats

    status = identification_status(exposure_stats(example_log))
    return pd.Series(status.to_numpy().astype(str), index=status["memory"].to_numpy().astype(str))


@pytest.fixture(scope="session")
def decisions(demo: dict) -> pd.DataFrame:
    return pd.read_csv(demo["report"] / "decisions.csv", dtype={"memory_id": str})


def test_demo_exits_0_and_says_where_everything_went(demo: dict) -> None:
    assert demo["status"] == 0, demo["stdout"][-2000:]
    out = demo["stdout"]
    for path in (
        demo["posterior"],
        demo["report"] / "index.html",
        demo["report"] / "decisions.csv",
    ):
        assert str(path) in out
    # the positivity table is printed before the fit, the decision summary after it
    assert out.index("unidentified") < out.index("[2/5]") < out.index("retain")


def test_posterior_loads_back_with_the_logs_memories(
    demo: dict, example_log, design_status
) -> None:
    dt = load_posterior(demo["posterior"])
    for group in (
        "posterior",
        "prior",
        "posterior_predictive",
        "observed_data",
        "sample_stats",
        "identification",
    ):
        assert group in dt.children, group
    memory = dt["posterior"]["tau"]["memory"].to_numpy().astype(str)
    np.testing.assert_array_equal(memory, example_log.memory_ids().to_numpy().astype(str))
    status = dt["identification"]["status"].to_numpy().astype(str)
    np.testing.assert_array_equal(status, design_status.loc[memory].to_numpy())
    assert dt.attrs["outcome_kind"] == "binary"


def test_decisions_one_row_per_memory_with_the_design_status(
    decisions: pd.DataFrame, example_log, design_status
) -> None:
    ids = example_log.memory_ids().to_numpy().astype(str)
    assert len(decisions) == len(ids)
    assert sorted(decisions["memory_id"]) == sorted(ids)
    assert set(decisions["action"]) <= {"retain", "forget", "defer"}
    np.testing.assert_array_equal(
        decisions["status"].to_numpy(), design_status.loc[decisions["memory_id"]].to_numpy()
    )
    # the example holds all three statuses, so the guard below is really exercised
    assert {IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED} <= set(decisions["status"])


def test_never_forgets_what_the_design_cannot_identify(decisions: pd.DataFrame) -> None:
    unsure = decisions[decisions["status"].isin([UNIDENTIFIED, RETRIEVED_ONLY])]
    assert len(unsure) > 0
    assert (unsure["action"] != "forget").all()
    assert decisions["reason"].notna().all() and (decisions["reason"].str.len() > 10).all()


def test_forgets_are_rarely_truly_useful(decisions: pd.DataFrame, example_log) -> None:
    """Against simulator truth: forgotten memories that were truly useful.

    If the posterior is calibrated, each forgotten memory i is truly useful
    with probability p_i = its p_useful, so their count is Poisson-binomial
    with mean sum p_i and variance sum p_i (1 - p_i); the bound is mean + 3 sd
    (plus 1 for discreteness). Every forget has p_i < 1/21 by the rule.
    """
    from cmp_bayes.decision.costs import Costs
    from cmp_bayes.simulation.truth import memory_truth

    truth = memory_truth(example_log).set_index("memory_id")
    forgets = decisions[decisions["action"] == "forget"]
    if forgets.empty:
        pytest.skip("no forget in this run (sampler health refused them): nothing to check")
    p = forgets["p_useful"].to_numpy()
    useful = (truth.loc[forgets["memory_id"], "tau_true"] > Costs().threshold).to_numpy()
    bound = p.sum() + 3 * math.sqrt((p * (1 - p)).sum()) + 1
    assert useful.sum() <= bound, (useful.sum(), bound)


def test_report_written_beside_the_decisions(demo: dict) -> None:
    html = (demo["report"] / "index.html").read_text(encoding="utf-8")
    for sid in SECTION_IDS:
        assert f'id="{sid}"' in html
    assert "data:image/png;base64," in html and "https://" not in html.split("<body>", 1)[1]
    md = (demo["report"] / "summary.md").read_text(encoding="utf-8")
    assert md.count("\n## ") == len(SECTION_IDS)


def test_demo_on_a_missing_log_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", str(tmp_path / "no-such-log")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-log" in err


def test_bundled_example_regenerates_identically(tmp_path: Path) -> None:
    out = make_example(tmp_path / "example")
    shipped = example_log_path()
    names = sorted(p.name for p in shipped.iterdir())
    assert names == sorted(p.name for p in out.iterdir())
    for name in names:
        assert (out / name).read_bytes() == (shipped / name).read_bytes(), name
