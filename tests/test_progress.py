"""Progress bars (cmp_bayes.progress) and --quiet: drawn on a terminal, silent otherwise."""

from __future__ import annotations

import argparse
import io
import json
import re
import time

import numpy as np
import pytest
from _replication_fixtures import HOTPOTQA, need
from rich.console import Console

from cmp_bayes import progress as pg
from cmp_bayes.cli.main import build_parser, main
from cmp_bayes.progress import Progress, quiet_mode, track

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=160), buf


def _text(buf: io.StringIO) -> str:
    return ANSI.sub("", buf.getvalue())


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch):
    # rich treats these as "stderr is a terminal": a developer's shell must not change the tests
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)


@pytest.fixture
def forced_stderr(monkeypatch) -> io.StringIO:
    """Make the bars' default console a terminal writing into a buffer (stderr stays captured)."""
    console, buf = _terminal()
    monkeypatch.setattr(pg, "stderr_is_terminal", lambda: True)
    monkeypatch.setattr(pg, "_default_console", lambda: console)
    return buf


def test_a_terminal_bar_shows_count_rate_and_time_left_and_completes() -> None:
    console, buf = _terminal()
    seen = list(track(range(12), "work", unit="draws", console=console))
    assert seen == list(range(12))
    out = _text(buf)
    assert "work" in out and "12/12" in out  # reached completion
    assert re.search(r"[\d,.]+ draws/s", out)  # the rate column
    assert "0:00:00 left" in out  # the time-left column, at completion
    # while it ran, the time left was a real estimate or the unknown mark, never missing
    assert re.search(r"\d+/12 .*(\d:\d\d:\d\d|-:--:--) left", out)


def test_rate_and_time_left_are_averages_over_the_run() -> None:
    from types import SimpleNamespace

    def task(completed: float, elapsed: float | None, total: float | None = 10) -> SimpleNamespace:
        return SimpleNamespace(completed=completed, elapsed=elapsed, total=total,
                               finished=total is not None and completed >= total, fields={"unit": "stores"})

    # slow work (a store's fit) reads as seconds per unit; 2 of 10 in 10 s leaves 40 s
    assert pg._rate_text(task(2, 10.0)) == "5.0 s/store"
    assert pg._left_text(task(2, 10.0)) == "0:00:40 left"
    assert pg._rate_text(task(300, 2.0)) == "150.0 stores/s"
    assert pg._left_text(task(2, 7200.0)) == "8:00:00 left"
    # nothing done yet: unknown, not a made-up number; no total: no time left at all
    assert pg._rate_text(task(0, 3.0)) == "? stores/s" and pg._left_text(task(0, 3.0)) == "-:--:-- left"
    assert pg._left_text(task(4, 3.0, total=None)) == ""
    assert pg._left_text(task(10, 3.0)) == "0:00:00 left"


def test_quiet_and_a_non_terminal_stderr_write_nothing(capfd) -> None:
    console, buf = _terminal()
    # quiet, explicitly: not even a forced terminal draws
    assert list(track(range(5), "work", console=console, quiet=True)) == list(range(5))
    # quiet from the process-wide setting (--quiet)
    with quiet_mode(True):
        assert not Progress(console=console).enabled
        with Progress(console=console).bar("work", total=3) as bar:
            bar.advance(3)
    assert not pg.is_quiet()  # restored after the block
    assert buf.getvalue() == ""
    # stderr is captured here (a pipe, not a terminal): bars on the default console are silent
    assert not Progress().enabled
    for _ in track(range(5), "work"):
        pass
    with Progress().bar("work", total=None) as bar:
        bar.advance()
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_a_delayed_bar_draws_only_when_the_work_outlasts_the_delay() -> None:
    console, buf = _terminal()
    with Progress(console=console, delay=5.0).bar("quick", total=3) as bar:
        bar.advance(3)
    assert buf.getvalue() == ""
    with Progress(console=console, delay=0.2).bar("slow", total=2) as bar:
        time.sleep(0.5)
        bar.advance(2)
    assert "2/2" in _text(buf) and "slow" in _text(buf)


