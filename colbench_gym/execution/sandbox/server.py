"""One fork server's lifecycle: starting it (under bubblewrap or as a plain process), its control
socket and kill pipe, stopping it, and the CPU it has used."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from colbench_gym.execution.sandbox.isolation import (
    _count_user_tasks,
    _python_dirs,
    _warn_once,
    _world_readable,
    bwrap_command,
    python_flags,
    resolve_mode,
    sandbox_environment,
    sandbox_path,
)
from colbench_gym.execution.sandbox.jobs import JobPipeline
from colbench_gym.execution.sandbox.protocol import _MESSAGE, _SERVER_SOURCE, _decode_control
from colbench_gym.execution.sandbox.settings import RunReport, SandboxSettings, SandboxStartError

_NOBODY = 65534
_STARTUP_TIMEOUT_S = 30.0


class SandboxProcess:
    """A warm fork server and the grader's side of its protocol. Used by one thread at a time."""

    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        self.python = settings.python or sys.executable
        self.mode: str | None = None
        self.proc: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None
        self.hello: dict[str, Any] = {}
        self._drops_uid = False
        self._nonce_key = os.urandom(8)
        self._ship_code = False  # whether the server takes code objects compiled here
        self._kill_w = -1  # the kill pipe (see _request_kill)
        self._server_pid: int | None = None
        self._server_pidfd = -1
        self._tempdir: str | None = None
        self._stderr: Any = None
        # Where the CPU goes, summed over every child of this sandbox (see cpu_breakdown()).
        self.stats: dict[str, float] = dict.fromkeys(
            ("children", "child_s", "fork_s", "clean_s", "minor_faults", "cleaned", "supervise_s"), 0
        )
        self.jobs = JobPipeline(self)

    # -- running code (see JobPipeline) --------------------------------------------------------
    def run(self, code: str, calls: list[str], budget_s: float | None = None) -> RunReport:
        """Define ``code`` in a fresh child and evaluate every call in its namespace."""
        return self.jobs.run(code, calls, budget_s)

    def run_units(self, units: list[tuple[str, list[str]]], budget_s: float | None = None) -> list[RunReport]:
        """One :class:`RunReport` per unit ``(code, calls)``: see :meth:`JobPipeline.run_units`."""
        return self.jobs.run_units(units, budget_s)

    def serve(self, source: Callable[[bool], Any], deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """Run jobs from ``source`` until it says stop: see :meth:`JobPipeline.serve`."""
        self.jobs.serve(source, deliver)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.ctl is not None

    def start(self) -> None:
        """Start (or restart) the fork server; SandboxStartError if it cannot run."""
        bwrap = shutil.which("bwrap")
        prefix = bwrap_command(bwrap, self.settings, _python_dirs(self.python)) if bwrap else None
        self._start(resolve_mode(self.settings.sandbox, prefix), prefix)

    def _start(self, mode: str, bwrap_prefix: list[str] | None) -> None:
        self.stop()
        source = _SERVER_SOURCE
        settings = self.settings
        root = os.geteuid() == 0
        python_dirs = _python_dirs(self.python)
        if mode == "bwrap":
            workdir = "/tmp/work"
            cwd = "/"
            drop = root and all(_world_readable(d) for d in python_dirs)
            prefix = list(bwrap_prefix or [])
        else:
            self._tempdir = tempfile.mkdtemp(prefix="colbench-sandbox-")
            workdir = os.path.join(self._tempdir, "work")
            cwd = self._tempdir
            drop = root and all(_world_readable(d) for d in python_dirs + [self._tempdir])
            if root and not drop:
                _warn_once(
                    "nodrop",
                    "colbench_gym grader: running as root without bubblewrap, and the Python installation is not "
                    "readable by `nobody`: sandboxed children keep root's user id, so a hostile answer could "
                    "change files root owns. Install bubblewrap, or run the grader as an unprivileged user.",
                )
            prefix = []
            os.chmod(self._tempdir, 0o755)
        nproc = settings.max_processes
        if mode == "none" and not drop:
            # RLIMIT_NPROC counts every process of the user on the host: allow what exists plus the budget.
            nproc += _count_user_tasks(os.getuid())
        config = {
            "ctl_fd": -1,
            "workdir": workdir,
            "wipe_tmp": mode == "bwrap" and not drop,
            "wipe_dirs": ["/dev/shm", "/dev/mqueue"] if mode == "bwrap" else [],
            "private_ipc": mode == "bwrap",  # --unshare-ipc
            "drop_uid": _NOBODY if drop else None,
            "drop_gid": _NOBODY if drop else None,
            "max_depth": settings.max_depth,
            "max_items": settings.max_items,
            "max_result_bytes": settings.max_result_bytes,
            "preload": list(settings.preload),
            "limits": {
                "address_space_bytes": settings.memory_mb << 20,
                "file_size_bytes": settings.file_size_mb << 20,
                "open_files": settings.open_files,
                "processes": nproc,
                "cpu_per_test_s": max(1.0, settings.timeout_s * 1.5),
            },
        }
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config["ctl_fd"] = child_sock.fileno()
        kill_r, kill_w = os.pipe()
        os.set_blocking(kill_w, False)
        config["kill_fd"] = kill_r
        python = sandbox_path(self.python) if mode == "bwrap" else self.python
        command = prefix + [python, *python_flags(), "-c", source, json.dumps(config)]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept open for the server's lifetime)
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                pass_fds=[child_sock.fileno(), kill_r],
                env=sandbox_environment(),
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as err:
            parent_sock.close()
            child_sock.close()
            os.close(kill_r)
            os.close(kill_w)
            raise SandboxStartError(f"cannot start the sandbox: {err}") from err
        child_sock.close()
        os.close(kill_r)
        self.ctl = parent_sock
        self._kill_w = kill_w
        self.mode = mode
        self._drops_uid = drop
        hello = self._receive(time.monotonic() + _STARTUP_TIMEOUT_S)
        if not hello or hello.get("ev") != "hello":
            detail = self._stderr_tail()
            self.stop()
            raise SandboxStartError(f"sandbox ({mode}) did not start: {detail or 'no hello from the server'}")
        if hello.get("hash_randomization"):
            self.stop()
            raise SandboxStartError("sandboxed interpreter ignored PYTHONHASHSEED; results would not be reproducible")
        if hello.get("dumpable") != 0:
            _warn_once(
                "dumpable",
                "colbench_gym grader: the fork server could not make itself non-dumpable (no ctypes/prctl?): "
                "an answer running under the server's user id could rewrite the server's memory through "
                "/proc/<pid>/mem and corrupt later results.",
            )
        self.hello = hello
        self._ship_code = hello.get("magic") == importlib.util.MAGIC_NUMBER.hex()
        self._server_pid = self._find_server_pid()
        if self._server_pid is None:
            self.stop()
            raise SandboxStartError(f"sandbox ({mode}): cannot find the fork server's process")
        try:  # signals go through a pidfd: never to another process that got the number later
            self._server_pidfd = os.pidfd_open(self._server_pid)
        except (AttributeError, OSError):
            self._server_pidfd = -1

    def _find_server_pid(self) -> int | None:
        """The fork server's process id here: bubblewrap's child, or the process itself."""
        assert self.proc is not None
        if self.mode != "bwrap":
            return self.proc.pid
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                return int(handle.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
        for entry in os.listdir("/proc"):  # a kernel without the children file: look for the parent
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                            return int(entry)
                except (OSError, IndexError, ValueError):
                    continue
        return None

    def _request_kill(self, job: int) -> None:
        """Ask the server to kill the child of ``job`` (or, if that job has not been forked yet,
        as soon as it is): its id on the kill pipe, then SIGURG to interrupt its wait."""
        if self._kill_w < 0 or self._server_pid is None:
            return
        try:
            os.write(self._kill_w, job.to_bytes(8, "little"))
        except OSError:
            pass
        try:
            if self._server_pidfd >= 0:
                signal.pidfd_send_signal(self._server_pidfd, signal.SIGURG)
            elif self.proc is not None and self.proc.poll() is None:
                os.kill(self._server_pid, signal.SIGURG)
        except OSError:
            pass

    def stop(self) -> None:
        self.jobs.abandon()  # anything still in flight there dies with the server
        if self.ctl is not None:
            try:
                self.ctl.send(_MESSAGE.pack(b"s", 0))
            except OSError:
                pass
            self._request_kill((1 << 63) - 1)  # whatever child runs: the server reads the stop after it
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            try:
                self.ctl.close()
            except OSError:
                pass
            self.ctl = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    self.proc.kill()
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self._kill_w >= 0:
            os.close(self._kill_w)
            self._kill_w = -1
        self._server_pid = None
        if self._server_pidfd >= 0:
            os.close(self._server_pidfd)
            self._server_pidfd = -1
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._tempdir is not None:
            _remove_tree(self._tempdir)
            self._tempdir = None

    def cpu_seconds(self) -> float:
        """CPU time of the fork server and every child it has reaped so far (0.0 if unknown)."""
        return sum(self.cpu_times())

    def cpu_times(self) -> tuple[float, float]:
        """CPU time of the fork server itself, and of the children it has reaped so far ((0.0, 0.0)
        if unknown), in clock ticks' resolution."""
        if self.proc is None:
            return 0.0, 0.0
        pid = self.proc.pid
        if self.mode == "bwrap":  # the server is bubblewrap's child
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as handle:
                    pid = int(handle.read().split()[0])
            except (OSError, IndexError, ValueError):
                return 0.0, 0.0
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0, 0.0
        # utime, stime, cutime, cstime: fields 14-17 of proc(5), counted after the command name.
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick

    @property
    def server_protected(self) -> bool:
        """Whether children cannot kill the server (so its death is the infrastructure's fault)."""
        return bool(self.hello.get("pid1")) or self._drops_uid

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-2000:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        """One control message before ``deadline``; None on timeout or a dead server."""
        assert self.ctl is not None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.ctl], [], [], remaining)
            if ready:
                return self._read_control()

    def _read_control(self) -> dict[str, Any] | None:
        """The next control message as a dict (exit records decoded); None if the server is gone."""
        assert self.ctl is not None
        try:
            data = self.ctl.recv(65536)
        except OSError:
            return None
        if not data:
            return None
        message = _decode_control(data)
        if message.get("ev") == "exit":
            stats = self.stats
            stats["children"] += 1
            stats["child_s"] += message["cpu_s"]
            stats["fork_s"] += message["fork_s"]
            stats["clean_s"] += message["clean_s"]
            stats["minor_faults"] += message["minor_faults"]
            stats["cleaned"] += message["cleaned"] != 0
        return message


def _remove_tree(path: str) -> None:
    """``rm -rf path``, whatever an answer left there (the server wipes after each child, but not
    after its own death): ``shutil.rmtree`` recurses, so a tree nested deeper than the recursion
    limit goes to ``rm``, which does not."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", path], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass

