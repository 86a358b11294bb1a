"""Text as the ops UI shows it: nothing in it can hide or reorder what an operator reads.

Every `{{ value }}` of every template passes through `display_text` (render.py makes it
the environment's `finalize`, so no template can forget it): each control character (C0,
DEL, C1), lone surrogate and invisible formatting character (Unicode category Cf: bidi
embeddings, overrides and isolates, zero-width characters, the BOM, tag characters; and
the line and paragraph separators) becomes U+FFFD, the replacement character, so it shows
where it was instead of acting. A cancel reason `a\\u202eexe.txt` reads `a\\ufffdexe.txt`,
never `atxt.exe`.

One place, at display, for every source: what operators and workers send is sanitized
when it is stored as well (ops_evidence.sanitize_error), but a page also shows what was
stored before, what definition files say, and what a form echoes back. The character set
is ops_evidence's (INVISIBLE_FORMATTING, held to the running Python's Unicode by its
tests), so the pages, the stored errors and the logs agree on what is unsafe.
"""

from __future__ import annotations

import re

from ops_evidence.error_text import INVISIBLE_FORMATTING

__all__ = ["REPLACEMENT", "display_text"]

REPLACEMENT = "\ufffd"

_INVISIBLE = "".join(f"{chr(low)}-{chr(high)}" for low, high in INVISIBLE_FORMATTING)
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_INVISIBLE}]")


def display_text(value: object) -> object:
    """`value` with every unsafe character replaced (as text; None, numbers, ids as their
    text). Markup (`__html__`) is the templates' own HTML, made of values that passed
    here already: it is left alone."""
    if hasattr(value, "__html__"):
        return value
    return _UNSAFE.sub(REPLACEMENT, str(value))
