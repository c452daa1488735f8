"""The dashboard's pure parts: the door's rules, the address parsing, the reason classes, the events' batches,
and the /proc/net/tcp address format (checked against a real connection of this process)."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from orchestrator.config.web import WebSettings, parse_address
from orchestrator.web import peers
from orchestrator.web.hub import Hub, _new_count
from orchestrator.web.metrics import Metrics, reason_class
from orchestrator.web.security import COOKIE, Door
from orchestrator.web.server import _shown, machine_names

DOOR = Door.for_server(WebSettings(port=0), 8765, "tok")
NOW = 1_000_000.0
SESSION = DOOR.session(NOW)


def check(
    method: str = "GET", cookies: dict[str, str] | None = None, door: Door = DOOR, now: float = NOW, **headers: str
) -> str | None:
    given = {
        "host": "127.0.0.1:8765",
        "authorization": "Bearer tok",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    given = {k: v for k, v in given.items() if v}
    refusal = door.check(method, given, cookies or {}, now=now)
    return refusal.code if refusal else None


def test_the_door() -> None:
    assert check() is None
    assert check(host="localhost:8765") is None and check(host="[::1]:8765") is None
    assert check(host="evil.example:8765") == "forbidden_host" and check(host="127.0.0.1:9999") == "forbidden_host"
    assert check(host="evil.example:8765", authorization="") == "forbidden_host"  # the Host before the token
    assert check(authorization="") == "unauthorized" and check(authorization="Bearer nope") == "unauthorized"
    assert check("POST", origin="http://127.0.0.1:8765") is None
    assert check("POST", origin="http://localhost:8765") is None
    assert check("POST", origin="http://evil.example") == "forbidden_origin"
    assert check("POST", sec_fetch_site="cross-site") == "forbidden_origin"
    assert check("GET", origin="http://evil.example") is None  # a read may come from anywhere with the token
    assert Door(DOOR.token, DOOR.hosts, DOOR.origins, read_only=True).action_refusal() is not None


def test_the_session_cookie_is_the_starts_token_and_expires() -> None:
    assert check(authorization="", cookies={COOKIE: SESSION}) is None
    assert check(authorization="", cookies={COOKIE: "tok"}) == "unauthorized"  # the cookie is not the token
    # within its max age, and not a second after it
    assert check(authorization="", cookies={COOKIE: SESSION}, now=NOW + 12 * 3600 - 1) is None
    assert check(authorization="", cookies={COOKIE: SESSION}, now=NOW + 12 * 3600) == "unauthorized"
    # a later expiry written into the cookie does not match its MAC
    forged = f"{int(NOW) + 10**6}.{SESSION.partition('.')[2]}"
    assert check(authorization="", cookies={COOKIE: forged}) == "unauthorized"
    # the next start has another token: the same cookie opens nothing there
    restarted = Door.for_server(WebSettings(port=0), 8765, "tok2")
    assert check(authorization="", cookies={COOKIE: SESSION}, door=restarted) == "unauthorized"
    short = Door.for_server(WebSettings(port=0, session_max_age="10m"), 8765, "tok")
    assert short.max_age == 600 and short.session(NOW).startswith(f"{int(NOW) + 600}.")


def test_public_urls_and_a_bind_to_every_address_admit_their_names() -> None:
    settings = WebSettings(
        port=0, host="0.0.0.0", allow_remote=True, public_urls=("https://Team.example.org/", "http://myhost:8765")
    )
    door = Door.for_server(settings, 9000, "tok", machine={"box"})
    for host in ("team.example.org", "team.example.org:443", "myhost:8765", "box:9000", "127.0.0.1:9000"):
        assert check(door=door, host=host) is None, host
    for host in ("team.example.org:9000", "myhost:9000", "box:8765", "evil.example:9000", "evil.example"):
        assert check(door=door, host=host) == "forbidden_host", host
    assert check("POST", door=door, host="team.example.org", origin="https://team.example.org") is None
    assert check("POST", door=door, host="team.example.org", origin="http://team.example.org") == "forbidden_origin"
    assert check("POST", door=door, host="box:9000", origin="http://box:9000") is None
    # the machine's names only for a bind to every address
    bound = Door.for_server(WebSettings(port=0), 9000, "tok", machine={"box"})
    assert check(door=bound, host="box:9000") == "forbidden_host"


def test_the_url_printed_for_a_bind_to_every_address_is_admitted_and_so_is_the_machines_name() -> None:
    for wildcard, shown in (("0.0.0.0", "127.0.0.1"), ("::", "[::1]")):
        door = Door.for_server(WebSettings(host=wildcard, allow_remote=True), 9000, "tok", machine_names())
        assert _shown(wildcard) == shown
        assert check(door=door, host=f"{shown}:9000") is None
        assert check(door=door, host=f"{socket.gethostname().lower()}:9000") is None
        assert check(door=door, host="evil.example:9000") == "forbidden_host"


def test_public_urls_are_origins_and_need_allow_remote() -> None:
    assert WebSettings(allow_remote=True, public_urls=("HTTPS://X.org:443/", "http://[::1]:80")).public_urls == (
        "https://x.org",
        "http://[::1]",
    )
    for bad in ("ftp://x.org", "x.org", "https://x.org/dashboard", "https://u:p@x.org", "https://x.org?a=1"):
        with pytest.raises(ValueError, match="public_urls"):
            WebSettings(allow_remote=True, public_urls=(bad,))
    with pytest.raises(ValueError, match="allow_remote"):
        WebSettings(public_urls=("https://x.org",))


def test_settings_and_address() -> None:
    assert parse_address("0").port == 0 and parse_address("127.0.0.1:9000").host == "127.0.0.1"
    assert parse_address("[::1]:9000").host == "::1"
    with pytest.raises(ValueError, match="allow_remote"):
        parse_address("0.0.0.0:9000")
    assert parse_address("0.0.0.0:1", WebSettings(allow_remote=True, read_only=True)).read_only is True
    with pytest.raises(ValueError, match=r"\[HOST:\]PORT"):
        parse_address("localhost")


def test_reason_classes_are_few_and_short() -> None:
    assert reason_class("exit code 3 after 2 attempts") == "exit_code"
    assert reason_class("timed out after 30m") == "timed_out_after"
    assert reason_class(None) == "unknown" and reason_class("3 things") == "other"


def test_metrics_count_an_ended_runs_tokens_by_kind_and_its_estimated_cost() -> None:
    class Quiet:  # the gauges' snapshot: nothing held
        def light(self) -> dict[str, object]:
            return {"runs": [], "queued": {}, "paused": {}, "holds": {}}

    metrics = Metrics(Quiet())  # type: ignore[arg-type]
    figures = {"input_tokens": 2400, "cached_input_tokens": 400, "output_tokens": 600, "reasoning_output_tokens": 240}
    run = {"run_id": 1, "role": "builder", "state": "succeeded", "cost_usd": 0.0086, "cost_estimated": True, **figures}
    metrics.run_changed({"type": "run", "run": run, "previous": None})
    metrics.run_changed({"type": "run", "run": {**run, "run_id": 2, "cost_estimated": False}, "previous": None})
    got = metrics.registry.get_sample_value
    assert got("orchestrator_tokens_total", {"role": "builder", "kind": "cached_input"}) == 800
    assert got("orchestrator_tokens_total", {"role": "builder", "kind": "reasoning_output"}) == 480
    assert got("orchestrator_cost_usd_total", {"role": "builder"}) == pytest.approx(0.0172)
    assert got("orchestrator_cost_estimated_usd_total", {"role": "builder"}) == pytest.approx(0.0086)


def test_events_go_in_batches_and_a_page_that_lags_is_dropped() -> None:
    async def scenario() -> None:
        hub = Hub()
        stream = hub.stream()
        assert (await anext(stream)).startswith(b"retry:")
        reading = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)
        hub.publish({"type": "run", "n": 1})
        hub.publish({"type": "run", "n": 2})
        chunk = await asyncio.wait_for(reading, 2)
        assert chunk.count(b"event: run") == 2  # one write for both
        queue = next(iter(hub.queues))
        for _ in range(queue.maxsize):
            queue.put_nowait(b"x")
        hub.publish({"type": "run"})
        await asyncio.sleep(0.2)
        assert hub.dropped == 1 and not hub.queues
        hub.close()
        await stream.aclose()

    asyncio.run(scenario())


def test_new_notices_are_counted_across_a_sliding_window() -> None:
    assert _new_count([], ["a"]) == 0
    assert _new_count(["a", "b"], ["a", "b", "c", "d"]) == 2
    assert _new_count(["a", "b"], ["b", "c"]) == 1
    assert _new_count(["x"], ["a", "b"]) == 2


def test_the_process_at_the_other_end_of_a_loopback_connection_is_found() -> None:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            server = socket.socket(family, socket.SOCK_STREAM)
            server.bind((host, 0))
        except OSError:
            continue  # no IPv6 loopback here
        server.listen()
        client = socket.create_connection(server.getsockname()[:2])
        accepted, _ = server.accept()
        try:
            # peers skips its own process (the orchestrator never asks about itself), so ask the inode only
            inode = peers.socket_inode(client.getsockname()[:2], server.getsockname()[:2])
            assert inode == os.fstat(client.fileno()).st_ino
        finally:
            for s in (client, accepted, server):
                s.close()
    assert peers.peer_pid(("10.0.0.1", 5), ("10.0.0.2", 6)) is None  # not loopback: not looked up
