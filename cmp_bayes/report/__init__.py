"""The diagnostic report of a posterior (``cmp_bayes.report(posterior, out_dir)``).

Modules: ``html`` (``report``: writes index.html + summary.md), ``sections``
(one builder per section), ``plots`` (figures as PNG data URIs), ``health``
(sampler checks from arviz_stats.diagnose), ``pipeline`` (the demo's
diagnose -> fit -> save -> decide -> report chain).

The package shares its name with the public function ``cmp_bayes.report``.
Once any submodule is imported, Python binds the attribute ``cmp_bayes.report``
to this package, not to the function; so the package itself is made callable
and forwards to :func:`cmp_bayes.report.html.report`, and
``cmp_bayes.report(posterior, out_dir)`` works in either case.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cmp_bayes.report.html import report

        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
