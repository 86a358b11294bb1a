"""The rules some settings' values must follow (URLs, the trusted proxies): pure checks
that settings.py applies at start and that other modules reuse (the artefact link
builder checks its base with `absolute_http_base`)."""

from __future__ import annotations

import ipaddress
import urllib.parse

__all__ = ["absolute_http_base", "parse_trusted_proxies", "repository_url_error"]


def absolute_http_base(value: object) -> str | None:
    """An absolute http(s) base URL without credentials, query or fragment, and without a
    trailing `/`; None for anything else. FORGEJO_WEB_BASE must be one (checked at start),
    and the artefact link builder checks its base with this same rule."""
    if type(value) is not str or not value or value != value.strip():
        return None
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port  # raises on a malformed port
    except ValueError:
        return None
    del port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    if parts.query or parts.fragment or "\\" in value:
        return None
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in value):
        return None
    return value.rstrip("/")


def repository_url_error(value: str) -> str | None:
    """What is wrong with ACTIVITY_CORE_REPOSITORY_URL, or None. The message never repeats
    the value: a mistaken one may hold a credential."""
    if "{target_repo}" not in value or value.count("{") != 1 or value.count("}") != 1:
        return (
            "must contain {target_repo} once (e.g. https://forgejo.example.org/{target_repo}.git)"
        )
    if value != value.strip() or any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        return "must not contain spaces or control characters"
    sample = value.replace("{target_repo}", "owner/name")
    try:
        parts = urllib.parse.urlsplit(sample)
        _ = parts.port
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https", "file"):
        return "must be an http://, https:// or file:// URL"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return (
            "must not hold credentials: the token is read from ACTIVITY_CORE_REPOSITORY_TOKEN_FILE"
        )
    if parts.query or parts.fragment:
        return "must not have a query or a fragment"
    if parts.scheme != "file" and not parts.hostname:
        return "needs a host"
    return None


def parse_trusted_proxies(text: str) -> tuple[str, ...]:
    """ACTIVITY_CORE_TRUSTED_PROXIES: comma-separated IP addresses and networks (CIDR),
    each in its canonical form; blank: none. Raises ValueError for anything else, `*`
    included: trusting every peer is written out (0.0.0.0/0, ::/0), not implied."""
    proxies: list[str] = []
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            continue
        try:
            canonical = (
                str(ipaddress.ip_network(entry, strict=True))
                if "/" in entry
                else str(ipaddress.ip_address(entry))
            )
        except ValueError:
            raise ValueError(
                "must be comma-separated IP addresses or networks without host bits "
                "(e.g. 10.42.0.0/16,fd00::/8); 0.0.0.0/0 trusts every peer"
            ) from None
        proxies.append(canonical)
    return tuple(dict.fromkeys(proxies))
