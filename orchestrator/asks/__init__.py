"""Asking a person: ``orchestrator ask`` and approvals (``approve:``), runs that wait in ``waiting/`` without a
slot, and ``orchestrator answer`` that runs them again (the Claude CLI's session resumed where it stopped)."""
