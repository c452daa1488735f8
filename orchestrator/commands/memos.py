"""The team's memo tools: ``send`` a memo, ``trace`` a conversation, ``release`` held memos."""

from __future__ import annotations

import argparse
import os

from orchestrator import console
from orchestrator.commands.common import memo_arg, project_root, stdin_text, who
from orchestrator.core.errors import OrchestratorError, RefusedError


def cmd_send(args: argparse.Namespace) -> int:
    """``orchestrator send``: write a memo into a role's inbox."""
    from pathlib import Path

    from orchestrator.control import permission
    from orchestrator.core.senders import AGENT_SENDER, normal_sender
    from orchestrator.tools.send import send

    # an agent runs anywhere: its own root comes from its environment when --root is not given
    given = args.root if args.root is not None else os.environ.get("ORCHESTRATOR_ROOT") or os.getcwd()
    root = Path(os.path.realpath(given))  # `--root ""` is here, as for every command
    caller = permission.require(root, "send")
    sender = (args.sender or "").strip() or None
    if caller.agent:  # from its own role, whatever its environment says: the loop breaker counts it as such
        own = caller.role or AGENT_SENDER
        if sender is not None and normal_sender(sender) != normal_sender(own):
            raise RefusedError(
                f"refused: send --from {sender}: an agent's memo is from its own role ({own}), and this is "
                f"{caller.describe()}; nothing was sent (leave --from out)"
            )
        sender = own
    text = stdin_text("send") if args.text == "-" else args.text
    result = send(
        root,
        args.to,
        text,
        subject=args.subject,
        reply_to=args.reply_to,
        tags=args.tag,
        sender=sender,
        strict=args.strict,
    )
    if result.warning:
        console.fail(result.warning)
    if args.json:
        console.print_json({"id": result.memo_id, "path": str(result.path), "warning": result.warning})
    else:
        console.say(str(result.path))
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    """``orchestrator trace``: the conversation a memo belongs to, as a tree."""
    from orchestrator.tools import trace

    memo = memo_arg(args.memo)
    report = trace.trace(project_root(args), memo)
    if args.json:
        console.print_json(report)
    else:
        for line in trace.render(report):
            console.say(line)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    """``orchestrator logs``: the log of a memo's newest run, with Claude's stream-json events rendered readably."""
    from orchestrator.tools import logs

    path = logs.log_of(project_root(args), args.memo)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise OrchestratorError(f"{path}: cannot read the run's log: {exc.strerror or exc}") from None
    for line in text.splitlines() if args.raw else logs.render(text):
        console.say(line)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    """``orchestrator diff``: what an attempt of a memo changed in its workspace."""
    from orchestrator.workspaces.show import diff_of

    text = diff_of(project_root(args), args.memo, args.attempt, args.stat)
    if text:
        console.say(text)
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    """``orchestrator release``: let memos the loop breaker held run after all."""
    from orchestrator.control import permission
    from orchestrator.tools.release import release

    root = project_root(args)
    permission.require(root, "release")
    memo = memo_arg(args.memo) if args.memo else args.memo
    done = release(root, memo, role=args.role, every=args.all, who=who())
    if args.json:
        console.print_json({"released": done})
        return 0
    if not done:
        console.say(f"nothing to release: memo/{args.role}/held/ is empty")
    for item in done:
        console.say(
            f"released {item['from']} -> memo/{item['role']}/inbox/{item['memo']}; it runs and is not held again"
        )
    return 0
