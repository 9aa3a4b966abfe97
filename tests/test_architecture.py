"""The layout keeps its promises: no import cycles, stages import in one direction,
no word_* prefixes standing in for subpackages, every SQL script declares itself."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from conftest import ROOT

# repository folder -> import name (pyproject.toml's package-dir)
PACKAGES = {"contract": "overlapscope.contract", "tracer": "overlapscope.tracer",
            "analyzer": "overlapscope.analyzer", "cli": "overlapscope.cli", "dashboard": "overlapscope.dashboard"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, name in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Every product module ``module`` imports, at module level or inside functions."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_cycles_are_found():
    """The checker itself: a two-module loop is a cycle."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


# Which stage may import which (the data flow: tracer -> bundle -> analyzer -> cli/dashboard).
ALLOWED = {
    "overlapscope.contract": {"overlapscope.contract"},
    "overlapscope.tracer": {"overlapscope.contract", "overlapscope.tracer"},
    "overlapscope.analyzer": {"overlapscope.contract", "overlapscope.analyzer"},
    "overlapscope.dashboard": {"overlapscope.contract", "overlapscope.analyzer", "overlapscope.dashboard"},
    "overlapscope.cli": {"overlapscope.contract", "overlapscope.analyzer", "overlapscope.dashboard",
                         "overlapscope.cli"},
}


def _stage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_stages_import_in_one_direction():
    wrong = [(m, i) for m, imports in GRAPH.items() for i in imports if _stage(i) not in ALLOWED[_stage(m)]]
    assert wrong == []


def test_the_contract_and_the_analyzer_import_no_torch():
    for module, path in MODULES.items():
        if _stage(module) in ("overlapscope.contract", "overlapscope.analyzer"):
            names = {n.split(".")[0] for n in _all_imports(path)}
            assert "torch" not in names, module
            if _stage(module) == "overlapscope.contract":
                assert "duckdb" not in names, module


def _all_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
    return out


def test_no_word_prefix_stands_in_for_a_subpackage():
    """A folder holding three or more modules named word_* wants a subpackage named word."""
    for folder in list(PACKAGES) + ["tests"]:
        for directory in {p.parent for p in (ROOT / folder).rglob("*.py")}:
            prefixes = defaultdict(list)
            for p in directory.glob("*.py"):
                stem = p.stem
                if "_" in stem.strip("_") and not stem.startswith("_") and not stem.startswith("test_"):
                    prefixes[stem.split("_")[0]].append(stem)
            crowded = {k: v for k, v in prefixes.items() if len(v) >= 3}
            assert not crowded, f"{directory}: {crowded}"


def test_every_sql_script_declares_what_it_needs_and_makes():
    from overlapscope.analyzer import sql

    scripts = [s for s in sql.scripts() if s not in sql.SETUP]
    provided = {}
    for name in scripts:
        s = sql.script(name)
        assert s.provides, f"{name}.sql declares no provides"
        for table in s.provides:
            assert table not in provided, f"{table} provided by {name} and {provided.get(table)}"
            provided[table] = name
        for required in s.requires:
            assert required in scripts, f"{name}.sql requires an unknown script {required!r}"


def test_no_script_reads_another_scripts_private_tables():
    """Private tables, macros and variables (_xx_*) belong to the script that makes them;
    shared ones are declared."""
    from overlapscope.analyzer import sql

    for name in sql.scripts():
        text = sql.text(name)
        made = set(re.findall(r"CREATE OR REPLACE TEMP (?:TABLE|MACRO) (\w+)|SET VARIABLE (\w+)", text))
        made = {m for pair in made for m in pair if m}
        used = set(re.findall(r"\b(_[a-z]{2}_\w+)", text))
        foreign = {u for u in used - made if not u.startswith("_sql")}
        assert not foreign, f"{name}.sql reads {sorted(foreign)}"
