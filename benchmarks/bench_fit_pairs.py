"""Time and peak memory of ``fit(log, by="query")`` on a shared-store log (issue 16, Done-when 5).

The target: all ten LoCoMo conversations under a window design, fitted by
query, in under 5 minutes on 2 cores with under 4 GiB of memory. The log is
the one ``replicate experiment`` writes (``--log-out``): BM25 over each
conversation's turns, W = 20, j = 1, today's exposure slots (k = 2 of B = 10,
6 exposures per pool memory). Build it once:

    .venv/bin/cmp-bayes replicate experiment --dataset locomo \\
        --data ../shared/data/locomo/locomo10.json --assignment window --window 20 \\
        --pool-slots 1 --no-fit --log-out /tmp/locomo10_window -q

then time each pair model, each fit in a fresh Python process of its own, so
that the peak resident memory (``ru_maxrss``) is that fit's alone, reading the
log included:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_fit_pairs.py /tmp/locomo10_window

Prints the table (``--out FILE`` also writes it); reports/benchmarks/fit_pairs.md quotes its
rows beside hand-written notes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    t0 = time.perf_counter()
    from cmp_bayes.log.read import read_log
    from cmp_bayes.model.config import ModelConfig
    from cmp_bayes.model.fit import fit
    from cmp_bayes.posterior.io import save_posterior
    path, pair_model, draws, tune, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    attempts = int(sys.argv[6])
    monotone = sys.argv[7] == "1"
    log = read_log(path)
    t_read = time.perf_counter() - t0
    t1 = time.perf_counter()
    tree = fit(log, by="query", model=ModelConfig(pair_model=pair_model, rank_summary="best", gate_rank_monotone=monotone),
               draws=draws, tune=tune, chains=2, seed=0, progressbar=False, max_attempts=attempts)
    t_fit = time.perf_counter() - t1
    save_posterior(tree, out)
    from cmp_bayes.posterior.health import sampler_health
    health = sampler_health(tree, advisory=False)
    post = tree["posterior"]
    pairs = int(post.sizes.get("pair", 0)) or int(post.sizes.get("memory", 0) * post.sizes.get("query", 0))
    print(json.dumps({
        "read_s": t_read, "fit_s": t_fit, "total_s": time.perf_counter() - t0,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "memories": int(post.sizes["memory"]), "pairs": pairs,
        "steps": int(log.n_steps), "divergences": int(tree["sample_stats"]["diverging"].values.sum()),
        "attempts": int(tree.attrs.get("fit_attempt_kept", 1)),
        "health_ok": bool(health.ok), "max_rhat": health.max_rhat,
    }))
    """
)


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", type=Path, help="the log (a directory replicate experiment --log-out wrote)")
    ap.add_argument("--pair-models", nargs="+", default=["gated", "normal"], choices=["gated", "normal"])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--max-attempts", type=int, default=3, help="fit's retry schedule (default 3, fit's own)")
    ap.add_argument("--gate-rank-monotone", action=argparse.BooleanOptionalAction, default=True,
                    help="ModelConfig.gate_rank_monotone (default True, the package's)")
    ap.add_argument("--out", type=Path, default=None,
                    help="also write the table here (reports/benchmarks/fit_pairs.md is a hand-kept page that "
                         "quotes these rows with its notes: copy rows into it rather than overwrite it)")
    ap.add_argument("--posterior-dir", type=Path, default=Path("/tmp"))
    args = ap.parse_args()
    from cmp_bayes.atomic import write_text_atomic

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    rows = []
    for pm in args.pair_models:
        before = _load()
        out = args.posterior_dir / f"fit_pairs_{pm}.nc"
        res = subprocess.run([sys.executable, "-c", CHILD, str(args.log), pm, str(args.draws), str(args.tune), str(out),
                              str(args.max_attempts), "1" if args.gate_rank_monotone else "0"],
                             capture_output=True, text=True, env=env, check=False)
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"fit with pair_model={pm} failed (exit {res.returncode})")
        row = json.loads(res.stdout.strip().splitlines()[-1]) | {"pair_model": pm, "load_before": before,
                                                                  "load_after": _load()}
        rows.append(row)
        print(row, flush=True)
    lines = [
        "# fit(log, by=\"query\") on a shared-store log: time and peak memory",
        "",
        f"`benchmarks/bench_fit_pairs.py {args.log.name} --draws {args.draws} --tune {args.tune} "
        f"--max-attempts {args.max_attempts}{' --gate-rank-monotone' if args.gate_rank_monotone else ' --no-gate-rank-monotone'}`: "
        "each fit in a fresh process (reading the log, fitting, recovery; saving the posterior "
        "not counted in fit s), 2 chains, nutpie, `rank_summary=\"best\"`. "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.",
        "",
        "Target (issue 16): all ten LoCoMo conversations, under 5 minutes on 2 cores, under 4 GiB.",
        "",
        "| pair model | draws + tune | steps | memories | pairs | read s | fit s | peak RSS GiB | divergences | max R-hat | checks | attempt kept | load before / after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['pair_model']} | {args.draws} + {args.tune} | {r['steps']} | {r['memories']} | {r['pairs']} | {r['read_s']:.1f} "
            f"| {r['fit_s']:.1f} | {r['peak_rss_gib']:.2f} | {r['divergences']} "
            f"| {r['max_rhat'] if r['max_rhat'] is None else format(r['max_rhat'], '.3f')} "
            f"| {'pass' if r['health_ok'] else 'fail'} | {r['attempts']} "
            f"| {r['load_before']} / {r['load_after']} |"
        )
    if args.out is not None:
        write_text_atomic(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
