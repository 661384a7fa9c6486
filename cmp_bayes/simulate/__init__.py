"""The ground-truth simulator of a memory system run under CMP.

``cmp_bayes.simulate`` is both this subpackage and the public function
:func:`cmp_bayes.simulate.simulator.simulate`; importing a submodule would
otherwise replace the function by the package on ``cmp_bayes``, so the
package itself is made callable and forwards to the function.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cmp_bayes.simulate.simulator import simulate

        return simulate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
