"""The bdsgd package's import graph has no cycle between modules.

Every import counts: at module level, inside functions, and under ``if TYPE_CHECKING:`` (a cycle
hidden from the interpreter is still one between the modules' meanings). A package's
``__init__`` is a module like any other, so ``bdsgd.policies`` importing ``bdsgd.policies.base``
while ``bdsgd.policies.base`` imports ``bdsgd.policies`` is a cycle too. import-linter's layers
contract (pyproject.toml) checks the packages' order; this test the modules' within them.
"""

from __future__ import annotations

from collections import deque

import grimp


def import_graph() -> dict[str, set[str]]:
    """Each bdsgd module and the bdsgd modules it imports, however (grimp, import-linter's
    engine, reads every import statement of a module's source)."""
    graph = grimp.build_graph("bdsgd", include_external_packages=False,
                              exclude_type_checking_imports=False, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each
    sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component:
    [a, b, ..., a]."""
    start, inside = component[0], set(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & inside):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {component}")


def test_tarjan_and_the_cycle_finder_on_a_known_graph():
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert strongly_connected(graph) == [["a", "b", "c"], ["d", "e"]]
    assert shortest_cycle(graph, ["a", "b", "c"]) == ["a", "b", "a"]
    assert shortest_cycle(graph, ["d", "e"]) == ["d", "e", "d"]


def test_the_graph_counts_type_checking_and_function_level_imports(tmp_path, monkeypatch):
    """grimp as called here sees an import under ``if TYPE_CHECKING:`` and one inside a
    function, so a cycle made only of those is found."""
    package = tmp_path / "cyclic_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                  "    from cyclic_probe.b import B\n")
    (package / "b.py").write_text("def f():\n    from cyclic_probe import a\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclic_probe", include_external_packages=False,
                              exclude_type_checking_imports=False, cache_dir=None)
    assert graph.direct_import_exists(importer="cyclic_probe.a", imported="cyclic_probe.b")
    assert graph.direct_import_exists(importer="cyclic_probe.b", imported="cyclic_probe.a")


def test_no_import_cycles():
    graph = import_graph()
    assert "bdsgd.runtime_model.model" in graph  # the graph is bdsgd's own, module by module
    components = strongly_connected(graph)
    message = "\n".join(f"{len(c)} modules in a cycle: {', '.join(c)}\n"
                        f"  e.g. {' -> '.join(shortest_cycle(graph, c))}" for c in components)
    assert not components, f"import cycles between bdsgd's modules:\n{message}"
