"""docs/configuration.md documents every key of roles.yaml, and only keys that exist.

The keys come from the JSON Schema that `orchestrator config schema` prints, so a key added to a settings model
fails this test until it has a row in one of the two reference tables ("Every key at the top level", "Every key
of a role"), and a row whose key was renamed or removed fails it too. A mapping keyed by the user's names
(`roles`, `tasks`, `signals`) is written `NAME` in a row (`tasks.NAME.daily`). The links between the docs are
checked here as well: a link to a file that is not there, or to a heading it does not have, is a broken page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orchestrator.ops.configuration import roles_schema

REPO = Path(__file__).resolve().parent.parent
CONFIGURATION = REPO / "docs" / "configuration.md"
TOP_TABLE, ROLE_TABLE = "## Every key at the top level", "## Every key of a role"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)
NAME = "NAME"


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].split("/")[-1]]
    return node


def _objects(node: dict[str, Any], defs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The object schemas a value may be, each with the step its keys add to a path ("" or ".NAME")."""
    node = _resolve(node, defs)
    found: list[tuple[str, dict[str, Any]]] = []
    for sub in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
        found += _objects(sub, defs)
    if "properties" in node:
        found.append(("", node))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and any("properties" in _resolve(o, defs) for _, o in _objects(extra, defs)):
        found += [(f".{NAME}" + step, obj) for step, obj in _objects(extra, defs)]
    return found


def schema_keys(
    node: dict[str, Any], defs: dict[str, Any], prefix: str = "", stop: frozenset[str] = frozenset()
) -> set[str]:
    """Every key path below ``node``, dotted; ``stop`` names keys whose insides are listed elsewhere."""
    keys: set[str] = set()
    for step, obj in _objects(node, defs):
        for key, sub in obj["properties"].items():
            path = f"{prefix}{step.lstrip('.')}.{key}" if step else f"{prefix}{key}"
            keys.add(path)
            if key not in stop:
                keys |= schema_keys(sub, defs, path + ".")
    return keys


def free_form(path: str, schema: dict[str, Any], defs: dict[str, Any]) -> bool:
    """Whether some prefix of ``path`` is an object the schema leaves open (``additionalProperties: true``), so a
    documented key below it cannot be checked against the schema."""
    node = schema
    for part in path.split("."):
        node = _resolve(node, defs)
        options = [_resolve(o, defs) for o in node.get("anyOf", [])] or [node]
        if any(o.get("type") == "object" and o.get("additionalProperties") is True for o in options):
            return True
        nxt = [o["properties"][part] for o in options if part in o.get("properties", {})]
        if not nxt:
            return False
        node = nxt[0]
    return False


def table_rows(text: str, heading: str) -> list[str]:
    """The keys in the first column of the section under ``heading`` (up to the next ``## `` heading)."""
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return ROW.findall(text[start : end if end != -1 else len(text)])


def _check(documented: list[str], expected: set[str], schema: dict[str, Any], defs: dict[str, Any], where: str) -> None:
    repeated = sorted({key for key in documented if documented.count(key) > 1})
    assert not repeated, f"{where}: keys with two rows: {repeated}"
    missing = sorted(expected - set(documented))
    assert not missing, f"{where}: keys of the schema with no row in docs/configuration.md: {missing}"
    stale = sorted(key for key in set(documented) - expected if not free_form(key.replace(NAME, "x"), schema, defs))
    assert not stale, f"{where}: rows for keys the schema does not have: {stale}"


def test_every_key_of_roles_yaml_is_documented() -> None:
    schema = roles_schema()
    defs = schema.get("$defs", {})
    text = CONFIGURATION.read_text(encoding="utf-8")
    top = schema_keys(schema, defs, stop=frozenset({"defaults", "roles"}))
    role = schema_keys(defs["RoleSettings"], defs)
    assert {"max_concurrent", "limits.pair_rate", "roles"} <= top and {"timeout", "tasks.NAME.daily"} <= role
    _check(table_rows(text, TOP_TABLE), top, schema, defs, "top level")
    role_schema = schema["properties"]["roles"]["additionalProperties"]
    _check(table_rows(text, ROLE_TABLE), role, role_schema, defs, "role")


