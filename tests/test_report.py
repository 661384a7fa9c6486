"""The diagnostic report: self-contained HTML, every section, honest health verdicts.

Posteriors here are synthetic (cmp_bayes.testing.synthetic_posterior): sampling is not the
point. The real fit is exercised by tests/test_demo.py.
"""

from __future__ import annotations

import base64
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from cmp_bayes.cli.main import main
from cmp_bayes.constants import CI_PROB, UNIDENTIFIED
from cmp_bayes.errors import PosteriorError
from cmp_bayes.posterior.health import sampler_health
from cmp_bayes.posterior.io import save_posterior
from cmp_bayes.reporting import ppc_plots
from cmp_bayes.reporting.blocks import FOREST_EACH_END, SECTION_IDS, fmt, identification_frame
from cmp_bayes.reporting.checks import loo_section, ppc_section, predictive_coverage
from cmp_bayes.reporting.html import report
from cmp_bayes.reporting.sections import forest_section
from cmp_bayes.testing import synthetic_posterior

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class _Collector(HTMLParser):
    """Every id, every resource reference (src, href, inline url()) and the tags seen."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.img_src: list[str] = []
        self.refs: list[str] = []
        self.tags: set[str] = set()
        self._in_style = False
        self.styles: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"] or "")
        for key in ("src", "href", "srcset", "poster", "data"):
            if a.get(key):
                self.refs.append(a[key] or "")
        if tag == "img":
            self.img_src.append(a.get("src") or "")
        if a.get("style"):
            self.styles.append(a["style"] or "")
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


@pytest.fixture(scope="session")
def posterior() -> xr.DataTree:
    return synthetic_posterior(n_memories=24, draws=300, seed=1)


@pytest.fixture(scope="session")
def cli_run(
    posterior: xr.DataTree, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, int, str]:
    """The one report of these tests: the synthetic posterior saved to NetCDF, then
    ``cmp-bayes report FILE -o DIR`` (so the HTML tests check what the CLI writes)."""
    root = tmp_path_factory.mktemp("report")
    path = root / "synthetic.nc"
    _save(posterior, path)
    out = root / "reports" / "synthetic"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(["report", str(path), "-o", str(out)])
    return out / "index.html", status, buf.getvalue()


@pytest.fixture(scope="session")
def written(cli_run: tuple[Path, int, str]) -> Path:
    return cli_run[0]


@pytest.fixture(scope="session")
def parsed(written: Path) -> tuple[str, _Collector]:
    text = written.read_text(encoding="utf-8")
    col = _Collector()
    col.feed(text)
    return text, col


def test_every_section_present_with_its_id(parsed: tuple[str, _Collector]) -> None:
    _, col = parsed
    for sid in SECTION_IDS:
        assert col.ids.count(sid) == 1, sid


def test_every_image_is_an_embedded_png(parsed: tuple[str, _Collector]) -> None:
    _, col = parsed
    # trace, rank, forest, scatter, prior-vs-posterior, PPC
    assert len(col.img_src) >= 6
    for src in col.img_src:
        assert src.startswith("data:image/png;base64,"), src[:40]
        raw = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert raw[:8] == PNG_SIGNATURE
        assert len(raw) > 1000  # a real figure, not an empty placeholder


def test_no_external_resources(parsed: tuple[str, _Collector]) -> None:
    text, col = parsed
    for ref in col.refs:
        assert not re.match(r"\s*(https?:)?//", ref, re.IGNORECASE), ref[:80]
        assert ref.startswith(("data:image/png;base64,", "#")), ref[:80]
    for style in col.styles:
        assert "url(" not in style and "@import" not in style
    assert "script" not in col.tags and "link" not in col.tags and "iframe" not in col.tags
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*https?://""", text, re.IGNORECASE)


def test_summary_md_has_the_same_sections(written: Path) -> None:
    md = (written.parent / "summary.md").read_text(encoding="utf-8")
    anchors = re.findall(r'<a id="([^"]+)"></a>\n## ', md)
    assert anchors == list(SECTION_IDS)
    assert "http://" not in md and "https://" not in md


