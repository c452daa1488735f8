"""Long-term memory per role: layered entries in SQLite with a Japanese-capable full-text index.

``rules`` (pure: layers, importance, periods, the prompt budget, due moments),
``secrets`` (what is never stored), ``db`` (the store), ``service`` (the CLI's
operations with their checks and access scope), ``section`` (``$memory`` in the
prompt) and ``curator`` (retention and the compaction memos, on the supervisor's clock).
"""
