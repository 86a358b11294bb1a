"""Bound the free-text error a worker sends when it fails a run."""

from __future__ import annotations

import re

from ops_evidence.bounds import MAX_ERROR_CHARS

# Control characters (C0, DEL, C1) would break log lines and operator pages; lone
# surrogates cannot be encoded as UTF-8 JSON at all.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

_FALLBACK = "error"


def sanitize_error(text: object) -> str:
    """A single-line, bounded error text; `"error"` when nothing usable is left.

    Unsafe characters become spaces, surrounding whitespace is stripped and the text is
    cut to MAX_ERROR_CHARS. Only the first MAX_ERROR_CHARS characters after leading
    whitespace are ever examined, so a huge message costs no more than a short one. The
    result is a fixed point: sanitizing it again changes nothing.
    """
    if type(text) is not str:
        return _FALLBACK
    cleaned = _UNSAFE.sub(" ", text.lstrip()[:MAX_ERROR_CHARS]).strip()
    return cleaned or _FALLBACK
