"""Where the benchmark data lives for the replication tests, and a skip when it is absent.

CI has ``shared/`` beside the clone, as the developers do: ``<repo>/../shared/data``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo10.json"
LONGMEMEVAL_S = DATA / "longmemeval" / "longmemeval_s_cleaned.jsonl.xz"
LONGMEMEVAL_ORACLE = DATA / "longmemeval" / "longmemeval_oracle.json"
HOTPOTQA = DATA / "hotpotqa" / "hotpot_dev_distractor_sample200.jsonl"
MUSIQUE = DATA / "musique" / "musique_ans_dev_sample200.jsonl"
MUSIQUE_KAG = DATA / "musique" / "musique_ans_dev_sample100_kag.json"


def need(path: Path) -> Path:
    """Skip the test, saying which file is missing, unless ``path`` exists."""
    if not path.is_file():
        pytest.skip(f"benchmark data not found at {path} (expected shared/data beside the repository)")
    return path