def test_a_bar_opened_inside_another_joins_its_display() -> None:
    console, buf = _terminal()
    outer = Progress(console=console)
    with outer.bar("outer", total=2, unit="stages") as a:
        a.advance()
        # a second live display on the same console would raise rich's LiveError
        for _ in Progress(console=console).track(range(4), "inner", unit="items"):
            pass
        a.advance()
    out = _text(buf)
    assert "2/2" in out and "4/4" in out and "items/s" in out


def test_advance_from_many_threads_counts_every_step() -> None:
    from concurrent.futures import ThreadPoolExecutor

    console, buf = _terminal()
    with Progress(console=console).bar("draws", total=400, unit="draws") as bar, ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: bar.advance(), range(400)))
    assert "400/400" in _text(buf)


def test_the_sampler_bar_is_off_when_stderr_is_not_a_terminal_or_quiet(monkeypatch) -> None:
    assert not pg.sampler_progress(True)  # captured stderr
    assert not pg.sampler_progress(False)
    monkeypatch.setattr(pg, "stderr_is_terminal", lambda: True)
    assert pg.sampler_progress(True) and not pg.sampler_progress(False)
    with quiet_mode(True):
        assert not pg.sampler_progress(True)


def test_recovery_bar_counts_the_draws(forced_stderr, monkeypatch) -> None:
    from cmp_bayes.model import recover as rc
    from cmp_bayes.model.build import model_data
    from cmp_bayes.model.config import ModelConfig
    from cmp_bayes.testing.stats import synthetic_stats

    monkeypatch.setattr(rc, "RECOVERY_BAR_DELAY", 0.0)
    stats, _ = synthetic_stats(40, seed=1)
    data = model_data(stats, ModelConfig(), None)
    # nine hyperparameter draws: small positive values are valid for every parameter
    hyper = {n: np.full((9, *s), 0.1) for n, s in rc.hyper_shapes(data).items()}
    plain = rc.recover(data, hyper, np.random.default_rng(0))
    assert forced_stderr.getvalue() == ""  # progress=False: no bar
    shown = rc.recover(data, hyper, np.random.default_rng(0), progress=True)
    out = _text(forced_stderr)
    assert "recovering tau, rho" in out and "9/9" in out and "draws/s" in out
    np.testing.assert_array_equal(plain.tau, shown.tau)  # the bar changes nothing


def test_dask_statistics_bar_counts_tasks(tmp_path) -> None:
    import xarray as xr
    from _scale_fixtures import partitioned_log

    from cmp_bayes.scale.dask_stats import dask_exposure_stats

    root = partitioned_log(tmp_path, n_parts=3)
    console, buf = _terminal()
    shown = dask_exposure_stats(root, scheduler="synchronous", progress=Progress(console=console))
    out = _text(buf)
    m = re.search(r"statistics \(3 \+ 3 parts\).* (\d+)/(\d+) .*tasks/s.*0:00:00 left", out)
    assert m is not None and m.group(1) == m.group(2) and int(m.group(2)) >= 6  # maps + reduces
    xr.testing.assert_identical(shown, dask_exposure_stats(root, scheduler="synchronous"))


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaf_parsers(child, (*path, name))


def test_every_verb_accepts_quiet() -> None:
    leaves = dict(_leaf_parsers(build_parser()))
    verbs = {p[0] for p in leaves}
    assert {"simulate", "fit", "decide", "report", "demo", "replicate"} <= verbs
    assert ("replicate", "experiment") in leaves and ("replicate", "positivity") in leaves
    for path, parser in leaves.items():
        flags = {s for a in parser._actions for s in a.option_strings}
        assert {"--quiet", "-q"} <= flags, path
    # given after the verb, before it, or not at all
    parser = build_parser()
    assert parser.parse_args(["demo", "--quiet"]).quiet is True
    assert parser.parse_args(["--quiet", "demo"]).quiet is True
    assert parser.parse_args(["-q", "replicate", "positivity", "--dataset", "hotpotqa"]).quiet is True
    assert parser.parse_args(["demo"]).quiet is False


