"""Wakes on a schedule: rules of due-ness (``rules``), their settings (``settings``), the records of what was done
and skipped (``records``), the checks run before a wake (``probes``) and the scheduler that writes wake memos
(``wakes``), plus what ``orchestrator schedule`` and ``orchestrator task`` print (``view``)."""
