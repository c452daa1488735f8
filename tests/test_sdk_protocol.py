"""The sdk runner's wire protocol: every message round-trips, and a bad one is refused naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agents.sdk.backend import runner_spec
from orchestrator.agents.sdk.protocol import (
    SPEC_OPTIONS,
    ActivityEvent,
    CostEvent,
    DoneEvent,
    FailureEvent,
    Interrupt,
    ProtocolError,
    ResultEvent,
    RunnerSpec,
    SessionEvent,
    SpecOptions,
    Tell,
    parse_control,
    parse_event,
    parse_spec,
)
from orchestrator.agents.spec import LaunchSpec
from orchestrator.config import Role
from orchestrator.config.sdk import SdkSettings, SystemPromptPreset

EVENTS = [  # each event as a model, and as the runner's docstring documents it on the wire
    (SessionEvent(session_id="s-1"), {"event": "session", "session_id": "s-1"}),
    (ActivityEvent(text="Bash: ls"), {"event": "activity", "text": "Bash: ls"}),
    (CostEvent(usd=0.25), {"event": "cost", "usd": 0.25}),
    (
        ResultEvent(
            cost_usd=0.25,
            input_tokens=100,
            output_tokens=20,
            num_turns=1,
            session_id=None,
            is_error=False,
            subtype="success",
        ),
        {
            "event": "result",
            "cost_usd": 0.25,
            "input_tokens": 100,
            "output_tokens": 20,
            "num_turns": 1,
            "session_id": None,
            "is_error": False,
            "subtype": "success",
        },
    ),
    (FailureEvent(reason="it broke"), {"event": "failure", "reason": "it broke"}),
    (FailureEvent(reason="over", budget=True), {"event": "failure", "reason": "over", "budget": True}),
    (DoneEvent(code=3), {"event": "done", "code": 3}),
]


@pytest.mark.parametrize(("event", "wire"), EVENTS, ids=lambda v: getattr(v, "event", ""))
def test_every_event_round_trips(event: Any, wire: dict[str, Any]) -> None:
    line = event.line()
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == wire
    assert parse_event(line) == event
    assert parse_event(json.dumps(wire).encode()) == event  # the orchestrator reads bytes


CONTROLS = [
    (Interrupt(), {"op": "interrupt", "keep": False}),
    (Interrupt(keep=True), {"op": "interrupt", "keep": True}),
    (Tell(text="and then?"), {"op": "tell", "text": "and then?"}),
]


@pytest.mark.parametrize(("control", "wire"), CONTROLS, ids=lambda v: getattr(v, "op", ""))
def test_every_control_round_trips(control: Any, wire: dict[str, Any]) -> None:
    assert json.loads(control.line()) == wire
    assert parse_control(control.line()) == control
    assert parse_control(json.dumps(wire)) == control


def test_an_interrupt_without_keep_does_not_keep() -> None:
    assert parse_control('{"op": "interrupt"}') == Interrupt(keep=False)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('{"event": "cost", "usd": "lots"}', "usd: "),
        ('{"event": "session"}', "session_id: Field required"),
        ('{"event": "activity", "text": "x", "colour": "blue"}', "colour: Extra inputs are not permitted"),
        (
            '{"event": "result", "cost_usd": 1, "input_tokens": 1, "output_tokens": 1, "num_turns": "many",'
            ' "session_id": null, "is_error": false, "subtype": null}',
            "num_turns: ",
        ),
        ('{"event": "party"}', "event: Input tag 'party'"),
        ('{"usd": 1}', "event: Unable to extract tag"),
        ("[1, 2]", "the event line: "),
        ("not json", "the event line: Invalid JSON"),
    ],
)
def test_a_bad_event_names_its_field(line: str, named: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_event(line)
    assert str(info.value).startswith(named), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('{"op": "tell"}', "text: Field required"),
        ('{"op": "tell", "text": "  "}', "text: Value error, a tell needs text"),
        ('{"op": "tell", "text": 5}', "text: Input should be a valid string"),
        ('{"op": "interrupt", "keep": "maybe"}', "keep: "),
        ('{"op": "interrupt", "now": true}', "now: Extra inputs are not permitted"),
        ('{"op": "pause"}', "op: Input tag 'pause'"),
        ('{"text": "hi"}', "op: Unable to extract tag"),
        ("not json", "the control line: Invalid JSON"),
    ],
)
def test_a_bad_control_names_its_field(line: str, named: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_control(line)
    assert str(info.value).startswith(named), str(info.value)


def test_the_spec_round_trips_and_null_means_absent() -> None:
    spec = RunnerSpec(
        prompt="hello",
        transcript="/t.jsonl",
        resume="s-1",
        per_run_usd=0.5,
        options=SpecOptions(
            model="m",
            system_prompt=SystemPromptPreset(append="Be brief."),
            allowed_tools=["Read"],
            max_turns=3,
            env={"A": "1"},
        ),
    )
    assert parse_spec(spec.line()) == spec
    assert set(spec.wire()["options"]) == SPEC_OPTIONS
    assert parse_spec('{"prompt": "x", "options": null, "resume": null}') == RunnerSpec(prompt="x")
    plain = parse_spec('{"prompt": "x", "options": {"system_prompt": "terse", "allowed_tools": null}}')
    assert plain.options.system_prompt == "terse" and plain.options.allowed_tools == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "the spec on stdin is not JSON: "),
        ('{"prompt": 5}', "prompt: Input should be a valid string"),
        ("{}", "prompt: Field required"),
        ('"hello"', "the spec: Input should be a valid dictionary"),
        ('{"prompt": "x", "per_run_usd": "a lot"}', "per_run_usd: Input should be a valid number"),
        ('{"prompt": "x", "options": {"max_turns": "three"}}', "options.max_turns: Input should be a valid integer"),
        ('{"prompt": "x", "options": {"env": {"A": 1}}}', "options.env.A: Input should be a valid string"),
        ('{"prompt": "x", "priority": 1}', "priority: Extra inputs are not permitted"),
        ('{"prompt": "x", "options": {"colour": "blue", "age": 3}}', "unknown option(s) age, colour; known: add_dirs"),
    ],
)
def test_a_bad_spec_names_its_field(line: str, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_spec(line)
    assert str(info.value).startswith(message), str(info.value)


def test_runner_spec_is_a_valid_spec(tmp_path: Path) -> None:
    prompt = {"preset": "claude_code", "append": "Be brief."}
    role = Role(
        name="writer",
        prompt="p.md",
        backend="sdk",
        model="m",
        max_turns=4,
        add_dirs=["docs"],
        system_prompt=prompt,
        budget={"per_run_usd": 0.5},
    )
    launch = LaunchSpec(
        run_id=7,
        attempt=1,
        role=role,
        root=tmp_path,
        prompt="do it",
        memo_paths=[],
        log_path=tmp_path / "7.log",
        cwd=tmp_path,
        env={},
        resume="s-9",
        carried_usd=0.25,
    )
    wire = runner_spec(launch, "/bin/claude", tmp_path, tmp_path / "t.jsonl")
    spec = parse_spec(json.dumps(wire))
    assert (spec.prompt, spec.resume, spec.per_run_usd) == ("do it", "s-9", 0.5)
    assert (spec.carried_usd, spec.session_cap) == (0.25, 0.75), "the budget is on top of what s-9 spent before"
    assert spec.transcript == str(tmp_path / "t.jsonl")
    assert spec.options.system_prompt == SystemPromptPreset(preset="claude_code", append="Be brief.")
    assert spec.options.add_dirs == [str(tmp_path / "docs")] and spec.options.max_turns == 4
    assert wire["options"]["system_prompt"] == {"preset": "claude_code", "append": "Be brief."}


def test_every_sdk_key_of_a_role_reaches_the_spec(tmp_path: Path) -> None:
    """The wire's options are the role's SDK keys: one set on a role arrives in the spec unchanged, but the
    paths, which the orchestrator resolves."""
    given: dict[str, Any] = {
        "model": "m",
        "system_prompt": "terse",
        "permission_mode": "plan",
        "allowed_tools": ["Read"],
        "disallowed_tools": ["Bash"],
        "max_turns": 2,
        "max_budget_usd": 0.75,
        "setting_sources": ["project"],
        "cli_path": "claude",
        "add_dirs": ["docs"],
    }
    assert set(given) == set(SdkSettings.model_fields)
    role = Role(name="w", prompt="p.md", backend="sdk", **given)
    options = SpecOptions.of(role, cli_path="/bin/claude", add_dirs=["/abs/docs"], cwd="/abs", env={"A": "1"})
    wired = parse_spec(RunnerSpec(prompt="x", options=options).line()).options
    resolved = {"cli_path": "/bin/claude", "add_dirs": ["/abs/docs"]}
    assert {key: getattr(wired, key) for key in given} == {**given, **resolved}
    assert (wired.cwd, wired.env) == ("/abs", {"A": "1"})
