"""Retention: what the orchestrator keeps of finished work, and for how long (``retention:`` in ``roles.yaml``).

``config.retention`` (the rules, checked with the rest of ``roles.yaml``), ``plan`` (what a pass would remove, read from the records and the folders),
``sweep`` (removing it, and ``orchestrator gc``), ``daily`` (the daily pass inside ``up``).
"""
