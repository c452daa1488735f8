"""A memo's front matter: the YAML block between its leading ``---`` lines, read with limits and never raising.

Whatever a person or an agent wrote there, the memo is still delivered: a block that is broken, too big to read
(a YAML bomb, say) or not a mapping gives a header with a warning and no fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

# front matter beyond these is not read (a warning): a few aliases expanding into millions of items is a YAML bomb
FRONT_MATTER_MAX_CHARS = 64 * 1024
FRONT_MATTER_MAX_DEPTH = 32
FRONT_MATTER_MAX_ALIASES = 100
FRONT_MATTER_MAX_EXPANDED = 1024 * 1024  # nodes plus characters of scalars, with every alias expanded
_BIG_SCALAR = 100  # an integer written with more characters than this stays text (str() refuses > 4300 digits)


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: a file name whose bytes are not UTF-8 holds lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class MemoHeader:
    """The front matter fields the orchestrator reads; all optional."""

    id: str | None = None
    subject: str | None = None
    sender: str | None = None
    to: str | None = None
    created_at: str | None = None
    reply_to: str | None = None
    tags: tuple[str, ...] = ()
    warning: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


class _HeaderLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader, but timestamps stay the text written, and a number Python refuses stays text too.

    A date YAML accepts may not exist (``2026-02-30``), and Python refuses integers of more than
    4300 digits: to us these fields are text, so reading them must not fail.
    """


def _as_text(loader: Any, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


def _lenient(construct: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def build(loader: Any, node: Any) -> Any:
        if isinstance(node, yaml.ScalarNode) and len(node.value) > _BIG_SCALAR:
            return _as_text(loader, node)
        try:
            return construct(loader, node)
        except (ValueError, KeyError, TypeError, OverflowError):  # ``!!int abc``, ``!!bool maybe``
            return _as_text(loader, node)

    return build


_HeaderLoader.add_constructor("tag:yaml.org,2002:timestamp", _as_text)
for _tag, _construct in (
    ("int", yaml.SafeLoader.construct_yaml_int),
    ("float", yaml.SafeLoader.construct_yaml_float),
    ("bool", yaml.SafeLoader.construct_yaml_bool),
):
    _HeaderLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _lenient(_construct))


def front_matter_problem(block: str) -> str | None:
    """Why a front matter block is too big to read (a YAML bomb, say), or None; never builds the data.

    One pass over the parser's events, which leave aliases unexpanded, tracks the nesting depth and
    the size every anchor would expand to, and stops at the first limit passed.
    """
    if len(block) > FRONT_MATTER_MAX_CHARS:
        return f"front matter is longer than {FRONT_MATTER_MAX_CHARS} characters"
    if "&" not in block and "*" not in block and sum(map(block.count, "-:?[{")) < FRONT_MATTER_MAX_DEPTH:
        # no anchor, so no alias to expand; and each collection starts at one of these indicators, so fewer
        # of them than the depth limit cannot nest that deep: the common header needs no pass over its events
        return None
    sizes: dict[str, int] = {}  # expanded size (nodes and characters) of each finished anchor
    stack: list[list[Any]] = []  # per open collection: [anchor, expanded size of what it holds so far]
    done = aliases = 0  # the size of what is outside every open collection
    for event in yaml.parse(block, Loader=_HeaderLoader):
        size = 0
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= FRONT_MATTER_MAX_DEPTH:
                return f"front matter nests deeper than {FRONT_MATTER_MAX_DEPTH} levels"
            stack.append([event.anchor, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            size = 1 + len(event.value)
            if event.anchor is not None:
                sizes[event.anchor] = size
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > FRONT_MATTER_MAX_ALIASES:
                return f"front matter has more than {FRONT_MATTER_MAX_ALIASES} aliases"
            if event.anchor not in sizes:  # unknown, or a collection that contains itself
                return f"front matter has an alias (*{event.anchor}) to no finished anchor"
            size = sizes[event.anchor]
        else:
            continue
        if stack:
            stack[-1][1] += size
        else:
            done += size
        if done + sum(entry[1] for entry in stack) > FRONT_MATTER_MAX_EXPANDED:
            return (
                f"front matter would expand past {FRONT_MATTER_MAX_EXPANDED} nodes and characters through its aliases"
            )
    return None


def _clean(text: str) -> str:
    """Text SQLite and the terminal accept: a lone surrogate (YAML's ``"\\ud800"``) becomes U+FFFD."""
    return text if is_utf8(text) else "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return _clean(str(value).strip()) or None


def _yaml_warning(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 2}" if mark else ""
    return f"front matter is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}"


def parse_front_matter(text: str) -> MemoHeader:
    """The YAML block between leading ``---`` lines; never raises.

    A block that is broken, too big to read (``front_matter_problem``) or not a mapping gives a
    header with a ``warning`` and no fields: the memo is still delivered.
    """
    try:
        return _parse_front_matter(text)
    except Exception as exc:  # noqa: BLE001 - the last guard: a memo is delivered whatever its header holds
        return MemoHeader(warning=f"front matter could not be read: {type(exc).__name__}: {exc}"[:300])


def _parse_front_matter(text: str) -> MemoHeader:
    if not text.startswith("---"):
        return MemoHeader()
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return MemoHeader()
    for end, line in enumerate(lines[1:], start=1):  # noqa: B007 - ``end`` is read after the loop
        if line.strip() in ("---", "..."):
            break
    else:
        return MemoHeader(warning="front matter has no closing '---' line")
    block = "\n".join(lines[1:end])
    try:
        problem = front_matter_problem(block)
        if problem:
            return MemoHeader(warning=f"{problem}; its fields are not read")
        data = yaml.load(block, Loader=_HeaderLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        return MemoHeader(warning=_yaml_warning(exc))
    if data is None:
        return MemoHeader()
    if not isinstance(data, dict):
        return MemoHeader(warning="front matter is not a mapping of keys")
    tags = data.get("tags") or ()
    if isinstance(tags, str):
        tags = (tags,)
    elif not isinstance(tags, (list, tuple)):
        tags = (str(tags),)
    return MemoHeader(
        id=_text(data.get("id")),
        subject=_text(data.get("subject")),
        sender=_text(data.get("from")),
        to=_text(data.get("to")),
        created_at=_text(data.get("created_at")),
        reply_to=_text(data.get("reply_to")),
        tags=tuple(_clean(str(t)) for t in tags),
        extra=data,
    )


def header_tasks(extra: dict[str, Any]) -> tuple[str, ...]:
    """The ``tasks:`` of a wake memo's front matter (a list, or one name), as names."""
    tasks = extra.get("tasks")
    if isinstance(tasks, list):
        return tuple(str(t) for t in tasks)
    if isinstance(tasks, str):
        return (tasks,)
    return ()
