"""The Ray executor's parts that need no cluster: settings, the start-up checks, and the wrapper on a worker.

The wrapper runs here as a plain generator with a stand-in agent and a stop
probe the test controls (the Ray actor only passes it a probe that reads what the
head left with it), so the kill ladder and the orphan sweep are tested on real
processes in a second or two.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import STAND_IN, Project, dead, pid_alive, wait_for
from orchestrator.agents import procs
from orchestrator.agents.proc_table import KEY_ENV, identity
from orchestrator.agents.ray import cluster as ray_cluster
from orchestrator.agents.ray import wrapper
from orchestrator.agents.ray.names import KEY_FILE, Names, prefix
from orchestrator.agents.ray.wire import Beat, Ended, Output, Payload, Started, StartFailed, parse
from orchestrator.agents.spawner import ProcessSpawner, choose_spawner
from orchestrator.config import load_config
from orchestrator.core.errors import ConfigError


def _payload(root: Path, record: Path, front: dict[str, Any], run_id: int = 7, **over: Any) -> Payload:
    memo = "---\n" + yaml.safe_dump({"agent": front}) + "---\nbody\n"
    data: dict[str, Any] = dict(
        run_id=run_id,
        attempt=1,
        lease=uuid.uuid4().hex,
        role="builder",
        root=str(root),
        argv=[sys.executable, str(STAND_IN)],
        prompt="the prompt",
        prompt_via="stdin",
        cwd=".",
        env={
            "STANDIN_RECORD": str(record),
            "ORCHESTRATOR_RUN_ID": str(run_id),
            "ORCHESTRATOR_ATTEMPT": "1",
            "ORCHESTRATOR_ROOT": str(root),
            "ORCHESTRATOR_ROLE": "builder",
        },
        memos={"m.md": memo},
        batch=False,
        poll=0.05,
        beat=0.2,
        lost_after=1.0,
    )
    data.update(over)
    return Payload(**data)


def _records(path: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_wrapper_runs_the_agent_streams_its_output_and_reports_its_exit(tmp_path: Path) -> None:
    record = tmp_path / "rec.jsonl"
    messages = list(wrapper.run(_payload(tmp_path, record, {"say": "hello", "exit": 3}), lambda: None, "node-a"))
    assert isinstance(messages[0], Started) and messages[0].node == "node-a"
    assert "hello (attempt 1)" in "".join(m.data for m in messages if isinstance(m, Output))
    end = messages[-1]
    assert isinstance(end, Ended) and end.code == 3 and not end.stopped
    (started,) = _records(record)
    assert started["prompt"] == "the prompt"
    assert started["sid"] == started["pid"]  # its own session and process group
    assert Path(started["memo"]).name == "m.md" and not Path(started["memo"]).exists()  # a private copy, removed


def test_wrapper_stop_kills_grandchild_and_setsid_escapee_and_reports_them(tmp_path: Path) -> None:
    record = tmp_path / "rec.jsonl"
    asked = threading.Event()
    front = {"sleep": 60, "grandchild": True, "setsid": True, "ignore_term": True}
    stream = wrapper.run(_payload(tmp_path, record, front), lambda: 0.3 if asked.is_set() else None, "node-a")
    first = next(stream)
    assert isinstance(first, Started)
    (rec,) = wait_for(lambda: _records(record), what="the agent's record")
    agent, (child, escapee) = rec["pid"], rec["children"]
    wait_for(
        lambda: (
            subprocess.run(["ps", "-o", "sid=", "-p", str(escapee)], capture_output=True, text=True).stdout.strip()
            == str(escapee)
        ),
        what="the setsid escapee in its own session",
    )
    asked.set()
    rest = list(stream)
    end = rest[-1]
    assert isinstance(end, Ended) and end.stopped and end.why == "asked"
    assert {agent, child, escapee} <= set(end.pids) and end.escalated and end.survivors == []
    assert not any(pid_alive(p) for p in (agent, child, escapee))


def test_wrapper_fences_itself_when_it_cannot_reach_the_head(tmp_path: Path) -> None:
    record = tmp_path / "rec.jsonl"

    def unreachable() -> float | None:
        raise TimeoutError("no head")

    messages = list(wrapper.run(_payload(tmp_path, record, {"sleep": 60}, lost_after=1.0), unreachable, "n"))
    end = messages[-1]
    assert isinstance(end, Ended) and end.stopped and end.why == "lost the head"
    assert not pid_alive(_records(record)[0]["pid"])


def test_wrapper_keeps_its_agent_for_reconnect_within_when_the_head_is_gone_then_kills_it(tmp_path: Path) -> None:
    record = tmp_path / "rec.jsonl"
    heard = [True]

    def head() -> float | None:  # answers once, then is gone
        if heard.pop() if heard else False:
            return None
        raise TimeoutError("no head")

    began = time.monotonic()
    payload = _payload(tmp_path, record, {"sleep": 60}, lost_after=0.2, reconnect_within=2.5)
    messages = list(wrapper.run(payload, head, "n"))
    end = messages[-1]
    assert isinstance(end, Ended) and end.stopped and end.why == "lost the head"
    assert time.monotonic() - began >= 2.5  # not after lost_after: the agent waited for a head to come back
    assert not pid_alive(_records(record)[0]["pid"])


def test_wrapper_that_cannot_start_the_command_says_so(tmp_path: Path) -> None:
    payload = _payload(tmp_path, tmp_path / "r", {}, argv=["no-such-agent-command"])
    (message,) = list(wrapper.run(payload, lambda: None, "node-b"))
    assert isinstance(message, StartFailed) and "no-such-agent-command" in message.reason and "node-b" in message.reason


def test_orphans_of_a_dead_wrapper_are_killed_and_live_wrappers_agents_spared(tmp_path: Path) -> None:
    # a "wrapper" that died: a process that has exited, whose pid and create time the orphan still carries
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    base = {"ORCHESTRATOR_ROOT": str(tmp_path), "ORCHESTRATOR_ATTEMPT": "1", "PATH": "/usr/bin:/bin"}
    orphan = subprocess.Popen(
        ["sleep", "60"],
        env={**base, "ORCHESTRATOR_RUN_ID": "5", wrapper.WRAPPER_ENV: f"{gone.pid}:1.0"},
        start_new_session=True,
    )
    me = procs.ProcRef.of(os.getpid())
    assert me is not None
    kept = subprocess.Popen(
        ["sleep", "60"],
        env={**base, "ORCHESTRATOR_RUN_ID": "6", wrapper.WRAPPER_ENV: f"{me.pid}:{me.create_time}"},
        start_new_session=True,
    )
    try:
        wait_for(lambda: procs.environ(orphan.pid) and procs.environ(kept.pid), what="both environments")
        ended = wrapper.sweep_orphans(str(tmp_path))
        assert orphan.pid in ended and kept.pid not in ended
        orphan.wait(5)
        assert kept.poll() is None
    finally:
        kept.kill()
        kept.wait()
        orphan.kill()
        orphan.wait()


def test_a_keyed_wrapper_sweeps_orphans_of_before_the_keys_and_never_another_projects(tmp_path: Path) -> None:
    """After an upgrade (`ray stop`, install, `ray start`), agents started before projects had a key are orphans of
    this root: swept. An orphan carrying another project's key (the same path on another machine) is spared."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    base = {
        "ORCHESTRATOR_ROOT": str(tmp_path),
        "ORCHESTRATOR_RUN_ID": "5",
        "ORCHESTRATOR_ATTEMPT": "1",
        "PATH": "/usr/bin:/bin",
        wrapper.WRAPPER_ENV: f"{gone.pid}:1.0",
    }
    agents = {
        key: subprocess.Popen(["sleep", "60"], env={**base, **extra}, start_new_session=True)
        for key, extra in (("none", {}), ("theirs", {KEY_ENV: "other"}), ("ours", {KEY_ENV: "mine"}))
    }
    try:
        wait_for(lambda: all(procs.environ(a.pid) for a in agents.values()), what="their environments")
        ended = wrapper.sweep_orphans(str(tmp_path), "mine", 6, 1)
        assert sorted(ended) == sorted([agents["none"].pid, agents["ours"].pid])
        assert agents["theirs"].poll() is None
    finally:
        for agent in agents.values():
            agent.kill()
            agent.wait()


