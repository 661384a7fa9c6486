"""The ground-truth simulator of a memory system run under CMP.

Public functions: ``cmp_bayes.simulate`` (:func:`cmp_bayes.simulation.simulator.simulate`),
``cmp_bayes.store_randomization`` and ``cmp_bayes.memory_truth``.
"""
