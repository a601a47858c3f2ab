"""No import cycles in kgen/: every module can be read, tested and changed with only what it
imports. The graph holds every import, the ones inside functions too (a deferred import is
still a dependency), except under ``if TYPE_CHECKING:``. Importing ``a.b.c`` makes ``a`` and
``a.b`` run first, but a package's own modules importing it back is how packages work, so
edges from a module to the packages that contain it are left out."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kgen"


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kgen modules ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            return
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets.add(source)
            targets.update(f"{source}.{a.name}" for a in node.names)   # a submodule imported by name
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    out = set()
    for target in targets:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):
            out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = walk(start)
            if found:
                return found
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_deferred_imports_count_and_parent_packages_do_not(tmp_path):
    pkg = tmp_path / "kgen"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from kgen.sub import leaf\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "leaf.py").write_text("import kgen\n\ndef f():\n    from kgen import other\n")
    (pkg / "other.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kgen.sub.leaf\n")
    modules = module_names(pkg)
    leaf = imported("kgen.sub.leaf", pkg / "sub" / "leaf.py", modules)
    assert leaf == {"kgen.other"}                # the function's import counts; kgen, its package, not
    assert imported("kgen.other", pkg / "other.py", modules) == set()   # TYPE_CHECKING only


def test_kgen_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 40 and "kgen.dispatch" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_dispatch_knows_neither_families_nor_search_nor_runners():
    graph = import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    below = reach("kgen.dispatch")
    for layer in ("kgen.kernels.gemm", "kgen.ops", "kgen.search", "kgen.runners", "kgen.cli"):
        assert not any(m == layer or m.startswith(layer + ".") for m in below), f"dispatch reaches {layer}"