def test_an_agent_of_an_earlier_attempt_of_the_same_run_is_killed_though_its_wrapper_lives(tmp_path: Path) -> None:
    """The head gave that attempt up (its wrapper hung, or was cut off from the head): the retry's wrapper kills its
    agent before starting its own, whatever its wrapper; another run's agent, or a later attempt's, is spared."""
    me = procs.ProcRef.of(os.getpid())  # a live "wrapper" for each of them
    assert me is not None
    base = {
        "ORCHESTRATOR_ROOT": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        wrapper.WRAPPER_ENV: f"{me.pid}:{me.create_time}",
    }
    agents = {
        (run, attempt): subprocess.Popen(
            ["sleep", "60"],
            env={**base, "ORCHESTRATOR_RUN_ID": str(run), "ORCHESTRATOR_ATTEMPT": str(attempt)},
            start_new_session=True,
        )
        for run, attempt in ((5, 1), (5, 3), (6, 1))
    }
    try:
        wait_for(lambda: all(procs.environ(a.pid) for a in agents.values()), what="their environments")
        ended = wrapper.sweep_orphans(str(tmp_path), None, 5, 2)
        assert ended == [agents[(5, 1)].pid]
        agents[(5, 1)].wait(5)
        assert agents[(5, 3)].poll() is None and agents[(6, 1)].poll() is None
        assert wrapper.sweep_orphans(str(tmp_path)) == [], "with no run named, live wrappers' agents are spared"
    finally:
        for agent in agents.values():
            agent.kill()
            agent.wait()


