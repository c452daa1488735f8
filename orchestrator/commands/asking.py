"""``orchestrator ask`` (an agent asks a person, from inside its run) and ``orchestrator answer`` (a person
answers, allows or denies).

Client commands: the standard library and one request each, so an agent's ``ask`` costs Python's start-up. Inside
the run resumed with the answer (``ORCHESTRATOR_ANSWER_FILE``, a Claude role's session) ``ask`` prints the answer,
which the model reads as its command's output.
"""

from __future__ import annotations

import argparse
import json
import os

from orchestrator import console
from orchestrator.commands.common import memo_arg, root_dir, stdin_text, who
from orchestrator.control import client as control
from orchestrator.core.errors import UsageError

ANSWER_ENV = "ORCHESTRATOR_ANSWER_FILE"  # the same name as asks/hook.py's, which imports what a client may not


def cmd_ask(args: argparse.Namespace) -> int:
    """``orchestrator ask QUESTION``: the answer when the run carries one, else the question recorded."""
    question = " ".join(args.question).strip()
    if question == "-":
        question = stdin_text("ask").strip()
    answer = _carried_answer()
    if answer is not None:
        if answer.get("decision") == "deny":
            console.say(f"no answer: {answer.get('note') or 'a person declined to answer'}")
        else:
            console.say(str(answer.get("text") or ""))
        return 0
    if not question:
        raise UsageError('orchestrator ask: give the question, as in orchestrator ask "Which design?"')
    run_id = os.environ.get("ORCHESTRATOR_RUN_ID", "")
    if not run_id.isdigit():
        said = f"is {run_id!r}, not a run's number" if run_id else "is not set"
        raise UsageError(f"orchestrator ask: only an agent asks, from inside its run (ORCHESTRATOR_RUN_ID {said})")
    result = control.call(root_dir(args), "ask", run_id=int(run_id), question=question, who=who())
    console.say(f"Your question is recorded. {result.get('note', '')}".strip())
    return 0


def _carried_answer() -> dict[str, object] | None:
    path = os.environ.get(ANSWER_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            answer = json.load(handle)
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None


def cmd_answer(args: argparse.Namespace) -> int:
    """``orchestrator answer MEMO [TEXT] [--allow | --deny] [--note TEXT]``."""
    text = args.text
    if text == "-":
        text = stdin_text("answer")
    # a path from here, as `cancel`'s; an id that holds a slash stays as it is
    memo = memo_arg(args.memo)
    result = control.call(
        root_dir(args),
        "answer",
        memo=memo,
        text=text,
        allow=args.allow,
        deny=args.deny,
        note=args.note,
        who=who(),
    )
    if args.json:
        console.print_json(result)
        return 0
    said = {"allow": "allowed" if result.get("kind") == "approval" else "answered", "deny": "denied"}
    console.say(
        f"{result.get('memo')} ({result.get('role')}): {said.get(str(result.get('decision')), 'answered')}; "
        f"queued to run again first in its role's queue ({result.get('queued')})"
    )
    return 0
