"""Which tool calls wait for a person: ``orchestrator ask`` itself, and calls that match a role's ``approve:`` rule.

Standard library only: the ``PreToolUse`` hook (``asks/hook.py``) imports it at every tool call. Rules are
written as Claude Code writes permission rules: ``Tool`` (any call), ``Bash(git push:*)`` (a command that starts
with ``git push``), ``Bash(make deploy)`` (that command, ``*`` matching anything), ``Write(migrations/**)`` (a path
glob, relative to the agent's folder: ``**`` crosses folders, ``*`` does not).

A rule holds more calls than it names, never fewer: a shell line is held when any command in it matches (``commands``
says which it reads: each side of its operators and lines, what wrappers, ``sh -c``, ``eval`` and substitutions run);
a path is compared with ``.``, ``..`` and links resolved; and a rule of one file-editing tool (``Write``, ``Edit``,
``MultiEdit``, ``NotebookEdit``) holds all four, as each can change the same file. What no text rule can see (a
script the agent writes, then runs) is for ``--disallowedTools`` or a sandbox.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

ASK = ("orchestrator", "ask")
_PATH_KEYS = ("file_path", "notebook_path", "path")
_TEXT_KEYS = ("command", "url", "pattern", "query", "prompt")
EDITS = ("Edit", "MultiEdit", "NotebookEdit", "Write")  # the tools that change a file: a rule of one holds them all
_PUNCTUATION = ";&|(){}!\n"  # a word made of these alone separates two commands
_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time", "!", "{", "}", "(", ")"}
_WRAPPERS = {  # programs that run the command their later words name
    "sudo",
    "doas",
    "env",
    "xargs",
    "nohup",
    "timeout",
    "nice",
    "ionice",
    "command",
    "exec",
    "watch",
    "stdbuf",
    "setsid",
    "flock",
    "find",
    "parallel",
    "strace",
    "unbuffer",
    "busybox",
    "chronic",
    "caffeinate",
    "time",
}
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh"}
_NESTED = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")  # a command substitution's text (one level at a time)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def tools_of(rule: str) -> set[str]:
    """The tools a rule holds: its own, or every file-editing tool for one of them."""
    name = rule.partition("(")[0]
    return set(EDITS) if name in EDITS else {name}


def ask_words(command: str) -> list[str] | None:
    """The words after ``orchestrator ask`` when ``command`` is that call (``…/orchestrator ask`` too), else None."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if len(words) >= 2 and os.path.basename(words[0]) == ASK[0] and words[1] == ASK[1]:
        return words[2:]
    return None


def question_of(command: str) -> str | None:
    """The question an ``orchestrator ask`` command asks, or None when it is not one."""
    words = ask_words(command)
    return None if words is None else " ".join(words).strip()


def is_ask(tool: str, given: dict[str, Any]) -> bool:
    """Whether a tool call is the agent running ``orchestrator ask``."""
    command = given.get("command")
    return tool == "Bash" and isinstance(command, str) and ask_words(command) is not None


def _glob(pattern: str, *, paths: bool) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*" if paths else ".*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]" if paths else ".")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def commands(text: str, depth: int = 0) -> list[str]:
    """The whole of a shell command line, then each simple command in it, its words joined by one space and its
    program by its name (``/usr/bin/git`` as ``git``): each side of its operators and lines, past leading ``VAR=value``
    words and keywords (``if``, ``then``, ``do``, ...), each command a wrapper runs (``sudo``, ``env``, ``xargs``,
    ``timeout 5``, ...: every tail of its words), and, nested, what ``$(...)``, backquotes, ``sh -c`` (``bash -lc``),
    ``eval`` and a shell fed text on its input run. Text the shell could not parse is split as well as it can be."""
    out = [" ".join(text.split())]
    if depth > 3:
        return out
    for match in _NESTED.finditer(text):
        out += commands(match.group(1) or match.group(2) or "", depth + 1)
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace, lexer.whitespace_split = " \t\r", True  # a line's end splits commands, as `;` does
    try:
        words = list(lexer)
    except ValueError:  # an open quote: the words as they stand
        words = text.replace(";", " ; ").replace("|", " | ").replace("&", " & ").split()
    part: list[str] = []
    fed = False  # a shell that reads its commands from its input (``echo 'git push' | bash``)
    for word in [*words, ";"]:
        if not all(char in _PUNCTUATION for char in word):
            part.append(word)
            continue
        while part and (_ASSIGNMENT.match(part[0]) or part[0] in _KEYWORDS):
            part.pop(0)
        if part:
            part[0] = os.path.basename(part[0]) or part[0]
            out.append(" ".join(part))
            if part[0] in _WRAPPERS:
                out += [" ".join([os.path.basename(part[i]), *part[i + 1 :]]) for i in range(1, len(part))]
            script = _shell_script(part)
            if script is not None:
                out += commands(script, depth + 1)
            elif part[0] in _SHELLS:
                fed = True
            elif part[0] == "eval" and len(part) > 1:
                out += commands(" ".join(part[1:]), depth + 1)
        part = []
    if fed:
        out += [found for word in words if " " in word for found in commands(word, depth + 1)]
    return out


def _shell_script(part: list[str]) -> str | None:
    """The text a shell command runs with ``-c`` (``bash -lc 'git push'``, ``sh -c -- '...'``), or None."""
    if part[0] not in _SHELLS:
        return None
    for i, word in enumerate(part[1:], 1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            rest = part[i + 1 :]
            rest = rest[1:] if rest[:1] == ["--"] else rest
            return rest[0] if rest else None
    return None


def matches(rule: str, tool: str, given: dict[str, Any], cwd: str) -> bool:
    """Whether the call of ``tool`` with ``given`` input (made in ``cwd``) is one ``rule`` names."""
    _, _, rest = rule.partition("(")
    if tool not in tools_of(rule):
        return False
    if not rest:
        return True
    spec = rest[:-1] if rest.endswith(")") else rest
    for key in _PATH_KEYS:
        value = given.get(key)
        if isinstance(value, str):
            pattern = _glob(spec.removeprefix("./"), paths=True)
            spelled = os.path.normpath(os.path.join(cwd, value))  # as written, then with its links resolved
            paths = {spelled, os.path.realpath(spelled)}
            if not spec.startswith("/"):
                paths = {
                    os.path.relpath(spelled, cwd),
                    os.path.relpath(os.path.realpath(spelled), os.path.realpath(cwd)),
                }
            return any(pattern.match(path) for path in paths)
    text = next((given[k] for k in _TEXT_KEYS if isinstance(given.get(k), str)), None)
    if text is None:
        return False
    each = commands(text) if tool == "Bash" else [text.strip()]
    if spec.endswith(":*"):
        prefix = " ".join(spec[:-2].split())
        return any(part.startswith(prefix) for part in each)
    pattern = _glob(spec, paths=False)
    return any(pattern.match(part) for part in each)


def approval_needed(rules: list[str], tool: str, given: dict[str, Any], cwd: str) -> str | None:
    """The first of ``rules`` the call matches, or None."""
    return next((rule for rule in rules if matches(rule, tool, given, cwd)), None)


def describe(tool: str, given: dict[str, Any]) -> str:
    """A tool call in one line for a person: ``Bash: git push origin main``."""
    text = next((given[k] for k in (*_TEXT_KEYS, *_PATH_KEYS) if isinstance(given.get(k), str)), None)
    shown = text if text is not None else ", ".join(f"{k}={v!r:.60}" for k, v in given.items())
    shown = " ".join(shown.split())
    return f"{tool}: {shown[:300]}"
