"""The package's layers, read from its import statements: cli -> pipelines/evaluation -> core, no
cycles, and no command module importing another (the command table in cli/app.py names them)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("cli", "core", "pipelines", "evaluation")


def modules() -> dict[str, Path]:
    found = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("vi", *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The vi modules `name` imports, at module level or inside functions alike (an import inside a
    function still ties the layers)."""
    out = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        out |= {t for t in targets if t in known and t != name}
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_core_knows_no_stage_and_pipelines_know_no_command():
    wrong = []
    for name, targets in graph().items():
        layer = name.split(".")[1]
        for target in targets:
            other = target.split(".")[1]
            if layer == "core" and other != "core":
                wrong.append(f"{name} -> {target}")
            if layer in ("pipelines", "evaluation") and other == "cli":
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_no_command_module_imports_another():
    shared = {"vi.cli.app", "vi.cli.stage", "vi.cli.options"}
    wrong = [f"{name} -> {target}" for name, targets in graph().items() if name.startswith("vi.cli.")
             for target in targets if target.startswith("vi.cli.") and target not in shared - {"vi.cli.app"}]
    assert wrong == []


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
