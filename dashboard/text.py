"""Untrusted text on the pages: shown literally, never read as Markdown or HTML.

Run names, tags, backends, device names, unit and bucket names, file names in
error lines and the checklist's evidence come from traces, manifests and
visitors. Streamlit reads the text of ``st.title``, ``st.caption``,
``st.markdown`` and the alert boxes as Markdown, where ``![x](http://...)``
makes every viewer's browser fetch a URL. ``md`` escapes a value for those
elements: every ASCII punctuation character gets a backslash (CommonMark shows
an escaped character as itself, so no image, link, emphasis, code, math or
HTML can start), and control characters become spaces (a newline would end the
line early). Inside a code span nothing is read as Markdown and a backslash shows
as itself, so ``code`` wraps a value in backticks without escaping it.

Escapes do not stop GFM's literal autolinks: Streamlit's Markdown turns ``https://...``,
``www.x.y`` and ``a@b.c`` into links by a pattern over the text after its escapes are
read. ``md`` puts a word joiner (U+2060, invisible, no width) where each of those
patterns starts (before the ``:`` of ``://``, after ``www`` ahead of a dot, after ``@``),
so none matches; text without them is unchanged.
"""

from __future__ import annotations

import re

_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character
WORD_JOINER = "\u2060"
_AUTOLINK_STARTS = re.compile(r"(?=://)|(?i:(?<=www)(?=\.))|(?<=@)")


def md(value) -> str:
    """``value`` as literal text inside a Markdown element (never a link either)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    text = _AUTOLINK_STARTS.sub(WORD_JOINER, text)
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def code(value) -> str:
    """``value`` as a Markdown code span, shown literally: delimited by one backtick more than
    its longest run of backticks (CommonMark), padded with a space where it starts or ends with
    one (the parser takes one space off each side), control characters as spaces."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    pad = " " if text[:1] == "`" or text[-1:] == "`" or (text[:1] == " " and text[-1:] == " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def plain(markdown: str) -> str:
    """What a reader sees of text that ``md`` escaped (its inverse, for checks and tests)."""
    return _ESCAPED.sub(r"\1", markdown).replace(WORD_JOINER, "")
