"""``orchestrator memory ...``: the sub-commands' arguments, and the one function each calls.

Reads (``search``, ``list``, ``show``) take only the role names and the curator
from ``roles.yaml`` without the full validation, and only when the call names a
role (an agent's own scope needs neither); ``parse_alone`` builds just this
command's parser. So an agent's search starts without yaml, pydantic, rich or the
other commands' parsers. Writes and ``stats`` load the validated configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator import console
from orchestrator.core.errors import ConfigError, UsageError
from orchestrator.core.text import whole_number

ROOT_ENV = "ORCHESTRATOR_ROOT"
READS = ("search", "list", "show")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def parse_alone(argv: Sequence[str] | None) -> argparse.Namespace | None:
    """``orchestrator memory ...`` parsed by a parser of this command only; None for any other command.

    The same ``add_parser`` builds it, so arguments, help and errors are those of the full parser.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "memory":
        return None
    top = _Parser(add_help=False)
    top.add_argument("--root", type=Path, default=None, help="project root (default: the current directory)")
    parser = _Parser(prog="orchestrator", parents=[top])
    common = _Parser(add_help=False)  # after the command: an absent --root must not overwrite the first one
    common.add_argument("--root", type=Path, default=argparse.SUPPRESS, help="project root")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add_parser(sub, common)
    return parser.parse_args(args)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``memory`` and its verbs to the CLI's sub-parsers."""
    memory = sub.add_parser("memory", parents=[common], help="long-term memory per role: add, search, forget ...")
    verbs = memory.add_subparsers(dest="verb", required=True, parser_class=type(memory))

    add = verbs.add_parser("add", parents=[common], help="remember something (text, or - for standard input)")
    add.add_argument("text")
    add.add_argument("--role")
    add.add_argument("--layer")
    add.add_argument("--importance", type=whole_number, default=3)
    add.add_argument("--category", default="other")
    add.add_argument("--source", default="agent")
    add.add_argument("--period")
    add.add_argument("--summarises", default="", help="ids this entry summarises: ID,ID,...")
    add.add_argument("--tag", action="append", default=[])
    add.add_argument("--remember", action="store_true", help="keep it in core")
    add.add_argument("--json", action="store_true")

    search = verbs.add_parser("search", parents=[common], help="find entries by words (any language)")
    search.add_argument("query")
    _filters(search)
    search.add_argument("--since", help="created on or after this day (YYYY-MM-DD)")
    search.add_argument("--until", help="created on or before this day (YYYY-MM-DD)")
    search.add_argument("--min-importance", type=whole_number)

    listing = verbs.add_parser("list", parents=[common], help="entries, newest first")
    _filters(listing)
    listing.add_argument("--forgotten", action="store_true", help="the tombstones instead")

    show = verbs.add_parser("show", parents=[common], help="one entry with its changes")
    show.add_argument("id", type=whole_number)
    show.add_argument("--json", action="store_true")

    forget = verbs.add_parser("forget", parents=[common], help="take a memory back (kept as a tombstone)")
    forget.add_argument("id", type=whole_number)
    forget.add_argument("--why", required=True)
    forget.add_argument("--source", default="agent")
    forget.add_argument("--json", action="store_true")

    replace = verbs.add_parser("replace", parents=[common], help="correct a memory (the growth log keeps both)")
    replace.add_argument("id", type=whole_number, nargs="?")
    replace.add_argument("text", nargs="?")
    replace.add_argument("--why", default="")
    replace.add_argument("--approve", type=whole_number, metavar="ID", help="approve the latest change of entry ID")
    replace.add_argument("--source", default="agent")
    replace.add_argument("--json", action="store_true")

    stats = verbs.add_parser("stats", parents=[common], help="counts per role and layer, what waits for a summary")
    stats.add_argument("--role")
    stats.add_argument("--json", action="store_true")


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role")
    parser.add_argument("--layer")
    parser.add_argument("--category")
    parser.add_argument("--limit", type=whole_number, default=20)
    parser.add_argument("--json", action="store_true")