def test_the_check_can_fail() -> None:
    """A key missing from the tables, and a row for a key that does not exist, are both found."""
    schema = roles_schema()
    defs = schema.get("$defs", {})
    role_schema = schema["properties"]["roles"]["additionalProperties"]
    role = schema_keys(defs["RoleSettings"], defs)
    rows = table_rows(CONFIGURATION.read_text(encoding="utf-8"), ROLE_TABLE)
    try:
        _check([key for key in rows if key != "grace"], role, role_schema, defs, "role")
    except AssertionError as error:
        assert "'grace'" in str(error)
    else:
        raise AssertionError("a missing row went unnoticed")
    try:
        _check([*rows, "wake.never"], role, role_schema, defs, "role")
    except AssertionError as error:
        assert "wake.never" in str(error)
    else:
        raise AssertionError("a stale row went unnoticed")
    open_object = {"properties": {"x": {"type": "object", "additionalProperties": True}}}
    assert free_form("x.y", open_object, {}) and not free_form("wake.never", role_schema, defs)
    assert not free_form("retry.max", role_schema, defs), "a mapping merged with defaults is described key by key"


LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings (outside code blocks)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_links_between_the_docs_lead_somewhere() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken, f"links to nothing: {broken}"


def test_the_state_table_of_the_architecture_is_the_code_s() -> None:
    """docs/architecture.md's table of transitions is `core/states.py`'s `ALLOWED`, row for row."""
    from orchestrator.core.states import ALLOWED, RunState

    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("## The state table\n")
    section = text[start : text.index("\n## ", start + 1)]
    rows = re.findall(r"^\| `([a-z_]+)` \| (.*) \|$", section, re.MULTILINE)
    documented = {
        RunState(state): {RunState(t) for t in re.findall(r"`([a-z_]+)`", targets)} for state, targets in rows
    }
    assert len(rows) == len(documented) == len(RunState), "a state is missing from the table, or has two rows"
    assert documented == {state: set(targets) for state, targets in ALLOWED.items()}


def test_the_readme_stays_one_a_reader_can_finish() -> None:
    """The README is the way in (what it is, the two commands, a tour, the essentials, the commands); the rest
    belongs in docs/, where a page per concern keeps each one short enough to read through."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move the detail into docs/"


def test_the_readme_lists_every_command() -> None:
    """Each sub-command of the CLI's parser has a row in the README's table of commands."""
    import argparse

    from orchestrator.commands.parser import build

    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Commands\n")
    table = text[start : text.index("\n## ", start + 1)]
    listed = set(re.findall(r"^\| `orchestrator ([a-z]+)", table, re.MULTILINE))
    parser = build()
    commands = {
        name for action in parser._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices
    }
    assert {"up", "status", "cancel"} <= commands
    missing = sorted(commands - listed)
    assert not missing, f"commands with no row in the README's table: {missing}"


FENCE = re.compile(r"^```[ \t]*(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for every `orchestrator ...` command of the shell examples (```sh and plain blocks),
    including those in a pipe, after `;`, before a redirection and inside `$(...)`."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for match in FENCE.finditer(page.read_text(encoding="utf-8")):
            if match.group(1) not in ("sh", ""):
                continue
            for line in match.group(2).splitlines():
                parts = re.findall(r"\$\((orchestrator [^)]*)\)", line) + re.split(r"\s;\s|\||\s>\s|&&", line)
                found += [(page.name, part.strip()) for part in parts if part.strip().startswith("orchestrator ")]
    return found


def test_every_command_the_docs_show_is_one_the_cli_takes() -> None:
    """The commands of the examples parse with the CLI's own parser: no option or sub-command that is not there."""
    import shlex

    from orchestrator.commands.parser import build

    commands = shown_commands()
    assert len(commands) >= 15, "the examples' commands were not found"
    wrong = []
    for page, command in commands:
        try:
            build().parse_args(shlex.split(command, comments=True)[1:])
        except Exception as error:  # noqa: BLE001 - each one named in the failure
            wrong.append(f"{page}: {command}: {error}")
    assert not wrong, "\n".join(wrong)
    try:
        build().parse_args(["cancel", "K-1", "--no-such-option"])
    except Exception:  # noqa: BLE001 - the check above can fail
        pass
    else:
        raise AssertionError("a wrong option parsed")
