"""Run the worker's sandbox probe under a seccomp profile, as the container runtime would.

    python seccomp_probe_child.py PROFILE.json

Started by test_worker_sandbox.py in a process of its own, since a seccomp filter cannot
be removed once loaded. As root it first becomes the manifests' user (10001, no
capabilities, no supplementary groups), like the worker container. It probes the sandbox
once without a filter (can this host create it at all?), then loads PROFILE the way runc
and crun do (libseccomp; a name libseccomp does not know is skipped, as they skip it),
calls each refused syscall once to see the errno the profile promises, and probes again.
Prints one JSON object: {"baseline": reason|null, "filtered": reason|null,
"seccomp_mode": "2", "errnos": {name: [expected, got]}}.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from rein_aharness.profiles import SandboxChoice
from rein_aharness.profiles.catalogue import BUILTIN_SANDBOXES
from rein_aharness.sandbox.gate import probe_sandbox, resolve_bwrap

WORKER_UID = WORKER_GID = 10001
SANDBOX = "profile.bwrap-local"

_ACT_ALLOW = 0x7FFF0000
_ACT_ERRNO = 0x00050000
_OPS = {
    "SCMP_CMP_NE": 1,
    "SCMP_CMP_LT": 2,
    "SCMP_CMP_LE": 3,
    "SCMP_CMP_EQ": 4,
    "SCMP_CMP_GE": 5,
    "SCMP_CMP_GT": 6,
    "SCMP_CMP_MASKED_EQ": 7,
}


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _libseccomp() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib


def _action(rule: dict[str, Any]) -> int:
    name = rule["action"]
    if name == "SCMP_ACT_ALLOW":
        return _ACT_ALLOW
    if name == "SCMP_ACT_ERRNO":
        return _ACT_ERRNO | (int(rule.get("errnoRet", errno.EPERM)) & 0xFFFF)
    raise ValueError(f"action {name} is not one this helper applies")


def load_profile(lib: ctypes.CDLL, profile: dict[str, Any]) -> None:
    default = _action({"action": profile["defaultAction"]})
    ctx = lib.seccomp_init(default)
    if not ctx:
        raise OSError("seccomp_init failed")
    for arch in profile.get("architectures", []):
        token = lib.seccomp_arch_resolve_name(arch.removeprefix("SCMP_ARCH_").lower().encode())
        if token == 0:
            raise ValueError(f"unknown architecture {arch}")
        rc = lib.seccomp_arch_add(ctx, token)
        if rc not in (0, -errno.EEXIST):
            raise OSError(-rc, f"seccomp_arch_add {arch}")
    for rule in profile["syscalls"]:
        action = _action(rule)
        if action == default:
            continue
        args = rule.get("args") or []
        cmps = (_ArgCmp * max(len(args), 1))()
        for i, arg in enumerate(args):
            cmps[i] = _ArgCmp(arg["index"], _OPS[arg["op"]], arg["value"], arg.get("valueTwo", 0))
        for name in rule["names"]:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                continue
            rc = lib.seccomp_rule_add_array(ctx, action, number, len(args), cmps)
            if rc != 0:
                raise OSError(-rc, f"seccomp_rule_add {name}")
    rc = lib.seccomp_load(ctx)
    if rc != 0:
        raise OSError(-rc, "seccomp_load")


def refused_errnos(lib: ctypes.CDLL, profile: dict[str, Any]) -> dict[str, list[int]]:
    """Call each refused syscall once, with zeros except where the rule names arguments
    (harmless as an unprivileged user: every such call fails or does nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    seen: dict[str, list[int]] = {}
    for rule in profile["syscalls"]:
        if rule["action"] != "SCMP_ACT_ERRNO":
            continue
        argv = [0] * 6
        for arg in rule.get("args") or []:
            masked = arg["op"] == "SCMP_CMP_MASKED_EQ"
            argv[arg["index"]] = arg["valueTwo"] if masked else arg["value"]
        for name in rule["names"]:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                continue
            ctypes.set_errno(0)
            result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in argv))
            got = ctypes.get_errno() if result == -1 else 0
            seen[name] = [int(rule.get("errnoRet", errno.EPERM)), got]
    return seen


def _become_worker() -> None:
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(WORKER_GID, WORKER_GID, WORKER_GID)
        os.setresuid(WORKER_UID, WORKER_UID, WORKER_UID)


def _seccomp_mode() -> str:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("Seccomp:"):
            return line.split()[1]
    return "?"


def main(profile_path: str) -> None:
    profile = json.loads(Path(profile_path).read_text(encoding="utf-8"))
    lib = _libseccomp()
    choice = SandboxChoice(SANDBOX, BUILTIN_SANDBOXES[SANDBOX])
    bwrap = resolve_bwrap(None)
    # Import what the probe imports lazily while the interpreter's files are readable (a
    # pyenv interpreter under /root is not, to the worker's user).
    anyio.run(anyio.sleep, 0)
    _become_worker()
    out: dict[str, Any] = {"baseline": anyio.run(probe_sandbox, choice, bwrap)}
    if out["baseline"] is None:
        load_profile(lib, profile)
        out["seccomp_mode"] = _seccomp_mode()
        out["errnos"] = refused_errnos(lib, profile)
        out["filtered"] = anyio.run(probe_sandbox, choice, bwrap)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