def test_a_projects_names_and_agents_are_its_own_though_another_is_at_the_same_path(tmp_path: Path) -> None:
    """Two projects at one path on two machines (each container's ``/app``) keep different keys, so their actors'
    names and their agents' marks differ. Names of before the key are looked for until a start has halted those it
    did not take back; then only those of the attempts it took back under them, which may still run."""
    root, old = "/app", prefix("/app", "")
    first, other = Names(root, tmp_path / "a"), Names(root, tmp_path / "b")
    assert first.actor(1, 1) != other.actor(1, 1) and first.parse(other.actor(1, 1)) is None
    assert identity(root, first.key) != identity(root, other.key) and identity(root, None) == root
    assert first.candidates(1, 1) == [first.actor(1, 1), old + "1-1"] and first.parse(old + "7-2") == (7, 2)
    again = Names(root, tmp_path / "a")  # a start that failed before its recovery halted anything: the same
    assert again.key == first.key and again.candidates(1, 1) == first.candidates(1, 1) and again.parse(old + "7-2")
    again.took_back(old + "7-2", 7, 2)
    again.took_back(again.actor(8, 1), 8, 1)
    again.settle()
    later = Names(root, tmp_path / "a")
    assert later.candidates(7, 2) == [later.actor(7, 2), old + "7-2"], "taken back under it: still looked for"
    assert later.candidates(1, 1) == [later.actor(1, 1)] and later.parse(old + "1-1") is None, "another's now"
    assert later.parse(later.actor(7, 2)) == (7, 2)
    later.settle()  # a start that took nothing back under an old name: the last one is over
    assert Names(root, tmp_path / "a").candidates(7, 2) == [later.actor(7, 2)]
    (tmp_path / "a" / KEY_FILE).write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"ray-project-key: empty; remove it") as refused:
        Names(root, tmp_path / "a")
    assert "\n" not in str(refused.value)


