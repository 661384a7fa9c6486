"""Regenerate every number of reports/replication/README.md.

Usage (from the repository root; shared/data beside the clone, or pass --data):

    .venv/bin/python benchmarks/replication.py [--data ../shared/data] [--only NAME ...] [--dense]

Each job is one ``cmp-bayes replicate ...`` command (printed before it runs);
its JSON result goes to ``reports/replication/results/<job>.json`` and its
table to stdout. Results on real stores with the reader model are
semi-synthetic. Seeds are fixed (``--seed 0``) in every command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path("reports/replication/results")

#: job name -> arguments of `cmp-bayes replicate` ({data} is the data folder)
JOBS: dict[str, str] = {
    # positivity, BM25, every benchmark (B = 5, 10, 20)
    "pos_longmemeval_turn_bm25": "positivity --dataset longmemeval --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "pos_longmemeval_session_bm25": "positivity --dataset longmemeval --granularity session --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "pos_longmemeval_first60_bm25": "positivity --dataset longmemeval --limit 60 --sample first --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "pos_locomo_turn_bm25": "positivity --dataset locomo --data {data}/locomo/locomo10.json",
    "pos_locomo_session_bm25": "positivity --dataset locomo --granularity session --data {data}/locomo/locomo10.json",
    "pos_locomo_conv42_bm25": "positivity --dataset locomo --conversations conv-42 --data {data}/locomo/locomo10.json",
    "pos_hotpotqa_bm25": "positivity --dataset hotpotqa --slots 2 5 --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "pos_musique_bm25": "positivity --dataset musique --slots 2 5 10 --data {data}/musique/musique_ans_dev_sample200.jsonl",
    # the CMP experiment (semi-synthetic reader), B = 10, k = 2 unless the store is small
    "exp_longmemeval_bm25": "experiment --dataset longmemeval --limit 12 --draws 300 --tune 300 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_longmemeval_gain02_bm25": "experiment --dataset longmemeval --limit 12 --draws 300 --tune 300 --reader-gain 0.2 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_longmemeval30_gain02_bm25": "experiment --dataset longmemeval --limit 30 --draws 300 --tune 300 --reader-gain 0.2 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_longmemeval30_bm25": "experiment --dataset longmemeval --limit 30 --draws 300 --tune 300 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    # 60 questions stratified over the six question types (the loader's default sample), 500/500 draws
    "exp_longmemeval60_bm25": "experiment --dataset longmemeval --limit 60 --draws 500 --tune 500 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_longmemeval60_long_bm25": "experiment --dataset longmemeval --limit 60 --draws 1000 --tune 1000 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_longmemeval60_gain02_bm25": "experiment --dataset longmemeval --limit 60 --draws 500 --tune 500 --reader-gain 0.2 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_locomo_conv42_bm25": "experiment --dataset locomo --conversations conv-42 --draws 300 --tune 300 --data {data}/locomo/locomo10.json",
    "exp_locomo_conv42_best_bm25": "experiment --dataset locomo --conversations conv-42 --draws 300 --tune 300 --rank-summary best --data {data}/locomo/locomo10.json",
    "exp_locomo_conv42_perquery_bm25": "experiment --dataset locomo --conversations conv-42 --draws 300 --tune 300 --per-query-fit --data {data}/locomo/locomo10.json",
    "exp_locomo_bm25": "experiment --dataset locomo --draws 300 --tune 300 --data {data}/locomo/locomo10.json",
    "exp_locomo_best_bm25": "experiment --dataset locomo --draws 300 --tune 300 --rank-summary best --data {data}/locomo/locomo10.json",
    # a real reader (issue 18): SmolLM2-135M reads each step's context (extra `reader`), and the
    # same 40 stores with the semi-synthetic reader beside it
    "exp_hotpotqa40_llm_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --reader llm --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "exp_hotpotqa40_llm_binary_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --reader llm --reader-outcome binary --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "exp_hotpotqa40_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    # a real reader on a shared store (issue 18): a LoCoMo conversation's single-hop questions, window design
    "exp_locomo_conv30_single_llm_bm25": "experiment --dataset locomo --conversations conv-30 --categories 4 --slots 6 --exposure-slots 2 --assignment window --window 8 --pool-slots 1 --exposures 4 --draws 300 --tune 300 --reader llm --data {data}/locomo/locomo10.json",
    "exp_locomo_conv30_single_bm25": "experiment --dataset locomo --conversations conv-30 --categories 4 --slots 6 --exposure-slots 2 --assignment window --window 8 --pool-slots 1 --exposures 4 --draws 300 --tune 300 --data {data}/locomo/locomo10.json",
    # the measured reader (issue 18): SmolLM2's curve per benchmark from designed calls, then the
    # semi-synthetic runs with it in place of the hand-picked gain (run the cal_* jobs first)
    "cal_hotpotqa_llm": "calibrate-reader --dataset hotpotqa --limit 60 --calls 300 --slots 2 4 6 --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "cal_locomo_llm": "calibrate-reader --dataset locomo --conversations conv-26 conv-30 --categories 4 --calls 300 --slots 4 6 10 --data {data}/locomo/locomo10.json",
    "cal_longmemeval_llm": "calibrate-reader --dataset longmemeval --limit 30 --calls 200 --slots 4 6 10 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "exp_hotpotqa40_measured_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --reader measured --reader-curve " + str(OUT / "cal_hotpotqa_llm.json") + " --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    # the measured reader made deterministic (a repeated context repeats its outcome), to test whether that is what it misses
    "exp_hotpotqa40_measured_det_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --reader measured --deterministic-reader --reader-curve " + str(OUT / "cal_hotpotqa_llm.json") + " --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    # ... and with per-question evidence slopes (the same 300 calls, read from the cache), alone and deterministic
    "cal_hotpotqa_llm_slopes": "calibrate-reader --dataset hotpotqa --limit 60 --calls 300 --slots 2 4 6 --question-slopes --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "exp_hotpotqa40_measured_slopes_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --reader measured --reader-curve " + str(OUT / "cal_hotpotqa_llm_slopes.json") + " --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "exp_hotpotqa40_measured_slopes_det_bm25": "experiment --dataset hotpotqa --limit 40 --slots 4 --exposure-slots 1 --draws 300 --tune 300 --reader measured --deterministic-reader --reader-curve " + str(OUT / "cal_hotpotqa_llm_slopes.json") + " --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "exp_locomo_conv30_single_measured_bm25": "experiment --dataset locomo --conversations conv-30 --categories 4 --slots 6 --exposure-slots 2 --assignment window --window 8 --pool-slots 1 --exposures 4 --draws 300 --tune 300 --reader measured --reader-curve " + str(OUT / "cal_locomo_llm.json") + " --data {data}/locomo/locomo10.json",
    "exp_locomo_conv42_measured_bm25": "experiment --dataset locomo --conversations conv-42 --draws 300 --tune 300 --reader measured --reader-curve " + str(OUT / "cal_locomo_llm.json") + " --data {data}/locomo/locomo10.json",
    "exp_longmemeval30_measured_bm25": "experiment --dataset longmemeval --limit 30 --draws 300 --tune 300 --reader measured --reader-curve " + str(OUT / "cal_longmemeval_llm.json") + " --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    # conv-42 at gain 0.6 rerun by the code that adds the localization check (the round-3 file stays as quoted)
    "exp_locomo_conv42_rerun_bm25": "experiment --dataset locomo --conversations conv-42 --draws 300 --tune 300 --data {data}/locomo/locomo10.json",
    "exp_hotpotqa_bm25": "experiment --dataset hotpotqa --slots 4 --exposure-slots 1 --draws 300 --tune 300 --data {data}/hotpotqa/hotpot_dev_distractor_sample200.jsonl",
    "exp_musique_bm25": "experiment --dataset musique --slots 6 --exposure-slots 2 --draws 300 --tune 300 --data {data}/musique/musique_ans_dev_sample200.jsonl",
}
#: dense (MiniLM ONNX, the optional extra): slow on 2 cores (~30 texts/s), so small slices
DENSE_JOBS: dict[str, str] = {
    "pos_locomo_conv42_dense": "positivity --dataset locomo --conversations conv-42 --retriever dense --data {data}/locomo/locomo10.json",
    "pos_longmemeval_strat12_dense": "positivity --dataset longmemeval --limit 12 --retriever dense --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "pos_longmemeval_strat12_bm25": "positivity --dataset longmemeval --limit 12 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    # 5 questions, one per type except preference (stratified, seed 0): 2,504 turns, fits a 2-core budget
    "pos_longmemeval_strat5_dense": "positivity --dataset longmemeval --limit 5 --retriever dense --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
    "pos_longmemeval_strat5_bm25": "positivity --dataset longmemeval --limit 5 --data {data}/longmemeval/longmemeval_s_cleaned.jsonl.xz",
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--only", nargs="+", help="job names to run (default: all)")
    p.add_argument("--dense", action="store_true", help="also run the dense (MiniLM) jobs")
    p.add_argument(
        "--tables", action="store_true", help="print the Markdown tables of the results and exit"
    )
    args = p.parse_args()
    if args.tables:
        print_tables()
        return 0
    from cmp_bayes.cli.main import main as cli

    jobs = dict(JOBS)
    if args.dense:
        jobs.update(DENSE_JOBS)
    if args.only:
        jobs = {k: v for k, v in {**JOBS, **DENSE_JOBS}.items() if k in args.only}
    for name, cmd in jobs.items():
        argv = [
            "replicate",
            *shlex.split(cmd.format(data=args.data)),
            "--seed",
            "0",
            "-o",
            str(OUT / f"{name}.json"),
        ]
        print(f"\n### {name}\n$ cmp-bayes {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        rc = cli(argv)
        print(f"({name}: exit {rc}, {time.perf_counter() - t0:.0f} s)", flush=True)
        if rc:
            return rc
        record_provenance(OUT / f"{name}.json", argv, started)
    return 0


def record_provenance(path: Path, argv: list[str], started: str) -> None:
    """Add to a result JSON the commit, the state of the tree and the machine that produced it.

    Round 2's numbers could not be quoted because they ran on an uncommitted
    tree and nothing in their JSON said so; every result now carries it.
    """
    import json
    import os
    import platform
    import subprocess

    import cmp_bayes
    from cmp_bayes.atomic import write_text_atomic

    def git(*a: str) -> str:
        try:
            return subprocess.run(
                ["git", *a], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    d = json.loads(path.read_text())
    d["provenance"] = {
        "command": "cmp-bayes " + shlex.join(argv),
        "cmp_bayes_version": cmp_bayes.__version__,
        "package_path": str(Path(cmp_bayes.__file__).parent),
        "git_commit": git("rev-parse", "HEAD"),
        # Uncommitted changes to tracked files (results/ excluded: the job writes there).
        "git_dirty": git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!reports/replication/results",
        ),
        "started_utc": started,
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()),
    }
    write_text_atomic(path, json.dumps(d, indent=2) + "\n")


def _reader_cell(d: dict) -> str:
    """Which reader gave the outcomes: a text reader, the measured curve or the hand-picked gain."""
    if d.get("label") == "real-reader":
        return f"reader {d['reader']} ({d.get('reader_outcome')})"
    if d["config"].get("measured_reader"):
        return "measured reader"
    return f"reader gain {d['config']['reader_gain']}"


def print_tables() -> None:
    """Markdown rows of every experiment result under reports/replication/results/."""
    import json

    def f(x: object) -> str:
        return "n/a" if x is None else f"{float(x):.3f}"

    for path in sorted(OUT.glob("exp_*.json")):
        d = json.loads(path.read_text())
        log, rz = d["log"], d["store_randomization"]
        print(
            f"\n{path.stem}: {d['dataset']} ({d['granularity']}), B={d['config']['slots']}, k={d['config']['exposure_slots']}, "
            f"{_reader_cell(d)}; {log['steps']} steps, {log['memories']} memories, "
            f"{log['required_memories']} required ({log['required_status_counts']}); required never retrieved "
            f"{100 * log['required_unidentified_share']:.1f}%; fit {d['fit_health']}"
        )
        print("| method | level | AUC all [90% interval] | AUC identified | no estimate |")
        print("| --- | --- | --- | --- | --- |")
        for r in d["auc"]:
            print(
                f"| {r['method']} | {r['level']} | {f(r['auc'])} [{f(r['ci_low'])}, {f(r['ci_high'])}] | {f(r['auc_identified'])} | {r['n_nan']} |"
            )
        for x in d.get("auc_difference", []):
            print(
                f"paired AUC {x['method']} - {x['baseline']} ({x['subset']}, n={x['n']}, {x['n_required']} required): "
                f"{f(x['diff'])} [{f(x['ci_low'])}, {f(x['ci_high'])}], P(<= 0) = {f(x['p_le_0'])}"
            )
        prov = d.get("provenance")
        if prov:
            dirty = " (uncommitted changes!)" if prov["git_dirty"] else ""
            print(
                f"run at {prov['git_commit'][:7]}{dirty}, {prov['started_utc']} - {prov['finished_utc']}; "
                f"timings {', '.join(f'{k} {v:.0f} s' for k, v in d['timings_s'].items())}"
            )
        else:
            print("no provenance recorded (run before the script recorded it)")
        loc = d.get("localization") or {}
        if loc.get("auc"):
            print(f"localization ({loc['memories']} memories retrieved and exposed, {loc['required']} required): "
                  + ", ".join(f"{k} {f(v)}" for k, v in loc["auc"].items())
                  + "".join(f"; {x['method']} - logged {f(x['diff'])} [{f(x['ci_low'])}, {f(x['ci_high'])}]"
                            for x in loc["auc_difference"]))
        lifts = ", ".join(f"{k} {v:.3f}" for k, v in rz["lift_by_rule"].items())
        print(
            f"store randomization: unchanged {100 * rz['unchanged_share']:.1f}% of {rz['perturbations']}; lift {lifts}"
        )


if __name__ == "__main__":
    sys.exit(main())
