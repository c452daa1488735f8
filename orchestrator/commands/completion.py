"""``orchestrator completion bash|zsh|fish``, and the answer to the shell when it asks at a TAB."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from orchestrator import console

ASKING = "_ARGCOMPLETE"  # set by the scripts when the shell asks for completions


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the completion script of a shell."""
    from orchestrator.ops.completion import script

    console.say(script(args.shell).rstrip("\n"))
    return 0


def answer_if_asked(build: Callable[[], argparse.ArgumentParser]) -> None:
    """When the shell asks (a TAB), write the completions and exit; otherwise return at once."""
    if ASKING not in os.environ:
        return
    import argcomplete

    from orchestrator.ops.completion import attach

    argcomplete.autocomplete(attach(build()), always_complete_options=False)
