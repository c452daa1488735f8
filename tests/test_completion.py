"""`orchestrator completion`: a script for each shell, and bash completing sub-commands, options, roles from
roles.yaml and memo names from the folders on disk, by running the real `orchestrator` at each TAB."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Project

MARKS = {
    "bash": "complete -o nospace -o default -o bashdefault -F _python_argcomplete orchestrator",
    "zsh": "compdef _python_argcomplete orchestrator",
    "fish": "complete --command orchestrator",
}
SYNTAX_CHECK = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_its_script(project: Project, tmp_path: Path, shell: str) -> None:
    result = project.cli("completion", shell)
    assert result.returncode == 0, result.stderr
    assert MARKS[shell] in result.stdout
    if shutil.which(SYNTAX_CHECK[shell][0]) is None:
        return  # the script was made; this machine has no such shell to read it
    script = tmp_path / f"orchestrator.{shell}"
    script.write_text(result.stdout, encoding="utf-8")
    checked = subprocess.run([*SYNTAX_CHECK[shell], str(script)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_an_unknown_shell_is_a_usage_error(project: Project) -> None:
    result = project.cli("completion", "tcsh")
    assert result.returncode == 2
    assert "invalid choice: 'tcsh'" in result.stderr and "Traceback" not in result.stderr


def _bash_completes(project: Project, tmp_path: Path, *lines: str) -> dict[str, list[str]]:
    """What bash offers for each command line, with the script sourced and `orchestrator` on PATH."""
    bin_dir = _program(tmp_path)
    probe = [
        "source <(orchestrator completion bash) || exit 9",
        'ask() { COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$COMP_LINE";'
        ' [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ));'
        ' COMPREPLY=(); _python_argcomplete orchestrator; printf "%s|" "$1"; printf "%s " "${COMPREPLY[@]}"; echo; }',
        *(f"ask {_bash_word(line)}" for line in lines),
    ]
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(probe)],
        capture_output=True,
        text=True,
        cwd=project.root,
        env=project.env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answers = dict(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
    return {line: answers[line].split() for line in lines}


def _program(tmp_path: Path) -> Path:
    """A folder holding `orchestrator` as pip installs it (a script calling `orchestrator.cli:main`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / "orchestrator"
    program.write_text(
        f"#!{sys.executable}\nimport sys\nfrom orchestrator.cli import main\nsys.exit(main())\n", encoding="utf-8"
    )
    program.chmod(0o755)
    return bin_dir


def _bash_word(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed here")
def test_bash_completes_commands_options_roles_and_memos(project: Project, tmp_path: Path) -> None:
    project.configure({"builder": {}, "planner": {}, "reviewer": {}})
    project.drop("builder", "T-1-build.md", {"id": "T-1"})
    project.drop("planner", "P-2-plan.md")
    (project.root / "memo" / "planner" / "archive").mkdir(parents=True)
    (project.root / "memo" / "planner" / "archive" / "P-1-old.md").write_text("done\n", encoding="utf-8")
    (project.root / "memo" / "builder" / "inbox" / "notes.txt").write_text("not a memo\n", encoding="utf-8")
    got = _bash_completes(
        project,
        tmp_path,
        "orchestrator ca",
        "orchestrator service ",
        "orchestrator cancel --r",
        "orchestrator send --to ",
        "orchestrator wake re",
        "orchestrator cancel ",
        "orchestrator trace P",
        "orchestrator release ",
        f"orchestrator history --root {project.root} --role p",
    )
    assert got["orchestrator ca"] == ["cancel"]
    assert got["orchestrator service "] == ["install", "status", "logs", "uninstall"]
    assert got["orchestrator cancel --r"] == ["--root", "--role", "--reason"]
    assert got["orchestrator send --to "] == ["builder", "planner", "reviewer"]
    assert got["orchestrator wake re"] == ["reviewer"]
    assert got["orchestrator cancel "] == ["P-2-plan", "T-1-build"]  # waiting ones; archived memos are done
    assert got["orchestrator trace P"] == ["P-1-old", "P-2-plan"]  # every folder
    assert got["orchestrator release "] == []  # nothing is held
    assert got[f"orchestrator history --root {project.root} --role p"] == ["planner"]


def test_completion_imports_nothing_heavy(project: Project) -> None:
    """A TAB starts Python and reads the root; pydantic, rich and asyncio stay out of it."""
    project.configure({"builder": {}})
    line = "orchestrator send --to b"
    answers = project.root / "answers"  # argcomplete's own alternative to the shell's descriptor 8
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator"],
        capture_output=True,
        text=True,
        cwd=project.root,
        env=project.env(
            _ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)), _ARGCOMPLETE_STDOUT_FILENAME=str(answers)
        ),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    offered = answers.read_text(encoding="utf-8")
    assert done.returncode == 0, done.stderr
    assert offered.split() == ["builder"]
    imported = {row.split("|")[-1].strip().split(".")[0] for row in done.stderr.splitlines() if "|" in row}
    assert "orchestrator" in imported
    assert imported.isdisjoint({"pydantic", "rich", "asyncio", "sqlite3"}), imported & {"pydantic", "rich", "asyncio"}


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here")
def test_fish_completes_roles(project: Project, tmp_path: Path) -> None:
    project.configure({"builder": {}, "planner": {}})
    bin_dir = _program(tmp_path)
    done = subprocess.run(
        ["fish", "--no-config", "-c", 'orchestrator completion fish | source; complete -C "orchestrator send --to b"'],
        capture_output=True,
        text=True,
        cwd=project.root,
        env=project.env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["builder"]