class _Light:
    """Role names and the memory curator from roles.yaml, read without validating the rest, and only when asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._roles: list[str] | None = None
        self._curator: str | None = None
        self.path = root / "roles.yaml"
        if not self.path.exists():
            raise ConfigError(f"{self.path}: not found; run memory commands inside a project (or set --root)")

    def _load(self) -> list[str]:
        if self._roles is None:
            import yaml

            try:
                raw = yaml.safe_load(self.path.read_text(encoding="utf-8"))
                roles = [str(r) for r in raw["roles"]]
                curator = (raw.get("memory") or {}).get("curator")
            except FileNotFoundError:
                raise ConfigError(
                    f"{self.path}: not found; run memory commands inside a project (or set --root)"
                ) from None
            except Exception:  # noqa: BLE001 - anything odd: let the full loader name the problem
                from orchestrator.config import load_config

                config = load_config(self.root)
                roles, curator = list(config.roles), config.memory.curator
            self._roles, self._curator = roles, curator if isinstance(curator, str) else None
        return self._roles

    @property
    def curator(self) -> str | None:
        self._load()
        return self._curator


class _LazyRoles(Sequence[str]):
    """The project's role names, read from roles.yaml the first time they are looked at."""

    def __init__(self, light: _Light) -> None:
        self.light = light

    def __getitem__(self, index: Any) -> Any:
        return self.light._load()[index]

    def __len__(self) -> int:
        return len(self.light._load())

    def __iter__(self) -> Iterator[str]:
        return iter(self.light._load())

    def __contains__(self, value: object) -> bool:
        return value in self.light._load()


def _root(args: argparse.Namespace) -> Path:
    root = args.root or (Path(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else Path.cwd())
    return Path(root).resolve()


def _light(root: Path) -> tuple[Sequence[str], Any]:
    """Role names and the curator for reads: looked up in roles.yaml only if a check needs them."""
    light = _Light(root)
    return _LazyRoles(light), light


def _now(settings: Any) -> datetime:
    zone = settings.zone() if hasattr(settings, "zone") else None
    return datetime.now(zone).astimezone(zone)


def _text(value: str | None, verb: str) -> str:
    if value is None:
        raise UsageError(f"memory {verb}: give the text as an argument or - for standard input")
    if value != "-":
        return value
    try:
        return sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"memory {verb}: standard input is not UTF-8 text; nothing stored") from None


def run(args: argparse.Namespace) -> int:
    """Run one ``memory`` verb; errors propagate to ``cli.main`` as one line and an exit status."""
    from orchestrator.memory.db import MemoryDB
    from orchestrator.memory.db.schema import db_path
    from orchestrator.memory.service import Memory

    root = _root(args)
    caller = _caller(root, args)
    if args.verb in READS:
        roles, settings = _light(root)
    else:
        from orchestrator.config import load_config

        config = load_config(root)
        roles, settings = list(config.roles), config.memory
    path = db_path(root / ".orchestrator")
    if args.verb in READS and not path.exists():
        return _print(args, [] if args.verb != "show" else None, root)
    db = MemoryDB(path)
    try:
        memory = Memory(db, settings, roles, caller, _authorize(root))
        return _print(args, _call(memory, args, settings), root)
    finally:
        db.close()


def _caller(root: Path, args: argparse.Namespace) -> Any:
    """Who calls, from the kernel (``control.permission``): a person, or an agent of which run and role; an agent
    whose role may not use memory at all (``may: [-memory]``), or not the role it names, is refused here."""
    from orchestrator.control import permission
    from orchestrator.memory.service import PERSON, Caller

    found = permission.require(root, f"memory {args.verb}", getattr(args, "role", None))
    if not found.agent:
        return PERSON
    return Caller(found.role, str(found.run_id) if found.run_id is not None else None)


def _authorize(root: Path) -> Any:
    """What lets an agent name another role's memory: the orchestrator's answer (its role's ``may:``)."""
    from orchestrator.control import permission

    def ask(caller: Any, verb: str, role: str) -> None:
        permission.require(root, f"memory {verb}", role)

    return ask


