"""The layout's rules (README, "Layout"): imports point down the stack of packages, no module
imports itself back through others, and no module is long."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# From the top floor down; a package may import its own modules and any package on a lower floor.
FLOORS = (
    ("bench.cli",),
    ("bench.tune",),
    ("bench.train", "bench.classic", "bench.report", "bench.speed"),
    ("losses",),
    ("miners", "bench.data", "bench.models", "bench.evaluation", "bench.runs"),
    ("bench.protocols",),
    ("bench.util",),
)
MAX_LINES = 400


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def modules() -> dict[str, Path]:
    tops = ("bench", "losses", "miners")
    return {module_name(p): p for top in tops for p in (ROOT / top).rglob("*.py")}


def imported(path: Path, known: set[str]) -> set[str]:
    """The project's modules that `path` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(path, set(found)) - {name} for name, path in found.items()}


def package(module: str) -> str | None:
    """The floor package a module belongs to (the longest prefix), None for bench itself."""
    names = [p for floor in FLOORS for p in floor if module == p or module.startswith(p + ".")]
    return max(names, key=len) if names else None


def floor(module: str) -> int:
    return next(i for i, names in enumerate(FLOORS) if package(module) in names)


def test_every_module_belongs_to_a_floor():
    assert [m for m in modules() if m != "bench" and package(m) is None] == []


def test_imports_point_down_the_stack():
    upward = [
        f"{a} -> {b}"
        for a, targets in graph().items()
        for b in targets
        if a != "bench" and package(a) != package(b) and floor(b) <= floor(a)
    ]
    assert upward == []


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import circle as [a, b, ..., a], or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return []

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return []


def test_cycle_finds_a_circle_and_only_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle():
    # A package's __init__ is imported with any of its modules; it may import them in turn.
    edges = {a: {b for b in targets if not a.startswith(b + ".")} for a, targets in graph().items()}
    assert cycle(edges) == []


@pytest.mark.parametrize("top", ["bench", "losses", "miners"])
def test_no_long_module(top):
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / top).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
