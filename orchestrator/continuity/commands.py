"""``orchestrator journal`` and ``orchestrator handoff``: read the journal back, show and restore handoff versions.

They read the files directly, so they work with or without a running orchestrator.
"""

from __future__ import annotations

import os
from datetime import date, datetime
from pathlib import Path
from typing import Any, TextIO

from orchestrator.config import Config, load_config
from orchestrator.console import printable_block, say
from orchestrator.continuity import handoff as ho
from orchestrator.continuity import journal as jn
from orchestrator.core.errors import OrchestratorError, UsageError


def _role(config: Config, role: str) -> str:
    if role not in config.roles:
        raise UsageError(f"no role {role!r} in {config.path} (roles: {', '.join(config.roles)})")
    return role


def journal_entries(
    root: Path, role: str | None = None, since: str | None = None, last: int | None = None
) -> list[dict[str, Any]]:
    """The journal entries of one role or all, oldest first, as JSON objects (``role``, ``date``, ``seq``, ...)."""
    config = load_config(root)
    if since is not None:
        try:
            since = date.fromisoformat(since).isoformat()
        except ValueError:
            raise UsageError(f"--since {since!r}: expected a date like 2026-11-30") from None
    if last is not None and last < 1:
        raise UsageError(f"--last {last}: expected a number of entries, 1 or more")
    roles = [_role(config, role)] if role else list(config.roles)
    found: list[jn.Entry] = []
    for name in roles:
        found += jn.read_entries(name, config.role_dir(name) / jn.JOURNAL, since=since, last=last)
    found.sort(key=lambda e: (e.date, e.end, e.run_id))
    if last is not None:
        found = found[-last:]
    return [e.to_json() for e in found]


def handoff_current(root: Path, role: str) -> dict[str, Any]:
    """The role's handoff now: ``path``, ``text``, ``bytes``, ``cap`` (a bad file is an error, named)."""
    config = load_config(root)
    handoff = ho.read_handoff(config, _role(config, role))
    if not handoff.usable:
        raise OrchestratorError(f"{handoff.problem}; it is not used and never touched")
    text = handoff.text
    return {
        "role": role,
        "path": str(ho.handoff_path(config, role)),
        "text": text,
        "bytes": len(text.encode("utf-8")),
        "counted": ho.agents_bytes(text),  # what the cap holds: the orchestrator's own note is not counted
        "cap": config.roles[role].handoff_max_bytes,
    }


def handoff_history(root: Path, role: str) -> list[dict[str, Any]]:
    """Every kept version, oldest first: the ``seq`` of the run that wrote it, its size and when it was kept."""
    config = load_config(root)
    out = []
    for seq, path in ho.versions(config, _role(config, role)):
        try:
            info = os.stat(path)
        except OSError:
            continue
        saved = datetime.fromtimestamp(info.st_mtime).astimezone().isoformat(timespec="seconds")
        out.append({"seq": seq, "bytes": info.st_size, "saved_at": saved, "path": str(path)})
    return out


def _version(config: Config, role: str, seq: int) -> str:
    kept = dict(ho.versions(config, role))
    if seq not in kept:
        listed = ", ".join(str(s) for s in kept) or "none yet"
        raise UsageError(f"no version of {role}'s handoff was written by run {seq} (versions: {listed})")
    try:
        return kept[seq].read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OrchestratorError(f"cannot read version {seq} of {role}'s handoff: {exc}") from None


def handoff_version(root: Path, role: str, seq: int) -> str:
    """The text of the version written by run ``seq``."""
    config = load_config(root)
    return _version(config, _role(config, role), seq)


def handoff_restore(root: Path, role: str, seq: int) -> dict[str, Any]:
    """Put version ``seq`` back as the handoff; the text it replaces is kept when no version holds it."""
    config = load_config(root)
    text = _version(config, _role(config, role), seq)
    current = ho.read_handoff(config, role)
    if not current.usable:
        raise OrchestratorError(f"{current.problem}; not restoring over it (move it away first)")
    kept = ho.keep_replaced(config, role, current.text, datetime.now())
    try:
        ho.write_handoff(current, text)
    except OSError as exc:
        raise OrchestratorError(f"cannot write {current.path}: {exc.strerror or exc}") from None
    return {"role": role, "seq": seq, "path": str(current.path), "replaced_kept_at": str(kept) if kept else None}


def print_journal(entries: list[dict[str, Any]], stream: TextIO | None = None) -> None:
    """``orchestrator journal`` for people: each entry's Markdown, under its role and date."""
    if not entries:
        say("no journal entries", stream)
    for entry in entries:
        say(f"# {entry['role']} {entry['date']}", stream)
        say(printable_block(entry["text"]) + "\n", stream)


def print_handoff(result: dict[str, Any] | list[dict[str, Any]], stream: TextIO | None = None) -> None:
    """``orchestrator handoff`` for people: the text, a version, the list of versions or what a restore did."""
    if isinstance(result, list):
        if not result:
            say("no versions kept yet", stream)
        for item in result:
            say(f"run {item['seq']:>5}  {item['bytes']:>7} bytes  kept {item['saved_at']}", stream)
    elif "replaced_kept_at" in result:
        kept = result["replaced_kept_at"]
        say(
            f"restored version {result['seq']} into {result['path']}"
            + (f"; the text it replaced is kept at {kept}" if kept else ""),
            stream,
        )
    else:
        if "cap" in result:
            counted = result.get("counted", result["bytes"])
            beside = f", {counted} of them the agent's" if counted != result["bytes"] else ""
            say(f"{result['path']}: {result['bytes']} bytes{beside} (cap {result['cap']})", stream)
        say(printable_block(result["text"]) if result["text"] else "(empty)", stream)
