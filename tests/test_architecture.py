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
            "analyzer": "overlapscope.analyzer", "cli": "overlapscope.cli", "server": "overlapscope.server",
            "dashboard": "overlapscope.dashboard"}


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
    """Every product module ``module`` imports, at module level or inside functions.

    ``from package import name`` counts as an import of the module ``package.name`` where
    there is one, else of ``package`` (a name defined there)."""
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
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_cycles_are_found():
    """The checker itself: a two-module loop is a cycle."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


# --- packages in layers: the map in docs/architecture.md ------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
LAYERS_HEADING = "## Packages and what each may import"


def package_of(module: str) -> str:
    """The package a module belongs to, as the map names it: ``contract``, ``tracer``, ``cli``,
    ``dashboard``, ``analyzer.<subpackage>``, ``analyzer.<module>`` for a module directly in
    analyzer/ (``analyzer.gate``), and ``analyzer`` for the package's own ``__init__``."""
    parts = module.split(".")[1:]
    if parts[0] != "analyzer" or len(parts) == 1:
        return parts[0]
    return f"analyzer.{parts[1]}"


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to packages (function-level imports included)."""
    out: dict[str, set[str]] = defaultdict(set)
    for module, imported in graph.items():
        out[package_of(module)].update(package_of(i) for i in imported)
    return {p: deps - {p} for p, deps in out.items()}


def _layer_map() -> dict[str, dict]:
    """The table under LAYERS_HEADING: package -> {"may": set of packages, "row": the row's text}."""
    text = ARCHITECTURE.read_text()
    assert LAYERS_HEADING in text, f"{ARCHITECTURE.name} has no section {LAYERS_HEADING!r}"
    section = text.split(LAYERS_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or cells[0] in ("package", "") or set(cells[0]) <= {"-"}:
            continue
        name = cells[0].strip("`")
        may = set() if cells[1] in ("nothing", "-") else {m.strip().strip("`") for m in cells[1].split(",")}
        assert name not in rows, f"{name} twice in the map"
        rows[name] = {"may": may, "row": line}
    return rows


LAYERS = _layer_map()


def test_every_package_is_in_the_map_and_nothing_else():
    assert set(LAYERS) == set(package_graph(GRAPH)) | {package_of(m) for m in MODULES}


def test_packages_import_only_what_the_map_allows():
    """Function-level imports count: an import hidden in a function is still a dependency."""
    wrong = sorted((p, i) for p, deps in package_graph(GRAPH).items() for i in deps if i not in LAYERS[p]["may"])
    assert wrong == [], "imports the map does not allow (package, imported): " + str(wrong)


def test_the_map_allows_no_cycle():
    """Not only the imports of today: what the map allows could never form a cycle."""
    assert _cycles({p: row["may"] for p, row in LAYERS.items()}) == []
    unknown = sorted({m for row in LAYERS.values() for m in row["may"]} - set(LAYERS))
    assert unknown == []


def test_no_two_packages_import_each_other():
    graph = package_graph(GRAPH)
    assert _cycles(graph) == []
    assert sorted((a, b) for a in graph for b in graph[a] if a in graph.get(b, ())) == []


def test_the_front_ends_reach_the_catalog_through_the_library():
    """The front ends (the CLI, the dashboard, the server) call the library (analyzer.api,
    analyzer.runs), never the store, its SQL or the measurement's drivers directly: the map
    says so and the imports hold it."""
    below = {"analyzer.store", "analyzer.sql", "analyzer.measure"}
    graph = package_graph(GRAPH)
    for front in ("cli", "dashboard", "server"):
        assert not (LAYERS[front]["may"] & below), front
        assert not (graph[front] & below), (front, graph[front] & below)


WHOLE_PRODUCT_TESTS = {"test_architecture.py", "test_docs.py", "test_packaging.py"}


def test_the_tests_mirror_the_packages():
    """``tests/<package>/`` holds a package's tests (``tests/analyzer/predict/`` for
    analyzer.predict); a test file directly in ``tests/analyzer/`` is named after a one-module
    package (``test_gate.py``: analyzer.gate); only the whole product's tests sit in tests/."""
    tests = ROOT / "tests"
    wrong = []
    for path in tests.rglob("test_*.py"):
        folder = path.parent.relative_to(tests)
        if folder == Path("."):
            if path.name not in WHOLE_PRODUCT_TESTS:
                wrong.append(str(path.relative_to(ROOT)))
            continue
        package = ".".join(folder.parts)
        if package == "analyzer" and path.stem.removeprefix("test_") in {p.split(".")[1] for p in LAYERS
                                                                         if p.startswith("analyzer.")}:
            continue
        if package not in LAYERS or package == "analyzer":
            wrong.append(str(path.relative_to(ROOT)))
    assert wrong == [], "test files outside their package's folder: " + str(wrong)


def test_the_map_checker_finds_a_hidden_import(tmp_path):
    """The collapsed graph sees a function-level import, and a two-way pair of packages is a cycle."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from overlapscope.analyzer.runs import derive\n")
    MODULES_BEFORE = dict(MODULES)
    try:
        MODULES["overlapscope.analyzer.store.fake"] = module
        found = _imports("overlapscope.analyzer.store.fake", module)
    finally:
        MODULES.clear()
        MODULES.update(MODULES_BEFORE)
    assert found == {"overlapscope.analyzer.runs.derive"}
    graph = package_graph({"overlapscope.analyzer.store.fake": found,
                           "overlapscope.analyzer.runs.derive": {"overlapscope.analyzer.store.results"}})
    assert graph == {"analyzer.store": {"analyzer.runs"}, "analyzer.runs": {"analyzer.store"}}
    assert _cycles(graph) == [["analyzer.runs", "analyzer.store"]]


def _path_of(package: str) -> Path:
    """The folder of a package, or the file of a one-module package (``analyzer.gate``)."""
    folder = ROOT / package.replace(".", "/")
    return folder if folder.is_dir() else folder.with_suffix(".py")


def test_every_module_is_named_in_its_packages_row():
    """docs/architecture.md names every module of a package in that package's row (a
    folder inside it, like ``views/``, by the folder's name), so a newcomer finds each
    file from the map."""
    missing = []
    for module, path in MODULES.items():
        home = _path_of(package_of(module))
        if home.suffix == ".py" or path == home / "__init__.py":
            continue  # a one-module package, or the package itself: its row
        rel = path.relative_to(home)
        name = f"`{rel.parts[0]}/`" if len(rel.parts) > 1 else f"`{path.name}`"
        if name not in LAYERS[package_of(module)]["row"]:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def test_the_development_page_names_every_package_bottom_layer_first():
    """docs/development.md: a line per package, by its folder (or file), each after every
    package the map lets it import."""
    section = (ROOT / "docs" / "development.md").read_text()
    starts = [line.split()[0] for line in section.split("```")[1].splitlines() if line and not line[0].isspace()]
    position = {}
    for package in LAYERS:
        home = _path_of(package)
        name = str(home.relative_to(ROOT)) + ("/" if home.is_dir() else "")
        assert name in starts, f"docs/development.md does not name {name}"
        position[package] = starts.index(name)
    late = [(p, m) for p, row in LAYERS.items() for m in row["may"] if position[m] > position[p]]
    assert late == [], "listed before a package it may import: " + str(late)


def test_the_contract_and_the_analyzer_import_no_torch():
    for module, path in MODULES.items():
        if package_of(module).split(".")[0] in ("contract", "analyzer"):
            names = {n.split(".")[0] for n in _all_imports(path)}
            assert "torch" not in names, module
            if package_of(module) == "contract":
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
