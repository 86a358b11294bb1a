"""Typed contracts shared by activity-core, rein-aharness and other teams."""
