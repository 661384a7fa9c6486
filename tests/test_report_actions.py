"""The report a person acts on: the decision first, labelled figures, grouped reasons, 800 px.

Synthetic posteriors (cmp_bayes.testing.synthetic_posterior): sampling is not the point. The
figures are checked as matplotlib objects before they are encoded.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from matplotlib.text import Text

from cmp_bayes.constants import IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED
from cmp_bayes.decision.costs import Costs
from cmp_bayes.decision.decisions import Decisions
from cmp_bayes.decision.recommend import recommend_exposures
from cmp_bayes.decision.rule import DecisionWarning, decide
from cmp_bayes.posterior.health import sampler_health
from cmp_bayes.posterior.sampling_checks import Check
from cmp_bayes.reporting import actions, plots, ppc_plots, reason_codes
from cmp_bayes.reporting.blocks import identification_frame
from cmp_bayes.reporting.html import report
from cmp_bayes.reporting.sections import forest_section, sampler_health_section
from cmp_bayes.testing import synthetic_posterior


def _decide(posterior: xr.DataTree, costs: Costs | None = None) -> Decisions:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionWarning)
        return decide(posterior, costs)


@pytest.fixture(scope="module")
def posterior() -> xr.DataTree:
    return synthetic_posterior(n_memories=24, draws=300, seed=1)


@pytest.fixture(scope="module")
def page(posterior: xr.DataTree, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """index.html and summary.md of one report (decisions under default costs)."""
    out = tmp_path_factory.mktemp("acts") / "r"
    index = report(posterior, out, decisions=_decide(posterior))
    return index.read_text(encoding="utf-8"), (out / "summary.md").read_text(encoding="utf-8")


def _section(html: str, sid: str) -> str:
    return html.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]


def _md_section(md: str, sid: str) -> str:
    return md.split(f'<a id="{sid}"></a>', 1)[1].split("<a id=", 1)[0]


def _without_images(html: str) -> str:
    # base64 could spell anything: look at the words only
    return re.sub(r'src="data:image/png;base64,[^"]*"', 'src=""', html)


# ------------------------------------------------------------------ the first screen


def test_first_section_names_every_forget_and_the_next_exposures(
    posterior: xr.DataTree, page: tuple[str, str]
) -> None:
    html, md = page
    first = _section(html, "overview")
    assert html.index('<section id="overview">') < html.index('<section id="sampler-health">')
    d = _decide(posterior)
    forgets = d.forgets["memory_id"].astype(str).tolist()
    assert forgets, "the fixture must forget something for this test to mean anything"
    # every forget, by id, in the list of ids (riskiest first) and in the first md section
    ids_line = re.search(r"<li class='forget'>(.*?)</li>", first, re.S)
    assert ids_line is not None
    named = re.findall(r"m\d{3}", ids_line.group(1))
    by_risk = d.forgets.sort_values("p_useful", ascending=False, kind="stable")["memory_id"]
    assert named == by_risk.astype(str).tolist()
    assert f"Forget {len(forgets)} memories (all of them" in first
    first_md = _md_section(md, "overview")
    for m in forgets:
        assert m in first_md
    # the next pool: recommend_exposures' selected memories under the same costs, best first
    todo = len(d) - len(forgets)
    rec = recommend_exposures(posterior, min(actions.NEXT_POOL, todo), d.costs)
    pool = rec[rec["selected"]]["memory_id"].astype(str).tolist()
    expose = re.search(r"<li class='expose'>(.*?)</li>", first, re.S)
    assert expose is not None
    assert re.findall(r"m\d{3}", expose.group(1)) == pool
    # and how strong the evidence is, in numbers
    evidence = re.search(r"<li class='evidence'>(.*?)</li>", first, re.S)
    assert evidence is not None
    expected = f"{float(d.forgets['p_useful'].sum()):.2f} (sum of their P(useful))"
    assert expected in evidence.group(1)


def test_first_screen_without_forgets_says_none() -> None:
    post = synthetic_posterior(n_memories=8, draws=200, divergences=3)  # the sampler fails
    d = _decide(post)
    assert d.counts()["forget"] == 0
    body, md = actions.first_screen(d, sampler_health(post))
    assert "Forget: none." in body and "verdict fail" in body
    assert md.startswith("**FAIL: ")


def test_a_pass_with_advisory_warnings_names_them_at_the_top_and_in_the_table(
    posterior: xr.DataTree,
) -> None:
    health = sampler_health(posterior)
    warn = Check("R-hat (tau, every memory)", "max 1.02; 2 of 24 above", "<= 1.01", False,
                 "more draws", gate=False)
    warned = dataclasses.replace(health, checks=[*health.checks, warn])
    assert warned.ok
    line, cls = actions.health_headline(warned)
    assert cls == "warn"
    assert line.startswith("PASS: with 1 warning.") and "2 of 24 above" in line
    assert "every recorded check passed" not in line  # not while the table warns
    # the sampler-health section says the same line over its table
    sec = sampler_health_section(warned)
    assert "verdict warn" in sec.html and line in sec.markdown
    # clean checks keep the checks module's own verdict
    assert actions.health_headline(health) == (health.verdict, "pass")


# ------------------------------------------------------------------ the decisions table


@pytest.mark.parametrize(
    ("kwargs", "costs"),
    [
        ({"n_memories": 24, "draws": 300, "seed": 1}, None),
        ({"n_memories": 40, "draws": 200, "seed": 3}, None),
        ({"n_memories": 8, "draws": 200, "divergences": 3}, None),  # sampler failed: D5
        ({"n_memories": 24, "draws": 300, "seed": 1}, Costs(capacity=4)),  # capacity: F2
    ],
)
def test_every_reason_has_a_code(kwargs: dict, costs: Costs | None) -> None:
    d = _decide(synthetic_posterior(**kwargs), costs)
    codes = reason_codes.reason_codes(d.table)
    assert reason_codes.OTHER_CODE not in set(codes), d.table.loc[codes == reason_codes.OTHER_CODE, "reason"]
    # a code belongs to its row's action
    action_of = {rc.code: rc.action for rc in reason_codes.REASON_CODES}
    assert all(action_of[c] == a for c, a in zip(codes, d.table["action"], strict=True))
    legend = reason_codes.reason_legend(d.table)
    assert legend["memories"].sum() == len(d) and legend["code"].is_unique
    if costs is not None:
        assert "F2" in set(codes)
    if kwargs.get("divergences"):
        assert "D5" in set(codes)


def test_an_unknown_reason_is_listed_with_its_own_sentence() -> None:
    d = _decide(synthetic_posterior(n_memories=6, draws=100, seed=2))
    table = d.table.copy()
    table.loc[0, "reason"] = "a reason nobody wrote yet"
    legend = reason_codes.reason_legend(table)
    row = legend[legend["code"] == reason_codes.OTHER_CODE]
    assert row["meaning"].tolist() == ["a reason nobody wrote yet"] and row["memories"].tolist() == [1]


def test_decisions_section_shows_codes_a_legend_and_defines_expected_value(
    posterior: xr.DataTree, page: tuple[str, str]
) -> None:
    html, md = page
    sec = _section(html, "decisions")
    d = _decide(posterior)
    # the 30-word sentences stay in decisions.csv: none of them is repeated in the table
    for reason in d.table["reason"]:
        assert reason not in sec
    assert "<th>why</th>" in sec and "Reason codes" in sec
    for code in set(reason_codes.reason_codes(d.table)):
        assert f"<td>{code}</td>" in sec
    assert "expected_value = the posterior mean of tau" in sec and "outcome units" in sec
    assert "p_useful = P(tau &gt; 0.05)" in sec
    md_sec = _md_section(md, "decisions")
    assert "expected_value = the posterior mean of tau" in md_sec and "| code |" in md_sec


# ------------------------------------------------------------------ the figures


def _forest_inputs(posterior: xr.DataTree) -> tuple[list[str], dict[str, str]]:
    ident = identification_frame(posterior)
    status = dict(zip(ident["memory_id"], ident["status"], strict=True))
    # one of each status, so the legend has all three
    picks = [next(m for m, s in status.items() if s == st) for st in (IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED)]
    return picks, status


def test_forest_has_its_axis_label_zero_and_threshold_lines_and_a_status_legend(
    posterior: xr.DataTree,
) -> None:
    memories, status = _forest_inputs(posterior)
    fig = plots.forest_figure(posterior, "tau", memories, status=status, threshold=0.05)
    (ax,) = fig.axes
    assert "change in success probability" in ax.get_xlabel() and "outcome units" in ax.get_xlabel()
    assert ax.get_ylabel() == "memory id"
    vertical = sorted(
        float(np.asarray(line.get_xdata())[0])
        for line in ax.get_lines()
        if len(line.get_xdata()) == 2 and np.ptp(np.asarray(line.get_xdata(), float)) == 0
        and np.ptp(np.asarray(line.get_ydata(), float)) > 0
    )
    assert vertical == [0.0, 0.05]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("identified") for t in legend)
    assert any(t.startswith("retrieved-only") for t in legend)
    assert any(t.startswith("unidentified") for t in legend)
    assert "decision threshold 0.05" in legend and "0: no effect" in legend
    # identified points are filled, the others hollow
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and len(ln.get_xdata()) == 1]
    assert [ln.get_fillstyle() for ln in points] == ["full", "none", "none"]
    assert [ln.get_linestyle() for ln in ax.get_lines() if ln.get_linewidth() == 1.0][:3] == [
        "-", "--", ":"
    ]
    # no leftover panel labels ("variable", "memory", the bare variable name)
    words = {t.get_text() for t in fig.findobj(Text)}
    assert not words & {"variable", "memory", "tau"}
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_forest_section_draws_the_threshold_only_when_given(posterior: xr.DataTree) -> None:
    ident = identification_frame(posterior)
    with_line = forest_section(posterior, ident, threshold=0.05)
    without = forest_section(posterior, ident)
    assert "dashed line at the decision threshold 0.05" in with_line.lead
    assert "threshold" not in without.lead
    assert "Hollow points" in with_line.lead


def test_report_draws_the_costs_threshold_on_the_forest(
    posterior: xr.DataTree, tmp_path: Path, no_trace_figures: None
) -> None:
    costs = Costs(threshold=0.03)
    index = report(posterior, tmp_path / "r", decisions=_decide(posterior, costs))
    sec = _section(index.read_text(encoding="utf-8"), "tau-forest")
    assert "decision threshold 0.03" in sec
    # a threshold on utility is not a tau value: no line
    util = report(posterior, tmp_path / "u", decisions=_decide(posterior, Costs(estimand="utility")))
    assert "decision threshold" not in _section(util.read_text(encoding="utf-8"), "tau-forest")


def test_trace_panels_name_their_variable_and_unit(posterior: xr.DataTree) -> None:
    from cmp_bayes.posterior.health import hyperparameter_names

    names = hyperparameter_names(posterior)[: plots.MAX_TRACE_VARS]
    fig = plots.trace_figure(posterior, names)
    xlabels = [ax.get_xlabel() for ax in fig.axes]
    ylabels = [ax.get_ylabel() for ax in fig.axes]
    for name in names:
        unit = plots.hyper_unit(name)
        assert f"{name} ({unit})" in xlabels, name  # the density panel
        assert any(y.startswith(name + "\n") for y in ylabels), name  # the trace panel
    assert ylabels.count("density") == len(names)
    assert xlabels.count("draw (per chain)") == len(names)
    assert plots.hyper_unit("tau_helps_mean") == "success-probability change"
    assert plots.hyper_unit("weight_intercept") == "log-odds"
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_rank_panels_are_labelled_and_the_lead_mentions_no_band(
    posterior: xr.DataTree, page: tuple[str, str]
) -> None:
    from cmp_bayes.posterior.health import hyperparameter_names

    names = hyperparameter_names(posterior)[:3]
    fig = plots.rank_figure(posterior, names)
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert panels
    for ax in panels:
        assert ax.get_xlabel().startswith("fractional rank") and ax.get_ylabel() == "ECDF − uniform"
    import matplotlib.pyplot as plt

    plt.close(fig)
    lead = _section(page[0], "trace-rank").split("</p>", 1)[0]
    assert "band" not in lead and "uniformity test" in lead


def test_ppc_axes_say_what_they_are_and_no_cep(posterior: xr.DataTree, page: tuple[str, str]) -> None:
    tree = ppc_plots.binary_calibration_tree(posterior)
    assert tree is not None
    fig = ppc_plots.ppc_binary_figure(tree)
    labelled = [ax for ax in fig.axes if ax.has_data()]
    assert labelled and all(ax.get_ylabel() == ppc_plots.PPC_YLABEL for ax in labelled)
    assert all(ax.get_xlabel() == ppc_plots.PPC_XLABEL for ax in labelled)
    assert "CEP" not in {t.get_text() for t in fig.findobj(Text)}
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert "CEP" not in _without_images(page[0]) and "CEP" not in page[1]


# ------------------------------------------------------------------ laptop width


def test_every_table_scrolls_in_its_own_box_and_the_page_has_a_narrow_layout(
    page: tuple[str, str],
) -> None:
    html = _without_images(page[0])
    tables = html.count("<table")
    assert tables > 5
    assert html.count("<div class='table-wrap'><table") == tables
    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert ".table-wrap { overflow-x: auto;" in style
    assert "@media (max-width: 900px)" in style
    # cells keep a readable width instead of shrinking to two characters
    assert re.search(r"th, td \{[^}]*min-width: 3\.5rem", style)
