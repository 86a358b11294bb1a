"""A small process supervisor, shared by `ops-demo`, the end-to-end suite and the tests
that start processes. (Its probes are in probes.py, its view of the process table in
process_table.py, the console scripts in console_scripts.py, the at-exit registry in
leftovers.py; all but the last are re-exported here, where every caller imports them.)

Every process runs in its own session (so its own process group): a Ctrl-C in the
terminal reaches only the supervising program, which then stops its children in order.
A child's stdout and stderr go to one log file (appended to across restarts, with a
header line per start), readiness is a probe polled until it passes, and stopping is
SIGTERM to the process, then SIGKILL to its group after a timeout.

Nothing is left behind:

* `Supervisor` is a context manager that stops everything it started, newest first;
* an `atexit` hook stops whatever is still alive when the interpreter exits;
* `kill()` (SIGKILL, a simulated crash) remembers the process's descendants at that
  moment, including those in sessions of their own that the group signal misses; the
  supervisor kills any of them still alive when it stops.

    with Supervisor(log_dir) as sup:
        server = sup.start("api", [...], env=env, ready=http_ok("http://127.0.0.1:8080/healthz"))
        ...
        server.restart()
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Self, TypedDict, Unpack

from ops_devsupport.console_scripts import console_script, run_console_script
from ops_devsupport.leftovers import LIVE
from ops_devsupport.probes import (
    LOCAL_HOST,
    Probe,
    all_of,
    free_port,
    http_ok,
    log_contains,
    port_is_open,
    port_open,
    wait_until,
)
from ops_devsupport.process_table import (
    RememberedPid,
    alive,
    children,
    command_line,
    kill_all,
    process_tree,
    processes_with_environment,
    processes_working_under,
    snapshot,
)

__all__ = [
    "LOCAL_HOST",
    "CommandResult",
    "ManagedProcess",
    "Probe",
    "ProcessFailed",
    "ProcessOptions",
    "Supervisor",
    "alive",
    "all_of",
    "children",
    "command_line",
    "console_script",
    "free_port",
    "http_ok",
    "log_contains",
    "port_is_open",
    "port_open",
    "process_tree",
    "processes_with_environment",
    "processes_working_under",
    "run_console_script",
    "wait_until",
]

POLL_SECONDS = 0.05


class ProcessFailed(Exception):
    """A supervised process could not start, did not become ready, or failed.

    `str()` is one line naming the process and what happened, with its log's path.
    """

    def __init__(self, name: str, what: str, log_path: Path) -> None:
        self.name = name
        self.what = what
        self.log_path = log_path
        super().__init__(f"{name} {what} (log: {log_path})")


@dataclass(frozen=True)
class CommandResult:
    """A one-shot command run to completion (see `Supervisor.run`)."""

    returncode: int
    output: str


class ManagedProcess:
    """One supervised command: started with `start()`, in its own process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: Probe | None = None,
        ready_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.argv = [str(arg) for arg in argv]
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.log_path = log_path
        self.ready = ready
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.stop_signal = stop_signal
        self.starts = 0
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._orphans: list[RememberedPid] = []
        self._lock = threading.RLock()

    # -- state ------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def __repr__(self) -> str:
        state = "running" if self.alive else f"exited {self.returncode}"
        return f"<ManagedProcess {self.name} pid={self.pid} {state}>"

    # -- output -----------------------------------------------------------------------

    def log_text(self) -> str:
        """The whole log file (every start)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def output(self) -> str:
        """What the process wrote since its latest start."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_output(self, text: str, *, timeout: float = 30.0) -> None:
        """Until `text` appears in the output since the latest start; ProcessFailed if not."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    self.name, f"did not print {text!r} within {timeout:g} s", self.log_path
                )
            time.sleep(POLL_SECONDS)

    # -- lifecycle --------------------------------------------------------------------

    def start(self, *, wait: bool = True) -> Self:
        """Start the command; with `wait`, also until it is ready (see `wait_ready`)."""
        with self._lock:
            if self.alive:
                raise RuntimeError(f"{self.name} is already running")
            self._reap()
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log: IO[bytes] = self.log_path.open("ab")
            try:
                stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
                log.write(f"=== {stamp} start {self.name}: {' '.join(self.argv)}\n".encode())
                log.flush()
                self._log_offset = log.tell()
                try:
                    self._popen = subprocess.Popen(
                        self.argv,
                        env=self.env,
                        cwd=self.cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    raise ProcessFailed(
                        self.name, f"could not be started: {exc.strerror or exc}", self.log_path
                    ) from None
            finally:
                log.close()
            self.starts += 1
            LIVE.add(self)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll the readiness probe; ProcessFailed (and the process stopped) if it exits
        first or the probe does not pass in time."""
        limit = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            code = self.returncode
            if code is not None:
                raise ProcessFailed(self.name, f"exited with status {code}", self.log_path)
            if self.ready is None or self.ready(self):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise ProcessFailed(self.name, f"was not ready within {limit:g} s", self.log_path)
            time.sleep(POLL_SECONDS)

    def send_signal(self, signum: signal.Signals) -> None:
        """Send `signum` to the process only (not its group), as a terminal or kubelet would."""
        if self._popen is not None and self.alive:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signum)

    def wait(self, timeout: float | None = None) -> int:
        """Until the process exits; its status. subprocess.TimeoutExpired on timeout."""
        if self._popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._popen.wait(timeout)

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM (or `stop_signal`) to the process, as kubelet or an init system sends
        it: stopping its own children is its job. If it has not exited after `timeout`,
        SIGKILL to its group; either way, whatever it started that is still running
        afterwards is killed. Returns the exit status (None if it was never started)."""
        with self._lock:
            popen = self._popen
            if popen is None:
                return None
            limit = self.stop_timeout if timeout is None else timeout
            if popen.poll() is None:
                tree = snapshot(process_tree(popen.pid))
                with contextlib.suppress(ProcessLookupError):
                    popen.send_signal(self.stop_signal)
                try:
                    popen.wait(limit)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    popen.wait()
                # whatever it started and left running (in its group or in sessions of
                # its own) goes with it
                kill_all(tree)
            self._finish()
            return popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the process group at once (a crash). Descendants in sessions of their
        own survive it, as they would a real crash, until `cleanup()`."""
        with self._lock:
            popen = self._popen
            if popen is None:
                return None
            if popen.poll() is None:
                self._orphans.extend(snapshot(process_tree(popen.pid)))
                self._signal_group(signal.SIGKILL)
                popen.wait()
            return popen.returncode

    def restart(self, *, wait: bool = True, timeout: float | None = None) -> Self:
        self.stop(timeout)
        return self.start(wait=wait)

    def cleanup(self) -> None:
        """Stop it, and kill anything it left behind."""
        self.stop()
        kill_all(self._orphans)
        self._orphans.clear()
        LIVE.discard(self)

    # -- internals --------------------------------------------------------------------

    def _signal_group(self, signum: signal.Signals) -> None:
        assert self._popen is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signum)

    def _finish(self) -> None:
        if not self._orphans:
            LIVE.discard(self)
        self._reap()

    def _reap(self) -> None:
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(0)


