"""The generic core knows no task by name, and evalpipe's modules import each other without cycles.

Both are promises of the design (docs/architecture.md): a new task is a task file or module and a
template, never an edit of the runner, CLI or report; and every stage can be read, tested and
reused on its own, which an import cycle makes impossible.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "evalpipe"
#: the code that must stay generic (docstrings and comments may cite examples)
GENERIC = ["pipeline", "store", "variants", "scoring", "rescoring.py", "cli", "results.py", "outcome.py",
           "frames.py", "terminal.py", "report"]
TASK_NAMES = re.compile(r"ncbi|clue_|cblue|chip_|cmeee|cmeie|kuake|huatuo|promptcblue|longhealth|medisum|mednli|"
                        r"meqsum|cdn_terms", re.IGNORECASE)


def _generic_files() -> list[Path]:
    out = []
    for name in GENERIC:
        path = PACKAGE / name
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return out


def _code_tokens(path: Path) -> list[tuple[int, str]]:
    """(line, token text) of every token that is neither a comment nor part of a docstring."""
    source = path.read_text(encoding="utf-8")
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docstring_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type != tokenize.COMMENT and t.start[0] not in docstring_lines]


def test_the_generic_core_names_no_task():
    hits = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text[:60]}"
            for path in _generic_files() for line, text in _code_tokens(path) if TASK_NAMES.search(text)]
    assert not hits, "task names in the generic core:\n" + "\n".join(hits)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """evalpipe modules imported anywhere in the file (lazy imports inside functions included)."""
    name = _module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: -node.level] if not path.name == "__init__.py" else name.split(".")
                base = ".".join([*package, base] if base else package)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_cycles():
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    graph = {_module_name(p): _imports(p, modules) for p in files}
    # a package's __init__ importing its own submodules is how packages expose their API, not a cycle
    graph = {m: {t for t in deps if not t.startswith(m + ".")} for m, deps in graph.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


#: the pipeline's modules that need no model: the stage is a file of rendered plans (re-scoring reads
#: its scratch folder), not a step that sends anything
OFFLINE_PIPELINE = frozenset({"evalpipe.pipeline", "evalpipe.pipeline.stage"})


def _talks_to_a_model(module: str) -> bool:
    """The runner (evalpipe.pipeline's stages, once runner.py) or a backend."""
    return (module.startswith("evalpipe.pipeline") and module not in OFFLINE_PIPELINE) \
        or module.startswith("evalpipe.backends")


def test_rescoring_and_the_report_never_reach_the_runner():
    """Re-scoring and the report need no model, so they must not depend on what talks to one:
    nothing they import (directly or through others) is the runner or a backend."""
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    graph = {_module_name(p): _imports(p, modules) for p in files}
    graph = {m: {t for t in deps if not t.startswith(m + ".")} for m, deps in graph.items()}
    offline = ["evalpipe.rescoring", "evalpipe.scoring"] + sorted(m for m in modules if m.startswith("evalpipe.report"))
    bad = {m: sorted(d for d in _reaches(graph, m) if _talks_to_a_model(d)) for m in offline}
    assert not {m: d for m, d in bad.items() if d}, bad


def test_listing_tasks_imports_no_heavy_library():
    """`evalpipe tasks` (the CLI plus every task family) must start fast: numpy, pandas, torch and
    matplotlib are imported where vectors, frames, models and plots are made, never at registry import."""
    import subprocess
    import sys

    code = ("import sys, evalpipe.cli; from evalpipe.tasks.registry import all_tasks; all_tasks(); "
            "print(sorted(m for m in ('numpy', 'pandas', 'torch', 'matplotlib', 'aiohttp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_run_writing_its_extract_imports_no_heavy_library():
    """A run takes the report's extract of its samples as it writes them (evalpipe.report.extract, in the
    scoring child beside the sending): pandas and numpy are the report's, ~80 MB a run never needed."""
    import subprocess
    import sys

    code = ("import sys, evalpipe.cli, evalpipe.pipeline.execute, evalpipe.samples_file, evalpipe.report.extract; "
            "print(sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _imported_names(path: Path) -> set[str]:
    """Every module named by an import statement or by an ``importlib.import_module``/``__import__``
    string in the file (relative imports resolved), whether or not it is an evalpipe module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                name = _module_name(path)
                package = name.split(".")[: -node.level] if path.name != "__init__.py" else name.split(".")
                base = ".".join([*package, base] if base else package)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__"):
                found.add(node.args[0].value)
    return found


def _reaching(folder: str, target: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    hits = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        if _module_name(path) in allowed:
            continue
        bad = sorted(n for n in _imported_names(path) if n == target or n.startswith(target + "."))
        hits.extend(f"{path.relative_to(PACKAGE.parent)}: {n}" for n in bad)
    return hits


def test_no_task_module_imports_the_report():
    """A task family declares what it shows as data (evalpipe.rundir.boards); it never builds report blocks."""
    hits = _reaching("tasks", "evalpipe.report")
    assert not hits, "evalpipe/tasks imports the report:\n" + "\n".join(hits)


def test_the_report_imports_no_task_module():
    """The report renders from the run directory (config.json records kinds, suites with their
    aggregates' declarations, boards): no report module loads evalpipe.tasks, statically or through
    importlib — there is no exception (the old registry bridge is gone)."""
    hits = _reaching("report", "evalpipe.tasks")
    assert not hits, "evalpipe/report imports evalpipe.tasks:\n" + "\n".join(hits)
    assert not (PACKAGE / "report" / "registry_bridge.py").exists()


def test_the_import_checks_see_importlib_strings(tmp_path):
    """The check above would catch a registry loaded by name (the old report/contributions did)."""
    module = tmp_path / "probe.py"
    module.write_text("import importlib\n\ndef f():\n    importlib.import_module('evalpipe.tasks.registry')\n",
                      encoding="utf-8")
    assert "evalpipe.tasks.registry" in _imported_names(module)