def _call(memory: Any, args: argparse.Namespace, settings: Any) -> Any:
    verb = args.verb
    if verb == "add":
        try:
            ids = [int(x) for x in args.summarises.replace(" ", "").split(",") if x]
        except ValueError:
            raise UsageError(f"memory add: --summarises takes ids such as 12,13 (got {args.summarises!r})") from None
        return memory.add(
            _text(args.text, "add"),
            now=_now(settings),
            role=args.role,
            layer=args.layer,
            importance=args.importance,
            category=args.category,
            source=args.source,
            period=args.period,
            summarises=ids,
            tags=args.tag,
            remember=args.remember,
        )
    if verb in ("search", "list"):
        for name in ("layer", "category"):
            _check_choice(verb, name, getattr(args, name))
        if args.limit < 1:
            raise UsageError(f"memory {verb}: --limit must be at least 1")
        filters: dict[str, Any] = {"layer": args.layer, "category": args.category, "limit": args.limit}
        if verb == "list":
            return memory.list(role=args.role, forgotten=args.forgotten, **filters)
        for name in ("since", "until"):
            _check_day(getattr(args, name), name)
        return memory.search(
            args.query,
            role=args.role,
            since=args.since,
            until=args.until,
            min_importance=args.min_importance,
            **filters,
        )
    if verb == "show":
        return memory.show(args.id)
    if verb == "forget":
        return memory.forget(args.id, args.why, _now(settings), args.source)
    if verb == "replace":
        if args.approve is not None:
            return memory.approve(args.approve, _now(settings), args.source)
        if args.id is None:
            raise UsageError("memory replace: give ID TEXT --why TEXT, or --approve ID")
        return memory.replace(args.id, _text(args.text, "replace"), args.why, _now(settings), args.source)
    return memory.stats(role=args.role, today=_now(settings))


def _check_choice(verb: str, name: str, value: str | None) -> None:
    from orchestrator.memory import rules

    choices = {"layer": rules.LAYERS, "category": rules.CATEGORIES}[name]
    if value is not None and value not in choices:
        raise UsageError(f"memory {verb}: unknown {name} {value!r}; one of {', '.join(choices)}")


def _check_day(value: str | None, name: str) -> None:
    if value is None:
        return
    try:
        datetime.strptime(value, "%Y-%m-%d")
    except ValueError:
        raise UsageError(f"memory search: --{name} {value!r} is not a day such as 2026-12-01") from None


def _print(args: argparse.Namespace, result: Any, root: Path) -> int:
    verb = args.verb
    if getattr(args, "json", False):
        if verb == "show" and result is None:
            raise UsageError(f"memory show: no entry #{args.id}")
        console.print_json(result)
        return 0
    if verb == "add":
        console.say(str(result["id"]))
    elif verb in ("search", "list"):
        for entry in result:
            console.say(_line(entry))
        if not result:
            console.say("no entries")
    elif verb == "show":
        if result is None:
            raise UsageError(f"memory show: no entry #{args.id}")
        console.say(_line(result))
        for key in ("period", "source", "tags", "created_at", "summarises", "summarised_by", "run_id"):
            if result.get(key):
                console.say(f"  {key}: {result[key]}")
        if result.get("forgotten_at"):
            console.say(f"  forgotten {result['forgotten_at']} by {result['forgotten_by']}: {result['forgotten_why']}")
        for change in result.get("growth", []):
            approved = f", approved by {change['approved_by']}" if change.get("approved_at") else ", not approved"
            console.say(f"  changed {change['at']} by {change['by']} ({change['why']}{approved})")
            console.say(f"    before: {change['before']}")
            console.say(f"    after:  {change['after']}")
    elif verb == "forget":
        console.say(f"forgot #{result['id']} (kept as a tombstone: {result['forgotten_why']})")
    elif verb == "replace":
        if result.get("approved"):
            console.say(f"approved change {result['growth_id']} of #{result['id']}")
        else:
            console.say(f"replaced #{result['id']} (change {result['growth_id']} in its growth log)")
    else:
        _print_stats(result)
    return 0


def _line(entry: dict[str, Any]) -> str:
    where = f"{entry['role']} {entry['layer']}" + (f" {entry['period']}" if entry.get("period") else "")
    gone = " FORGOTTEN" if entry.get("forgotten_at") else ""
    return f"#{entry['id']} [{where} {entry['category']} {entry['importance']}{gone}] {entry['text']}"


def _print_stats(stats: dict[str, Any]) -> None:
    for role, layers in sorted(stats["roles"].items()):
        counts = ", ".join(f"{layer} {layers.get(layer, 0)}" for layer in ("core", "daily", "weekly", "monthly"))
        console.say(f"{role}: {counts} (core max {stats['core_max']})")
    if not stats["roles"]:
        console.say("no entries")
    console.say(
        f"tombstones {stats['forgotten']}, changes {stats['changes']} ({stats['unapproved_changes']} not approved)"
    )
    for key, count in sorted(stats["waiting_for_summary"].items()):
        layer, period = key.split(" ", 1)
        wanted = "weekly" if layer == "daily" else "monthly"
        console.say(f"waiting: {count} {layer} entries past retention wait for a {wanted} summary of {period}")
