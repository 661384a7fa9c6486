"""Input checks and the CLI's error lines: bad costs are refused naming the field, a bug is
one line with exit 1 (a traceback only when asked), bad input one line with exit 2."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from cmp_bayes.cli.main import DEBUG_ENV, main
from cmp_bayes.decision.costs import ESTIMAND_RANGE, Costs
from cmp_bayes.errors import ConfigError
from cmp_bayes.posterior.io import save_posterior
from cmp_bayes.testing import synthetic_posterior


@pytest.fixture(scope="module")
def posterior_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("post") / "post.nc"
    return save_posterior(synthetic_posterior(n_memories=10, draws=40, seed=2), path)


# --------------------------------------------------------------------------- Costs


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("threshold", 2.0, "(-1, 1)"),
        ("threshold", 1.0, "(-1, 1)"),
        ("threshold", -1.0, "(-1, 1)"),
        ("threshold", math.inf, "finite"),
        ("threshold", "0.05", "number"),
        ("forget_cost", math.nan, "finite"),
        ("retain_cost", 0, "> 0"),
        ("retain_cost", -2.0, "> 0"),
        ("forget_cost", None, "number"),
        ("capacity", True, "integer"),
        ("capacity", -3, ">= 0"),
        ("min_exposures", 0, ">= 1"),
        ("min_exposures", 1.5, "integer"),
        ("min_mean_shift", math.inf, "finite"),
        ("min_mean_shift", -1.0, ">= 0"),
        ("max_rhat", 0.5, ">= 1"),
        ("max_rhat", math.nan, "finite"),
        ("max_divergence_share", -0.01, "[0, 1]"),
        ("max_divergence_share", 1.01, "[0, 1]"),
        ("estimand", "rho", "tau, utility"),
    ],
)
def test_each_bad_field_is_refused_naming_field_value_and_range(
    field: str, value: object, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Costs(**{field: value})
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"costs: {field} must")
    assert allowed in msg and repr(value) in msg


@pytest.mark.parametrize("estimand", sorted(ESTIMAND_RANGE))
def test_threshold_range_holds_for_each_estimand(estimand: str) -> None:
    low, high = ESTIMAND_RANGE[estimand]
    assert (low, high) == (-1.0, 1.0)
    Costs(estimand=estimand, threshold=high - 1e-9)
    Costs(estimand=estimand, threshold=low + 1e-9)
    with pytest.raises(ConfigError, match=rf"threshold must lie in .*{estimand}"):
        Costs(estimand=estimand, threshold=high)


def test_edges_that_are_allowed_stay_allowed() -> None:
    c = Costs(capacity=0, min_exposures=1, max_rhat=1, max_divergence_share=1, min_mean_shift=0)
    assert c.max_rhat == 1.0 and isinstance(c.max_rhat, float)
    assert Costs(threshold=0, forget_cost=3).threshold == 0.0


def test_bad_value_in_a_toml_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "costs.toml"
    bad.write_text("threshold = 1.5\n")
    with pytest.raises(ConfigError, match=r"costs\.toml: threshold must lie in \(-1, 1\)"):
        Costs.from_toml(bad)


# --------------------------------------------------------------------------- CLI lines


def _one_line_exit(
    capsys: pytest.CaptureFixture[str], argv: list[str], status: int
) -> str:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_cli_decide_threshold_out_of_range_is_one_line_exit_2(
    posterior_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line_exit(capsys, ["decide", str(posterior_file), "--threshold", "2"], 2)
    assert err.startswith("cmp-bayes decide: error:") and "threshold" in err and "2.0" in err


def test_cli_decide_bad_costs_file_is_one_line_exit_2(
    posterior_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = tmp_path / "costs.toml"
    costs.write_text("[costs]\nmax_divergence_share = 3\n")
    err = _one_line_exit(capsys, ["decide", str(posterior_file), "--costs", str(costs)], 2)
    assert "costs.toml [costs]: max_divergence_share" in err and "[0, 1]" in err


def test_cli_report_bad_costs_file_is_one_line_exit_2(
    posterior_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    costs = tmp_path / "costs.toml"
    costs.write_text("retain_cost = -1\n")
    err = _one_line_exit(
        capsys, ["report", str(posterior_file), "--costs", str(costs), "-o", str(tmp_path / "r")], 2
    )
    assert "retain_cost must be > 0" in err
    assert not (tmp_path / "r").exists()


def _boom(args: argparse.Namespace) -> int:
    raise RuntimeError("the plot\nbroke")


def test_cli_unexpected_error_is_one_line_exit_1(
    posterior_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    monkeypatch.setattr("cmp_bayes.cli.report.run", _boom)
    err = _one_line_exit(capsys, ["report", str(posterior_file), "-o", str(tmp_path / "r")], 1)
    assert err.startswith("cmp-bayes report: internal error: RuntimeError: the plot broke")
    assert f"{DEBUG_ENV}=1" in err


@pytest.mark.parametrize("value", ["1", "yes"])
def test_cli_debug_env_reraises_with_the_traceback(
    posterior_file: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(DEBUG_ENV, value)
    monkeypatch.setattr("cmp_bayes.cli.report.run", _boom)
    with pytest.raises(RuntimeError, match="the plot"):
        main(["report", str(posterior_file)])


def test_cli_debug_env_zero_keeps_the_one_line(
    posterior_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DEBUG_ENV, "0")
    monkeypatch.setattr("cmp_bayes.cli.report.run", _boom)
    _one_line_exit(capsys, ["report", str(posterior_file)], 1)


def test_cli_user_errors_keep_exit_2_under_debug(
    posterior_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # CMP_BAYES_DEBUG is for bugs; bad input stays one line and exit 2
    monkeypatch.setenv(DEBUG_ENV, "1")
    _one_line_exit(capsys, ["decide", str(posterior_file), "--threshold", "-3"], 2)


def test_output_folder_that_is_a_file_is_one_line_exit_2(
    posterior_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # decide -o X.csv, then report -o X.csv: the report's folder is a file. The user's
    # to fix (exit 2, naming the file), not an internal error; the file is left alone.
    blocker = tmp_path / "decisions.csv"
    blocker.write_text("memory_id,action\n")
    assert main(["report", str(posterior_file), "-o", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a folder" in err and str(blocker) in err
    assert blocker.read_text() == "memory_id,action\n"
    from cmp_bayes.atomic import write_text_atomic

    with pytest.raises(ConfigError, match="decisions.csv is a file, not a folder"):
        write_text_atomic(blocker / "deeper" / "x.txt", "x")
