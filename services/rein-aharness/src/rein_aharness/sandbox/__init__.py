"""The sandbox every approach runs in: bubblewrap namespaces, bounds, and a gate that
keeps the worker from claiming while the sandbox cannot be created."""

from rein_aharness.sandbox.gate import SandboxGate, probe_sandbox, resolve_bwrap
from rein_aharness.sandbox.growth import WorktreeTooLarge
from rein_aharness.sandbox.layout import (
    GitMounts,
    SandboxMounts,
    approach_git_environment,
    dotgit_text,
)
from rein_aharness.sandbox.process import (
    Sandbox,
    SandboxUnavailable,
    sandbox_over,
    sandboxed_process,
)

__all__ = [
    "GitMounts",
    "Sandbox",
    "SandboxGate",
    "SandboxMounts",
    "SandboxUnavailable",
    "WorktreeTooLarge",
    "approach_git_environment",
    "dotgit_text",
    "probe_sandbox",
    "resolve_bwrap",
    "sandbox_over",
    "sandboxed_process",
]
