"""Logs larger than one machine: Dask map-reduce statistics, a streaming log generator,
and the choice of scheduler (local threads or a ``dask.distributed`` cluster).

Needs the optional extra ``scale`` (``dask[dataframe]``, ``distributed``).
"""
