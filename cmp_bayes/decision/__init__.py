"""Decisions from a posterior (public function: ``cmp_bayes.decide``).

Modules: ``costs`` (the ``Costs`` of each mistake), ``rule`` (the asymmetric
Bayes rule and its guards), ``preposterior`` (exposures needed, value of
information), ``recommend`` (which memories to expose next), ``baselines``
(threshold and logged-count rules the Bayes rule is measured against).
"""
