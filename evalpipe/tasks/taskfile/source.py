"""A YAML task file read with the line of every value, so schema errors can name ``FILE:LINE``.

Parsing is PyYAML's safe loader (``CSafeLoader`` where PyYAML has libyaml, else ``SafeLoader``: the
nodes ``yaml.safe_load`` composes, scalars resolved by its constructor, no Python tags). While building the value, every node's start line is
recorded by its path in the document (``("fields", "inputs", "question")``, ``("labels", 2)``).
Two departures from ``safe_load``, both to catch mistakes: a key given twice in one mapping is an
error (``safe_load`` silently keeps the last one, which hides a typo'd copy), and keys are kept as
written (``1: 是`` has the key ``"1"``, ``yes:`` the key ``"yes"``) because every task-file key is text.
YAML merge keys (``<<``) are not supported.

**Bounded** (a 487-byte file of nested aliases once expanded to 5.4 GB): a task file is at most
:data:`MAX_TASK_FILE_BYTES`, its value at most :data:`MAX_NODES` nodes (an alias counts as many
nodes as it expands to, so a "billion laughs" stops at the limit, not at the end of memory), at most
:data:`MAX_ALIASES` alias uses of a list or mapping and :data:`MAX_DEPTH` levels deep; beyond any of
them the file is one error naming it.

:func:`locate` maps a pydantic error location to the deepest path present in the document; a
discriminated union's tag (``"classification"``) and pydantic's internal steps are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalpipe.data.errors import DataError

Path_ = tuple[Any, ...]

#: the largest task file read (the shipped ones are under 4 KB)
MAX_TASK_FILE_BYTES = 1024 * 1024
#: the most nodes (values, aliases expanded) a task file's value may have
MAX_NODES = 100_000
#: the most uses of an alias of a list or mapping (anchors of scalars cost nothing to expand)
MAX_ALIASES = 100
#: the deepest nesting of lists and mappings
MAX_DEPTH = 50


class _Budget:
    """What is left of the bounds while one task file's value is built."""

    def __init__(self, file: Path) -> None:
        self.file, self.nodes, self.aliases = file, 0, 0
        self.seen: set[int] = set()

    def spend(self, node: yaml.Node, depth: int) -> None:
        self.nodes += 1
        line = node.start_mark.line + 1
        if self.nodes > MAX_NODES:
            raise TaskFileError(self.file, line, None, f"more than {MAX_NODES:,} values (YAML aliases expanded); "
                                "a task file this large is refused (an alias bomb?)")
        if depth > MAX_DEPTH:
            raise TaskFileError(self.file, line, None, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.CollectionNode):
            if id(node) in self.seen:
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise TaskFileError(self.file, line, None, f"more than {MAX_ALIASES} uses of YAML aliases of "
                                        "lists or mappings; a task file this repetitive is refused (an alias bomb?)")
            self.seen.add(id(node))


class TaskFileError(DataError):
    """A task file that cannot be used: ``FILE:LINE: field.path: what is wrong``."""


@dataclass(frozen=True)
class TaskSource:
    """A task file's data and where each value of it starts (1-based lines)."""

    path: Path
    text: str
    data: Mapping[str, Any]
    lines: Mapping[Path_, int]

    def line_of(self, where: Sequence[Any]) -> int | None:
        """The line of the deepest node of ``where`` the document has (its parent's if absent)."""
        found = locate(self.data, where)
        while found and found not in self.lines:
            found = found[:-1]
        return self.lines.get(found, 1)

    def error(self, where: Sequence[Any], problem: str) -> TaskFileError:
        return TaskFileError(self.path, self.line_of(where), dotted(locate(self.data, where)) or None, problem)


def dotted(path: Sequence[Any]) -> str:
    """``("labels", 2, "name")`` → ``labels[2].name``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def locate(data: Any, where: Sequence[Any]) -> Path_:
    """The path of ``where`` through ``data``, skipping steps the document does not have (a union's
    tag, pydantic's ``function-after[…]``), but keeping a final missing key (so a "missing field"
    error names it)."""
    out: list[Any] = []
    node = data
    for i, step in enumerate(where):
        if isinstance(node, Mapping) and step in node:
            out.append(step)
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            out.append(step)
            node = node[step]
        elif i == len(where) - 1 and isinstance(step, str) and isinstance(node, Mapping):
            out.append(step)
    return tuple(out)


def _build(node: yaml.Node, path: Path_, lines: dict[Path_, int], file: Path, loader: yaml.SafeLoader,
           budget: _Budget) -> Any:
    """The value of ``node`` (keys as written: ``1:`` is the key ``"1"``, as every task-file key is
    text), recording each node's line by its path, within ``budget`` (the module's bounds)."""
    budget.spend(node, len(path))
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                raise TaskFileError(file, key_node.start_mark.line + 1, dotted(path) or None,
                                    "a key must be a plain value (YAML merge keys and complex keys are not supported)")
            key, line = str(key_node.value), key_node.start_mark.line + 1
            if key in seen:
                raise TaskFileError(file, line, dotted((*path, key)),
                                    f"given twice (first on line {seen[key]}); YAML would silently keep the last")
            seen[key] = line
            lines[(*path, key)] = line
            out[key] = _build(value_node, (*path, key), lines, file, loader, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), lines, file, loader, budget) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


#: libyaml's safe loader where PyYAML was built with it (the same nodes and marks; composing the
#: shipped task files is ~5x faster, which is most of `evalpipe tasks`), else the pure-Python one
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_task_text(text: str, path: Path) -> TaskSource:
    """Parse a task file's text (see the module docstring); a YAML error names its line."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise TaskFileError(path, None, None, "empty task file (expected a mapping with name, kind, data, …)")
        lines: dict[Path_, int] = {}
        data = _build(node, (), lines, path, loader, _Budget(path))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise TaskFileError(path, line, None, f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise TaskFileError(path, None, None, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise TaskFileError(path, None, None, f"nested too deeply (at most {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise TaskFileError(path, 1, None, f"expected a mapping at the top level, found {type(data).__name__}")
    return TaskSource(path=path, text=text, data=data, lines=lines)


def read_task_source(path: str | Path) -> TaskSource:
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(path, None, None, "task file not found")
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_TASK_FILE_BYTES + 1)
    except OSError as exc:
        raise TaskFileError(path, None, None, f"cannot read the task file ({exc.strerror or exc})") from None
    if len(raw) > MAX_TASK_FILE_BYTES:
        raise TaskFileError(path, None, None, f"over {MAX_TASK_FILE_BYTES // 1024} KiB; a task file names its data "
                            "files, it does not hold the data")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TaskFileError(path, None, None, f"not valid UTF-8 (byte {exc.start}); save the task file as UTF-8") from None
    return parse_task_text(text, path)
