"""Benchmark adapters: real data as memory stores, queries and evidence labels.

``load_dataset(name, path, **options)`` dispatches to the adapter of each
benchmark; every adapter returns a :class:`~cmp_bayes.datasets.base.Dataset`.
Paths are always given by the caller (nothing is downloaded; the test suite
reads the copies in ``../shared/data``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmp_bayes.datasets.base import Dataset, Store
from cmp_bayes.errors import ConfigError

#: dataset name -> (module, loader, file name under the shared data folder)
DATASETS: dict[str, tuple[str, str, str]] = {
    "longmemeval": ("cmp_bayes.datasets.longmemeval", "load_longmemeval", "longmemeval/longmemeval_s_cleaned.jsonl.xz"),
    "locomo": ("cmp_bayes.datasets.locomo", "load_locomo", "locomo/locomo10.json"),
    "hotpotqa": ("cmp_bayes.datasets.hotpotqa", "load_hotpotqa", "hotpotqa/hotpot_dev_distractor_sample200.jsonl"),
    "musique": ("cmp_bayes.datasets.musique", "load_musique", "musique/musique_ans_dev_sample200.jsonl"),
}


def default_file(name: str, data_root: str | Path) -> Path:
    """The benchmark's file under a folder laid out like ``shared/data``."""
    _check(name)
    return Path(data_root) / DATASETS[name][2]


def load_dataset(name: str, path: str | Path, **options: Any) -> Dataset:
    """Load a benchmark by name from ``path`` with the adapter's options."""
    import importlib

    _check(name)
    module, func, _ = DATASETS[name]
    return getattr(importlib.import_module(module), func)(path, **options)


def _check(name: str) -> None:
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")


__all__ = ["DATASETS", "Dataset", "Store", "default_file", "load_dataset"]
