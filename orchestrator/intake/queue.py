"""What waits: memos seen in the inboxes, queued when complete, pending while their writer is busy.

Owned by the supervisor and touched only from its loop. A memo is complete when a rename or a
close-after-write event says so, or, found by a scan, when it has not changed for ``SETTLE`` seconds
and no process holds it open for writing. Queues are FIFO per role (file-name order at start-up);
both sets hold only files still in an inbox, so they stay bounded however long the orchestrator runs.
Each memo keeps when it was first seen, on the supervisor's clock: the loop breaker counts a memo
without a usable ``created_at`` at that time. The check of pending memos is a timer on that clock whose
``SettleDue`` is posted to the loop like any other event. Who holds a settled memo open for writing is read
from every process's descriptors in a worker thread, never on the loop; its answer comes back as a
``WritersFound`` event, so what it queues lands in that event's transaction and is started by the loop after it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.console import Console
from orchestrator.core.clock import Clock, Timer
from orchestrator.core.events import MemoGone, MemoSeen
from orchestrator.intake.memo import INBOX, is_memo_name, open_for_writing
from orchestrator.store import Store

SETTLE = 1.0  # a memo found by a scan, unchanged this long and open for writing by nobody, is complete
BATCH_WAIT = 2 * SETTLE  # a batch role waits at most this long for its inbox's settling memos
SLOW_WRITER = 30.0  # a memo held open for writing this long is named in one log line


@dataclass(frozen=True)
class SettleDue:
    """Time to look again at the memos still pending (their writer may be done)."""


@dataclass(frozen=True)
class WritersFound:
    """The writer check's answer: of the ``settled`` memos (path, role), those in ``busy`` are still open for
    writing by some process; ``asked``: when it was asked, on the supervisor's monotonic clock."""

    settled: tuple[tuple[Path, str], ...]
    busy: frozenset[Path]
    asked: float


@dataclass
class Queued:
    """A complete memo waiting in its inbox for a slot; ``arrival`` orders all roles' memos.

    ``seen_ts``: when it was first seen in its inbox, pending or complete (seconds since the epoch).
    """

    role: str
    path: Path
    arrival: int
    seen_ts: float


def _child_maker(folder: Path) -> Callable[[str], Path]:
    """``folder / name`` for many names: pathlib's own child constructor (a fifth of the cost of ``/``, which
    parses the name again), where this Python has it."""
    make = getattr(folder, "_make_child_relpath", None)
    return make if callable(make) else folder.joinpath


