"""Smoke checks of an installed (non-editable) cmp_bayes, run by ``./dev wheel-check``.

Not a pytest module (its name does not start with ``test_``): the wheel check
runs it with the fresh environment's Python, from a folder outside the
source tree, after ``cmp-bayes demo`` has run there. It fails (exit 1, with
the reason) when the package imported is not the installed one, when a
package-data file did not ship (the example log, the report template,
``py.typed``), when the wheel lacks ``LICENSE`` or ``CHANGELOG.md``, or when the
demo's outputs are not what the demo promises.

Usage: ``python smoke_installed.py WHEEL DEMO_DIR``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata, resources
from pathlib import Path


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"smoke_installed: FAILED: {what}")
    print(f"  ok: {what}")


def main(wheel: Path, demo_dir: Path) -> None:
    import cmp_bayes

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(cmp_bayes.__file__).resolve()
    check(site in where.parents, f"cmp_bayes imported from the installed wheel ({where})")
    check(cmp_bayes.__version__ == metadata.version("cmp-bayes"), "version from the metadata")

    pkg = resources.files("cmp_bayes")
    check(pkg.joinpath("py.typed").is_file(), "py.typed ships")
    check(pkg.joinpath("reporting", "templates", "report.html").is_file(), "report template ships")
    for name in ("steps.jsonl", "design.json", "memories.jsonl"):
        check(pkg.joinpath("data", "example", name).is_file(), f"example log's {name} ships")

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        check(any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE in the wheel")
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    check("License-Expression: MIT" in text, "the MIT licence expression in METADATA")
    check("# Changelog" in text and "## [Unreleased]" in text, "the changelog in METADATA")
    check(any(n.endswith(".data/data/share/doc/cmp-bayes/CHANGELOG.md") for n in names),
          "CHANGELOG.md in the wheel")
    installed = Path(sys.prefix) / "share" / "doc" / "cmp-bayes" / "CHANGELOG.md"
    check(installed.is_file() and installed.read_text().startswith("# Changelog"),
          f"CHANGELOG.md installed ({installed})")

    # the demo's outputs: a posterior that loads, a report, one decision per memory
    posterior = cmp_bayes.load_posterior(demo_dir / "models" / "demo.nc")
    log = cmp_bayes.read_log(Path(str(pkg.joinpath("data", "example"))))
    memories = set(log.memory_ids().astype(str))
    check(set(posterior["posterior"]["tau"]["memory"].to_numpy().astype(str)) == memories,
          "the demo's posterior covers the example's memories")
    html = (demo_dir / "reports" / "demo" / "index.html").read_text(encoding="utf-8")
    check("<html" in html and "data:image/png;base64," in html, "the report embeds its figures")
    with open(demo_dir / "reports" / "demo" / "decisions.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    check({r["memory_id"] for r in rows} == memories, "decisions.csv: one row per memory")
    check({r["action"] for r in rows} <= {"retain", "forget", "defer"}, "decisions.csv: actions")

    # the console script: a bad log is one line on stderr and exit 2, no traceback
    bad = subprocess.run(
        [str(Path(sys.executable).with_name("cmp-bayes")), "diagnose", str(demo_dir / "nope")],
        capture_output=True,
        text=True,
    )
    err = bad.stderr.strip().splitlines()
    check(bad.returncode == 2 and len(err) == 1 and "Traceback" not in bad.stderr,
          f"a missing log: exit 2 and one line ({err[:1]})")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
