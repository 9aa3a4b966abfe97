"""Every command, option, setting, rule id and JSON key is documented (a test per
feature): the README is the short tour, ``docs/`` the reference, and together they
name everything a user can type or read."""

from __future__ import annotations

import re

from overlapscope.cli import _build_parser
from conftest import ROOT

README = (ROOT / "README.md").read_text()
PAGES = sorted((ROOT / "docs").glob("*.md"))
# what a user can read: the README and every page of docs/ (the reference moved there)
DOCS = "\n".join([README, *(p.read_text() for p in PAGES)])
JSON_DOC = (ROOT / "docs" / "json.md").read_text()
README_MAX_LINES = 250


def _commands(parser, prefix=""):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sp in sub.choices.items():
        nested = [a for a in sp._actions if a.__class__.__name__ == "_SubParsersAction"]
        if nested:
            yield from _commands(sp, prefix + name + " ")
        else:
            yield prefix + name, sp


def test_every_command_and_option_is_documented():
    commands = (ROOT / "docs" / "commands.md").read_text()
    for name, parser in _commands(_build_parser()):
        assert f"overlapscope {name}" in commands, name  # each command has its line in the reference
        for action in parser._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help":
                    assert opt in DOCS, f"{name} {opt}"


def test_every_setting_is_documented():
    code = "\n".join(p.read_text() for folder in ("analyzer", "cli", "contract", "dashboard", "tracer")
                     for p in (ROOT / folder).rglob("*.py"))
    for setting in set(re.findall(r"OVERLAPSCOPE_[A-Z_]+", code)):
        assert setting in DOCS, setting


def test_every_rule_id_is_documented():
    from overlapscope.analyzer.checklist import RULES

    assert len(RULES) == 17
    for rule_id in RULES:
        assert f"`{rule_id}`" in (ROOT / "docs" / "checklist.md").read_text(), rule_id


def _keys(value, out: set) -> set:
    """Every key of every object in a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(value, list):
        for v in value:
            _keys(v, out)
    return out


def documented_gaps(value, own=("k",)) -> list[str]:
    """The keys of a JSON value that docs/json.md does not name (``own``: the
    user's own tag keys)."""
    return sorted(k for k in _keys(value, set()) - set(own) if f"`{k}`" not in JSON_DOC)


def test_every_json_key_is_documented(tmp_path, capsys, monkeypatch):
    """Each key that analyze, buckets, diagnose, ingest, history, check, prune, delete and model print with --json
    is named in docs/json.md (users' scripts read them: a key nobody
    documented is a key nobody can rely on)."""
    import json

    from conftest import SAMPLES
    from overlapscope.cli import main

    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "c.duckdb"))
    commands = [["analyze", str(SAMPLES / "hsdp_2x2"), "--json"],
                ["buckets", str(SAMPLES / "fsdp_per_block"), "--json"],
                ["diagnose", str(SAMPLES / "ddp"), "--json"],
                ["ingest", str(SAMPLES / "ddp"), "--run", "docs", "--tag", "k=v", "--json"],
                ["ingest", str(SAMPLES / "ddp"), "--run", "docs", "--json"],
                ["history", "--json"],
                ["check", "--run", "docs", "--json"],
                ["prune", "--keep-last", "1", "--json"],
                ["analyze", "--run", "1", "--json"],
                ["delete", "1", "--json"],
                ["model", "memory", "--params", "13B", "--gpus", "32", "--group", "8", "--json"],
                ["model", "comm", "--params", "13B", "--gpus", "32", "--stage", "hsdp", "--group", "8", "--json"],
                ["model", "hide", "--flops", "400T", "--bandwidth", "50G", "--gpus", "32", "--tokens", "4096",
                 "--json"],
                ["whatif", str(SAMPLES / "ddp"), "--bucket-mb", "5", "--no-sync", "--sweep", "tokens=1x,2x", "--json"],
                ["whatif", str(SAMPLES / "hsdp_2x2"), "--hsdp", "2", "--wrap", "root-only", "--json"]]
    missing = {}
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 0, argv
        keys = documented_gaps(json.loads(capsys.readouterr().out))
        gone = keys
        if gone:
            missing[" ".join(argv[:2])] = gone
    assert missing == {}


def test_no_seed_in_what_a_user_reads():
    """The model is the data-parallel model (F/W, ring bytes, ZeRO memory), never "the seed's":
    the word is in no document, page, command or help text; the trainer's RNG flag ``--seed``
    is the one exception."""
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in
             [ROOT / "README.md", ROOT / "tracer" / "README.md", ROOT / "sample_traces" / "README.md",
              *(ROOT / "docs").rglob("*.md"), *(ROOT / "dashboard").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]}
    texts.update({f"overlapscope {name} --help": parser.format_help() for name, parser in _commands(_build_parser())})
    found = {where: line.strip() for where, text in texts.items() for line in text.splitlines()
             if re.search(r"seed", line.replace("--seed", ""), re.IGNORECASE)}
    assert found == {}, found


def test_each_command_parses_alone_as_in_the_whole_parser():
    """``overlapscope CMD`` builds only CMD's parser (cli.COMMANDS): every subcommand is in that
    map, and alone it has the same options as in the parser of every command."""
    from overlapscope.cli import COMMANDS

    whole = dict(_commands(_build_parser()))  # "model memory" etc.: the model's subcommands apart
    assert {name.split()[0] for name in whole} == set(COMMANDS)
    for name, parser in whole.items():
        (alone,) = [p for n, p in _commands(_build_parser(name.split()[0])) if n == name]
        assert sorted(a.dest for a in alone._actions) == sorted(a.dest for a in parser._actions), name


def test_the_readme_is_a_short_tour_that_links_to_the_reference():
    """At most 250 lines (a newcomer reads it in five minutes), its two commands and the
    screenshot first, and every relative link of the README and of docs/ resolves: a file
    that exists, and where a link names a section, a heading of that file."""
    lines = README.splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    assert "make run" in README and "make test" in README
    broken = []
    for page in [ROOT / "README.md", *PAGES]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == [], broken
    for page in PAGES:  # every page of the reference is linked from the README
        assert f"docs/{page.name}" in README, page.name


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as -."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text)))
    return out
