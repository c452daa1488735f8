"""The orchestrator as users install it: built with ``python -m build``, installed from the wheel into a fresh venv.

The keeper is compiled when the package is built (``setup.py``), so the wheel
carries it and the installed ``up`` starts with it; a build on a machine without
a C compiler still succeeds, says so, and gives a package whose ``up`` refuses
``recovery: adopt`` (fail closed) and runs with ``recovery: restart``. The chaos
test (``test_chaos.py``) runs against the same install.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import Installed, Project, fresh_venv, loud_lines, run_checked, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
KEEPER = "orchestrator/agents/orchestrator-keeper"


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3*/site-packages")
    return found


def test_the_sdist_carries_the_keepers_source_and_no_binary(installed: Installed) -> None:
    (sdist,) = installed.dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert "orchestrator/agents/keeper.c" in names and "setup.py" in names
    assert KEEPER not in names, "a binary built on one machine must not travel in the sdist"


def test_the_wheel_carries_the_keeper_and_is_tagged_for_this_platform(installed: Installed) -> None:
    (wheel,) = installed.dist.glob("*.whl")
    assert wheel.name.endswith(f"-py3-none-linux_{platform.machine()}.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(KEEPER)
    assert stat.S_IMODE(info.external_attr >> 16) & 0o111, "the keeper is executable in the wheel"


def test_the_keeper_is_built_with_musl_where_musl_gcc_is_installed(installed: Installed) -> None:
    """glibc's static start-up costs a start about 0.5 ms on a virtual machine (docs/operations.md): the build
    prefers musl-gcc, which .ci/needs installs for CI."""
    if shutil.which("musl-gcc") is None or os.environ.get("CC"):
        pytest.skip("musl-gcc is not installed, or $CC chooses the compiler")
    data = (site_packages(installed.venv) / KEEPER).read_bytes()
    assert b"GLIBC_" not in data, "the wheel's keeper was built against glibc although musl-gcc is installed"


def test_the_installed_keeper_is_inside_the_package_and_runs(installed: Installed) -> None:
    done = installed.run(
        "import json, orchestrator; from orchestrator.agents import keeper; f = keeper.find(); "
        "print(json.dumps({'package': orchestrator.__file__, 'binary': str(f.binary), 'problem': f.problem}))"
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    package = site_packages(installed.venv) / "orchestrator"
    assert found["package"] == str(package / "__init__.py"), "the installed copy, not this checkout"
    assert found == {**found, "binary": str(package / "agents" / "orchestrator-keeper"), "problem": ""}


def test_up_from_the_installed_copy_starts_with_its_keeper(installed_project: Project) -> None:
    project = installed_project
    project.configure()
    orch = project.up()
    orch.wait_output("orchestrator up:")
    assert project.installed is not None
    binary = site_packages(project.installed.venv) / KEEPER
    assert f"recovery: adopt (keeper {binary})" in orch.output, orch.output
    project.drop("builder", "M-1.md", {"id": "M-1"})
    wait_for(lambda: project.folder("builder", "archive") == ["M-1.md"], what="M-1 archived")
    assert project.status()["recovery"]["keeper"] == str(binary)
    assert orch.stop() == 0


def test_a_build_without_a_c_compiler_warns_and_its_install_fails_closed(installed: Installed, tmp_path: Path) -> None:
    (sdist,) = installed.dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    (source,) = (tmp_path / "src").iterdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    built = run_checked(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(source)],
        "python -m build --wheel without a compiler",
        env={**env, "CC": str(tmp_path / "no-such-cc")},
    )
    warning = "WARNING: orchestrator: the keeper was not built (cannot run the C compiler"
    assert warning in built.stdout + built.stderr, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert KEEPER not in archive.namelist()
    # the wheel's own package beside the dependencies of the session's install: a copy without the keeper
    target = tmp_path / "no-keeper"
    run_checked(
        [str(installed.venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        "pip install --target <wheel without the keeper>",
        env=env,
    )
    bare = Installed(
        installed.venv, tmp_path / "dist", {"PYTHONPATH": str(target)}, [str(installed.python), "-m", "orchestrator"]
    )
    project = Project(tmp_path / "project", bare)
    project.root.mkdir()
    try:
        project.configure()
        refused = project.up(wait_ready=False)
        assert refused.wait() == 2
        lines = refused.output.strip().splitlines()
        assert len(lines) == 1, refused.output
        missing = target / KEEPER
        assert f"recovery: adopt needs the keeper, and there is no keeper binary at {missing} " in lines[0]
        assert "with a C compiler present" in lines[0] and "set `recovery: restart`" in lines[0]

        project.configure(recovery="restart")
        orch = project.up()
        orch.wait_output("recovery: restart (no keeper: runs are repeated after a crash)")
        project.drop("builder", "M-1.md", {"id": "M-1"})
        wait_for(lambda: project.folder("builder", "archive") == ["M-1.md"], what="M-1 archived")
        assert orch.stop() == 0
        assert loud_lines(project) == []
    finally:
        project.cleanup()


def test_an_editable_install_compiles_the_keeper_into_the_checkout(tmp_path: Path) -> None:
    """``pip install -e .`` (what ``make`` does) on a copy of the sources: the binary appears beside keeper.c."""
    import shutil

    from conftest import REPO

    copy = tmp_path / "checkout"
    shutil.copytree(
        REPO, copy, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "build", "orchestrator-keeper", ".*")
    )
    assert not (copy / KEEPER).exists()
    venv = fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_checked([str(venv / "bin" / "pip"), "install", "--quiet", "-e", str(copy)], "pip install -e", env=env)
    assert os.access(copy / KEEPER, os.X_OK)
    done = Installed(venv, tmp_path).run("from orchestrator.agents import keeper; print(keeper.find().binary)")
    assert done.stdout.strip() == str(copy / KEEPER), done.stderr


def test_the_installed_copy_runs_the_demo_and_the_doctor(installed: Installed, tmp_path: Path) -> None:
    """The two commands a new user runs first, from the venv the wheel was installed into."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    demo = run_checked(
        [str(installed.venv / "bin" / "orchestrator"), "demo"],
        "orchestrator demo",
        timeout=180,
        env={**env, "TMPDIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert "memos handled, now in archive/:" in demo.stdout, demo.stdout
    (folder,) = tmp_path.glob("orchestrator-demo-*")
    assert len(list(folder.glob("memo/*/archive/*.md"))) >= 4

    project = Project(tmp_path / "project", installed)
    project.root.mkdir()
    project.configure()
    healthy = project.cli("doctor", "--json")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    found = {f["check"]: f for f in json.loads(healthy.stdout) if f["role"] is None}
    keeper = site_packages(installed.venv) / KEEPER
    assert found["keeper"]["detail"] == f"{keeper} (passes its self-check)"

    scaffolded = Project(tmp_path / "team", installed)
    scaffolded.root.mkdir()
    assert scaffolded.cli("init", str(scaffolded.root)).returncode == 0
    bare = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "claude").exists())
    refused = scaffolded.cli("doctor", PATH=f"{installed.venv / 'bin'}{os.pathsep}{bare}")
    assert refused.returncode == 1, refused.stdout
    assert "fail project-manager: command: " in refused.stdout
    assert "roles.project-manager.command: 'claude' not found on PATH" in refused.stdout


