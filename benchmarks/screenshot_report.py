"""Render a cmp_bayes report in headless Chromium: screenshot it and fail on console errors.

Usage::

    .venv/bin/python benchmarks/screenshot_report.py [reports/NAME/index.html] \
        [--out reports/benchmarks/report_screenshot.png]

Without a report path, a report of a small synthetic posterior (the test
fixture) is written to a temporary folder first. Needs Debian's ``chromium``
(``apt-get install -y chromium``). Chromium runs offline-style: no network
services, no first-run, a throwaway profile; its console messages go to stderr
(``--enable-logging=stderr --v=0``) and any ``CONSOLE`` line at level ERROR,
any failed resource load and a missing screenshot fail the check (exit 1).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_OUT = Path("reports/benchmarks/report_screenshot.png")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
#: Console lines chromium prints (our report has no script, so any console message is an error)
_CONSOLE = re.compile(r"CONSOLE[:(]\d+|Uncaught|Failed to load resource|net::ERR_", re.IGNORECASE)


@dataclass
class RenderResult:
    """Outcome of one headless render."""

    screenshot: Path
    returncode: int
    console_errors: list[str] = field(default_factory=list)
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """True when chromium exited 0, wrote a PNG and logged no console error."""
        return (
            self.returncode == 0
            and self.screenshot.exists()
            and self.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            and not self.console_errors
        )


def find_chromium() -> str | None:
    """Path of a Chromium binary, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def render(
    html_path: Path, screenshot: Path, width: int = 1280, height: int = 9000
) -> RenderResult:
    """Screenshot ``html_path`` with headless chromium and collect console errors."""
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium not found: apt-get install -y chromium")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cmp-bayes-chromium-") as profile:
        cmd = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--screenshot={screenshot.resolve()}",
            html_path.resolve().as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    errors = [line for line in proc.stderr.splitlines() if _CONSOLE.search(line)]
    if screenshot.exists():
        _shrink(screenshot)
    return RenderResult(screenshot, proc.returncode, errors, proc.stderr)


def _shrink(path: Path) -> None:
    """Re-save as a 256-colour PNG: a third of the size, text still sharp (it is committed)."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow comes with matplotlib
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256)
    small.save(path, optimize=True)


def _synthetic_report(folder: Path) -> Path:
    from cmp_bayes.reporting.html import report
    from cmp_bayes.testing import synthetic_posterior

    return report(synthetic_posterior(n_memories=24), folder)


def main(argv: list[str] | None = None) -> int:
    """Render the report, save the screenshot, exit 1 on any console error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", nargs="?", type=Path, help="report index.html (default: synthetic)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        html_path = args.html or _synthetic_report(Path(tmp) / "synthetic")
        result = render(html_path, args.out)
    print(f"report: {html_path}")
    print(f"screenshot: {result.screenshot} (chromium exit {result.returncode})")
    if result.console_errors:
        print("console errors:")
        for line in result.console_errors:
            print("  " + line)
    print("OK: rendered without console errors" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
