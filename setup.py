"""The build step that pyproject.toml cannot say: compile the keeper into the package.

``orchestrator/agents/keeper.c`` becomes the executable ``orchestrator-keeper``
beside it whenever the package is built: a wheel (``python -m build``, ``pip
install .``, ``pipx install .``) gets it in its build folder, an editable install
(``pip install -e .``, ``make``) in the source tree, where the package is imported
from. ``orchestrator up`` never compiles anything; it refuses to start with
``recovery: adopt`` when the keeper is missing (see "The keeper" in
docs/operations.md). A machine without a C compiler still gets a package, without the keeper,
and a warning saying so. The wheel is platform-specific: it carries a native binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
KEEPER_SOURCE = HERE / "orchestrator" / "agents" / "keeper.c"
KEEPER_BINARY = Path("orchestrator", "agents", "orchestrator-keeper")  # inside the package, wherever it is built
WARNING = (
    "WARNING: orchestrator: the keeper was not built ({why}); this install has no keeper, so "
    "`orchestrator up` refuses `recovery: adopt` (the default) until it is reinstalled with a C compiler "
    "present (e.g. `apt-get install gcc`), or the team sets `recovery: restart` and accepts that runs are "
    "repeated after a crash"
)


def _compiler() -> str | None:
    """``$CC`` when set (even when it names nothing, so a build can be told there is no compiler), else cc or gcc."""
    if os.environ.get("CC"):
        return os.environ["CC"]
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _builds(compiler: str) -> list[tuple[str, list[str]]]:
    """(compiler, flags) to try, best first. Static first: no dynamic loader at each of the keeper's starts, and no
    libc to match where it is installed. With musl (``musl-gcc``, Debian's musl-tools) before the C library of
    ``compiler``, unless ``$CC`` chose: glibc's static start-up asks the CPU for its features and caches (dozens of
    ``cpuid``, each a trap to the hypervisor on a virtual machine), 0.5 ms of every start measured on one, where
    musl's keeper starts in under 0.1 ms (docs/operations.md, The keeper)."""
    musl = None if os.environ.get("CC") else shutil.which("musl-gcc")
    return ([(musl, ["-static"])] if musl else []) + [(compiler, ["-static"]), (compiler, [])]


def compile_keeper(source: Path, target: Path) -> str | None:
    """Compile ``source`` to ``target`` (static when a C library allows it); None, or why it could not be built."""
    if target.exists():  # a binary of an earlier build must not pass for this one's
        target.unlink()
    compiler = _compiler()
    if compiler is None:
        return "no C compiler: none of $CC, cc, gcc, clang"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".keeper-", dir=target.parent)
    os.close(fd)
    errors = []
    try:
        for program, flags in _builds(compiler):
            try:
                done = subprocess.run(
                    [program, "-O2", "-Wall", *flags, "-o", tmp, str(source)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
            except OSError as exc:
                if program != compiler:  # musl-gcc that cannot run: the compiler's own builds remain
                    continue
                return f"cannot run the C compiler {compiler!r}: {exc.strerror or exc}"
            if done.returncode == 0:
                os.chmod(tmp, 0o755)
                os.replace(tmp, target)  # whole or not at all: a failed build never leaves half a binary
                return None
            errors.append(done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"])
        return f"{compiler} failed: {errors[-1][0]}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class BuildWithKeeper(build_py):
    """``build_py``, then the keeper compiled into the package (into the source tree for an editable install)."""

    def run(self) -> None:
        super().run()
        base = HERE if getattr(self, "editable_mode", False) else Path(self.build_lib)
        why = compile_keeper(KEEPER_SOURCE, base / KEEPER_BINARY)
        if why is not None:
            print(WARNING.format(why=why), file=sys.stderr, flush=True)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        built = Path(self.build_lib) / KEEPER_BINARY
        if not getattr(self, "editable_mode", False) and built.exists():
            outputs.append(str(built))
        return outputs


class NativeDistribution(Distribution):
    """A distribution with a native part, installed where platform-specific files go (platlib)."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """A wheel tagged for this platform (it carries a native executable) and any Python 3 (it links no Python)."""

    def get_tag(self) -> tuple[str, str, str]:
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"build_py": BuildWithKeeper, "bdist_wheel": PlatformWheel}, distclass=NativeDistribution)
