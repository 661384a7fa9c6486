"""Screenshots of a cmp_bayes report in headless Chromium at laptop and desktop width.

Usage::

    .venv/bin/python benchmarks/report_screenshots.py [reports/demo] [--out reports/screenshots]

Renders ``REPORT_DIR/index.html`` (default ``reports/demo``, what ``cmp-bayes demo``
writes) and writes, under ``--out``:

* ``report-1280.png``: the first screen at 1280 x 1000 px (a desktop);
* ``report-800.png``: the first screen at 800 x 1000 px (a laptop window);
* ``report-800-full.png``: the whole page at 800 px wide, cut below its last line.

Chromium runs as ``benchmarks/screenshot_report.py`` runs it (no network
services, a throwaway profile) and the same checks apply: a console error, a
failed resource load or a missing screenshot exits 1. Without Chromium
(``apt-get install -y chromium``) it prints why and exits 0 having written nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
DEFAULT_REPORT = Path("reports/demo")
DEFAULT_OUT = Path("reports/screenshots")
#: (file name, window width, window height, keep the whole page) of each screenshot, px.
SHOTS: tuple[tuple[str, int, int, bool], ...] = (
    ("report-1280.png", 1280, 1000, False),
    ("report-800.png", 800, 1000, False),
    ("report-800-full.png", 800, 20000, True),
)


def _renderer() -> ModuleType:
    """benchmarks/screenshot_report.py, loaded by path (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("screenshot_report", HERE / "screenshot_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def crop_to_content(path: Path, margin: int = 24) -> tuple[int, int]:
    """Cut a tall screenshot below the last non-white row (plus ``margin`` px); return its size."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        grey = np.asarray(im.convert("L"))
        rows = np.flatnonzero((grey < 250).any(axis=1))
        bottom = min(grey.shape[0], int(rows.max()) + margin) if rows.size else grey.shape[0]
        cut = im.crop((0, 0, im.width, bottom))
        cut.load()
    cut.save(path, optimize=True)
    return cut.width, cut.height


def main(argv: list[str] | None = None) -> int:
    """Write the screenshots; 1 on a render failure, 0 otherwise (also when chromium is missing)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_REPORT,
                        help="report folder holding index.html (default reports/demo)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    shots = _renderer()
    if shots.find_chromium() is None:
        print("skipped: chromium not found (apt-get install -y chromium); no screenshot written")
        return 0
    index = args.report / "index.html"
    if not index.is_file():
        print(f"error: {index} not found: run `cmp-bayes demo` (or give a report folder)")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for name, width, height, full in SHOTS:
        target = args.out / name
        result = shots.render(index, target, width=width, height=height)
        if full and target.exists():
            width, height = crop_to_content(target)
        print(f"{target}: {width} x {height} px, {target.stat().st_size / 1e3:,.0f} kB"
              if target.exists() else f"{target}: not written")
        for line in result.console_errors:
            print("  console: " + line)
        failed |= not result.ok
    print("FAILED" if failed else "OK: rendered without console errors")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