def test_unidentified_memories_listed_in_both_files(
    posterior: xr.DataTree, written: Path, parsed: tuple[str, _Collector]
) -> None:
    status = posterior["identification"]["status"].to_numpy().astype(str)
    unid = posterior["identification"]["memory"].to_numpy()[status == UNIDENTIFIED].astype(str)
    assert unid.size > 0
    text, _ = parsed
    section = text.split('id="identification"', 1)[1].split("<section", 1)[0]
    md = (written.parent / "summary.md").read_text(encoding="utf-8")
    md_section = md.split('<a id="identification"></a>', 1)[1].split("<a id=", 1)[0]
    for m in unid:
        assert f"<td>{m}</td>" in section
        assert f"| {m} |" in md_section
    # the panel carries the scatter and the prior-vs-posterior figure
    assert section.count("<img") == 2


def test_decision_table_matches_decide(posterior: xr.DataTree, written: Path) -> None:
    from cmp_bayes.decision import rule

    decisions = rule.decide(posterior).table
    md = (written.parent / "summary.md").read_text(encoding="utf-8")
    section = md.split('<a id="decisions"></a>', 1)[1].split("<a id=", 1)[0]
    for action in ("retain", "forget", "defer"):
        n = int((decisions["action"] == action).sum())
        assert f"| {action} | {n} |" in section
    # unidentified memories appear among the shown rows as defer, never forget
    for row in decisions[decisions["status"] == UNIDENTIFIED].itertuples():
        assert row.action != "forget"


def test_health_verdict_pass_on_clean_draws(
    posterior: xr.DataTree, parsed: tuple[str, _Collector]
) -> None:
    health = sampler_health(posterior)
    assert health.ok, health.checks
    assert {c.name for c in health.checks} >= {
        "divergences",
        "tree depth",
        "E-BFMI",
        "R-hat (hyperparameters)",
        "ESS (hyperparameters)",
    }
    text, _ = parsed
    assert "verdict pass" in text and "PASS:" in text


def test_health_verdict_fails_on_divergences() -> None:
    health = sampler_health(synthetic_posterior(n_memories=8, draws=200, divergences=3))
    assert not health.ok
    div = next(c for c in health.checks if c.name == "divergences")
    assert div.ok is False and div.value.startswith("3 of 400") and div.advice
    assert "divergences" in health.verdict


def test_health_verdict_fails_on_a_stuck_chain() -> None:
    dt = synthetic_posterior(n_memories=8, draws=200)
    post = dt["posterior"].to_dataset()
    shifted = post["tau_helps_mean"].copy()
    shifted[0] = shifted[0] + 1.0  # chain 0 far from chain 1: R-hat >> 1.01
    dt["posterior"] = xr.DataTree(post.assign(tau_helps_mean=shifted))
    health = sampler_health(dt)
    rhat = next(c for c in health.checks if c.name == "R-hat (hyperparameters)")
    assert rhat.ok is False and "tau_helps_mean" in rhat.value
    assert not health.ok


def test_missing_sample_stats_is_not_recorded_not_pass() -> None:
    dt = synthetic_posterior(n_memories=8, draws=200)
    del dt["sample_stats"]
    health = sampler_health(dt)
    div = next(c for c in health.checks if c.name == "divergences")
    assert div.ok is None and div.verdict == "not recorded"


def test_binary_calibration_tree_keeps_every_exposure(posterior: xr.DataTree) -> None:
    tree = ppc_plots.binary_calibration_tree(posterior)
    obs = posterior["observed_data"]
    assert tree is not None
    observed = tree["observed_data"]["outcome"].to_numpy()
    assert observed.size == int(obs["exposed"].sum())
    assert observed.sum() == int(obs["exposed_outcome_sum"].sum())
    rep = tree["posterior_predictive"]["outcome"].to_numpy()
    assert set(np.unique(rep)) <= {0, 1} and rep.shape[-1] == observed.size


def test_predictive_coverage_counts_memories_with_exposures(posterior: xr.DataTree) -> None:
    share, n = predictive_coverage(posterior)
    exposed = posterior["observed_data"]["exposed"].to_numpy()
    assert n == int((exposed > 0).sum())
    # recompute by hand for one memory with exposures
    q = (1 - CI_PROB) / 2, (1 + CI_PROB) / 2
    pp = posterior["posterior_predictive"]["exposed_outcome_sum"].to_numpy()
    y = posterior["observed_data"]["exposed_outcome_sum"].to_numpy()
    idx = np.flatnonzero(exposed > 0)
    inside = [np.quantile(pp[..., i], q[0]) <= y[i] <= np.quantile(pp[..., i], q[1]) for i in idx]
    assert share == pytest.approx(np.mean(inside))


