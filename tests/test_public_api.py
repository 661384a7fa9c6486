"""Every public name of ``cmp_bayes`` is the documented function or class, in any import order.

A script may import submodules before or after it touches the public names; a
subpackage whose name equals a public function would rebind the attribute on
``cmp_bayes`` (the old ``cb.decide`` became a module after ``import
cmp_bayes.decide.costs``). Each check runs in a fresh interpreter so that the
rest of the suite's imports cannot hide the order dependence.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: The script every check runs: imports submodules in the given order and, after each,
#: checks every public name against the object its defining module holds.
_CHECK = textwrap.dedent(
    """
    import importlib, inspect, pkgutil, sys, types
    import cmp_bayes as cb

    order = sys.argv[1]
    names = [n for n in cb.__all__ if n in cb._LAZY]
    mods = sorted(
        m.name for m in pkgutil.walk_packages(cb.__path__, "cmp_bayes.")
        if not m.name.startswith(("cmp_bayes.integrations", "cmp_bayes.scale.cluster"))
    )

    def check(where):
        for n in names:
            obj = getattr(cb, n)
            want = getattr(importlib.import_module(cb._LAZY[n]), n)
            assert not isinstance(obj, types.ModuleType), f"cb.{n} is a module after {where}"
            assert obj is want, f"cb.{n} is not {cb._LAZY[n]}.{n} after {where}"

    if order == "names-first":
        check("import cmp_bayes")
    for m in mods:
        importlib.import_module(m)
        check(f"import {m}")
    print(len(names), len(mods))
    """
)


@pytest.mark.parametrize("order", ["submodules-first", "names-first"])
def test_public_names_survive_any_import_order(order: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, order], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    n_names, n_mods = map(int, proc.stdout.split())
    assert n_names >= 20 and n_mods >= 50


@pytest.mark.parametrize(
    ("name", "kind"),
    [("decide", "function"), ("report", "function"), ("simulate", "function"),
     ("estimate", "function"), ("evaluate", "function"), ("fit", "function"),
     ("Costs", "class"), ("ModelConfig", "class"), ("LogWriter", "class")],
)
def test_public_name_is_the_documented_kind(name: str, kind: str) -> None:
    import inspect

    import cmp_bayes as cb

    obj = getattr(cb, name)
    assert (inspect.isfunction(obj) if kind == "function" else inspect.isclass(obj)), name
    assert obj.__doc__ and obj.__doc__.strip()


#: The issue's script, in a script's order: Costs (importing cmp_bayes.decision.costs)
#: before cb.decide is touched, and the posterior from the shipped synthetic builder.
_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import cmp_bayes as cb
    from cmp_bayes.testing import synthetic_posterior

    costs = cb.Costs(forget_cost=20, retain_cost=1, threshold=0.05)
    path = cb.save_posterior(synthetic_posterior(), Path(sys.argv[1]) / "p.nc")
    result = cb.decide(cb.load_posterior(path), costs)
    table = getattr(result, "table", result)
    print(len(table), table["memory_id"].nunique(), cb.load_posterior(path)["posterior"].sizes["memory"])
    """
)


def test_the_readme_script_runs_in_a_fresh_interpreter(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, unique, memories = map(int, proc.stdout.split())
    assert rows == unique == memories > 0
