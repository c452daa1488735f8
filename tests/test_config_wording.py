"""What a configuration error says, word for word, and what `off` turns off.

Each case calls ``load_config`` on a small ``roles.yaml`` and compares the whole one-line message: the file,
the full key path down to the key that is wrong, what that key expects (read from its declaration, never
pydantic's "Input should be ..."), and what was written there.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config import RoleSettings, TeamFile, load_config
from orchestrator.core.errors import ConfigError

DURATION = "(such as 5s, 500ms, 30m or a number of seconds)"


def _project(root: Path, text: str) -> Path:
    """A project whose roles.yaml is ``text`` (dedented); every role of it gets a prompt file."""
    text = textwrap.dedent(text)
    (root / "roles.yaml").write_text(text, encoding="utf-8")
    data = yaml.safe_load(text)
    (root / "prompts").mkdir(exist_ok=True)
    for name in (data.get("roles") or {}) if isinstance(data, dict) else ():
        (root / "prompts" / f"{name}.md").write_text("$memo\n", encoding="utf-8")
    return root


def _error(root: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(_project(root, text))
    return str(caught.value)


# ---------------------------------------------------------------- off
@pytest.mark.parametrize("off", ["off", "OFF", '"off"', "'Off'", "false", "no"])  # null: tests/test_breaker.py
def test_every_limit_takes_off_as_yaml_reads_it(tmp_path: Path, off: str) -> None:
    config = load_config(
        _project(
            tmp_path,
            f"""
            limits: {{chain_depth: {off}, pair_rate: {off}}}
            budget: {{per_day_usd: {off}}}
            defaults:
              budget: {{per_run_usd: 2, per_day_usd: 20}}
            roles:
              b:
                budget: {{per_run_usd: {off}, per_day_usd: {off}}}
              c: {{}}
            """,
        )
    )
    assert (config.limits.chain_depth, config.limits.pair_rate) == (None, None)
    assert config.budget.per_day_usd is None
    # a role's off turns off the cap it would take from the defaults; another role keeps them
    assert (config.roles["b"].budget.per_run_usd, config.roles["b"].budget.per_day_usd) == (None, None)
    assert (config.roles["c"].budget.per_run_usd, config.roles["c"].budget.per_day_usd) == (2.0, 20.0)


# ---------------------------------------------------------------- the wording, whole
CASES: list[tuple[str, str, str]] = [
    (
        "a limit of 0",
        "limits: {chain_depth: 0}\nroles: {b: {}}",
        "limits.chain_depth: expected a whole number >= 1, or off, got 0",
    ),
    (
        "a limit as text",
        "limits: {chain_depth: many}\nroles: {b: {}}",
        "limits.chain_depth: expected a whole number >= 1, or off, got 'many'",
    ),
    (
        "on is no limit",
        "limits: {chain_depth: on}\nroles: {b: {}}",
        "limits.chain_depth: expected a whole number >= 1, or off, got true",
    ),
    (
        "a rate that is on",
        "limits: {pair_rate: on}\nroles: {b: {}}",
        "limits.pair_rate: expected a rate such as 20/h or 5/30m (memos per window), or off, got true",
    ),
    (
        "a budget of 0",
        "budget: {per_day_usd: 0}\nroles: {b: {}}",
        "budget.per_day_usd: expected a number > 0, or off, got 0",
    ),
    (
        "a role's budget as text",
        "roles: {b: {budget: {per_run_usd: lots}}}",
        "roles.b.budget.per_run_usd: expected a number > 0, or off, got 'lots'",
    ),
    (
        "a whole number as text",
        "max_concurrent: many\nroles: {b: {}}",
        "max_concurrent: expected a whole number >= 1, got 'many'",
    ),
    (
        "a fraction for a whole number",
        "max_memo_bytes: 1.5\nroles: {b: {}}",
        "max_memo_bytes: expected a whole number >= 1, got 1.5",
    ),
    (
        "a number out of its range",
        "roles: {b: {api_retries: 30}}",
        "roles.b.api_retries: expected a whole number from 0 to 20, got 30",
    ),
    (
        "a retry count as text",
        "roles: {b: {retry: {max: often}}}",
        "roles.b.retry.max: expected a whole number >= 0, got 'often'",
    ),
    (
        "an empty backoff under defaults",
        "defaults: {retry: {backoff: []}}\nroles: {b: {}}",
        "defaults.retry.backoff: expected a non-empty list of durations such as 5s, 500ms, 30m or numbers of "
        "seconds, got []",
    ),
    ("a boolean as text", "roles: {b: {batch: maybe}}", "roles.b.batch: expected true or false, got 'maybe'"),
    ("a choice", "roles: {b: {prompt_via: pipe}}", "roles.b.prompt_via: expected stdin or arg, got 'pipe'"),
    (
        "a choice in a list",
        "roles: {b: {setting_sources: [user, mine]}}",
        "roles.b.setting_sources.1: expected user, project or local, got 'mine'",
    ),
    ("a number for a string", "roles: {b: {env: {DEPTH: 3}}}", "roles.b.env.DEPTH: expected a string, got 3"),
    (
        "a string for a list",
        "roles: {b: {command: claude -p}}",
        "roles.b.command: expected a non-empty list of strings, got 'claude -p'",
    ),
    (
        "an empty preflight command",
        "roles: {b: {preflight: [[]]}}",
        "roles.b.preflight.0: expected a non-empty list of strings, got []",
    ),
    (
        "a union, one line",
        "roles: {b: {system_prompt: 5}}",
        "roles.b.system_prompt: expected a string or a mapping of keys, got 5",
    ),
    ("a role that is null", "roles: {b: null}", "roles.b: expected a mapping of keys, got null"),
    (
        "memory's renamed key",
        "memory: {keeper: b}\nroles: {b: {}}",
        "memory.keeper: renamed to memory.curator (a keeper is the process that watches an agent)",
    ),
    (
        "memory's nested key",
        "memory: {prompt_budget: {lines: 0}}\nroles: {b: {}}",
        "memory.prompt_budget.lines: expected a whole number >= 1, got 0",
    ),
    (
        "a duration of 0 where it must be longer",
        "executor: {poll: 0s}\nroles: {b: {}}",
        f"executor.poll: expected a duration longer than 0 {DURATION}, got '0s'",
    ),
    (
        "a daily time",
        'roles: {rin: {tasks: {diary: {daily: "25:00", text: t}}}}',
        "roles.rin.tasks.diary.daily: expected a time of day between 00:00 and 23:59:59, got '25:00'",
    ),
    (
        "a weekly rule",
        'roles: {rin: {tasks: {review: {weekly: "sun", text: t}}}}',
        "roles.rin.tasks.review.weekly: expected a weekday and a time such as \"sun 10:00\", got 'sun'",
    ),
    (
        "a weekly day",
        'roles: {rin: {tasks: {review: {weekly: "someday 10:00", text: t}}}}',
        "roles.rin.tasks.review.weekly: unknown weekday 'someday'; expected one of mon, tue, wed, thu, fri, sat, sun",
    ),
    (
        "a once time",
        "roles: {rin: {tasks: {launch: {once: soon, text: t}}}}",
        "roles.rin.tasks.launch.once: expected an ISO 8601 time such as 2026-12-01T09:00, got 'soon'",
    ),
    (
        "an every of 0",
        "roles: {rin: {tasks: {post: {every: 0s, text: t}}}}",
        f"roles.rin.tasks.post.every: expected a duration longer than 0 {DURATION}, got '0s'",
    ),
    (
        "two rules in a task",
        'roles: {rin: {tasks: {x: {daily: "21:00", every: 1h, text: t}}}}',
        "roles.rin.tasks.x: expected exactly one of the keys daily, weekly, every, once in a task, got daily and every",
    ),
    (
        "a heartbeat of 0",
        "roles: {rin: {wake: {every: 0}}}",
        "roles.rin.wake.every: expected a heartbeat longer than 0 (omit `every` for a role woken only by due "
        "tasks), got 0",
    ),
    (
        "a time zone",
        "timezone: Mars/Olympus\nroles: {b: {}}",
        "timezone: expected a time zone's IANA name such as Asia/Tokyo or UTC, got 'Mars/Olympus'",
    ),
]


@pytest.mark.parametrize("text, expected", [pytest.param(t, e, id=i) for i, t, e in CASES])
def test_one_line_names_the_key_what_it_expects_and_what_was_found(tmp_path: Path, text: str, expected: str) -> None:
    assert _error(tmp_path, text + "\n") == f"{tmp_path / 'roles.yaml'}: {expected}"


# ---------------------------------------------------------------- no key leaks pydantic's words
PYDANTIC_WORDS = ("Input should", "valid integer", "unable to", "Value error", "Assertion failed", "after validation")
WRONG_KINDS: list[Any] = ["???", -1, 0, 1.5, True, ["?"], {"?": 1}]


def _keys() -> list[tuple[str, str]]:
    team = [("", name) for name in TeamFile.model_fields if name not in ("roles", "defaults")]
    role = [("roles.b", name) for name in RoleSettings.model_fields]
    return team + role


def test_no_key_says_it_in_pydantic_words(tmp_path: Path) -> None:
    """Every top-level and role key, given a value of each wrong kind: each line names the key and says it in
    our words (one test, so a failure lists every key that still leaks)."""
    leaks: list[str] = []
    for where, key in _keys():
        for value in WRONG_KINDS:
            data: dict[str, Any] = {"roles": {"b": {}}}
            (data["roles"]["b"] if where else data)[key] = value
            _project(tmp_path, yaml.safe_dump(data))
            try:
                load_config(tmp_path)
            except ConfigError as exc:
                prefix = f"{tmp_path / 'roles.yaml'}: {where + '.' if where else ''}{key}"
                leaks += [
                    line
                    for line in str(exc).splitlines()
                    if not line.startswith(prefix) or any(words in line for words in PYDANTIC_WORDS)
                ]
    assert leaks == []