def _experiment(tmp_path, *extra: str) -> list[str]:
    return ["replicate", "experiment", "--dataset", "hotpotqa", "--data", str(need(HOTPOTQA)), "--limit", "3",
            "--slots", "4", "--exposure-slots", "1", "--no-fit", "--json", *extra]


def test_replicate_experiment_shows_progress_in_a_terminal_and_none_under_quiet(
    tmp_path, capsys, forced_stderr
) -> None:
    assert main(_experiment(tmp_path, "--quiet")) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and forced_stderr.getvalue() == ""
    assert json.loads(quiet.out)["log"]["steps"] == 3 * 42
    assert not pg.is_quiet()  # the verb's setting ends with the verb

    assert main(_experiment(tmp_path)) == 0
    loud = capsys.readouterr()
    out = _text(forced_stderr)
    assert "ranking stores" in out and "store randomization" in out and "3/3" in out
    assert "left" in out and "stores/s" in out
    # stdout is the result alone, bars or not
    assert json.loads(loud.out)["log"] == json.loads(quiet.out)["log"]


def test_replicate_experiment_writes_nothing_on_a_redirected_stderr(tmp_path, capfd) -> None:
    assert main(_experiment(tmp_path)) == 0
    captured = capfd.readouterr()
    assert captured.err == ""
    assert json.loads(captured.out)["label"] == "semi-synthetic"


def test_quiet_drops_the_informational_stderr_line(tmp_path, capsys) -> None:
    log = tmp_path / "log"
    assert main(["simulate", str(log), "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out  # the verb's result on stdout stays
    out = tmp_path / "diag.csv"
    assert main(["diagnose", str(log), "--json", "-o", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert captured.err == "" and out.is_file()
    assert main(["diagnose", str(log), "--json", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().err  # without --quiet the line is still there


def test_library_chatter_is_muted_when_stderr_is_not_a_terminal(tmp_path, capfd, monkeypatch) -> None:
    import logging

    import cmp_bayes.cli.simulate as verb

    pymc_log = logging.getLogger("pymc")
    seen: list[tuple[bool, bool]] = []

    def fake_run(args: argparse.Namespace) -> int:
        pymc_log.setLevel(logging.INFO)  # what importing PyMC inside a verb does
        pymc_log.info("Sampling: [a, b]")
        seen.append((pymc_log.isEnabledFor(logging.INFO), pymc_log.isEnabledFor(logging.WARNING)))
        return 0

    level = pymc_log.level
    monkeypatch.setattr(verb, "run", fake_run)
    try:
        assert main(["simulate", str(tmp_path / "x")]) == 0
    finally:
        pymc_log.setLevel(level)
    assert seen == [(False, True)]  # INFO chatter muted, warnings pass
    assert logging.root.manager.disable == logging.NOTSET  # restored after the verb
    assert "Sampling" not in capfd.readouterr().err


def test_the_samplers_own_bar_follows_the_terminal_and_quiet(monkeypatch) -> None:
    from cmp_bayes.model import sampling
    from cmp_bayes.model.config import SamplerConfig

    seen: list[bool] = []
    monkeypatch.setattr(sampling, "_nutpie", lambda model, cfg: seen.append(cfg.progressbar))
    asked = SamplerConfig(progressbar=True)
    sampling.sample_hyper(None, asked)  # stderr captured: no bar although the config asks
    monkeypatch.setattr(pg, "stderr_is_terminal", lambda: True)
    sampling.sample_hyper(None, asked)
    sampling.sample_hyper(None, SamplerConfig(progressbar=False))
    with quiet_mode(True):
        sampling.sample_hyper(None, asked)
    assert seen == [False, True, False, False]
    assert asked.progressbar is True  # the config (and the posterior's record of it) is left alone
