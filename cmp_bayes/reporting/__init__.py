"""The diagnostic report of a posterior (public function: ``cmp_bayes.report``).

Modules: ``html`` (``report``: writes index.html + summary.md), ``sections``
(one builder per section), ``plots`` (figures as PNG data URIs), ``health``
(the report's table of sampler checks), ``pipeline`` (the demo's
diagnose -> fit -> save -> decide -> report chain).
"""
