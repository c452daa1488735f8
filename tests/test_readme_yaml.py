"""Every YAML example in README.md and docs/*.md loads: the docs' examples are part of the interface.

The pages are read when the tests are collected, so a block added to one is checked with no change here.
Each fenced block whose info string is ``yaml`` (or ``yml``) is one test, named by its line, and is read by
these conventions:

- a block that starts with a ``---`` line is a memo: its front matter must parse, with no warning, as the
  orchestrator reads a memo's (``parse_front_matter``);
- a block with a top-level ``roles:`` is a whole ``roles.yaml``;
- a block without ``roles:`` whose keys are all top-level keys (``max_concurrent``, ``limits``, ``executor``,
  ...) is a fragment of the top level: it gets a minimal team of one role, ``example`` (plus any role it
  names in ``notify`` or ``memory.curator``);
- a block whose keys are all role keys (``wake``, ``tasks``, ``context``, ...) is one role's settings: it
  becomes the role ``example``;
- any other block (keys of both kinds, unknown keys, not a mapping) fails: the page is wrong.

The block is written as ``roles.yaml`` in a temporary folder, with stubs for what it names: every role's
prompt (its ``prompt`` or ``prompts/<role>.md``), the ``context`` files, an executable for every signal or
preflight command given as a path, and the ``cwd`` folders. It must pass ``load_config`` and the same
start-up checks as ``orchestrator up`` (``app.preflight``), with ``ORCHESTRATOR_SPAWN_CMD`` standing in for
the agent programs, which this machine need not have.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.app import preflight
from orchestrator.config import RoleSettings, TeamFile, load_config
from orchestrator.intake.memo import parse_front_matter

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[ \t]*(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
EXAMPLE_ROLE = "example"


def yaml_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, body) of each fenced ``yaml``/``yml`` block."""
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(2))
        for match in FENCE.finditer(text)
        if match.group(1).lower() in ("yaml", "yml")
    ]


def as_team(block: str) -> tuple[str, dict[str, Any]]:
    """The roles.yaml a block stands for, by the conventions of the module's docstring: its text (the block's
    own lines kept as written) and its data."""
    data = yaml.safe_load(block)
    assert isinstance(data, dict) and data, "the block is not a mapping of keys"
    if "roles" in data:
        return block, data
    team_keys, role_keys = set(TeamFile.model_fields), set(RoleSettings.model_fields)
    if set(data) <= team_keys:
        roles = [EXAMPLE_ROLE]
        for named in (data.get("notify"), (data.get("memory") or {}).get("keeper")):
            if isinstance(named, str) and named not in roles:
                roles.append(named)
        text = block.rstrip("\n") + "\nroles:\n" + "".join(f"  {name}: {{}}\n" for name in roles)
    elif set(data) <= role_keys:
        text = f"roles:\n  {EXAMPLE_ROLE}:\n" + textwrap.indent(block, "    ")
    else:
        raise AssertionError(
            f"the block is neither a roles.yaml, a fragment of its top level, nor a role: keys {sorted(data)} "
            f"(not top-level keys: {sorted(set(data) - team_keys)}; not role keys: {sorted(set(data) - role_keys)})"
        )
    return text, yaml.safe_load(text)


def _stub(path: Path, text: str, executable: bool = False) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if executable:
        path.chmod(0o755)


def stub_files(root: Path, team: dict[str, Any]) -> None:
    """Create the prompts, context files, command paths and folders the team names."""
    for channel in team.get("notifications") or []:
        argv = channel.get("argv") or []
        if argv and "/" in str(argv[0]) and not Path(str(argv[0])).is_absolute():
            _stub(root / str(argv[0]), "#!/bin/sh\nexit 0\n", executable=True)
    defaults = team.get("defaults") or {}
    for name, own in (team.get("roles") or {}).items():
        role = {**defaults, **(own or {})}
        _stub(root / str(role.get("prompt") or f"prompts/{name}.md"), "$memo\n")
        for context in role.get("context") or []:
            _stub(root / str(context), f"{context}\n")
        commands = [signal.get("command") or [] for signal in (role.get("signals") or {}).values()]
        for argv in [*commands, *(role.get("preflight") or [])]:
            if argv and "/" in str(argv[0]) and not Path(str(argv[0])).is_absolute():
                _stub(root / str(argv[0]), "#!/bin/sh\nexit 0\n", executable=True)
        if isinstance(role.get("cwd"), str) and not Path(role["cwd"]).is_absolute():
            (root / role["cwd"]).mkdir(parents=True, exist_ok=True)


BLOCKS = [
    (f"{page.relative_to(REPO)} line {line}", body)
    for page in PAGES
    for line, body in yaml_blocks(page.read_text(encoding="utf-8"))
]


def test_the_docs_have_yaml_examples() -> None:
    for page in ("README.md", "docs/configuration.md", "docs/guide.md"):
        found = [where for where, _ in BLOCKS if where.startswith(page + " ")]
        assert found, f"{page} lost its configuration examples, or this test cannot find them"
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("block", [pytest.param(body, id=where) for where, body in BLOCKS])
def test_a_readme_yaml_block_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: str) -> None:
    if block.lstrip().startswith("---"):
        header = parse_front_matter(block.lstrip())
        assert header.warning is None, header.warning
        assert header.extra, "the memo's front matter is empty"
        return
    text, team = as_team(block)
    (tmp_path / "roles.yaml").write_text(text, encoding="utf-8")
    stub_files(tmp_path, team)
    monkeypatch.setenv("ORCHESTRATOR_SPAWN_CMD", sys.executable)
    for channel in team.get("notifications") or []:  # the variables a channel names, as its user exports them
        for key in ("url_env", "secret_env"):
            if channel.get(key):
                monkeypatch.setenv(channel[key], "https://hooks.example.org/team-token")
    preflight(load_config(tmp_path))


def test_a_wrong_block_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: a block the code refuses, or one mixing top-level and role keys."""
    with pytest.raises(Exception, match=r"limits\.chain_depth"):
        test_a_readme_yaml_block_loads(tmp_path, monkeypatch, "limits: {chain_depth: 0}\n")
    with pytest.raises(AssertionError, match="neither a roles.yaml"):
        as_team("limits: {}\nwake: {}\n")
    blocks = yaml_blocks("text\n```yaml\na: 1\n```\n\n```sh\nls\n```\n```yml title\nb: 2\n```\n")
    assert blocks == [(2, "a: 1\n"), (9, "b: 2\n")]
