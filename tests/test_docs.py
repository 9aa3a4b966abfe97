"""Every command, option and setting is documented in the README (a test per feature)."""

from __future__ import annotations

import re

from overlapscope.cli import _build_parser
from conftest import ROOT

README = (ROOT / "README.md").read_text()


def _commands(parser, prefix=""):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sp in sub.choices.items():
        nested = [a for a in sp._actions if a.__class__.__name__ == "_SubParsersAction"]
        if nested:
            yield from _commands(sp, prefix + name + " ")
        else:
            yield prefix + name, sp


def test_every_command_and_option_is_in_the_readme():
    for name, parser in _commands(_build_parser()):
        assert f"overlapscope {name}" in README, name
        for action in parser._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help":
                    assert opt in README, f"{name} {opt}"


def test_every_setting_is_in_the_readme():
    code = "\n".join(p.read_text() for p in list((ROOT / "analyzer").rglob("*.py")) + list((ROOT / "cli").rglob("*.py")) + list((ROOT / "dashboard").rglob("*.py")))
    for setting in set(re.findall(r"OVERLAPSCOPE_[A-Z_]+", code)):
        assert setting in README, setting


def test_every_rule_id_is_in_the_readme():
    from overlapscope.analyzer.checklist import RULES

    assert len(RULES) == 16
    for rule_id in RULES:
        assert f"`{rule_id}`" in README, rule_id
