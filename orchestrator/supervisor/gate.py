"""Every control request passes here before the loop acts on it: who asks, and whether they may.

The caller is identified from the kernel (``control.callers``: the peer's pid
against the live runs) and checked against the rules of ``control.authority``
and its role's ``may:``. A refusal is one line to the caller (``RefusedError``,
exit 13), one line in the log (``refused stop --force from an agent of run 3
(reviewer)``) and, the first time a run is refused, one notice to the
``notify`` role; nothing else changes and the run goes on. A request let
through carries the caller in its ``who``, so the records say an agent did it.

The commands that act on files themselves (``release``, ``memory forget``, ...)
ask the same question with an ``authorize`` request (``control.permission``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.control import authority, callers, lookup
from orchestrator.control.authority import Caller
from orchestrator.control.callers import LiveRun, UnknownCallerError
from orchestrator.control.lookup import Candidate
from orchestrator.control.protocol import (
    AuthorizeRequest,
    CancelRequest,
    FeatureRequest,
    InterruptRequest,
    Request,
    StopRequest,
    TellRequest,
    WakeRequest,
)
from orchestrator.core.clock import Clock
from orchestrator.core.errors import RefusedError
from orchestrator.core.senders import normal_sender
from orchestrator.intake import outbox
from orchestrator.store import Store
from orchestrator.supervisor.breaker import links_of
from orchestrator.supervisor.feature_requests import FeatureRequests

Checked = TypeVar("Checked", bound=Request | FeatureRequest)
CHAIN_CAP = 1000  # reply_to links followed up from a memo to find one its caller's role sent


class Gate:
    """Identifies each caller and admits or refuses its request; remembers which runs were told about."""

    def __init__(
        self,
        config: Config,
        store: Store,
        console: Console,
        clock: Clock,
        runs: Callable[[], Iterable[RoleRun]],
        find: Callable[[str], list[Candidate]],
    ) -> None:
        self.config = config
        self.features = FeatureRequests()  # the requests the extensions serve, each with who may send it
        self.store = store
        self.console = console
        self.clock = clock
        self.runs = runs
        self.find = find
        self.noticed: set[int | None] = set()  # runs whose refusal the notify role was told (None: no run)

    # ------------------------------------------------------------ who asks
    def identify(self, pid: int) -> Caller:
        """The caller that process ``pid`` is; a pid that cannot be read is refused (and logged)."""
        live = [
            LiveRun(run.run_id, run.role.name, agent.pid)
            for run in self.runs()
            if (agent := run.agent) is not None
            and agent.pid is not None
            and agent.node is None  # elsewhere: no pid here
        ]
        try:
            return callers.identify(pid, live, self.config.root, os.getpid())
        except UnknownCallerError as exc:
            self.console.line(f"refused a request from pid {pid}: {str(exc).removeprefix('refused: ')}")
            raise

    # ------------------------------------------------------------ requests
    def admit(self, request: Checked, pid: int) -> Checked:
        """The request to carry out, its ``who`` naming an agent caller; ``RefusedError`` when it may not."""
        if not self._checked(request):
            return request  # reads, and the ledger's nudge, are open to every caller
        return self.admit_caller(request, self.identify(pid))

    def admit_caller(self, request: Checked, caller: Caller) -> Checked:
        """``admit`` for a caller already identified (the dashboard's: a person holding the token, unless the
        kernel traced its connection to an agent)."""
        if not self._checked(request) or not caller.agent:
            return request
        if isinstance(request, FeatureRequest):
            command, rule, own = self.features.rule(request, caller)
            self.require(caller, command, own, rule)
        else:
            command, own = self._what(request, caller)
            self.require(caller, command, own)
        who = f"{getattr(request, 'who', 'unknown')}, {caller.describe()}"
        return cast(Checked, request.model_copy(update={"who": who}))

    def _checked(self, request: Checked) -> bool:
        """Whether the caller of ``request`` must be checked (a feature's: as it registered)."""
        if isinstance(request, FeatureRequest):
            return self.features.needs(request) is not None
        return isinstance(request, StopRequest | CancelRequest | InterruptRequest | TellRequest | WakeRequest)

    def authorize(self, request: AuthorizeRequest, pid: int) -> dict[str, Any]:
        """A command that acts on files asks whether its caller may; the answer names the caller."""
        caller = self.identify(pid)
        self.require(caller, request.command, authority.touches_own(caller, request.command, request.role))
        return {"caller": caller.to_wire()}

    def require(self, caller: Caller, command: str, own: bool, rule: tuple[str, bool] | None = None) -> None:
        """Refuse (loudly, once per run to the notify role) what ``caller`` may not do (``rule``: a feature's
        command's grant, see ``authority.refusal``)."""
        role = self.config.roles.get(caller.role) if caller.role else None
        held = authority.grants(role.may if role else (), curator=caller.role == self.config.memory.curator)
        why = authority.refusal(caller, held, command, own, rule)
        if why is None:
            return
        self.console.line(f"refused {command} from {caller.describe()}", role=caller.role)
        self._tell(caller, command)
        raise RefusedError(why)

    def _what(self, request: Request, caller: Caller) -> tuple[str, bool]:
        """The command a request is, and whether what it touches is the caller's own role's."""
        if isinstance(request, StopRequest):
            return ("stop --force" if request.force else "stop"), False
        if isinstance(request, CancelRequest):
            if request.role:
                return "cancel --role", False
            if request.all:
                return "cancel --all", False
            return "cancel", self._own_work(caller, request.memo or "")
        if isinstance(request, WakeRequest):
            return "wake", request.role == caller.role
        assert isinstance(request, InterruptRequest | TellRequest)
        return request.op, self._own_work(caller, request.memo)

    # ------------------------------------------------------------ whose work
    def _own_work(self, caller: Caller, query: str) -> bool:
        """Whether every memo ``query`` names is work the caller's role sent: its ``from``, or a memo further up
        its ``reply_to`` chain. Nothing named is nothing touched (the request then says no memo matches)."""
        if caller.role is None:
            return False
        mine = normal_sender(caller.role)
        for cand in self.find(query) if query else []:
            if cand.run is not None:
                memos = [(m.sender, m.reply_to) for m in cand.run.memos]
            else:
                header = lookup.read_header(cand.path)
                memos = [(header.sender, header.reply_to)]
            if not all(self._sent_by(mine, sender, reply_to) for sender, reply_to in memos):
                return False
        return True

    def _sent_by(self, mine: str | None, sender: str | None, reply_to: str | None) -> bool:
        if normal_sender(sender) == mine:
            return True
        level: set[str] = {reply_to} if reply_to else set()
        seen: set[str] = set()
        while level and len(seen) < CHAIN_CAP:
            seen |= level
            rows = links_of(self.store.db, level)
            if any(row[0] == mine for row in rows):  # the links keep senders as normal_sender has them
                return True
            level = {row[1] for row in rows if row[1]} - seen
        return False

    # ------------------------------------------------------------ the notice
    def _tell(self, caller: Caller, command: str) -> None:
        """The notify role hears of a run's first refusal; a role is not told about its own runs (that news
        would wake it to read of its own refusal), nor is anyone about a run already told of."""
        notify = self.config.notify
        if notify is None or caller.run_id in self.noticed or caller.role == notify:
            return
        self.noticed.add(caller.run_id)
        run = next((r for r in self.runs() if r.run_id == caller.run_id), None) if caller.run_id else None
        first = run.memos[0] if run is not None and run.memos else None
        about = f"run {caller.run_id} of role **{caller.role}**" if caller.run_id else "a process it started"
        body = "\n".join(
            [
                f"The orchestrator refused `orchestrator {command}` from {about}: agents act with an agent's "
                "authority, and this is for people. Nothing was changed; the run goes on.",
                "",
                f"- Memo of the run: {first.name} (id {first.memo_id or '-'}, subject: {first.subject or '-'}, "
                f"from {first.sender or '-'})"
                if first
                else "- Memo of the run: none on record",
                f"- Conversation: `orchestrator trace {first.label}`" if first else "- Conversation: -",
                "",
                "An instruction the agent read (in a memo, or a signal its wake carried) is the likely cause. Further "
                "refusals of this run are only logged (.orchestrator/orchestrator.log). A role that should be allowed "
                "it is given the grant with `may:` in roles.yaml (see docs/guide.md, Permissions).",
            ]
        )
        sent = outbox.write_memo(
            self.config.root,
            notify,
            body,
            subject=f"Refused: {command} from {caller.describe()}",
            sender="orchestrator",
            now=self.clock.now(),
            reply_to=first.memo_id or first.label if first else None,
            tags=["refused"],
        )
        self.console.line(f"told {notify} of the refusal ({sent.path.name})", role=caller.role)