# -- the supervisor -------------------------------------------------------------------


class ProcessOptions(TypedDict, total=False):
    """What `Supervisor.process` (and `start`) take besides a name and an argv."""

    env: Mapping[str, str] | None
    cwd: Path | None
    ready: Probe | None
    ready_timeout: float | None
    stop_timeout: float | None
    stop_signal: signal.Signals


class Supervisor:
    """Starts processes with logs under `log_dir`; stops them all (newest first) on exit."""

    def __init__(
        self,
        log_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.log_dir = log_dir
        self.env = dict(os.environ if env is None else env)
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.processes: list[ManagedProcess] = []

    def __enter__(self) -> Self:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def log_path(self, name: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        return self.log_dir / f"{safe}.log"

    def process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: Probe | None = None,
        ready_timeout: float | None = None,
        stop_timeout: float | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> ManagedProcess:
        """A process registered with this supervisor, not started yet.

        `env` is added to the supervisor's environment (a value of "" removes a name).
        """
        merged = dict(self.env)
        for key, value in (env or {}).items():
            if value == "":
                merged.pop(key, None)
            else:
                merged[key] = value
        process = ManagedProcess(
            name,
            argv,
            log_path=self.log_path(name),
            env=merged,
            cwd=cwd,
            ready=ready,
            ready_timeout=self.ready_timeout if ready_timeout is None else ready_timeout,
            stop_timeout=self.stop_timeout if stop_timeout is None else stop_timeout,
            stop_signal=stop_signal,
        )
        self.processes.append(process)
        return process

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        wait: bool = True,
        **options: Unpack[ProcessOptions],
    ) -> ManagedProcess:
        """Register and start a process (`process`'s options); with `wait`, until it is
        ready."""
        return self.process(name, argv, **options).start(wait=wait)

    def run(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60.0,
        check: bool = True,
    ) -> CommandResult:
        """Run a one-shot command to completion with its output in its log.

        ProcessFailed if it runs longer than `timeout` (it is stopped) or, with `check`,
        exits non-zero."""
        process = self.process(name, argv, env=env, cwd=cwd)
        process.start(wait=False)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.cleanup()
            raise ProcessFailed(
                name, f"did not finish within {timeout:g} s", process.log_path
            ) from None
        finally:
            self.processes.remove(process)
        process.cleanup()
        if check and code != 0:
            raise ProcessFailed(name, f"failed with status {code}", process.log_path)
        return CommandResult(code, process.output())

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """A block whose processes go when it ends: every process registered inside it is
        stopped (newest first) on the way out, the supervisor's earlier ones stay."""
        before = len(self.processes)
        try:
            yield
        finally:
            for process in reversed(self.processes[before:]):
                process.cleanup()

    def stop_all(self, timeout: float | None = None) -> None:
        """Stop every process, newest first, and kill whatever they left behind."""
        for process in reversed(self.processes):
            process.cleanup() if timeout is None else _cleanup_within(process, timeout)

    def kill_all(self) -> None:
        """SIGKILL everything at once (a second Ctrl-C)."""
        for process in reversed(self.processes):
            process.kill()
            process.cleanup()

    def describe(self, *, tail: int = 25) -> str:
        """Every process's state and the end of its log: for failure messages."""
        parts = []
        for process in self.processes:
            parts.append(f"--- {process!r} log {process.log_path}")
            parts.append(process.tail(tail))
        return "\n".join(parts)


def _cleanup_within(process: ManagedProcess, timeout: float) -> None:
    process.stop(timeout)
    process.cleanup()
