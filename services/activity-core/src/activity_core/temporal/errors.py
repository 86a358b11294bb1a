"""Domain errors of the Temporal context, in words an operator can act on."""

from __future__ import annotations

__all__ = ["AutomationNotFound", "AutomationPaused", "FireNotFound", "TemporalUnavailable"]


class TemporalUnavailable(Exception):
    """The Temporal server cannot be reached (or refuses our namespace) right now."""


class AutomationNotFound(Exception):
    """No activity definition has this id or slug."""


class AutomationPaused(Exception):
    """The definition is paused (or removed from the definition files): it does not fire."""


class FireNotFound(Exception):
    """The automation has no fire with this run id (or UUID)."""
