"""Wakes on a schedule: rules of due-ness (``rules``; the keys and how a moment is written are
``config.schedule`` and ``config.when``), the records of what was done
and skipped (``records``), the checks run before a wake (``probes``, ``preflight``), the scheduler that writes wake
memos (``wakes``) with what is due (``due``), its memo writes (``writer``), and its holds (``holds``),
plus what ``orchestrator schedule`` and ``orchestrator task`` print (``view``)."""