def test_a_local_agent_never_inherits_a_ray_agents_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``up`` running inside a Ray agent (its key in our environment) starts local agents marked by their root
    alone, as its own stops and recovery look for them."""
    from orchestrator.agents.spec import agent_environment
    from orchestrator.config import Role

    monkeypatch.setenv(KEY_ENV, "the-outer-project")
    env = agent_environment(Role(name="b", prompt="p.md"), tmp_path, 1, 1, [tmp_path / "m.md"])
    assert KEY_ENV not in env and env["ORCHESTRATOR_ROOT"] == str(tmp_path)


def test_messages_are_typed_and_a_bad_one_names_its_field() -> None:
    assert isinstance(parse({"type": "beat", "lease": "x"}), Beat)
    with pytest.raises(Exception, match="code"):
        parse({"type": "ended", "lease": "x", "code": "not a number"})


def test_executor_and_resources_keys_are_checked_with_their_path(project: Project) -> None:
    project.configure(
        {"builder": {"resources": {"cpu": 2, "custom": {"role_builder": 1}, "node_labels": {"pool": "b"}}}},
        executor={"kind": "ray", "address": "ray://head:10001", "lost_after": "20s"},
    )
    config = load_config(project.root)
    assert config.executor.kind == "ray" and config.executor.lost_after == 20.0
    assert config.roles["builder"].resources.cpu == 2 and config.roles["builder"].resources.custom == {
        "role_builder": 1
    }
    project.configure({"builder": {"resources": {"cpus": 2}}})
    with pytest.raises(ConfigError, match=r"roles\.builder\.resources\.cpus: unknown key"):
        load_config(project.root)
    project.configure({"builder": {}}, executor={"kind": "dask"})
    with pytest.raises(ConfigError, match=r"executor\.kind"):
        load_config(project.root)


def test_local_executor_never_imports_ray(project: Project) -> None:
    project.configure({"builder": {}})
    code = (
        "import sys; from pathlib import Path; from orchestrator.config import load_config; "
        "from orchestrator.agents.spawner import choose_spawner; import orchestrator.supervisor.loop; "
        f"s = choose_spawner(load_config(Path({str(project.root)!r})), print); "
        "assert type(s).__name__ == 'ProcessSpawner', s; assert 'ray' not in sys.modules, 'ray was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_ray_asked_for_but_not_installed_fails_at_start_up_in_one_line(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.configure({"builder": {}}, executor={"kind": "ray"})
    monkeypatch.setattr(ray_cluster, "ray_installed", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'orchestrator\[ray\]'") as caught:
        choose_spawner(load_config(project.root), print)
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2
    assert isinstance(
        choose_spawner(
            load_config(project.root).model_copy(
                update={"executor": load_config(project.root).executor.model_copy(update={"kind": "local"})}
            ),
            print,
        ),
        ProcessSpawner,
    )


def test_unreachable_cluster_fails_at_start_up_in_one_line(project: Project) -> None:
    project.configure({"builder": {}}, executor={"kind": "ray", "address": "127.0.0.1:1"})
    started = time.monotonic()
    result = project.cli("up", "--plain", timeout=120)
    assert result.returncode == 30, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert any("cannot reach the Ray cluster at '127.0.0.1:1'" in line for line in lines), result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 120
    assert not (project.root / ".orchestrator" / KEY_FILE).exists(), (
        "a start that never reached the cluster makes no key"
    )
    assert dead  # the helper is shared with the cluster tests


def test_output_split_inside_a_character_arrives_whole(tmp_path: Path) -> None:
    text = "x" + "é" * 70_000  # two-byte characters after one byte: a read of 64 KB ends inside a character
    messages = list(wrapper.run(_payload(tmp_path, tmp_path / "r", {"say": text}), lambda: None, "n"))
    streamed = "".join(m.data for m in messages if isinstance(m, Output))
    assert streamed == f"{text} (attempt 1)\n" and "\ufffd" not in streamed


# ---------------------------------------------------------------- an sdk runner under the wrapper


def records_of(root: Path) -> list[dict[str, Any]]:
    """What the fake CLI received."""
    return _records(root / "claude.jsonl")


def _sdk_payload(root: Path, cli: Path, prompt: str) -> Payload:
    spec = {"prompt": prompt, "options": {"env": {"FAKE_CLAUDE_RECORD": str(root / "claude.jsonl")}}}
    return _payload(root, root / "rec.jsonl", {}, backend="sdk", sdk_spec=spec, cli_path=str(cli))


@pytest.mark.os_level
def test_wrapper_runs_the_sdk_runner_relays_a_tell_and_its_events_and_stops_its_tree(
    tmp_path: Path, fake_cli: Path
) -> None:
    import json

    from orchestrator.agents.ray.wire import ControlAnswer, SdkEvent, TranscriptLines

    mail: list[dict[str, Any]] = []
    stop: list[float] = []
    seen: list[Any] = []
    tell = {"id": "t1", "what": "tell", "line": json.dumps({"op": "tell", "text": "and more"}) + "\n"}
    for message in wrapper.run(
        _sdk_payload(tmp_path, fake_cli, "[slow] work"),
        lambda: stop[0] if stop else None,
        "n",
        lambda: [mail.pop()] if mail else [],
    ):
        seen.append(message)
        if (
            isinstance(message, SdkEvent)
            and '"activity"' in message.line
            and not any(isinstance(m, ControlAnswer) for m in seen)
        ):
            mail.append(tell)
        if isinstance(message, ControlAnswer):
            stop.append(0.5)
    started, ended = seen[0], seen[-1]
    assert isinstance(started, Started) and isinstance(ended, Ended) and ended.stopped
    events = [json.loads(m.line)["event"] for m in seen if isinstance(m, SdkEvent)]
    assert events[:2] == ["session", "activity"]
    pending = [json.loads(m.line) for m in seen if isinstance(m, SdkEvent) and '"tells"' in m.line]
    assert pending[0]["pending"] == 1  # the runner took the tell (queued behind the slow turn, as locally)
    assert [m for m in seen if isinstance(m, ControlAnswer)] == [ControlAnswer(lease=started.lease, id="t1")]
    records = records_of(tmp_path)
    (cli_pid,) = {r["pid"] for r in records}
    assert started.pid in ended.pids and dead(started.pid, started.create_time) and not pid_alive(cli_pid)
    transcript = "".join(m.data for m in seen if isinstance(m, TranscriptLines))
    assert json.loads(transcript.splitlines()[0])["type"] == "prompt"


def test_an_sdk_control_after_the_session_ended_is_refused_in_one_line(tmp_path: Path, fake_cli: Path) -> None:
    import queue

    from orchestrator.agents.ray.sdk_worker import SdkSession

    payload = _sdk_payload(tmp_path, fake_cli, "hi")
    session = SdkSession(payload, tmp_path, queue.Queue())
    session.deliver([{"id": "x", "what": "tell", "line": "{}\n"}])  # never started
    session.closing = True
    session.deliver([{"id": "y", "what": "interrupt", "line": "{}\n"}])
    answers = list(session.tick())
    assert [(a.id, a.refused) for a in answers] == [  # type: ignore[union-attr]
        ("x", "run 7's agent session has already ended; nothing to tell"),
        ("y", "run 7's agent session has already ended; nothing to interrupt"),
    ]


def test_a_token_is_missing_only_when_token_mode_is_on_and_no_source_holds_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    on = {"RAY_AUTH_MODE": "token"}
    assert ray_cluster.token_missing({}, home) is None  # mode off: nothing to send
    problem = ray_cluster.token_missing(on, home)
    assert problem is not None and "RAY_AUTH_MODE=token is set, but there is no token" in problem
    assert str(home / ".ray" / "auth_token") in problem
    assert ray_cluster.token_missing({**on, "RAY_AUTH_TOKEN": "abc"}, home) is None
    named = tmp_path / "token"
    named.write_text("")
    assert "is empty" in (ray_cluster.token_missing({**on, "RAY_AUTH_TOKEN_PATH": str(named)}, home) or "")
    named.write_text("abc\n")
    assert ray_cluster.token_missing({**on, "RAY_AUTH_TOKEN_PATH": str(named)}, home) is None
    (home / ".ray" / "auth_token").write_text("abc\n")
    assert ray_cluster.token_missing(on, home) is None
