"""Adapters that put CMP exposure logging inside existing memory systems.

Each integration is an optional extra and imports its system only when used:
``cmp_bayes.integrations.mem0`` (``pip install 'cmp-bayes[mem0]'``).
"""
