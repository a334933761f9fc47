"""No project module imports another in a circle (CONTRIBUTING.md, "Imports point one way").

Every module of ``analysis/``, ``precompute/``, ``dashboard/``, ``training/``, ``pages/``
and ``app.py`` is parsed with `ast` (nothing is imported or executed) and every import
statement in it is read, at module level and inside functions alike: a function-level
import hides a circle from Python's import machinery, not from the reader. An import
names one project module: ``import a.b``, ``from a.b import c`` and ``from .b import c``
name ``a.b``, or ``a.b.c`` when that is itself a module. The package ``__init__``
an import makes Python run on the way (``a/__init__.py`` for ``a.b``) is not counted
as imported: most ``__init__`` files here hold only docstrings, and ``analysis/store/__init__.py``
re-exports its own modules' public names (an edge from a package to its own modules, which
Python resolves; counting it would report ``analysis.store`` <-> ``analysis.store.meta``).

A circle is a strongly connected component of that graph with more than one module
(or a module importing itself). The ones in `KNOWN_CYCLES` are owned by other work
and listed so that the test stays exact; any other circle fails the test, and so does
a known one that is gone (drop it from the list).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("headwatch", "pages")
SCRIPTS = ("app.py",)

# Circles outside precompute/, left to the engineers who own those modules; each as its
# set of modules. Empty: none today.
KNOWN_CYCLES: set[frozenset[str]] = set()


def project_modules(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every module the test covers."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    for script in SCRIPTS:
        if (root / script).is_file():
            modules[Path(script).stem] = root / script
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` (at ``path``) imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` where only a.b is ours, or an attribute
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def circular_sets(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected sets of modules that hold a circle (more than one module, or
    one that imports itself), ordered by their first module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:  # a few hundred modules: recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found, key=min)


def circle(graph: dict[str, set[str]], modules: frozenset[str]) -> list[str]:
    """One circle through the set's first module, ``[a, b, ..., a]``: a shortest way back to it."""
    start = min(modules)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & modules):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{sorted(modules)} is not strongly connected")


def describe(graph: dict[str, set[str]], sets: list[frozenset[str]]) -> str:
    """One line per set: a circle through it, and the set's other modules."""
    lines = []
    for modules in sets:
        path = circle(graph, modules)
        rest = sorted(modules - set(path))
        lines.append("\n  " + " -> ".join(path) + (f"  (in the same tangle: {', '.join(rest)})" if rest else ""))
    return "".join(lines) or " (none)"


def test_the_cycle_finder_finds_circles_through_function_level_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "headwatch" / "precompute"
    pkg.mkdir(parents=True)
    (tmp_path / "headwatch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from headwatch.precompute.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import headwatch.precompute.a as a\nimport os\n")
    (pkg / "d.py").write_text("from headwatch.precompute import a, e\n")  # a chain, not a circle
    (pkg / "e.py").write_text("from .e import g\n")  # imports itself
    (tmp_path / "app.py").write_text("from headwatch.precompute.d import y\n")
    (pkg / "f.py").write_text("import headwatch.precompute.a.x\n")  # an attribute of a: imports a
    graph = import_graph(tmp_path)
    a, b, c, d, e, f = (f"headwatch.precompute.{m}" for m in "abcdef")
    assert graph[d] == {a, e}
    assert graph[f] == {a}
    assert graph["app"] == {d}
    sets = circular_sets(graph)
    assert sets == [frozenset({a, b, c}), frozenset({e})]
    assert circle(graph, sets[0]) == [a, b, c, a]
    graph[c].add(f)  # a second, longer circle c -> f -> a: one tangle of four
    assert circular_sets(graph)[0] == frozenset({a, b, c, f})
    assert "(in the same tangle: headwatch.precompute.f)" in describe(graph, circular_sets(graph))


def test_no_module_imports_another_in_a_circle() -> None:
    graph = import_graph()
    found = circular_sets(graph)
    new = [m for m in found if m not in KNOWN_CYCLES]
    gone = [sorted(m) for m in KNOWN_CYCLES if m not in found]
    assert not any(m.startswith("headwatch.precompute") for c in KNOWN_CYCLES for m in c), "precompute/ has no known circles"
    assert not new and not gone, (
        f"import circles:{describe(graph, found)}\n"
        f"new ones (break them; moving an import into a function does not):{describe(graph, new)}\n"
        f"known ones that are gone (remove them from KNOWN_CYCLES): {gone or '(none)'}"
    )