class Intake:
    """The queues and the pending memos of every role."""

    def __init__(
        self,
        roles: list[str],
        role_dir: Callable[[str], Path],
        console: Console,
        store: Store,
        clock: Clock,
        post: Callable[[object], None],  # the supervisor's post: any event its loop handles
    ) -> None:
        self.role_dir = role_dir
        self.console = console
        self.store = store
        self.clock = clock
        self._post = post  # the pending check's ``SettleDue``, back through the loop
        self.queues: dict[str, OrderedDict[Path, Queued]] = {name: OrderedDict() for name in roles}
        self.pending: dict[Path, tuple[str, float, float]] = {}  # role, monotonic and wall time first seen
        self._arrival = itertools.count()
        self._pending_timer: Timer | None = None
        self._slow_writers: set[Path] = set()  # pending memos already named in a "still open" line
        self._checking: set[Path] = set()  # settled memos whose writers are being looked for, off the loop
        self._checks: set[asyncio.Future[None]] = set()  # those look-ups (strong references: the loop keeps weak)

    def _wall(self) -> float:
        """Now on the supervisor's clock, in seconds since the epoch: when a memo is first seen."""
        return self.clock.now().timestamp()

    @property
    def busy(self) -> bool:
        return bool(self.pending) or any(self.queues.values())

    def settling(self, roles: list[str]) -> list[str]:
        """Of ``roles``, those with a memo still settling (found by a scan, or written in place and not yet
        closed), first seen under ``BATCH_WAIT`` ago: a batch role waits for it, so memos that lay in its inbox
        together (at start-up, or on a folder only a scan sees) go to one run, not split by a second of mtimes."""
        since = self.clock.monotonic() - BATCH_WAIT
        return sorted({role for role, first, _ in self.pending.values() if role in roles and first > since})

    def drop(self, role: str, path: Path) -> None:
        """Forget a memo that is being taken out of its inbox (cancelled)."""
        self.queues[role].pop(path, None)
        self.pending.pop(path, None)

    def seen(self, event: MemoSeen) -> None:
        """A memo appeared or changed: queue it when complete, else wait for its writer."""
        path = event.path
        queue = self.queues.get(event.role)
        if queue is None or path in queue:
            return  # duplicate event for a memo already queued
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return  # already claimed or gone: the rename was the arbiter
        if stat.S_ISDIR(info.st_mode):
            return
        waited = self.pending.pop(path, None)
        seen_ts = waited[2] if waited else self._wall()  # a memo still being written keeps its first sight
        if event.complete:
            self._enqueue(event.role, path, seen_ts)
        else:
            self.pending[path] = (event.role, self.clock.monotonic(), seen_ts)
            self._arm_pending_check()

    def gone(self, event: MemoGone) -> None:
        """A memo left its inbox before its claim: it is simply gone."""
        if event.path not in self.queues[event.role] and event.path not in self.pending:
            return  # not waiting here: our own claim, most often, which took it off the queue already
        if os.path.lexists(event.path):
            return  # a new memo under the same name already took its place
        self.pending.pop(event.path, None)
        if self.queues[event.role].pop(event.path, None) is not None:
            self.store.forget_memo_attempts(event.role, [event.path.name])  # a later namesake starts afresh
            self.console.line(f"{event.path.name} left the inbox before it was claimed", role=event.role)

    def put_back(self, role: str, paths: list[Path], arrival: int) -> None:
        """Memos the orchestrator itself returned to the inbox: queued again at the front, in their order, with
        their first ``arrival``, so they keep their place (the watcher's event of the move finds them queued).
        Their breaker check is on record from their first claim, so the time given here counts for nothing."""
        queue = self.queues[role]
        now = self._wall()
        for path in reversed(paths):
            queue[path] = Queued(role, path, arrival, now)
            queue.move_to_end(path, last=False)
            self.pending.pop(path, None)

    def _enqueue(self, role: str, path: Path, seen_ts: float) -> None:
        self.queues[role][path] = Queued(role, path, next(self._arrival), seen_ts)

    def rescan(self, initial: bool = False) -> None:
        """Look at every inbox; queue what is new and complete. Never queues a memo twice."""
        mtimes: dict[Path, float] = {}  # what this scan just saw of each new memo: not looked at again
        seen_ts = self._wall()
        waiting: dict[Path, set[str]] = {}  # the memos waiting to settle, by folder: gathered once, not per role
        for path in self.pending:
            waiting.setdefault(path.parent, set()).add(path.name)
        for role in self.queues:
            inbox = self.role_dir(role) / INBOX
            try:
                entries = sorted((e for e in os.scandir(inbox) if is_memo_name(e.name)), key=lambda e: e.name)
            except FileNotFoundError:
                inbox.mkdir(parents=True, exist_ok=True)
                self.console.line(f"inbox {inbox} was missing; created it again", role=role)
                continue
            queue = self.queues[role]
            # by name: a Path per entry (and its hash) was most of a rescan's cost with thousands waiting
            known = {p.name for p in queue}
            known.update(waiting.get(inbox, ()))
            present = set()
            child = _child_maker(inbox)
            for entry in entries:
                present.add(entry.name)
                if entry.name in known:
                    continue
                path = child(entry.name)
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    continue
                if not stat.S_ISREG(info.st_mode):
                    self._enqueue(role, path, seen_ts)  # its claim rejects it with a reason
                else:  # no close event seen: _check_pending below decides whether its writer is done
                    self.pending[path] = (role, self.clock.monotonic(), seen_ts)
                    mtimes[path] = info.st_mtime
            for path in [p for p in queue if p.name not in present]:
                del queue[path]
            if initial and entries:
                self.console.line(f"{len(entries)} memo(s) waiting in the inbox", role=role)
        self._check_pending(mtimes)

    def _arm_pending_check(self) -> None:
        if self._pending_timer is None:
            self._pending_timer = self.clock.call_later(SETTLE, self._post, SettleDue())

    def settle_due(self, _event: SettleDue) -> None:
        """The pending check's time: queue the memos whose writer is done (the loop starts them after)."""
        self._pending_timer = None
        self._check_pending()

    def _check_pending(self, mtimes: dict[Path, float] | None = None) -> None:
        """Promote memos that stopped changing and that no process holds open for writing.

        The others wait for their close event (or a later check): a writer may pause with the file open.
        ``mtimes``: the modification times a scan has just read (one stat per memo, not two).
        A memo's age is read on the clock its mtime was stamped by, the kernel's wall clock, not the
        supervisor's: comparing a file's stamp with an injected clock would say nothing about its writer.
        """
        now = time.time()
        settled: list[tuple[Path, str]] = []
        for path, (role, _mono, _seen) in list(self.pending.items()):
            mtime = mtimes.get(path) if mtimes else None
            if mtime is None:
                try:
                    mtime = os.lstat(path).st_mtime
                except FileNotFoundError:
                    del self.pending[path]
                    continue
            age = now - mtime
            if age >= SETTLE or age < -SETTLE:  # a future mtime (copied from another clock) would never settle
                settled.append((path, role))
        settled = [(path, role) for path, role in settled if path not in self._checking]
        if settled:
            self._checking.update(path for path, _ in settled)
            check = asyncio.ensure_future(self._find_writers(tuple(settled), self.clock.monotonic()))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)
        if self.pending.keys() - self._checking:
            self._arm_pending_check()

    async def _find_writers(self, settled: tuple[tuple[Path, str], ...], asked: float) -> None:
        """Who holds the settled memos open for writing, read in a worker thread (it looks at every descriptor
        of every process), then handed back to the loop."""
        try:
            busy = await asyncio.to_thread(open_for_writing, [path for path, _ in settled])
        except Exception:  # noqa: BLE001 - it reads /proc and counts what it cannot read as not writing
            busy = set()
        self._post(WritersFound(settled, frozenset(busy), asked))

    def writers_found(self, event: WritersFound) -> None:
        """Queue the settled memos nobody writes to any more; the others wait for their close or a later check."""
        for path, role in event.settled:
            self._checking.discard(path)
            if path not in self.pending or self.pending[path][1] > event.asked:
                continue  # gone, or queued by its close event meanwhile, or a new memo of the same name
            if path not in event.busy:
                self._enqueue(role, path, self.pending.pop(path)[2])
            elif path not in self._slow_writers and self.clock.monotonic() - self.pending[path][1] >= SLOW_WRITER:
                self._slow_writers.add(path)
                self.console.line(
                    f"{path.name} is still open for writing by another process; it waits until closed", role=role
                )
        self._slow_writers &= self.pending.keys()
        if self.pending:
            self._arm_pending_check()
