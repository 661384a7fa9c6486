"""The measured reader's curves beside the hand-picked ones: a figure and a Markdown table.

Usage (from the repository root, after the ``cal_*`` jobs of benchmarks/replication.py):

    .venv/bin/python benchmarks/reader_curves.py

Reads ``reports/replication/results/cal_*.json`` and writes
``reports/replication/reader_curves.png``; prints a Markdown table of the
coefficients and of the curve at each benchmark's context sizes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "reports" / "replication" / "results"
FIGURE = ROOT / "reports" / "replication" / "reader_curves.png"


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cmp_bayes.atomic import atomic_path

    files = sorted(RESULTS.glob("cal_*.json"))
    if not files:
        print(f"no cal_*.json under {RESULTS}: run the cal_* jobs of benchmarks/replication.py first", file=sys.stderr)
        return 2
    cals = [json.loads(f.read_text()) for f in files]
    fig, axes = plt.subplots(1, len(cals), figsize=(4.2 * len(cals), 3.6), sharey=True, squeeze=False)
    for ax, cal in zip(axes[0], cals, strict=True):
        c = cal["curve"]
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, b in enumerate(c["slots"]):
            rows = [p for p in c["curve"] if p["slots"] == b]
            x = [p["share"] for p in rows]
            ax.plot(x, [p["mean"] for p in rows], color=colours[i], label=f"measured, B = {b}")
            ax.fill_between(x, [p["low"] for p in rows], [p["high"] for p in rows], color=colours[i], alpha=0.2)
            emp = [e for e in c["empirical"] if e["slots"] == b]
            ax.scatter([e["share"] for e in emp], [e["mean_score"] for e in emp], color=colours[i],
                       s=[8 + 2 * e["calls"] for e in emp], alpha=0.6, edgecolor="none")
        for gain, style in ((0.6, "--"), (0.2, ":")):
            rows = [h for h in cal["hand_picked"] if h["gain"] == gain]
            ax.plot([h["share"] for h in rows], [h["mean"] for h in rows], "k", ls=style, lw=1,
                    label=f"hand-picked, gain {gain}")
        ax.set_title(f"{cal['dataset']} ({c['calls']} calls, {c['questions']} questions)", fontsize=10)
        ax.set_xlabel("share of the question's evidence in the context")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper left")  # each panel: the B of the panels differ
    axes[0][0].set_ylabel(f"mean score ({cals[0]['curve']['outcome']})")
    fig.suptitle(f"Measured reader ({cals[0]['reader']}): lines and 90% bands are the fit,\n"
                 "dots the raw means (size: calls); black: the hand-picked reader model", fontsize=10)
    fig.tight_layout()
    with atomic_path(FIGURE) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    print(f"wrote {FIGURE.relative_to(ROOT)}\n")
    print("| benchmark | calls (questions) | alpha | beta_share | beta_slots | beta_position | sigma_q | R-hat |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for cal in cals:
        c = cal["curve"]
        co = c["coefficients"]
        cells = " | ".join(f"{co[k]['mean']:.2f} [{co[k]['low']:.2f}, {co[k]['high']:.2f}]"
                           for k in ("alpha", "beta_share", "beta_slots", "beta_position", "sigma_q"))
        print(f"| {cal['dataset']} | {c['calls']} ({c['questions']}) | {cells} | {c['fit_health']['max_rhat']:.3f} |")
    print("\n| benchmark | B | share 0 | share 0.5 | share 1 | hand-picked 0 / 1 (gain 0.6) |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for cal in cals:
        c = cal["curve"]
        for b in c["slots"]:
            at = {p["share"]: p for p in c["curve"] if p["slots"] == b}
            cells = " | ".join(f"{at[s]['mean']:.2f} [{at[s]['low']:.2f}, {at[s]['high']:.2f}]" for s in (0.0, 0.5, 1.0))
            print(f"| {cal['dataset']} | {b} | {cells} | 0.20 / 0.80 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
