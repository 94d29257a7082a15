"""The shape of the code: no import cycles among the project's modules; the engine never imports the UI.

The import graph is read from the source (every `import`, at module level, inside functions and under
`TYPE_CHECKING`: a cycle hidden in a function is still a cycle someone has to untangle), so it covers
modules no test happens to import.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("doctor", "checks", "remedies", "playbooks")


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages under `root`."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(name: str, path: Path, modules: set[str]) -> set[str]:
    """Every dotted name the module imports: `from a import b` is `a.b` where that is a module,
    else `a` (a package is not an import of its own submodules: `from doctor.launch import slurm`
    inside doctor.launch.engine loads doctor.launch.slurm only)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            submodules = {f"{source}.{alias.name}" for alias in node.names}
            names.update(submodules & modules)
            if submodules - modules:
                names.add(source)
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = module_names(root)
    return {name: {n for n in imported_names(name, path, set(modules)) if n in modules and n != name}
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import cycle per strongly connected group of modules (Tarjan), each as a path a -> ... -> a."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [cycle_path(graph, group) for group in groups]


def cycle_path(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest cycle through the group's first module, to name in the failure."""
    start = min(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                todo.append(nxt)
    raise AssertionError("a strongly connected group always has a cycle")


def test_no_import_cycles_among_the_projects_modules():
    found = cycles(import_graph(ROOT))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_cycle_through_a_temporary_module_is_found(tmp_path):
    """The test above can fail: a module hiding `import doctor.gate` in a function, imported by the
    argument helpers the gate imports, closes a cycle (the old cli <-> gate one) and is named."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    assert cycles(import_graph(tmp_path)) == []
    (tmp_path / "doctor" / "cycle_probe.py").write_text(
        "def gate_entry():\n    from doctor import gate\n\n    return gate.run_gate\n", encoding="utf-8")
    with (tmp_path / "doctor" / "arguments.py").open("a", encoding="utf-8") as out:
        out.write("\nfrom . import cycle_probe  # noqa: E402\n")
    found = cycles(import_graph(tmp_path))
    assert found == [["doctor.arguments", "doctor.cycle_probe", "doctor.gate", "doctor.arguments"]]


def engine_modules() -> list[str]:
    return sorted(name for name in module_names(ROOT) if not name.startswith(("doctor.tui", "playbooks"))
                  and not name.endswith("__main__"))


def test_no_engine_module_can_reach_textual():
    """doctor/ minus doctor/tui, checks/ and remedies/: no chain of imports (lazy ones too) leads to
    a module that imports textual. (The command line may build the app's plain `Options`; it starts
    the app by name, with importlib.)"""
    modules = module_names(ROOT)
    graph = import_graph(ROOT)
    uses_textual = {name for name, path in modules.items()
                    if any(n.split(".")[0] == "textual" for n in imported_names(name, path, set(modules)))}
    assert "doctor.tui.app" in uses_textual
    offenders = {}
    for name in engine_modules():
        seen, todo = {name}, [name]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        if seen & uses_textual:
            offenders[name] = sorted(seen & uses_textual)
    assert offenders == {}


def test_importing_every_engine_module_loads_no_textual():
    """harlequin's guard: import the whole engine in a fresh interpreter and look at sys.modules."""
    modules = engine_modules()
    assert "doctor.gate" in modules and "checks.scorep" in modules and "remedies.launch" in modules
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual' or m.startswith('doctor.tui')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
