"""A role's keys for asking a person (``orchestrator/asks``): tool calls that wait for an approval (``approve``),
how long a question may wait (``ask_timeout``) and what an unanswered one becomes (``on_timeout``).

Light on purpose (pydantic only): ``config`` imports it; the hook and the waiting are the feature's.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from orchestrator.core.units import Duration, Strict

# Claude Code's permission-rule syntax: a tool's name, alone or with its specifier in parentheses
RULE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\(.+\))?$")
RULE_EXPECTED = "a permission rule such as Bash(git push:*), Bash(npm publish:*) or Write(migrations/**)"


def check_rules(rules: list[str]) -> list[str]:
    """Every ``approve:`` entry is a permission rule, ``Tool`` or ``Tool(specifier)``."""
    for rule in rules:
        if not RULE.match(rule.strip()):
            raise ValueError(f"expected {RULE_EXPECTED}, got {rule!r}")
    return [rule.strip() for rule in rules]


class AskKeys(Strict):
    """A role's keys for asking a person and waiting for the answer without holding a slot."""

    approve: Annotated[list[str], AfterValidator(check_rules)] = Field(default_factory=list)
    ask_timeout: Duration = Field(86400.0, gt=0)  # an unanswered question ends the run after this long
    on_timeout: Literal["fail", "deny"] = "fail"  # an approval nobody answered: fail the run, or deny the call