def test_loo_not_computed_without_log_likelihood(posterior: xr.DataTree) -> None:
    sec = loo_section(posterior)
    assert "Not computed" in sec.html and "Not computed" in sec.markdown


def test_loo_compares_models_when_log_likelihoods_exist(posterior: xr.DataTree) -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(0, 1, 40)
    c, d = posterior["posterior"].sizes["chain"], posterior["posterior"].sizes["draw"]
    # "pooled" predicts y well (mean 0), "no_pooling" is off by 1: it must rank second
    mu = rng.normal(0, 0.05, (c, d, 1))
    ll = xr.Dataset(
        {
            "pooled": (("chain", "draw", "obs"), -0.5 * (y - mu) ** 2 - 0.919),
            "no_pooling": (("chain", "draw", "obs"), -0.5 * (y - mu - 1.0) ** 2 - 0.919),
        }
    )
    dt = posterior.copy()
    dt["log_likelihood"] = xr.DataTree(ll)
    sec = loo_section(dt)
    assert "Not computed" not in sec.html
    rows = [
        line
        for line in sec.markdown.splitlines()
        if line.startswith("| pooled") or line.startswith("| no_pooling")
    ]
    assert len(rows) == 4  # one loo row each, one compare row each
    assert sec.markdown.index(
        "| pooled", sec.markdown.index("elpd_diff") if "elpd_diff" in sec.markdown else 0
    ) < sec.markdown.rindex("| no_pooling")


def test_fmt_is_readable() -> None:
    assert fmt(1234567) == "1,234,567"
    assert fmt(0.123456) == "0.123"
    assert fmt(float("nan")) == "–"
    assert fmt(1e-17) == "0"
    assert fmt(True) == "yes"


def test_report_refuses_a_tree_without_posterior(tmp_path: Path) -> None:
    with pytest.raises(PosteriorError):
        report(xr.DataTree(), tmp_path / "r")


def _save(dt: xr.DataTree, path: Path) -> None:
    save_posterior(dt, path)


def test_cli_report_writes_both_files(cli_run: tuple[Path, int, str]) -> None:
    index, status, out = cli_run
    assert status == 0
    assert index.exists() and (index.parent / "summary.md").exists()
    assert str(index) in out


def test_cli_report_missing_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope.nc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.nc" in err


@pytest.mark.slow
def test_report_renders_in_headless_chromium(written: Path, tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "screenshot_report",
        Path(__file__).resolve().parents[1] / "benchmarks" / "screenshot_report.py",
    )
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    result = mod.render(written, tmp_path / "shot.png")
    assert result.console_errors == [], result.console_errors
    assert result.ok
    assert (tmp_path / "shot.png").stat().st_size > 50_000  # a rendered page, not a blank one


def test_cli_report_refuses_a_foreign_netcdf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "foreign.nc"
    xr.DataTree(xr.Dataset({"x": ("i", np.arange(3.0))})).to_netcdf(path, engine="h5netcdf")
    assert main(["report", str(path), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "foreign.nc" in err
    assert not (tmp_path / "r" / "index.html").exists()


def test_forest_on_a_per_query_posterior() -> None:
    """The per-query contract (tau over memory x query, plus tau_memory): the memory-level
    variable drives the forest plot."""
    dt = synthetic_posterior(per_query=True)
    sec = forest_section(dt, identification_frame(dt))
    assert "tau_memory" in sec.html and len(sec.images) == 1
    n = dt["posterior"].sizes["memory"]
    rows = [line for line in sec.markdown.splitlines() if line.startswith("| m0")]
    assert len(rows) == min(n, 2 * FOREST_EACH_END)


def test_ppc_for_fractional_outcomes_is_a_scatter_not_pava(posterior: xr.DataTree) -> None:
    dt = posterior.copy()
    dt.attrs["outcome_kind"] = "fractional"
    sec = ppc_section(dt)
    assert len(sec.images) == 1 and "fractional" in sec.lead
    assert "PAVA" not in sec.lead
    raw = base64.b64decode(sec.images[0].split(",", 1)[1])
    assert raw[:8] == PNG_SIGNATURE
