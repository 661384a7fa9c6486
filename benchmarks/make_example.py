"""Regenerate the demo's bundled example log, cmp_bayes/data/example/.

Usage::

    .venv/bin/python benchmarks/make_example.py [OUT]

Deterministic: the simulator with ``cmp_bayes.data.EXAMPLE_CONFIG`` at
``EXAMPLE_SEED`` writes the same files every time.
"""

from __future__ import annotations

import sys

from cmp_bayes.data import EXAMPLE_CONFIG, EXAMPLE_SEED, make_example


def main(argv: list[str] | None = None) -> int:
    """Write the example log and print where it went."""
    argv = sys.argv[1:] if argv is None else argv
    path = make_example(argv[0] if argv else None)
    print(f"wrote {path} (simulator preset 'tiny' with {EXAMPLE_CONFIG}, seed {EXAMPLE_SEED})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
