"""Sending one payload through one channel: our signed webhook, Apprise, or a command given the JSON on stdin.

Each sender returns what the other end answered (``HTTP 204``, ``exit 0``) or raises ``DeliveryError`` with one
line. The secrets a channel uses (its URL, its HMAC key) are read from the environment at each send and listed by
``secrets_of`` so that no line for people ever shows them.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.config.notify import AppriseChannel, CommandChannel, WebhookChannel
from orchestrator.notify.payload import title_and_text

AnyChannel = WebhookChannel | AppriseChannel | CommandChannel
SIGNATURE_HEADER = "X-Orchestrator-Signature"
ANSWER_MAX = 200  # characters of an answer kept for the line that reports it


class DeliveryError(Exception):
    """The channel did not take the event; the message is one line, with no secret in it."""


def apprise_installed() -> bool:
    """Whether Apprise can be imported here (without importing it: it is slow to load)."""
    try:
        return importlib.util.find_spec("apprise") is not None
    except ValueError:  # hidden on purpose (``sys.modules["apprise"] = None``)
        return False


def signature(secret: str, body: bytes) -> str:
    """The header's value: ``sha256=`` and the hex HMAC-SHA256 of the body under ``secret``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def secrets_of(channel: AnyChannel, environ: Mapping[str, str]) -> list[str]:
    """The values no line may show: the URL and the key the channel reads from the environment."""
    names = [getattr(channel, "url_env", None), getattr(channel, "secret_env", None)]
    found = [environ.get(name, "") for name in names if name]
    if isinstance(channel, WebhookChannel) and channel.url:
        found.append(channel.url)
    return [value for value in found if len(value) >= 4]


def _env(name: str, environ: Mapping[str, str]) -> str:
    value = environ.get(name, "")
    if not value:
        raise DeliveryError(f"the variable {name} is not set")
    return value


def send(channel: AnyChannel, body: dict[str, Any], environ: Mapping[str, str], cwd: Path) -> str:
    """Send ``body`` through ``channel``; the answer, or ``DeliveryError``."""
    if isinstance(channel, WebhookChannel):
        return _webhook(channel, body, environ)
    if isinstance(channel, AppriseChannel):
        return _apprise(channel, body, environ)
    return _command(channel, body, cwd)


def _webhook(channel: WebhookChannel, body: dict[str, Any], environ: Mapping[str, str]) -> str:
    url = channel.url or _env(channel.url_env or "", environ)
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "orchestrator-notify"}
    if channel.secret_env:
        headers[SIGNATURE_HEADER] = signature(_env(channel.secret_env, environ), data)
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=channel.timeout) as response:  # noqa: S310 (http(s) only)
            return f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise DeliveryError(f"cannot reach it: {exc.reason}") from None
    except (TimeoutError, OSError) as exc:
        raise DeliveryError(f"cannot reach it: {exc or type(exc).__name__}") from None


def _apprise(channel: AppriseChannel, body: dict[str, Any], environ: Mapping[str, str]) -> str:
    url = _env(channel.url_env, environ)
    try:
        import apprise
    except ImportError:
        raise DeliveryError("Apprise is not installed: pip install 'orchestrator[notify]'") from None
    quiet = logging.getLogger("apprise")  # its own lines may show the URL: they are not ours to print
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    sender = apprise.Apprise()
    if not sender.add(url):
        raise DeliveryError(f"Apprise does not know the service of the URL in ${channel.url_env}")
    title, text = title_and_text(body)
    if not sender.notify(title=title, body=text):
        raise DeliveryError("the service did not take it (Apprise said no)")
    return "sent"


def _command(channel: CommandChannel, body: dict[str, Any], cwd: Path) -> str:
    data = json.dumps(body, ensure_ascii=False).encode()
    try:
        done = subprocess.run(  # noqa: S603 (the team's own command, from roles.yaml)
            channel.argv, input=data, capture_output=True, timeout=channel.timeout, cwd=cwd, check=False
        )
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"{channel.argv[0]} ran over its {channel.timeout:g}s") from None
    except OSError as exc:
        raise DeliveryError(f"cannot run {channel.argv[0]}: {exc.strerror or exc}") from None
    said = (done.stdout or done.stderr).decode("utf-8", "replace").strip().splitlines()
    first = f": {said[0][:ANSWER_MAX]}" if said else ""
    if done.returncode != 0:
        raise DeliveryError(f"{channel.argv[0]} exited {done.returncode}{first}")
    return f"exit 0{first}"


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def command_path(channel: CommandChannel, cwd: Path, environ: Mapping[str, str]) -> str | None:
    """Where the command's program is (a path is taken from ``cwd``), or None when it is not found."""
    import shutil

    program = channel.argv[0]
    if os.sep in program:
        path = cwd / program
        return str(path) if os.access(path, os.X_OK) and path.is_file() else None
    return shutil.which(program, path=environ.get("PATH"))
