"""The doctor's checks of the whole team: the keeper, inotify's limits, the disk, the state folder and its
database, the clock and the time zone, the accounts a usage limit has paused, and the notification channels."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from orchestrator.agents import keeper
from orchestrator.config import Config
from orchestrator.core.errors import OrchestratorError
from orchestrator.intake import inotify
from orchestrator.intake.memo import FOLDERS
from orchestrator.notify.checks import check_channels
from orchestrator.ops.doctor.findings import Finding, fail, ok, warn
from orchestrator.ops.doctor.host import Host
from orchestrator.ops.doctor.roles import writable_problem

WATCHES_PER_ROLE = 2  # the inbox and the role folder (orchestrator/intake/inotify.py)
WATCHES_LEFT = 1000  # fewer left to other programs than this: a warning (an editor or IDE takes thousands)
DISK_FAIL = 100 * 1024**2
DISK_WARN = 1024**3
INODES_FAIL = 1000
INODES_WARN = 10_000
NOT_BEFORE = datetime(2026, 1, 1, tzinfo=UTC)  # this version did not exist before: a clock earlier is wrong
CLOCK_SLACK = timedelta(minutes=5)
DB_SECONDS = 5.0


def check_keeper(config: Config) -> Finding:
    """The keeper is there and passes its self-check, which ``recovery: adopt`` rests on."""
    if config.executor.kind != "local":
        return ok("keeper", f"not used: agents run on executor {config.executor.kind}")
    found = keeper.find()
    if found.binary is not None:
        return ok("keeper", f"{found.binary} (passes its self-check)")
    if config.recovery == "adopt":
        return fail(
            "keeper",
            f"{config.path}: recovery: adopt needs the keeper, and {found.problem}: without it `up` refuses to start",
            f"{found.remedy}, or set `recovery: restart` in roles.yaml to accept reruns after a crash",
        )
    return warn(
        "keeper",
        f"{found.problem}: with recovery: restart, every run under way when the orchestrator crashes is run again",
        f"{found.remedy}, then `recovery: adopt` repeats none",
    )


def check_ray_token(config: Config) -> list[Finding]:
    """On a Ray cluster: the Ray package, and with token authentication on (``RAY_AUTH_MODE=token``), the token
    ``up`` must send; no finding for agents on this machine."""
    if config.executor.kind != "ray":
        return []
    from orchestrator.agents.ray import INSTALL_HINT, ray_installed
    from orchestrator.agents.ray.cluster import token_missing  # imports no Ray

    if not ray_installed():
        return [
            fail("ray", "executor: kind ray needs the Ray package, which is not installed", f"run `{INSTALL_HINT}`")
        ]

    problem = token_missing(dict(os.environ), Path.home())
    if problem:
        fix = "set RAY_AUTH_TOKEN to the cluster's token, or copy it to ~/.ray/auth_token (`ray get-auth-token` there)"
        return [fail("ray-token", problem, fix)]
    mode = os.environ.get("RAY_AUTH_MODE", "unset")
    return [ok("ray-token", f"RAY_AUTH_MODE {mode}: a token is there, or none is needed")]


def watches_needed(config: Config) -> int | None:
    """The inotify watches the team's watcher takes, None when it is not the inotify one (not Linux, or
    ``ORCHESTRATOR_WATCHER=watchdog``, which watches every folder under each role's)."""
    if os.environ.get("ORCHESTRATOR_WATCHER", "inotify") != "watchdog" and inotify.available():
        return WATCHES_PER_ROLE * len(config.roles)
    if not sys.platform.startswith("linux"):
        return None
    total = 0
    for role in config.roles:
        folder = config.role_dir(role)
        below = sum(len(dirs) for _, dirs, _ in os.walk(folder))  # 0 when it is not there yet
        total += 1 + below + sum(1 for name in FOLDERS if not (folder / name).is_dir())  # `up` makes those
    return total


