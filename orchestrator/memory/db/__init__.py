"""The memory store: one SQLite database (WAL) under ``.orchestrator/``, written by many agents at once.

Entries live in ``entries``; a trigram FTS5 index (``entries_fts``, rowid = entry id)
finds any substring of three characters or more, so unsegmented Japanese is
found too; a contentless bigram index (``entries_bi``, tokens from ``grams``)
finds the words of one or two characters (記憶, 監督, PM). Nothing is ever
deleted: ``forget`` and retention leave a tombstone (``forgotten_at``,
``forgotten_why``), and every ``replace`` is kept in ``growth``.

Search cost is bounded whatever the size of the store: the words' index gives
the matching ids newest first, at most ``RANK_WINDOW`` of them in scope are
ranked (bm25, then importance, then recency) inside SQLite, and only the
``limit`` rows shown are read whole. ``$memory`` reads per group only as many
rows as its line budget can hold, plus counts. A database of an older schema
(``PRAGMA user_version``) is brought up to date, indexes filled, when first opened.
Every SQLite failure (corrupt, locked, unreadable) becomes ``MemoryUnavailableError``.

``MemoryDB`` is one class made of its parts: ``connection`` (opening, errors, transactions), ``schema``
(tables, version, migration), ``writes``, ``search`` (every read) and ``retention`` (and compaction records).
"""

from __future__ import annotations

from orchestrator.memory.db.retention import Retention
from orchestrator.memory.db.search import Search
from orchestrator.memory.db.writes import Writes


class MemoryDB(Writes, Search, Retention):
    """One connection to the memory database; every method is one short transaction.

    ``timeout`` is how long a statement waits for another writer's lock (the
    supervisor passes a fraction of a second, so a locked database never stalls its loop).
    """
