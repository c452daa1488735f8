"""``orchestrator service``: install, show and remove the systemd user unit of a project root.

The one boundary is ``Systemd``: it finds ``systemctl``, ``journalctl`` and ``loginctl`` on PATH and runs them
(tests put recording fakes first on PATH). Without ``systemctl``, or when no user manager answers, every step
that needs one refuses with one line (``NoSystemdError``, exit 2) before anything is written.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.config import Config
from orchestrator.core.errors import NoSystemdError, ServiceError
from orchestrator.ops import unit

Say = Callable[[str], None]
PROBE_SECONDS = 20.0


class Systemd:
    """The systemd tools of this machine, found on PATH; each failure is one line."""

    def tool(self, name: str) -> str:
        """The path of ``name``; ``NoSystemdError`` when it is not on PATH."""
        found = shutil.which(name)
        if found is None:
            raise NoSystemdError(
                f"systemd is not available here (no {name} on PATH): run `orchestrator up` under another "
                "supervisor; `orchestrator service install --dry-run` prints the unit it would write"
            )
        return found

    def require_manager(self) -> None:
        """A user manager answers ``systemctl --user``; else ``NoSystemdError`` with what systemctl said."""
        try:
            done = subprocess.run(
                [self.tool("systemctl"), "--user", "show-environment"],
                capture_output=True,
                text=True,
                errors="replace",
                stdin=subprocess.DEVNULL,
                timeout=PROBE_SECONDS,
            )
        except subprocess.TimeoutExpired:
            raise NoSystemdError(
                f"no systemd user manager answered `systemctl --user` within {PROBE_SECONDS:g}s"
            ) from None
        if done.returncode != 0:
            raise NoSystemdError(
                f"no systemd user manager answers here (systemctl --user: {_last_line(done) or done.returncode}): "
                "log in through a session that starts one (ssh or a desktop login, not su or a container shell)"
            )

    def systemctl(self, *args: str) -> None:
        """``systemctl --user ARGS``; ``ServiceError`` naming the command and systemctl's last line when it fails."""
        argv = [self.tool("systemctl"), "--user", *args]
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ServiceError(
                f"`systemctl --user {shlex.join(args)}` failed (exit {done.returncode}): {_last_line(done) or '-'}"
            )

    def show(self, argv: Sequence[str]) -> int:
        """Run a tool with the terminal as its output (``status``, ``logs``); its exit status."""
        return subprocess.run([self.tool(argv[0]), *argv[1:]], stdin=subprocess.DEVNULL).returncode

    def linger(self, user: str) -> bool | None:
        """Whether ``user``'s manager outlives their logins (``loginctl show-user -p Linger``); None when unknown."""
        loginctl = shutil.which("loginctl")
        if loginctl is None:
            return None
        try:
            done = subprocess.run(
                [loginctl, "show-user", user, "-p", "Linger"],
                capture_output=True,
                text=True,
                errors="replace",
                stdin=subprocess.DEVNULL,
                timeout=PROBE_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return None
        value = done.stdout.strip().removeprefix("Linger=")
        return {"yes": True, "no": False}.get(value) if done.returncode == 0 else None


def install(config: Config, say: Say, *, dry_run: bool = False, systemd: Systemd | None = None) -> int:
    """Write the root's unit, reload systemd, enable and start it; say when lingering is needed."""
    name = unit.unit_name(config.root)
    path = unit.unit_dir() / name
    text = unit.render(unit.spec_for(config))
    user = _user()
    if dry_run:
        say(f"# {path}")
        say(text.rstrip("\n"))
        say("# would run:")
        for args in (("daemon-reload",), ("enable", "--now", name)):
            say(f"#   systemctl --user {shlex.join(args)}")
        say(f"#   loginctl show-user {shlex.quote(user)} -p Linger")
        if shutil.which("systemctl") is None:
            say("# (there is no systemctl on PATH here: install would stop before writing anything)")
        return 0
    systemd = systemd or Systemd()
    systemd.require_manager()
    previous = _read(path)
    _write(path, text)
    say(f"wrote {path}")
    systemd.systemctl("daemon-reload")
    systemd.systemctl("enable", "--now", name)
    say(f"enabled and started {name}; see it with `orchestrator service status` and `orchestrator service logs`")
    if previous is not None and previous != text:
        say(
            f"the unit changed: a service already running takes it at its next start "
            f"(`systemctl --user restart {name}`; running agents finish first, or are adopted)"
        )
    linger = systemd.linger(user)
    if linger is False:
        say(f"to keep it running while you are logged out (and start it at boot): loginctl enable-linger {user}")
    elif linger is None:
        say(
            "loginctl could not say whether lingering is on; to keep it running while you are logged out: "
            f"loginctl enable-linger {user}"
        )
    return 0


def uninstall(root: Path, say: Say, *, dry_run: bool = False, systemd: Systemd | None = None) -> int:
    """Stop and disable the root's unit, remove its file, reload systemd. Nothing installed: say so, exit 0."""
    name = unit.unit_name(root)
    path = unit.unit_dir() / name
    if not path.exists():
        say(f"no service is installed for {root} (no {path}); nothing to do")
        return 0
    if dry_run:
        say("would run:")
        say(f"  systemctl --user disable --now {name}")
        say(f"  rm {shlex.quote(str(path))}")
        say("  systemctl --user daemon-reload")
        return 0
    systemd = systemd or Systemd()
    systemd.require_manager()
    say(f"stopping and disabling {name} (running agents finish first)")
    systemd.systemctl("disable", "--now", name)
    path.unlink(missing_ok=True)
    systemd.systemctl("daemon-reload")
    say(f"removed {path}")
    return 0


def status(root: Path, systemd: Systemd | None = None) -> int:
    """``systemctl --user status`` of the root's unit; 0 when shown, whether it runs or not."""
    name = _installed(root)
    systemd = systemd or Systemd()
    systemd.require_manager()
    code = systemd.show(["systemctl", "--user", "status", "--no-pager", name])
    if code not in (0, 3):  # systemctl's 3: shown, and not running
        raise ServiceError(f"`systemctl --user status {name}` failed (exit {code})")
    return 0


def logs(root: Path, *, follow: bool = False, lines: int | None = None, systemd: Systemd | None = None) -> int:
    """``journalctl --user -u`` of the root's unit (also after an uninstall: the journal keeps them)."""
    argv = ["journalctl", "--user", "-u", unit.unit_name(root)]
    if lines is not None:
        argv += ["-n", str(lines)]
    if follow:
        argv.append("--follow")
    code = (systemd or Systemd()).show(argv)
    if code != 0:
        raise ServiceError(f"`{shlex.join(argv)}` failed (exit {code})")
    return 0


def _installed(root: Path) -> str:
    name = unit.unit_name(root)
    if not (unit.unit_dir() / name).exists():
        raise ServiceError(f"no service is installed for {root}; `orchestrator service install` writes one")
    return name


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name: loginctl takes the uid as well
        return str(os.getuid())


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: Path, text: str) -> None:
    """Atomically (a hidden temporary renamed over it): systemd never reads half a unit."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.with_name(f".{path.name}.tmp").unlink()
        raise ServiceError(f"{path}: cannot write the unit: {exc.strerror or exc}") from None


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""
