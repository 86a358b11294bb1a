"""Bound the free-text error a worker sends when it fails a run."""

from __future__ import annotations

import re

from ops_evidence.bounds import MAX_ERROR_CHARS

__all__ = ["INVISIBLE_FORMATTING", "sanitize_error"]

# Every format character (Unicode category Cf: bidi embeddings, overrides and isolates,
# zero-width joiners and spaces, the BOM, tag characters, ...) and the line and paragraph
# separators (Zl, Zp) above U+009F, as code point ranges (Unicode 14.0; a test holds the
# table to the running Python's unicodedata, so a newer Unicode shows up as a failure).
INVISIBLE_FORMATTING: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
    (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)  # fmt: skip
_INVISIBLE = "".join(f"{chr(low)}-{chr(high)}" for low, high in INVISIBLE_FORMATTING)

# Control characters (C0, DEL, C1) would break log lines and operator pages; lone
# surrogates cannot be encoded as UTF-8 JSON at all; invisible formatting characters
# (a right-to-left override, say) would make an error read differently from what it
# says on an operator's screen or in a log (Trojan Source, CVE-2021-42574).
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_INVISIBLE}]")

_FALLBACK = "error"


def sanitize_error(text: object) -> str:
    """A single-line, bounded error text; `"error"` when nothing usable is left.

    Unsafe characters (controls, lone surrogates, invisible formatting such as bidi
    overrides and zero-width characters, line separators) become spaces, surrounding
    whitespace is stripped and the text is cut to MAX_ERROR_CHARS. Only the first
    MAX_ERROR_CHARS characters after leading whitespace are ever examined, so a huge
    message costs no more than a short one. The result is a fixed point: sanitizing it
    again changes nothing.
    """
    if type(text) is not str:
        return _FALLBACK
    cleaned = _UNSAFE.sub(" ", text.lstrip()[:MAX_ERROR_CHARS]).strip()
    return cleaned or _FALLBACK