def test_uv_tool_install_and_pipx_install_of_the_wheel_run_the_doctor(installed: Installed, tmp_path: Path) -> None:
    """uv and pipx, installed from the registry into a venv of their own, install the wheel each in a venv
    of its own; each copy's ``doctor`` finds its own keeper."""
    (wheel,) = installed.dist.glob("*.whl")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    tools = fresh_venv(tmp_path / "tools")
    run_checked([str(tools / "bin" / "pip"), "install", "--quiet", "uv", "pipx"], "pip install uv pipx", env=env)
    home = tmp_path / "home"
    homes = {
        "uv": {"UV_TOOL_DIR": str(home / "uv-tools"), "UV_TOOL_BIN_DIR": str(home / "uv-bin")},
        "pipx": {
            "PIPX_HOME": str(home / "pipx"),
            "PIPX_BIN_DIR": str(home / "pipx-bin"),
            "PIPX_MAN_DIR": str(home / "man"),
        },
    }
    run_checked(
        [str(tools / "bin" / "uv"), "tool", "install", str(wheel)], "uv tool install", env={**env, **homes["uv"]}
    )
    run_checked([str(tools / "bin" / "pipx"), "install", str(wheel)], "pipx install", env={**env, **homes["pipx"]})
    for tool, bin_dir, venv in (
        ("uv", home / "uv-bin", home / "uv-tools" / "orchestrator"),
        ("pipx", home / "pipx-bin", home / "pipx" / "venvs" / "orchestrator"),
    ):
        copy = Installed(venv, installed.dist, command=[str(bin_dir / "orchestrator")])
        project = Project(tmp_path / f"project-{tool}", copy)
        project.root.mkdir()
        project.configure()
        done = project.cli("doctor", "--json")
        assert done.returncode == 0, (tool, done.stdout, done.stderr)
        keeper = {f["check"]: f for f in json.loads(done.stdout)}["keeper"]
        assert keeper["detail"] == f"{site_packages(venv) / KEEPER} (passes its self-check)", (tool, keeper)
