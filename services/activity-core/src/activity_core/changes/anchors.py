"""The id of one file's diff on the ops UI's run page, so links can point at it.

A path may hold any character git allows, so it is never used as the id itself: the id is
a short hash of the path's bytes (surrogatepass: a path decoded with surrogateescape from
git's bytes hashes as those bytes). Twelve hex digits: collisions within one run's few
hundred files are out of reach.
"""

from __future__ import annotations

import hashlib

__all__ = ["change_anchor"]


def change_anchor(path: str) -> str:
    digest = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()
    return "change-" + digest[:12]
