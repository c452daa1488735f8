"""The two tiers are chosen by markers that ``tests/conftest.py`` sets: what `make test` leaves out is ``full``."""

from __future__ import annotations

from typing import Any

import pytest

import conftest


class Item:
    """The part of a collected test the tier hook reads and writes."""

    def __init__(self, fixtures: tuple[str, ...] = (), markers: tuple[str, ...] = ()) -> None:
        self.fixturenames = list(fixtures)
        self.markers = set(markers)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.add(marker.name)


def tiers(*items: Item) -> list[bool]:
    conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    return ["full" in item.markers for item in items]


def test_a_test_that_starts_a_real_orchestrator_is_in_the_full_tier_unless_it_proves_an_os_guarantee() -> None:
    assert tiers(
        Item(("tmp_path",)),
        Item(("tmp_path", "project")),
        Item(("installed_project",)),
        Item(("fake_cli", "monkeypatch")),
        Item(("project",), ("os_level",)),
    ) == [False, True, True, True, False]


def test_ray_the_real_cli_and_installs_are_in_the_full_tier_whatever_their_fixtures() -> None:
    assert tiers(
        Item((), ("ray",)), Item((), ("real_cli",)), Item(("tmp_path",), ("slow",)), Item((), ("timeout",))
    ) == [
        True,
        True,
        True,
        False,
    ]


def test_this_session_selects_by_the_markers_the_hook_set(request: pytest.FixtureRequest) -> None:
    """Whatever ``-m`` chose, no collected test lacks the marker its fixtures call for."""
    for item in request.session.items:
        real = not conftest.REAL_PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        if real and item.get_closest_marker("os_level") is None:
            assert item.get_closest_marker("full") is not None, item.nodeid


def test_make_test_is_the_fast_tier_and_ci_runs_every_test() -> None:
    repo = conftest.REPO
    recipes: dict[str, list[str]] = {}
    target = None
    for line in (repo / "Makefile").read_text(encoding="utf-8").splitlines():
        if line.startswith("\t") and target is not None:
            recipes[target].append(line.strip())
        elif ":" in line and not line.startswith(("#", " ", ".")) and "=" not in line.split(":", 1)[0]:
            target = line.split(":", 1)[0]
            recipes[target] = []
    pytest_line = [r for r in recipes["test"] if "pytest" in r]
    assert pytest_line == ["$(BIN)/python -m pytest -m 'not full' $(PYTEST_ARGS)"]
    assert [r for r in recipes["test-all"] if "pytest" in r] == ["$(BIN)/python -m pytest $(PYTEST_ARGS)"]
    ci = (repo / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "make test-all" in ci and ".ci/needs cc" in " ".join(ci)
