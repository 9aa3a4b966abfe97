"""The wheel: one overlapscope.* namespace, the samples inside it as package data,
usable from a directory outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import ROOT, SAMPLES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        if "Could not find a version" in done.stderr or "No matching distribution" in done.stderr:
            pytest.skip("no package index to build the wheel with")
        raise AssertionError(done.stderr[-2000:])
    (path,) = out.glob("overlapscope-*.whl")
    return path


def test_the_wheel_installs_one_namespace_and_the_samples(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"overlapscope"}, tops  # no generic top-level tracer/analyzer/dashboard
    for sub in ("contract", "tracer", "analyzer", "cli", "server", "dashboard", "sample_traces"):
        assert any(n.startswith(f"overlapscope/{sub}/") for n in names), sub
    samples = {n.split("/")[2] for n in names if n.startswith("overlapscope/sample_traces/") and n.endswith(".gz")}
    assert samples == {p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("*.json.gz"))}
    assert any(n.startswith("overlapscope/analyzer/sql/queries/") and n.endswith(".sql") for n in names)


def test_an_installed_wheel_preloads_the_samples_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    code = (
        "import overlapscope.analyzer, sys\n"
        "from overlapscope.analyzer import runs\n"
        "from overlapscope.analyzer.store import catalog\n"
        "bundles = catalog.sample_bundles()\n"
        "con = runs.open_catalog(sys.argv[1])\n"
        "runs.ingest(con, [str(bundles[0])], 'sample')\n"
        "print(overlapscope.analyzer.__file__)\n"
        "print(catalog.SAMPLES_DIR)\n"
        "print(len(bundles), catalog.runs(con)[0]['headline']['step_ms'] > 0)\n"
    )
    # -S: no site-packages hooks, so the checkout's editable install stays out; the
    # dependencies come from this interpreter's site-packages, after the wheel.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"],
                                                        sysconfig.get_paths()["platlib"]])}
    out = subprocess.run([sys.executable, "-S", "-c", code, str(tmp_path / "c.duckdb")], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    module, samples, counts = out.stdout.splitlines()
    assert module.startswith(str(target)) and samples.startswith(str(target))
    assert counts == f"{len([p for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob('*.json.gz'))])} True"


def test_every_python_package_of_the_checkout_is_in_the_wheel():
    """A package folder missing from pyproject's list works in the checkout and breaks the
    installed wheel (analyzer/whatif once did): every folder with an __init__.py is listed."""
    import tomllib

    from conftest import ROOT

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = {folder: name for name, folder in config["package-dir"].items()}
    found = set()
    for top, name in dirs.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join([name, *rel.parts]))
    assert found - listed == set()


def test_declared_dependencies_are_the_imported_ones():
    """Every third-party package the product imports is declared (in the dependencies, or in
    the extra of the folder that imports it: torch for the tracer, ray for the Ray engine),
    and nothing is declared that no product module imports."""
    import ast
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(specs):
        return {re.match(r"[A-Za-z0-9_.-]+", s).group(0).lower() for s in specs}

    declared = names(project["dependencies"])
    extras = {k: names(v) for k, v in project["optional-dependencies"].items()}
    imported: dict[str, set[str]] = {}
    for folder in ("contract", "tracer", "analyzer", "cli", "server", "dashboard"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    tops = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    if top not in sys.stdlib_module_names and top not in ("overlapscope", "__future__"):
                        imported.setdefault(top.lower(), set()).add(folder)  # import names = distribution names here
    undeclared = {name for name in imported if name not in declared and name not in extras["tracer"] | extras["ray"]}
    assert undeclared == set(), f"imported, not declared: {undeclared}"
    assert imported.get("torch", set()) <= {"tracer"}, "torch is the tracer's alone"
    assert declared - set(imported) == set(), f"declared, never imported: {declared - set(imported)}"
