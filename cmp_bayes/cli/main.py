"""Entry point of the ``cmp-bayes`` command.

Each verb lives in its own module ``cmp_bayes.cli.<verb>`` exposing
``add_arguments(parser)`` and ``run(args) -> int``; a verb's module (and the
heavy libraries it needs) is imported only when that verb runs, so ``--help``
stays fast.

Conventions every verb follows: a user error (:class:`CmpBayesError`, a bad
option, a missing file) prints exactly one line on stderr and exits 2, never a
traceback; any other exception is a bug and prints one line too (verb,
exception type and message) and exits 1, unless ``CMP_BAYES_DEBUG=1`` asks for
the traceback; outputs are written atomically.

Every verb takes ``--quiet`` (``-q``; also accepted before the verb): no
progress bars and no informational lines on stderr; what the verb prints on
stdout (its results) is unchanged. Without it, progress bars draw only when
stderr is a terminal (:mod:`cmp_bayes.progress`), and the libraries'
informational log lines (PyMC's "Sampling: [...]") reach stderr only then,
so a redirected stderr holds warnings and errors alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from cmp_bayes.errors import CmpBayesError

#: Environment variable that lets an unexpected error raise with its traceback.
DEBUG_ENV: str = "CMP_BAYES_DEBUG"

#: verb -> (module, one-line help). Order is the pipeline's order.
VERBS: dict[str, tuple[str, str]] = {
    "simulate": ("cmp_bayes.cli.simulate", "simulate a memory system under CMP and write its log"),
    "diagnose": ("cmp_bayes.cli.diagnose", "check retrieval positivity: which memories are identified"),
    "estimate": ("cmp_bayes.cli.estimate", "frequentist estimates (Hajek, IPW, logged baselines) to CSV"),
    "evaluate": ("cmp_bayes.cli.evaluate", "AUC of required vs non-required memories against labels"),
    "fit": ("cmp_bayes.cli.fit", "fit the hierarchical rho x tau model; posterior to NetCDF"),
    "decide": ("cmp_bayes.cli.decide", "retain / forget / defer decisions from a posterior"),
    "recommend": ("cmp_bayes.cli.recommend", "rank memories by the value of exposing them next"),
    "report": ("cmp_bayes.cli.report", "write the HTML + Markdown diagnostic report of a posterior"),
    "compare": ("cmp_bayes.cli.compare", "rank fits of one log (model variants) by PSIS-LOO"),
    "demo": ("cmp_bayes.cli.demo", "the whole pipeline on the bundled example (or on LOG)"),
    "replicate": ("cmp_bayes.cli.replicate", "measure positivity and CMP on real benchmark data"),
}


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus a message on error; we print one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"cmp-bayes {self.prog.split()[-1]}: error: {message}\n")
        raise SystemExit(2)


def _available_verbs() -> dict[str, tuple[str, str]]:
    found = {}
    for verb, (module, help_) in VERBS.items():
        if importlib.util.find_spec(module) is not None:
            found[verb] = (module, help_)
    return found


def build_parser() -> argparse.ArgumentParser:
    """The full parser (imports every verb module, which are light by design)."""
    from cmp_bayes import __version__

    parser = _OneLineParser(
        prog="cmp-bayes",
        description="Bayesian analysis of Causal Memory Policy exposure logs.",
    )
    parser.add_argument("--version", action="version", version=f"cmp-bayes {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", default=False, help=QUIET_HELP)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_OneLineParser)
    for verb, (module, help_) in _available_verbs().items():
        p = sub.add_parser(verb, help=help_, description=help_)
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
        add_quiet(p)
    return parser


#: Help of ``--quiet``, the same on every verb.
QUIET_HELP: str = "no progress bars or informational lines on stderr (results on stdout stay)"


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` ``--quiet``, or each of its sub-verbs when it has them (``replicate``).

    The flag goes on the parsers a command line ends in, so ``cmp-bayes replicate
    experiment ... --quiet`` parses. Its default is "not given" rather than
    False: argparse lets a sub-parser's default overwrite a value the parent
    parsed, which would undo ``cmp-bayes --quiet VERB``.
    """
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for action in subs:
            for child in dict.fromkeys(action.choices.values()):
                add_quiet(child)
        return
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)


@contextmanager
def _verb_output(quiet: bool) -> Iterator[None]:
    """While a verb runs: the process-wide quiet setting, and the libraries' chatter muted.

    The chatter (log records below WARNING: PyMC's "Sampling: [...]") is muted
    under ``--quiet`` and whenever stderr is not a terminal; warnings and errors
    always pass. ``logging.disable`` rather than a logger's level, because PyMC
    is imported during the verb and sets its logger's level to INFO on import.
    """
    from cmp_bayes.progress import quiet_mode, show_progress

    with quiet_mode(quiet):
        before = logging.root.manager.disable
        if not show_progress():
            logging.disable(max(before, logging.INFO))
        try:
            yield
        finally:
            logging.disable(before)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status.

    0 ok; 2 a user error (:class:`CmpBayesError`, a bad option or path), one
    line on stderr; 1 any other exception (a bug), one line naming the verb and
    the exception, re-raised with its traceback when :data:`DEBUG_ENV` is set
    (to anything but "" or "0"); 130 interrupted; 141 stdout's reader closed the
    pipe (``| head``), with no message.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    module = importlib.import_module(args._module)
    try:
        with _verb_output(bool(getattr(args, "quiet", False))):
            return int(module.run(args) or 0)
    except CmpBayesError as exc:
        sys.stderr.write(f"cmp-bayes {args.verb}: error: {_one_line(str(exc))}\n")
        return 2
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        sys.stderr.write(f"cmp-bayes {args.verb}: error: {_one_line(str(exc))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"cmp-bayes {args.verb}: interrupted\n")
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (``| head``): not an error of ours, and the verbs
        # write their files before they print; stop quietly, as a process SIGPIPE ends
        # does, with nothing left for the exit-time flush to fail on
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except Exception as exc:  # noqa: BLE001 - a bug is one line too; DEBUG_ENV shows the traceback
        if os.environ.get(DEBUG_ENV, "").strip() not in ("", "0"):
            raise
        sys.stderr.write(
            f"cmp-bayes {args.verb}: internal error: {type(exc).__name__}: "
            f"{_one_line(str(exc)) or '(no message)'} (a bug, not your input; rerun with "
            f"{DEBUG_ENV}=1 for the traceback)\n"
        )
        return 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
