"""The README's figure: which memories help, how sure we are, and what decide does with each.

Usage::

    .venv/bin/python benchmarks/readme_figure.py [--posterior models/demo.nc] \
        [--out docs/images/readme-figure.png]

The report's forest plot (:func:`cmp_bayes.reporting.plots.forest_figure`) of the
bundled example: the 7 most useful memories kept, 7 deferred ones and the 7 most
harmful forgets, in order of posterior mean of tau, their 50% and 90% intervals, the zero line and the
decision threshold, retrieved-only and unidentified memories drawn hollow, and
beside each row the action ``decide`` takes under the default costs. The
posterior is ``--posterior`` when that file exists (``cmp-bayes demo`` writes
``models/demo.nc``), else the bundled example is fitted first (about a minute on
two cores, the demo's sampler settings and seed 0).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

DEFAULT_POSTERIOR = Path("models/demo.nc")
DEFAULT_OUT = Path("docs/images/readme-figure.png")
#: Memories shown per action (retain, defer, forget).
PER_ACTION = 7
_ACTION_COLORS = {"retain": "#1b7837", "forget": "#a40e26", "defer": "#0969da"}


def _posterior(path: Path):  # noqa: ANN202 - an xarray.DataTree
    from cmp_bayes.posterior.io import load_posterior

    if path.is_file():
        return load_posterior(path)
    from cmp_bayes.data import example_log_path
    from cmp_bayes.log.read import read_log
    from cmp_bayes.reporting.pipeline import fit_stage

    print(f"{path} not found: fitting the bundled example")
    return fit_stage(read_log(example_log_path()), progressbar=False)


def make_figure(posterior):  # noqa: ANN001, ANN201 - a DataTree in, a matplotlib Figure out
    """The forest of the most useful and most harmful memories, each row's action beside it."""
    from matplotlib.transforms import blended_transform_factory

    from cmp_bayes.decision.rule import DecisionWarning, decide
    from cmp_bayes.reporting import plots
    from cmp_bayes.reporting.blocks import identification_frame, tau_summary

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionWarning)
        decisions = decide(posterior)
    ident = identification_frame(posterior)
    status = dict(zip(ident["memory_id"], ident["status"], strict=True))
    ranked = tau_summary(posterior).sort_values("tau_mean", ascending=False, kind="stable")
    action = decisions.table.set_index("memory_id")["action"].astype(str)
    ranked["action"] = ranked["memory_id"].map(action)
    # every action in the picture: the most useful retains, the deferred memories the design
    # cannot judge yet, the most harmful forgets; drawn in tau order
    picks = set(ranked[ranked["action"] == "retain"]["memory_id"].head(PER_ACTION))
    picks |= set(ranked[ranked["action"] == "defer"]["memory_id"].head(PER_ACTION))
    picks |= set(ranked[ranked["action"] == "forget"]["memory_id"].tail(PER_ACTION))
    chosen = [m for m in ranked["memory_id"] if m in picks]
    var = "tau_memory" if "tau_memory" in posterior["posterior"] else "tau"
    fig = plots.forest_figure(
        posterior, var, chosen, status=status, threshold=decisions.costs.threshold
    )
    ax = fig.axes[0]
    # the first memory is drawn at the top: row y = n - 1 - i
    where = blended_transform_factory(ax.transAxes, ax.transData)
    n = len(chosen)
    for i, mem in enumerate(chosen):
        act = action.get(mem, "")
        ax.text(1.01, n - 1 - i, act, transform=where, va="center", fontsize=8.5,
                color=_ACTION_COLORS.get(act, "black"), fontweight="bold")
    ax.text(1.01, n - 0.3, "decide", transform=where, fontsize=8.5, color="#57606a")
    c = decisions.counts()
    ax.set_title(
        f"Bundled example, {len(decisions)} memories: {c['forget']} forget, {c['defer']} defer "
        f"(expose first), {c['retain']} retain\n" + ax.get_title(),
        fontsize=10,
    )
    return fig


def main(argv: list[str] | None = None) -> int:
    """Write the figure; print where it went."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--posterior", type=Path, default=DEFAULT_POSTERIOR)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = make_figure(_posterior(args.posterior))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"{args.out}: {args.out.stat().st_size / 1e3:,.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
