"""The systemd user unit that runs ``orchestrator up`` for one project root, as text.

Its settings, and why:

- ``ExecStart=<this orchestrator> up --plain --root <root>``: the install that wrote the unit, by its path.
- ``Environment=PATH=...``: the PATH of the shell that installed it (a user manager's own PATH seldom holds
  ``claude`` or a venv), with this orchestrator's folder put first when it is missing, so agents find
  ``orchestrator`` too.
- ``KillMode=process``: a stop or a restart signals ``up`` alone; agents and their keepers live on and the next
  start adopts them (systemd's default, ``control-group``, would kill every agent at each restart).
- ``Restart=on-failure`` with ``RestartPreventExitStatus=1 2 3 5 70``: started again when it died (a signal, an
  unexpected status), never after an ending someone asked for or that a restart cannot mend: 1 a forced
  stop, 2 a bad configuration, 3 a critical role's crash loop, 5 another orchestrator holds the root, 70 a bug
  of ours (it would meet it again at every start).
- ``TimeoutStopSec``: a stop lets running agents finish, so systemd waits the longest role ``timeout`` +
  ``grace`` + ``STOP_MARGIN`` before it kills ``up`` (its agents live on even then).

Values follow systemd's rules (systemd.syntax(7); systemd.service(5), "Command lines"): ``%`` is written
``%%`` everywhere, ``$`` is ``$$`` in command arguments, and a word holding a space, a quote or a backslash
is double-quoted with C escapes. What a unit cannot hold is refused with one line (``ServiceError``).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import Config
from orchestrator.core.errors import ServiceError

STOP_MARGIN = 30.0
RESTART_SEC = 5
RESTART_PREVENT = (1, 2, 3, 5, 70)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NEEDS_QUOTES = re.compile(r"[\s\"'\\;]")
# systemd refuses to start a program whose path holds these ("Executable name contains special characters");
# a dollar would be expanded in the argv[0] systemd passes, and Python finds its venv from argv[0]
_UNSAFE_PROGRAM = re.compile(r"[\x00-\x1f\x7f\"'\\$]")


@dataclass(frozen=True)
class UnitSpec:
    """What the unit of one root says: the root, the command it starts, the PATH it gives, its stop timeout."""

    root: Path
    command: list[str]
    path: str
    stop_seconds: int


def unit_name(root: Path) -> str:
    """``orchestrator-<folder>-<hash>.service``: readable, and unique per root (two ``team`` folders differ)."""
    stem = re.sub(r"[^A-Za-z0-9_]+", "-", root.name).strip("-")[:40] or "team"
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:8]
    return f"orchestrator-{stem}-{digest}.service"


def unit_dir() -> Path:
    """Where the user's own units live: ``$XDG_CONFIG_HOME/systemd/user``, by default ``~/.config/systemd/user``."""
    config_home = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config_home) if os.path.isabs(config_home) else Path.home() / ".config"
    return base / "systemd" / "user"


def installed_path(root: Path) -> str | None:
    """The ``PATH`` the installed unit of ``root`` gives its service (``render``'s quoting undone), or None when no
    unit is installed or it sets none."""
    try:
        text = (unit_dir() / unit_name(root)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, RuntimeError):  # RuntimeError: no home folder to look in
        return None
    for line in text.splitlines():
        value = line.removeprefix("Environment=")
        if value == line:
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        value = value.replace("%%", "%")
        if value.startswith("PATH="):
            return value.removeprefix("PATH=")
    return None


def own_command() -> list[str]:
    """This orchestrator: the ``orchestrator`` script that runs now, by its absolute path (a venv's or pipx's,
    not resolved, so an upgrade in place is picked up), else this Python with ``-m orchestrator``."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "orchestrator" and os.path.isfile(script) and os.access(script, os.X_OK):
        return [os.path.abspath(script)]
    return [sys.executable, "-m", "orchestrator"]


def service_path(command: list[str], path: str) -> str:
    """The PATH the service gets: ``path`` as captured, with the folder of the orchestrator's program first
    when it is missing (agents run ``orchestrator send`` and must find this same install)."""
    folder = os.path.dirname(command[0])
    entries = [entry for entry in path.split(os.pathsep) if entry]
    if folder and folder not in entries:
        entries.insert(0, folder)
    return os.pathsep.join(entries)


def stop_seconds(config: Config) -> int:
    """How long a stop may take: the longest role ``timeout`` + ``grace``, + ``STOP_MARGIN``, in whole seconds."""
    longest = max((role.timeout + role.grace for role in config.roles.values()), default=0.0)
    return math.ceil(longest + STOP_MARGIN)


def spec_for(config: Config, command: list[str] | None = None, path: str | None = None) -> UnitSpec:
    """The unit of ``config``'s root, for this orchestrator and the PATH of this process (or those given)."""
    command = command or own_command()
    captured = path if path is not None else os.environ.get("PATH", os.defpath)
    return UnitSpec(config.root, command, service_path(command, captured), stop_seconds(config))


def render(spec: UnitSpec) -> str:
    """The unit file's text; ``ServiceError`` when systemd could not hold the root, the program or the PATH."""
    root = str(spec.root)
    if _CONTROL.search(root) or root != root.rstrip() or root.endswith("\\"):
        raise ServiceError(
            f"{root}: a systemd unit cannot hold this folder's path (a control character, or a space or backslash "
            "at its end); move the project to a folder without one"
        )
    if _CONTROL.search(spec.path):
        raise ServiceError("PATH holds a control character, which a systemd unit cannot hold; fix PATH and retry")
    argv = [*spec.command, "up", "--plain", "--root", root]
    exec_start = " ".join([program_word(argv[0]), *(argument_word(word) for word in argv[1:])])
    prevent = " ".join(str(code) for code in RESTART_PREVENT)
    return (
        f"# Written by `orchestrator service install` for {root}; `orchestrator service uninstall` removes it.\n"
        "[Unit]\n"
        f"Description=orchestrator: the agent team at {_specifiers(root)}\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={exec_start}\n"
        f"WorkingDirectory={_specifiers(root)}\n"
        f"Environment={_quoted(_specifiers('PATH=' + spec.path))}\n"
        "KillMode=process\n"
        "Restart=on-failure\n"
        f"RestartSec={RESTART_SEC}s\n"
        f"RestartPreventExitStatus={prevent}\n"
        f"TimeoutStopSec={spec.stop_seconds}s\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def program_word(program: str) -> str:
    """The program of ``ExecStart=``: absolute, free of what systemd refuses there, quoted when it has a space."""
    if not os.path.isabs(program) or _UNSAFE_PROGRAM.search(program):
        raise ServiceError(
            f"{program}: systemd starts only a program with an absolute path free of quotes, backslashes, dollars "
            "and control characters; install the orchestrator under such a path"
        )
    text = _specifiers(program)
    return _quoted(text) if _NEEDS_QUOTES.search(text) else text


def argument_word(word: str) -> str:
    """One argument of ``ExecStart=``: specifiers and variables escaped, quoted when it needs to be."""
    if _CONTROL.search(word):
        raise ServiceError(f"{word!r}: a systemd command line cannot hold a control character")
    text = _specifiers(word).replace("$", "$$")
    return text if text and not _NEEDS_QUOTES.search(text) else _quoted(text)


def _specifiers(text: str) -> str:
    return text.replace("%", "%%")


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
