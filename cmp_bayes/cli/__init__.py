"""The ``cmp-bayes`` command line: one module per verb, dispatched by :mod:`.main`."""
