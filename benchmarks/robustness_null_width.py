"""Can the data tell the null's width? A fit-free check on the robustness study's DGPs (issue 15).

For each DGP and seed of benchmarks/robustness_dgp.py (the logs the study fits),
the prior is the oracle's (the true taus' histogram on the model's grid) with
its null part replaced by a Normal(mean of the true null taus, s) for several
widths s (0: a point at that mean). For each s this reports

* the marginal log-likelihood of the exposed memories (the model's truncated
  grid likelihood with its normaliser, as ``fit`` uses it), relative to the
  best s: how strongly the data prefer one width;
* the 90% intervals' coverage of the identified memories' true taus, and the
  realized loss of the Bayes rule at threshold 0.05 (costs 20:1): what the
  width does to the criteria of issue 15.

Everything else of the prior is the truth, so this isolates the null's width.

    .venv/bin/python benchmarks/robustness_null_width.py --seeds 1 2 3 --out reports/robustness/null_width.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))

from robustness import DGPS, _with_stores  # noqa: E402
from robustness_dgp import generate, read_truth  # noqa: E402
from robustness_grid import GridLikelihood, grid_posterior  # noqa: E402

#: null widths tried (outcome units); 0 is a point mass at the null's mean
WIDTHS: tuple[float, ...] = (0.0, 0.005, 0.01, 0.015, 0.02, 0.03)
THRESHOLD, FORGET_COST, RETAIN_COST = 0.05, 20.0, 1.0


def _prior(grid_edges: np.ndarray, null_tau: np.ndarray, other_tau: np.ndarray, width: float) -> np.ndarray:
    """Histogram of the non-null true taus plus a Normal(null mean, width) null, weighted by counts."""
    mids = (grid_edges[1:] + grid_edges[:-1]) / 2
    mu = float(null_tau.mean())
    if width == 0.0:
        null = np.zeros(mids.size)
        null[np.clip(np.searchsorted(grid_edges, mu) - 1, 0, mids.size - 1)] = 1.0
    else:
        null = np.diff(sps.norm.cdf(grid_edges, loc=mu, scale=width))
        null /= null.sum()
    other = np.histogram(np.clip(other_tau, -1, 1), bins=grid_edges)[0].astype(np.float64)
    n0, n1 = null_tau.size, other_tau.size
    f = n0 * null + other
    return f / (n0 + n1)


def one(name: str, seed: int, workdir: Path) -> list[dict]:
    import cmp_bayes
    from cmp_bayes.model.fit import memory_inputs

    logdir = workdir / f"{name}-{seed}"
    generate(_with_stores(DGPS[name], 10), seed, logdir)  # the study's size (--stores 10)
    log = cmp_bayes.read_log(logdir)
    truth = read_truth(logdir)
    stats, memory_group, _ = memory_inputs(log)
    ids = stats["memory"].to_numpy().astype(str)
    tr = truth.set_index("memory_id").loc[ids]
    tau, kind = tr["tau_true"].to_numpy(np.float64), tr["kind"].to_numpy().astype(str)
    gl = GridLikelihood.from_stats(stats, memory_group)
    ex = gl.exposed
    rows = []
    for w in WIDTHS:
        f = _prior(gl.grid.edges, tau[kind == "null"], tau[kind != "null"], w)
        # the model's marginal likelihood: the truncated prior renormalised per memory
        with np.errstate(divide="ignore"):
            ll = float((np.log(gl.lik[ex] @ f) - np.log(gl.feas[ex] @ f)).sum())
        gp = grid_posterior(gl, f)
        cover = float(((gp.lower[ex] <= tau[ex]) & (tau[ex] <= gp.upper[ex])).mean())
        p_useful = gp.p_above(THRESHOLD)
        forget = ex & (FORGET_COST * p_useful < RETAIN_COST * (1 - p_useful))
        useful = tau > THRESHOLD
        loss = FORGET_COST * float((forget & useful).sum()) + RETAIN_COST * float((~forget & ~useful).sum())
        rows.append({"dgp": name, "seed": seed, "width": w, "loglik": ll, "coverage": cover, "loss": loss,
                     "true_null_sd": float(tau[kind == "null"].std())})
    best = max(r["loglik"] for r in rows)
    for r in rows:
        r["llr"] = r["loglik"] - best
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dgps", nargs="+", default=list(DGPS), choices=list(DGPS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dgps:
            for seed in args.seeds:
                rows += one(name, seed, Path(tmp))
    head = " | ".join(f"s = {w:g}" for w in WIDTHS)
    lines = [
        "# The null's width: what the data say, and what it does to the criteria",
        "",
        f"`benchmarks/robustness_null_width.py --seeds {' '.join(map(str, args.seeds))}`: the oracle prior of the "
        "robustness study (the true taus' histogram on the model's grid) with its null part replaced by "
        "Normal(true null mean, s); no fit. Per DGP, mean over seeds of: the exposed memories' marginal "
        "log-likelihood relative to the best width (nats; the model's truncated likelihood with its "
        "normaliser), the 90% intervals' coverage of the exposed memories' true taus, and the Bayes rule's "
        f"realized loss at threshold {THRESHOLD} (costs {FORGET_COST:g}:{RETAIN_COST:g}).",
        "",
        f"| DGP | true null sd | quantity | {head} |",
        "| --- | ---: | --- | " + " | ".join("---:" for _ in WIDTHS) + " |",
    ]
    for name in args.dgps:
        rs = [r for r in rows if r["dgp"] == name]
        sd = np.mean([r["true_null_sd"] for r in rs])
        for q, fmt in (("llr", "{:.1f}"), ("coverage", "{:.3f}"), ("loss", "{:.0f}")):
            cells = [fmt.format(np.mean([r[q] for r in rs if r["width"] == w])) for w in WIDTHS]
            label = {"llr": "log-lik. vs best", "coverage": "coverage", "loss": "loss at 0.05"}[q]
            lines.append(f"| {name} | {sd:.4f} | {label} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from cmp_bayes.atomic import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