def check_inotify(config: Config, host: Host) -> Finding:
    """``max_user_watches`` (and ``max_user_instances``) against what the team needs and this user's processes
    already hold."""
    need = watches_needed(config)
    if need is None:
        return ok("inotify", "not used here (no inotify: the watcher polls the folders)")
    limit = host.read_number("sys", "fs", "inotify", "max_user_watches")
    if limit is None:
        return warn(
            "inotify",
            f"cannot read {host.proc}/sys/fs/inotify/max_user_watches; the team needs {need} watches",
            "check `sysctl fs.inotify.max_user_watches` by hand",
        )
    running = host.running_orchestrator(config.state_dir)  # what it holds is the team's own: not counted twice
    used = host.inotify_in_use(skip=running)
    raise_it = (
        f"raise it: `sysctl fs.inotify.max_user_watches={max(524288, 2 * (need + (used.watches if used else 0)))}`"
    )
    raise_it += " (and in /etc/sysctl.d/ to keep it)"
    roles = f"{need} watches needed ({len(config.roles)} role{'s' if len(config.roles) != 1 else ''})"
    if need > limit:
        return fail("inotify", f"{roles}, over max_user_watches {limit}", raise_it)
    if used is None:
        return ok("inotify", f"{roles} of max_user_watches {limit} (what this user's processes hold: unknown)")
    left = limit - used.watches
    held = f"{used.watches} held by this user's {'other ' if running else ''}processes"
    instances = host.read_number("sys", "fs", "inotify", "max_user_instances")
    if instances is not None and used.instances >= instances:
        return fail(
            "inotify",
            f"this user's processes hold {used.instances} inotify instances, max_user_instances {instances}: "
            "`up` cannot make its one",
            "stop some watching programs, or raise `sysctl fs.inotify.max_user_instances`",
        )
    if need > left:
        return fail("inotify", f"{roles}, {held}, max_user_watches {limit}: {left} left", raise_it)
    if left - need < WATCHES_LEFT:
        return warn(
            "inotify", f"{roles}, {held}, max_user_watches {limit}: {left - need} left to other programs", raise_it
        )
    return ok("inotify", f"{roles}, {held}, max_user_watches {limit}")


def check_disk(root: Path, host: Host) -> Finding:
    """Free space and inodes under the root, where memos, logs and the database are written."""
    try:
        stats = host.statvfs(root)
    except OSError as exc:
        return warn("disk", f"cannot tell the free space under {root}: {exc.strerror or exc}", "check `df`")
    free = stats.f_bavail * stats.f_frsize
    inodes = stats.f_favail if stats.f_files else None  # some file systems keep no inode count
    shown = f"{_size(free)} free under {root}" + (f", {inodes:,} inodes" if inodes is not None else "")
    fix = "free some space there (old logs: .orchestrator/logs/), or move the project to a larger disk"
    if free < DISK_FAIL or (inodes is not None and inodes < INODES_FAIL):
        return fail("disk", shown, fix)
    if free < DISK_WARN or (inodes is not None and inodes < INODES_WARN):
        return warn("disk", shown, fix)
    return ok("disk", shown)


def _size(count: int) -> str:
    value = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


def check_state(state_dir: Path) -> Finding:
    """The state folder (``.orchestrator/``: the lock, the database, logs, exit records) can be written."""
    problem = writable_problem(state_dir)
    if problem:
        return fail("state", *problem)
    return ok("state", f"{state_dir} writable" + ("" if state_dir.exists() else " (made at start)"))


def check_database(state_dir: Path) -> Finding:
    """``.orchestrator/state.db`` opens and passes ``PRAGMA quick_check``; absent is fine (made at start)."""
    path = state_dir / "state.db"
    if not os.path.exists(path):
        return ok("database", f"{path} not created yet (made at the first start)")
    fix = (
        "stop the orchestrator and keep a copy; `sqlite3 state.db .recover | sqlite3 fixed.db` often saves it, "
        "or move it aside and `up` starts a new one (run history and attempt counts are lost, memos are not)"
    )
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=DB_SECONDS)
        try:
            rows = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)")]
        finally:
            db.close()
    except sqlite3.OperationalError as exc:  # locked, or unreadable
        return warn("database", f"{path}: cannot check it: {exc}", "run `orchestrator doctor` again in a while")
    except sqlite3.DatabaseError as exc:
        return fail("database", f"{path} is damaged: {exc}", fix)
    if rows != ["ok"]:
        return fail("database", f"{path} fails PRAGMA quick_check: {'; '.join(rows)}", fix)
    return ok("database", f"{path} passes PRAGMA quick_check")


