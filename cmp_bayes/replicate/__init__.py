"""Replication on real benchmark data: retrieval positivity and the CMP experiment.

Results on real stores with outcomes from :mod:`cmp_bayes.replicate.reader`
are semi-synthetic (real memories, queries, evidence and retrieval; simulated
answers) and labelled so everywhere.
"""
