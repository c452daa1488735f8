"""`orchestrator config schema|check` and the schema `init` writes: the JSON Schema accepts every file the
orchestrator accepts (the examples of the README and docs/, `init`'s team), refuses what it refuses, and is kept current in
the repository; `config check` prints the values in force.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import Project, error_line
from orchestrator.config import TeamFile
from orchestrator.ops.configuration import INPUTS, roles_schema, schema_text, validator_name

REPO = Path(__file__).resolve().parent.parent
MODELINE = "# yaml-language-server: $schema=./roles.schema.json"


def _validator() -> jsonschema.Draft202012Validator:
    schema = roles_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _problems(data: Any) -> list[str]:
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in _validator().iter_errors(data)]


def _readme_teams() -> list[Any]:
    """Every ```yaml block of the README and docs/ that is a whole roles.yaml (has `roles`); fragments are left
    out."""
    teams = []
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        try:
            data = yaml.safe_load(block)
        except yaml.YAMLError:
            continue  # a memo with front matter, not a configuration
        if isinstance(data, dict) and "roles" in data:
            teams.append(data)
    return teams


def test_the_repository_keeps_the_schema_current() -> None:
    kept = (REPO / "roles.schema.json").read_text(encoding="utf-8")
    assert kept == schema_text(), (
        "roles.schema.json is stale: regenerate it with `make schema` "
        "(or `orchestrator config schema > roles.schema.json`)"
    )


def test_the_schema_accepts_the_readme_examples_and_the_default_teams() -> None:
    teams = _readme_teams()
    assert len(teams) >= 4, "the configuration examples of the README and docs/ were not found"
    for team in teams:
        assert _problems(team) == [], team
    for path in (REPO / "roles.yaml", REPO / "orchestrator" / "templates" / "roles.yaml"):
        assert _problems(yaml.safe_load(path.read_text(encoding="utf-8"))) == [], path


def test_durations_rates_and_off_are_accepted_as_people_write_them() -> None:
    team = {
        "rescan_interval": "500ms",
        "limits": {"chain_depth": None, "pair_rate": "5/30m"},
        "executor": {"poll": 0.5, "lost_after": "2m"},
        "defaults": {"timeout": 90, "grace": "10s", "retry": {"max": 1, "backoff": ["5s", 30]}},
        "roles": {
            "heartbeat": {"wake": {"every": "30m"}, "tasks": {"t": {"every": "1d", "text": "x"}}},
            "b": {"signals": {"s": {"command": ["true"], "timeout": "1.5s"}}},
        },
    }
    assert _problems(team) == []
    # `off` as YAML 1.1 reads it (false, as PyYAML does) and as YAML 1.2 editors do (the string)
    for off in (False, "off", None):
        assert _problems({"limits": {"pair_rate": off}, "roles": {"b": {}}}) == [], off


def test_the_schema_refuses_what_the_orchestrator_refuses() -> None:
    assert _problems({"roles": {"b": {"timout": "30m"}}})  # a misspelt key
    assert _problems({"roles": {"b": {"timeout": "30 minutes"}}})
    assert _problems({"roles": {"b": {"timeout": -1}}})
    assert _problems({"limits": {"pair_rate": "often"}, "roles": {"b": {}}})
    assert _problems({"roles": {"-b": {}}})  # a role name names a folder
    assert _problems({"max_concurrent": 10})  # `roles` is required
    # the mappings that merge with `defaults` key by key are checked key by key too (defect: any mapping passed)
    assert _problems({"roles": {"b": {"workspace": {"mode": "sideways"}}}})
    assert _problems({"roles": {"b": {"workspace": {"copy_files": [".env"]}}}})
    assert _problems({"roles": {"b": {"retry": {"max": -5}}}})
    assert _problems({"roles": {"b": {"crash": {"window": "banana"}}}})
    assert _problems({"defaults": {"budget": {"per_week_usd": 3}}, "roles": {"b": {}}})
    assert not _problems({"defaults": {"retry": {"max": 5}}, "roles": {"b": {"retry": {"backoff": ["1s"]}}}})


def _custom_inputs(schema: Any, found: set[str]) -> set[str]:
    if isinstance(schema, dict):
        if schema.get("type") in ("function-before", "function-wrap", "function-plain"):
            found.add(validator_name(schema["function"]["function"]))
        for value in schema.values():
            _custom_inputs(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _custom_inputs(value, found)
    return found


def test_every_key_that_reads_more_than_its_type_says_so_in_the_schema() -> None:
    """A before- or wrap-validator reads input its type does not describe (``30m`` for a float): without an
    entry in ``INPUTS`` the schema would refuse what the orchestrator accepts."""
    unnamed = _custom_inputs(TeamFile.__pydantic_core_schema__, set()) - set(INPUTS)
    assert unnamed == set(), (
        f"describe what these validators accept in orchestrator/ops/configuration.py INPUTS: {unnamed}"
    )


def test_config_schema_prints_the_schema(project: Project) -> None:
    result = project.cli("config", "schema")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == roles_schema()


def test_init_writes_the_schema_beside_roles_yaml_and_names_it(project: Project, tmp_path: Path) -> None:
    target = tmp_path / "new team"
    result = project.cli("init", str(target))
    assert result.returncode == 0, result.stderr
    roles = (target / "roles.yaml").read_text(encoding="utf-8")
    assert roles.splitlines()[0] == MODELINE
    assert json.loads((target / "roles.schema.json").read_text(encoding="utf-8")) == roles_schema()
    assert f"created {target / 'roles.schema.json'}" in result.stdout
    assert _problems(yaml.safe_load(roles)) == []
    (target / "roles.schema.json").write_text("{}\n", encoding="utf-8")
    again = project.cli("init", str(target))
    assert again.returncode == 0 and (target / "roles.schema.json").read_text(encoding="utf-8") == "{}\n"


def test_config_check_prints_the_values_in_force(project: Project) -> None:
    project.configure(
        {"builder": {"timeout": "2h", "retry": {"max": 1}}, "planner": {}},
        defaults={"grace": "500ms", "retry": {"backoff": ["1m"]}},
        limits={"pair_rate": "5/30m"},
    )
    result = project.cli("config", "check", "--json")
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    builder, planner = values["roles"]["builder"], values["roles"]["planner"]
    assert builder["timeout"] == 7200.0 and planner["timeout"] == 1800.0  # its own, and the default
    assert builder["grace"] == planner["grace"] == 0.5  # from `defaults`
    assert builder["retry"] == {"max": 1, "backoff": [60.0]}  # merged key by key
    assert planner["retry"] == {"max": 3, "backoff": [60.0]}  # `max` from the built-in default
    assert planner["prompt"] == "prompts/planner.md"
    assert values["limits"]["pair_rate"] == [5, 1800.0]
    assert values["root"] == str(project.root)
    people = project.cli("config", "check")
    assert people.returncode == 0, people.stderr
    assert people.stdout.startswith(f"# {project.root / 'roles.yaml'}: valid, roles builder, planner;")
    assert yaml.safe_load(people.stdout) == values


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        ({"timeout": "soon"}, "roles.builder.timeout: expected a duration"),
        ({"prompt": "prompts/missing.md"}, "missing.md"),
    ],
)
def test_config_check_says_the_first_problem_in_one_line(
    project: Project, mutation: dict[str, Any], expected: str
) -> None:
    project.configure({"builder": {}})
    data = yaml.safe_load((project.root / "roles.yaml").read_text(encoding="utf-8"))
    data["roles"]["builder"].update(mutation)
    (project.root / "roles.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    for args in (("config", "check"), ("config", "check", "--json")):
        result = project.cli(*args)
        assert result.returncode == 2
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and expected in lines[0] and error_line(lines[0]), lines


def test_config_check_prints_the_stall_timeout_in_force(tmp_path: Path) -> None:
    """Defect: a role that sets none printed null, though its backend's default (10m for a stream-json `claude`) is
    in force, and `off` printed 0.0, where the docs promise null for a key that is off."""
    from orchestrator.config import load_config
    from orchestrator.ops.configuration import effective

    roles = {
        "streams": {"command": ["claude", "-p", "--output-format", "stream-json", "--verbose"]},
        "off": {"stall_timeout": "off"},
        "own": {"stall_timeout": "5m"},
        "plain": {},
    }
    (tmp_path / "prompts").mkdir()
    for name in roles:
        (tmp_path / "prompts" / f"{name}.md").write_text("x", encoding="utf-8")
    (tmp_path / "roles.yaml").write_text(yaml.safe_dump({"roles": roles}), encoding="utf-8")
    shown = {name: role["stall_timeout"] for name, role in effective(load_config(tmp_path))["roles"].items()}
    assert shown == {"streams": 600.0, "off": None, "own": 300.0, "plain": None}