def check_clock(config: Config, host: Host) -> Finding:
    """The time zone schedules use resolves, and the clock is not before this version existed nor behind the
    last run the database recorded."""
    now = host.clock.now()
    zone = _zone(config)
    if isinstance(zone, Finding):
        return zone
    floor = max(NOT_BEFORE, host.installed or NOT_BEFORE)
    set_it = "set the system clock (`timedatectl set-ntp true`, or `date -s`)"
    if now < NOT_BEFORE:
        return fail("clock", f"the system clock says {now:%Y-%m-%d %H:%M}, before this orchestrator existed", set_it)
    if now + CLOCK_SLACK < floor:
        return warn(
            "clock",
            f"the system clock says {now:%Y-%m-%d %H:%M %z}, before this orchestrator was installed ({floor:%Y-%m-%d %H:%M %z})",
            set_it,
        )
    last = _last_run(config)
    if last is not None and now + CLOCK_SLACK < last:
        return warn(
            "clock",
            f"the system clock says {now:%Y-%m-%d %H:%M %z}, before the last run recorded ({last:%Y-%m-%d %H:%M %z}): "
            "it went back, and schedules and history see time out of order",
            set_it,
        )
    return ok("clock", f"now {now:%Y-%m-%d %H:%M %z}; {zone}")


def _zone(config: Config) -> str | Finding:
    """The zone schedules run in, said for people, or the finding that it does not resolve."""
    if config.timezone is not None:
        try:
            zone = ZoneInfo(config.timezone)
        except (ZoneInfoNotFoundError, ValueError):  # checked at load time: only a zone database removed since
            return fail("clock", f"{config.path}: timezone: {config.timezone!r} names no zone here", "install tzdata")
        offset = datetime.now(zone).strftime("%z")
        return f"schedules use timezone {config.timezone} (UTC{offset} now)"
    name = os.environ.get("TZ", "")
    zone_file = name.removeprefix(":")
    if name and not (os.path.isabs(zone_file) and os.path.isfile(zone_file)):  # TZ=:/etc/localtime names a file
        try:
            ZoneInfo(zone_file)
        except (ZoneInfoNotFoundError, ValueError):
            return warn(
                "clock",
                f"TZ={name} names no zone here: the C library falls back to UTC, and schedules with it",
                "set TZ to an IANA name (such as Europe/Paris), or `timezone:` in roles.yaml",
            )
    offset = datetime.now().astimezone().strftime("%z")
    return f"schedules use this machine's local time (UTC{offset} now; `timezone:` is not set)"


def _last_run(config: Config) -> datetime | None:
    """When the last run on record was created, None when there is none or it cannot be read."""
    path = config.state_dir / "state.db"
    if not os.path.exists(path):
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=DB_SECONDS)
        try:
            row = db.execute("SELECT created_at FROM runs ORDER BY run_id DESC LIMIT 1").fetchone()
        finally:
            db.close()
        return datetime.fromisoformat(row[0]) if row else None
    except (sqlite3.Error, ValueError, TypeError):
        return None


def running_status(config: Config) -> dict[str, Any] | None:
    """The running orchestrator's status, or None when none serves this root (or it does not answer)."""
    from orchestrator.control import channel

    try:
        return channel.call(config.root, "status", timeout=5.0)
    except OrchestratorError:
        return None


def check_accounts(config: Config, status: Callable[[Config], dict[str, Any] | None] = running_status) -> Finding:
    """Whether a usage limit has paused an account: only the running orchestrator knows (a pause lives in its
    memory), so without one there is none."""
    snap = status(config)
    if snap is None:
        return ok("accounts", "no orchestrator is running here: no account is paused")
    paused = snap.get("paused") or {}
    if not paused:
        return ok("accounts", "no account is paused by a usage limit")
    said = "; ".join(
        f"{name}: {entry.get('reason') or 'usage limit'}"
        + (f" until {entry['until']}" if entry.get("until") else "")
        + (f", next probe {entry['probe_at']}" if entry.get("probe_at") else "")
        + f" ({', '.join(entry.get('roles') or [])})"
        for name, entry in sorted(paused.items())
    )
    return warn(
        "accounts",
        f"paused: {said}",
        "no new run of those roles starts until the reset or a probe run succeeds; `orchestrator status` shows it",
    )


def check_notifications(config: Config) -> list[Finding]:
    """One finding per channel of ``notifications:``: its variables set (by name only), Apprise, its command."""
    return [
        fail("notify", f"{c.label}: {c.problem}", c.fix) if c.problem else ok("notify", f"{c.label}: {c.ready}")
        for c in check_channels(config)
    ]
