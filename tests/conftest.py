"""Shared test configuration: the --run-slow switch and small shared fixtures."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def mock_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling replaced by ``pymc.testing.mock_sample`` (prior draws stand in for the
    posterior), for tests where a posterior-shaped object, not a real posterior, is the point.

    Patches ``cmp_bayes.model.sampling.sample_hyper`` (what ``fit`` calls for every
    sampler: nutpie is called directly, not through ``pm.sample``) and ``pm.sample``;
    ``sample_stats`` gets an all-False ``diverging``.
    """
    import warnings
    from functools import partial

    import numpy as np
    import pymc as pm
    from pymc.testing import mock_sample as pm_mock_sample

    from cmp_bayes.model import sampling

    mock = partial(
        pm_mock_sample, sample_stats={"diverging": lambda size: np.zeros(size, dtype=bool)}
    )

    def sample_hyper(model: pm.Model, cfg: sampling.SamplerConfig):  # noqa: ANN202 - as sampling's
        with warnings.catch_warnings():
            # prior draws ignore the likelihood Potential: that is the mock's point
            warnings.filterwarnings("ignore", message="The effect of Potentials")
            tree = mock(model=model, draws=cfg.draws, chains=cfg.chains, random_seed=cfg.seed)
        return sampling._groups(tree)

    monkeypatch.setattr(pm, "sample", mock)
    monkeypatch.setattr(sampling, "sample_hyper", sample_hyper)


@pytest.fixture
def no_trace_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's trace and rank figures left out (an empty ``trace-rank`` section).

    They are 3-4 s of a 4-5 s report and hold nothing but the figures; for tests whose
    point is another section (a verdict, a forest line, memory texts). The report tests
    (tests/test_report.py, tests/test_report_robust.py) draw them.
    """
    from cmp_bayes.reporting import sections
    from cmp_bayes.reporting.blocks import Section

    def empty(posterior: object, hyper: list[str]) -> Section:
        return Section("trace-rank", "Trace and rank plots", "", "", "")

    monkeypatch.setattr(sections, "trace_rank_section", empty)
