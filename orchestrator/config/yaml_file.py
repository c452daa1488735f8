"""``roles.yaml`` read as YAML, with one check YAML does not make: a key written twice in one mapping.

YAML keeps the last of two equal keys and says nothing, so a role pasted twice, or a second ``max_concurrent:``
further down, silently replaced what came first (a role's cap of 1 was lost). The file is parsed once: its node
tree is checked, then built.
"""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> tuple[Any, str | None]:
    """The document of ``text`` and the first key written twice (``key.path: ...``), or None; ``yaml.YAMLError``
    as ``yaml.safe_load`` raises it."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        twice = _twice(node, [], set()) if node is not None else None
        return (loader.construct_document(node) if node is not None else None), twice
    finally:
        loader.dispose()


def _twice(node: yaml.Node, path: list[str], seen: set[int]) -> str | None:
    if id(node) in seen:  # an alias: its node was checked where it was anchored (and may hold itself)
        return None
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _twice(item, [*path, str(i)], seen)
            if found:
                return found
    if not isinstance(node, yaml.MappingNode):
        return None
    first: dict[str, int] = {}
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":  # ``<<`` may come twice
            name, line = str(key.value), key.start_mark.line + 1
            if name in first:
                lines = f"line {line}" if first[name] == line else f"lines {first[name]} and {line}"
                return (
                    f"{'.'.join([*path, name])}: written twice ({lines}); YAML would keep the second alone, so give "
                    "each its own name or merge them"
                )
            first[name] = line
            found = _twice(value, [*path, name], seen)
        else:
            found = _twice(value, path, seen)
        if found:
            return found
    return None
