"""Prompt templates: ``string.Template`` files with a fixed set of placeholders.

Templates are checked at start-up, so a typo in a placeholder is a
configuration error naming the file, never a surprise at the first memo.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.agents import memo_list
from orchestrator.core.errors import ConfigError

# filled by the supervisor's prompt sections (continuity, memory, wakes, asks); empty when nothing fills them
SECTIONS = ("context", "memory", "handoff", "journal", "tasks", "signals", "answers")

PLACEHOLDERS = frozenset(
    {
        "role",
        "run_id",
        "seq",
        "attempt",
        "memo_path",
        "memo_paths",
        "memo",
        "root",
        "now",
        "date",
        "weekday",
        "time",
        *SECTIONS,
        "INPUT_MEMO_FILES",  # an alias of $memo_paths, so prompts written with that name still render
    }
)


@dataclass(frozen=True)
class PromptTemplate:
    path: Path
    template: string.Template

    def render(
        self,
        *,
        role: str,
        run_id: int,
        attempt: int,
        seq: int | None = None,
        root: Path,
        memo_paths: list[Path],
        memo_text: str,
        batch: bool,
        now: datetime | None = None,
        sections: Mapping[str, str] | None = None,
        memos_file: Path | None = None,
    ) -> str:
        """The prompt for one run; ``$memo_path`` and ``$memo`` are empty for batch roles.

        ``memos_file``: where a batch run's whole list of memos is, named in ``$memo_paths`` when the list is
        too long to be given whole (``memo_list.prompt_list``)."""
        now = (now or datetime.now()).astimezone()
        paths = memo_list.prompt_list(memo_paths, memos_file)
        values = {
            "role": role,
            "run_id": str(run_id),
            "seq": str(seq or ""),
            "attempt": str(attempt),
            "memo_path": "" if batch else str(memo_paths[0]),
            "memo_paths": paths,
            "INPUT_MEMO_FILES": paths,
            "memo": "" if batch else memo_text,
            "root": str(root),
            "now": now.isoformat(timespec="seconds"),
            "date": now.date().isoformat(),
            "weekday": now.strftime("%A"),
            "time": now.strftime("%H:%M"),
            **dict.fromkeys(SECTIONS, ""),
            **(sections or {}),
        }
        return self.template.substitute(values)


def load_template(path: Path) -> PromptTemplate:
    """Read and check a template: it must exist, be UTF-8 and use known placeholders only."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: prompt file not found; create it or fix the role's `prompt` key") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read prompt: {exc}") from None
    template = string.Template(text)
    if not template.is_valid():
        # find the first bad '$' for the message
        for match in template.pattern.finditer(text):
            if match.group("invalid") is not None:
                line = text.count("\n", 0, match.start()) + 1
                raise ConfigError(
                    f"{path}: line {line}: a '$' that starts no placeholder; write '$$' for a literal dollar"
                )
    unknown = sorted(set(template.get_identifiers()) - PLACEHOLDERS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown placeholder ${unknown[0]}"
            + (f" (and {', '.join('$' + u for u in unknown[1:])})" if len(unknown) > 1 else "")
            + f"; known: {', '.join('$' + p for p in sorted(PLACEHOLDERS))}"
        )
    return PromptTemplate(path=path, template=template)
