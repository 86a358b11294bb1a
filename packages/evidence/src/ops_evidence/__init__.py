"""Allowlisted, bounded evidence normalization (standard library only)."""
