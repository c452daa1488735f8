"""Configuration mistakes end `up` before any memo is touched, with one line naming file, key and expectation;
`init` scaffolds a team that passes the same checks.

Every case runs the real `orchestrator up` on a project with a memo waiting in its inbox.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import STAND_IN, Project, error_line, wait_for

Mutate = Callable[[Path], None]


def _set(*keys: str, value: Any) -> Mutate:
    """Set ``value`` at a key path of roles.yaml."""

    def mutate(root: Path) -> None:
        config = root / "roles.yaml"
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
        target = data
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
        config.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

    return mutate


def _write(path: str, text: str | bytes) -> Mutate:
    """Write a file of the project (roles.yaml or a prompt) as given."""

    def mutate(root: Path) -> None:
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            file.write_bytes(text)
        else:
            file.write_text(text, encoding="utf-8")

    return mutate


def _raw(text: str | None) -> Mutate:
    """Replace roles.yaml with this text, or delete it (None)."""

    def mutate(root: Path) -> None:
        if text is None:
            (root / "roles.yaml").unlink()
        else:
            (root / "roles.yaml").write_text(text, encoding="utf-8")

    return mutate


CASES: list[tuple[str, Mutate, list[str]]] = [
    ("unknown top-level key", _set("max_concurent", value=3), ["roles.yaml: max_concurent: unknown key"]),
    ("unknown key in defaults", _set("defaults", "timout", value="5s"), ["roles.yaml: defaults.timout: unknown key"]),
    (
        "unknown key in a role",
        _set("roles", "builder", "promt", value="x.md"),
        ["roles.yaml: roles.builder.promt: unknown key"],
    ),
    (
        "unknown key in retry",
        _set("roles", "builder", "retry", value={"maxx": 1}),
        ["roles.builder.retry.maxx: unknown key"],
    ),
    (
        "bad duration in defaults",
        _set("defaults", "timeout", value="5 minutes"),
        ["roles.yaml: defaults.timeout: expected a duration", "'5 minutes'"],
    ),
    (
        "bad duration in a role",
        _set("roles", "builder", "grace", value="soon"),
        ["roles.builder.grace: expected a duration", "'soon'"],
    ),
    (
        "bad backoff duration",
        _set("roles", "builder", "retry", value={"max": 2, "backoff": ["1s", "later"]}),
        ["roles.builder.retry.backoff.1: expected a duration", "'later'"],
    ),
    (
        "negative duration",
        _set("defaults", "timeout", value=-5),
        ["defaults.timeout: expected a duration that is not negative"],
    ),
    ("duration as a boolean", _set("rescan_interval", value=True), ["rescan_interval: expected a duration"]),
    # YAML keeps the last of two equal keys silently: a pasted role, or a second top-level key, lost what came first
    (
        "a role written twice",
        _raw(
            "max_concurrent: 5\nroles:\n  builder: {prompt: p.md, max_concurrent: 1}\n  reviewer: {prompt: p.md}\n"
            "  builder: {prompt: p.md}\n"
        ),
        ["roles.yaml: roles.builder: written twice (lines 3 and 5); YAML would keep the second alone"],
    ),
    (
        "a top-level key written twice",
        _raw("max_concurrent: 5\nroles:\n  builder: {prompt: p.md}\nmax_concurrent: 50\n"),
        ["roles.yaml: max_concurrent: written twice (lines 1 and 4)"],
    ),
    (
        "an env variable written twice on one line",
        _raw("roles:\n  builder: {prompt: p.md, env: {A: '1', A: '2'}}\n"),
        ["roles.yaml: roles.builder.env.A: written twice (line 2)"],
    ),
    # NaN passes every "not negative" comparison: every run timed out as it started ("timeout of nans")
    (
        "duration not a number",
        _set("roles", "builder", "timeout", value=float("nan")),
        ["timeout: expected", "got .nan"],
    ),
    (  # .inf passed too, and overflowed the date of the first retry: an internal error, the memo in failed/
        "endless backoff",
        _set("roles", "builder", "retry", value={"max": 1, "backoff": [float("inf")]}),
        ["roles.builder.retry.backoff.0: expected a duration of at most 100 years (36500d), got inf"],
    ),
    (
        "zero timeout",
        _set("roles", "builder", "timeout", value=0),
        ["roles.builder.timeout: expected a duration longer than 0", "got 0"],
    ),
    ("zero rescan", _set("rescan_interval", value="0s"), ["rescan_interval: expected a duration longer than 0"]),
    (
        "integer as text",
        _set("max_concurrent", value="many"),
        ["roles.yaml: max_concurrent: expected a whole number >= 1, got 'many'"],
    ),
    (
        "zero limit",
        _set("roles", "builder", "max_concurrent", value=0),
        ["roles.builder.max_concurrent: expected a whole number >= 1, got 0"],
    ),
    (
        "boolean as text",
        _set("roles", "builder", "batch", value="maybe"),
        ["roles.builder.batch: expected true or false, got 'maybe'"],
    ),
    (
        "command as a string",
        _set("roles", "builder", "command", value="claude -p"),
        ["roles.builder.command: expected a non-empty list of strings, got 'claude -p'"],
    ),
    (
        "empty command",
        _set("roles", "builder", "command", value=[]),
        ["roles.builder.command: expected a non-empty list of strings, got []"],
    ),
    (
        "prompt_via not a choice",
        _set("defaults", "prompt_via", value="pipe"),
        ["defaults.prompt_via: expected stdin or arg, got 'pipe'"],
    ),
    (
        "env value not text",
        _set("roles", "builder", "env", value={"DEPTH": 3}),
        ["roles.builder.env.DEPTH: expected a string, got 3"],
    ),
    ("notify names an unknown role", _set("notify", value="boss"), ["roles.yaml: notify:", "'boss'", "builder"]),
    ("no roles", _set("roles", value={}), ["roles.yaml: roles: expected a non-empty mapping of keys, got {}"]),
    (
        "a role that is null",
        _set("roles", "builder", value=None),
        ["roles.yaml: roles.builder: expected a mapping of keys, got null"],
    ),
    (
        "a bad system_prompt preset, one line for a union",
        _set("roles", "builder", "system_prompt", value={"preset": "x"}),
        ["roles.builder.system_prompt.preset: expected claude_code, got 'x'"],
    ),
    ("roles missing", _raw("max_concurrent: 3\n"), ["roles.yaml: roles: required key is missing"]),
    (
        "roles as a list",
        _raw("roles: [builder]\n"),
        ["roles.yaml: roles: expected a non-empty mapping of keys, got ['builder']"],
    ),
    ("a list at the top", _raw("- builder\n"), ["roles.yaml: expected a mapping with a `roles` key"]),
    ("an empty file", _raw(""), ["roles.yaml: expected a mapping with a `roles` key"]),
    ("invalid YAML", _raw("roles: {builder: {prompt: p.md}\n"), ["roles.yaml: not valid YAML at line"]),
    ("tab-indented YAML", _raw("roles:\n\tbuilder: {}\n"), ["roles.yaml: not valid YAML at line 2"]),
    ("missing roles.yaml", _raw(None), ["roles.yaml: not found", "orchestrator init"]),
    ("roles.yaml not UTF-8", _write("roles.yaml", b"roles: {b\xff: {}}\n"), ["roles.yaml: cannot read"]),
    (
        "role name with a slash",
        _set("roles", "a/b", value={"prompt": "prompts/builder.md"}),
        ["roles.a/b: a role name"],
    ),
    (
        "unknown placeholder",
        _write("prompts/builder.md", "Hello $role,\nsee $memo_pth\n"),
        ["prompts/builder.md: unknown placeholder $memo_pth", "$memo_path"],
    ),
    (
        "unknown braced placeholder",
        _write("prompts/builder.md", "${nme}"),
        ["prompts/builder.md: unknown placeholder $nme"],
    ),
    (
        "a lone dollar",
        _write("prompts/builder.md", "$role\ncosts 5 $ each\n"),
        ["prompts/builder.md: line 2: a '$' that starts no placeholder", "'$$'"],
    ),
    ("a dollar before a digit", _write("prompts/builder.md", "costs $5\n"), ["prompts/builder.md: line 1:", "'$$'"]),
    ("prompt not UTF-8", _write("prompts/builder.md", b"\xff\xfe$memo"), ["prompts/builder.md: cannot read prompt"]),
    (
        "missing prompt file",
        _set("roles", "builder", "prompt", value="prompts/missing.md"),
        ["prompts/missing.md: prompt file not found", "`prompt`"],
    ),
    (
        "command not on PATH",
        _set("roles", "builder", "command", value=["no-such-agent-xyz", "-p"]),
        ["roles.yaml: roles.builder.command: 'no-such-agent-xyz' not found on PATH", "ORCHESTRATOR_SPAWN_CMD"],
    ),
    (
        "command path not executable",
        _set("roles", "builder", "command", value=["./agent.sh"]),
        ["roles.builder.command: './agent.sh' is not an executable file"],
    ),
    ("missing cwd", _set("roles", "builder", "cwd", value="nowhere"), ["roles.yaml: roles.builder.cwd:", "nowhere"]),
]


@pytest.mark.parametrize("mutate, fragments", [pytest.param(m, f, id=i) for i, m, f in CASES])
def test_config_error_exits_2_with_one_line_and_touches_no_memo(
    project: Project, mutate: Mutate, fragments: list[str]
) -> None:
    project.configure({"builder": {}, "reviewer": {}})
    mutate(project.root)
    memo = project.drop("builder", "waiting.md", {"id": "W-1"})
    result = project.cli("up", "--plain", timeout=30)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert error_line(lines[0])
    assert str(project.root) in lines[0]  # the file, as a full path
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert memo.exists() and project.folder("builder", "active") == []
    assert not (project.root / ".orchestrator").exists()  # checked before the lock, the database or any folder
    assert project.records() == []


def test_a_bad_spawn_cmd_is_a_config_error(project: Project) -> None:
    project.configure({"builder": {}})
    memo = project.drop("builder", "waiting.md")
    result = project.cli("up", "--plain", ORCHESTRATOR_SPAWN_CMD="python 'unclosed", timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "ORCHESTRATOR_SPAWN_CMD" in result.stderr and "'unclosed" in result.stderr
    assert memo.exists() and "Traceback" not in result.stderr


def test_spawn_cmd_makes_a_missing_command_pass_preflight(project: Project) -> None:
    project.configure({"builder": {"command": ["no-such-agent-xyz"]}})
    orch = project.up(ORCHESTRATOR_SPAWN_CMD=shlex.join([sys.executable, str(STAND_IN)]))
    project.drop("builder", "b.md")
    wait_for(lambda: project.folder("builder", "archive") == ["b.md"], 60, "the memo archived")
    assert orch.stop() == 0


def test_usage_errors_exit_2_without_traceback(project: Project) -> None:
    for args in (["up", "--no-such-flag"], ["no-such-command"], []):
        result = project.cli(*args, timeout=30)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.strip()


# ---------------------------------------------------------------- init
TEAM = ("project-manager", "planner", "builder", "reviewer")


def test_init_scaffolds_a_team_and_never_overwrites(project: Project, tmp_path: Path) -> None:
    target = tmp_path / "new team"
    result = project.cli("init", str(target))
    assert result.returncode == 0, result.stderr
    assert (target / "roles.yaml").is_file()
    for role in TEAM:
        assert (target / "prompts" / f"{role}.md").is_file()
        assert (target / "memo" / role / "inbox").is_dir()
        assert f"created {target / 'prompts' / f'{role}.md'}" in result.stdout
    config = yaml.safe_load((target / "roles.yaml").read_text(encoding="utf-8"))
    assert set(config["roles"]) == set(TEAM)
    # what a person changed survives a second init; only what is missing comes back
    config_text = (target / "roles.yaml").read_text(encoding="utf-8")
    (target / "roles.yaml").write_text("# mine\n" + config_text, encoding="utf-8")
    (target / "prompts" / "builder.md").write_text("my own prompt $memo\n", encoding="utf-8")
    (target / "prompts" / "planner.md").unlink()
    (target / "memo" / "builder" / "inbox" / "keep.md").write_text("a memo\n", encoding="utf-8")
    before = (target / "roles.yaml").read_bytes()
    again = project.cli("init", str(target))
    assert again.returncode == 0, again.stderr
    assert (target / "roles.yaml").read_bytes() == before
    assert (target / "prompts" / "builder.md").read_text(encoding="utf-8") == "my own prompt $memo\n"
    assert (target / "prompts" / "planner.md").is_file()
    assert (target / "memo" / "builder" / "inbox" / "keep.md").read_text(encoding="utf-8") == "a memo\n"
    assert f"kept    {target / 'roles.yaml'}" in again.stdout
    assert f"created {target / 'prompts' / 'planner.md'}" in again.stdout


def test_the_scaffolded_team_runs_with_the_stand_in(project: Project) -> None:
    result = project.cli("init", str(project.root))
    assert result.returncode == 0, result.stderr
    if shutil.which("claude") is None:  # as scaffolded it wants `claude`, and says so
        refused = project.cli("up", "--plain", timeout=30)
        assert refused.returncode == 2 and "'claude' not found on PATH" in refused.stderr
    orch = project.up(ORCHESTRATOR_SPAWN_CMD=shlex.join([sys.executable, str(STAND_IN)]))
    project.drop("builder", "task.md", {"id": "T-1", "subject": "build it"})
    project.drop("project-manager", "kickoff.md", {"id": "K-1", "subject": "start"})
    wait_for(lambda: project.folder("builder", "archive") == ["task.md"], 60, "the builder's memo archived")
    wait_for(lambda: project.folder("project-manager", "archive") == ["kickoff.md"], 60, "the pm's memo archived")
    assert orch.stop() == 0
    prompts = {r["role"]: r["prompt"] for r in project.records()}
    assert "subject: build it" in prompts["builder"]  # the builder's template hands over $memo
    assert str(project.root / "memo" / "project-manager" / "active" / "kickoff.md") in prompts["project-manager"]


def test_merge_keys_may_come_twice_and_anchors_are_checked_once() -> None:
    """``<<`` is YAML's merge, not a key: two of them in one mapping merge both (PyYAML does), no key is written
    twice; an alias's mapping is checked where it was anchored."""
    from orchestrator.config.yaml_file import load_yaml

    text = "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: *a\n  <<: *b\n  z: 3\nd: *a\n"
    assert load_yaml(text) == ({"a": {"x": 1}, "b": {"y": 2}, "c": {"x": 1, "y": 2, "z": 3}, "d": {"x": 1}}, None)
    assert load_yaml("c:\n  <<: {x: 1}\n  z: 3\n  z: 4\n")[1] == (
        "c.z: written twice (lines 3 and 4); YAML would keep the second alone, so give each its own name or merge them"
    )
