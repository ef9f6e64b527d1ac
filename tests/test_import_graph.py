"""The package's modules import one another without circles (issue 70).

Every import statement counts, those inside functions too: a lazy import still ties two modules
together, and a circle means neither can be read, tested or moved without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module name -> the package modules it imports (module level and inside functions)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                prefix = ".".join(base + ([node.module] if node.module else []))
                names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
            else:
                continue
            targets.update(t for t in map(resolve, names) if t and t != module)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_of_the_package_imports_itself_through_others():
    graph = import_graph()
    assert "icw.corpus" in graph and "icw.integrations.datatrove" in graph
    found = cycles(graph)
    assert not found, "import circles (module -> the members it imports):\n" + "\n".join(
        "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)


def test_corpus_detection_and_the_datatrove_steps_point_one_way():
    """The datatrove steps build on icw.corpus; the command line chooses between them (icw.cli_corpus)."""
    graph = import_graph()
    assert "icw.corpus" in graph["icw.integrations.datatrove"]
    assert "icw.integrations.datatrove" not in graph["icw.corpus"]
    assert {"icw.corpus", "icw.integrations.datatrove"} <= graph["icw.cli_corpus"]


def test_the_cycle_finder_finds_a_lazy_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
