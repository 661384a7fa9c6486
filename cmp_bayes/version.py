"""The installed package version, in one place below every layer that records or checks it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    #: The version of the installed cmp-bayes distribution (PEP 440), e.g. ``"0.1.0"``.
    __version__: str = version("cmp-bayes")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"
