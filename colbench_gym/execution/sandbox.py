"""Sandboxed worker processes: a warm fork server inside bubblewrap, and the grader's side of it.

One :class:`SandboxProcess` owns one fork server (``_sandbox_server.py``) started as::

    bwrap --unshare-net --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try \\
          --die-with-parent --new-session --as-pid-1 [--cap-drop ALL --cap-add CAP_SETUID,SETGID,KILL] \\
          --ro-bind /usr /usr --symlink usr/bin /bin ... --ro-bind /etc /etc \\
          --size <tmpfs> --tmpfs /tmp --ro-bind <python prefix> <python prefix> ... \\
          --dev /dev --perms 1777 --size <tmpfs> --tmpfs /dev/shm --mqueue /dev/mqueue --remount-ro /dev \\
          --proc /proc --remount-ro / --chdir /tmp -- \\
          python -s -P -c <server source> <config>

The sandbox's filesystem is an allow-list: system directories and the Python installation,
read-only, plus a small private ``/tmp`` and ``/dev/shm`` (``/dev`` itself is read-only). Home
directories, the project, data sets and anything else on the host simply do not exist inside. Its
network namespace has no interfaces but a loopback that is down; its PID namespace contains only
the server (PID 1, which cannot be killed from inside) and the current child; its IPC namespace is
its own. When the grader runs as root, children drop to ``nobody``. The server is non-dumpable, so
a child -- even one with the server's user id -- cannot read or write its memory through ``/proc``
or ptrace (a warning says so if that could not be set). After every child the server empties what
children can write (work directory, ``/tmp``, ``/dev/shm``, ``/dev/mqueue``) and removes every
System V IPC object in the sandbox: nothing one answer leaves behind reaches the next. Most children
leave nothing, so the server first checks (a ``stat`` of each of those tmpfs/mqueue directories,
whose size counts their entries, and three IPC counts) and removes only when there is something.

The interpreter runs with ``-s -P`` and a fully controlled environment rather than ``-I``:
``-I`` also ignores ``PYTHONHASHSEED``, and a fixed hash seed is what makes set and dict orders --
hence results -- reproducible across processes. With the environment cleared, ``-s -P`` gives the
same isolation as ``-I`` (no user site, no script directory, no ``PYTHON*`` variables but ours).

Per answer the grader compiles the code and the test calls (when the sandbox's interpreter has its
bytecode; nothing compiled here runs here), creates three pipes (payload in; results and output
out), hands their ends to the server over its control socket, and supervises the child from
outside: a deadline per test (reset by each result frame), an output budget, and a kill when either
is exceeded (the job's id on a kill pipe, and SIGURG to interrupt the server's ``wait4``). Each
worker is a pipeline (:meth:`SandboxProcess.serve`): the next job is handed to the server while a
child runs, so that the server forks it as soon as it has cleaned up after the last; a child's
results are read when its exit record arrives, or every observe period while it runs (2% of the
timeout, 2 to 20 ms: the precision of the deadlines), and output likewise, unless a pipe fills.

Without ``bwrap`` on ``PATH`` (or when it cannot create namespaces) the server runs as a plain
process (``sandbox="none"``) with the same limits, clean environment and temporary directory, but
with the host's filesystem and network visible; a :class:`SandboxWarning` says so. There, what an
answer writes outside its work directory (the host's ``/tmp``, ``/dev/shm``) stays, and System V
IPC objects are removed after each child only when the server could give itself an IPC namespace
(as root): in the host's namespace it cannot tell its children's objects from anybody else's.
Unless children drop to ``nobody`` they share the server's user id and can kill it (their tests
are then lost, never passed).
"""

from __future__ import annotations

import collections
import fcntl
import importlib.util
import json
import marshal
import os
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colbench_gym.execution.codec import FrameReader, ProtocolError, decode_value

_SERVER_SOURCE_PATH = Path(__file__).with_name("_sandbox_server.py")
# Read once, with this module: a process keeps starting servers that speak its own protocol, even if
# the file changes on disk while it runs (an upgrade under a long training job).
_SERVER_SOURCE = _SERVER_SOURCE_PATH.read_text(encoding="utf-8")
_NOBODY = 65534
_STARTUP_TIMEOUT_S = 30.0
_KILL_GRACE_S = 5.0
_EXIT_GRACE_S = 2.0
# Control messages, as in _sandbox_server.py: op + job id to the server; exit records back.
_MESSAGE = struct.Struct("<cQ")
_EXIT = struct.Struct("<cQidqqddi")


class SandboxWarning(RuntimeWarning):
    """The grader runs without the full sandbox (no bubblewrap): weaker isolation."""


class SandboxStartError(RuntimeError):
    """A fork server could not be started."""


@dataclass(frozen=True)
class SandboxSettings:
    """Limits and isolation of every sandboxed child.

    Attributes:
        timeout_s: wall-clock budget of each test call (and of defining the answer).
        memory_mb: address-space limit (``RLIMIT_AS``) of each child, in MiB.
        output_limit_bytes: stdout + stderr a child may print before it is killed.
        file_size_mb: largest file a child may write (``RLIMIT_FSIZE``).
        tmpfs_mb: size of each of the sandbox's private ``/tmp`` and ``/dev/shm`` (bubblewrap only).
        max_processes: ``RLIMIT_NPROC`` of children (processes and threads of the sandbox user).
        open_files: ``RLIMIT_NOFILE`` of children.
        max_result_bytes: largest encoded return value of one test call.
        max_items: most containers/scalars in one return value.
        max_depth: deepest nesting of one return value.
        sandbox: ``"auto"`` (bubblewrap if it works, else degraded with a warning), ``"bwrap"``
            (fail if it does not work) or ``"none"`` (degraded, warns).
        python: interpreter for the sandbox; defaults to ``sys.executable``.
        hide_paths: extra paths mounted over with an empty tmpfs inside the sandbox (only needed
            when they lie inside the Python installation, as everything else is absent anyway).
        preload: modules the fork server imports once, beyond the standard-library ones it always
            warms (``math``, ``re``, ``collections``, ``typing``, ...). An answer importing a
            preloaded module pays nothing; every fork pays a little for the larger server (for
            ``numpy``: about +0.3 ms per answer, against about 100 ms per answer that imports it).
    """

    timeout_s: float = 2.0
    memory_mb: int = 1024
    output_limit_bytes: int = 1 << 20
    file_size_mb: int = 16
    tmpfs_mb: int = 64
    max_processes: int = 16
    open_files: int = 64
    max_result_bytes: int = 16 << 20
    max_items: int = 1_000_000
    max_depth: int = 100
    sandbox: str = "auto"
    python: str | None = None
    hide_paths: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.sandbox not in ("auto", "bwrap", "none"):
            raise ValueError(f"sandbox must be 'auto', 'bwrap' or 'none', got {self.sandbox!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s!r}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb must be at least 64, got {self.memory_mb!r}")


@dataclass
class Outcome:
    """What one test call produced inside the sandbox, before comparison.

    ``kind`` is one of ``value`` (``value`` holds the decoded result), ``error``, ``memory``,
    ``timeout``, ``output_limit``, ``crashed``, ``unserializable`` or ``infra``.
    """

    kind: str
    value: Any = None
    detail: str = ""


@dataclass
class RunReport:
    """All outcomes of running one piece of code against a list of test calls.

    ``output`` is the head of what the child printed; ``elapsed_s`` the wall-clock time its runs
    took (all attempts, from sending the job to its last result).
    """

    outcomes: list[Outcome]
    output: str = ""
    elapsed_s: float = 0.0


# --------------------------------------------------------------------------------------------
# Environment and command line
# --------------------------------------------------------------------------------------------

def sandbox_environment() -> dict[str, str]:
    """The complete environment of sandboxed processes: nothing inherited from the host."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
    }


def _python_dirs(python: str) -> list[str]:
    """Directories the interpreter needs, outside ``/usr`` (venvs, pyenv, conda prefixes)."""
    candidates = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    if python != sys.executable:
        candidates.add(str(Path(python).parent.parent))
    resolved: set[str] = set()
    for path in candidates:
        for variant in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.isdir(variant) and variant != "/" and not _under(variant, ("/usr", "/etc")):
                resolved.add(variant)
    exe_dir = os.path.dirname(os.path.realpath(python))
    if (
        os.path.isdir(exe_dir)
        and not _under(exe_dir, ("/usr", "/etc"))
        and not any(_under(exe_dir, (d,)) for d in resolved)
    ):
        resolved.add(exe_dir)
    # Keep only outermost directories.
    return sorted(d for d in resolved if not any(d != o and _under(d, (o,)) for o in resolved))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _world_readable(path: str) -> bool:
    """Whether an unprivileged user can reach and list ``path`` (every ancestor searchable)."""
    current = os.path.realpath(path)
    try:
        mode = os.stat(current).st_mode
        if not (mode & stat.S_IROTH and mode & stat.S_IXOTH):
            return False
        while current != "/":
            current = os.path.dirname(current)
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True


def bwrap_command(bwrap: str, settings: SandboxSettings, python_dirs: list[str]) -> list[str]:
    """The bubblewrap part of the server's command line (everything before the interpreter)."""
    args = [
        bwrap,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
    ]
    if os.geteuid() == 0:
        # Keep only what the server needs to drop its children to `nobody` and to kill them.
        args += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL"):
            args += ["--cap-add", cap]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/etc", "/etc"]
    # The private /tmp comes before the interpreter's directories: a venv that lives under /tmp
    # (CI checkouts often do) is then bound on top of it instead of being hidden by it.
    args += ["--perms", "0755", "--size", str(settings.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    created: set[str] = {"/tmp"}
    for directory in python_dirs:
        parents = []
        parent = os.path.dirname(directory)
        while parent not in ("/", ""):
            parents.append(parent)
            parent = os.path.dirname(parent)
        for ancestor in reversed(parents):
            if ancestor not in created:
                created.add(ancestor)
                args += ["--perms", "0755", "--dir", ancestor]
        args += ["--ro-bind", directory, directory]
    # An installed (non-editable) colbench_gym sits inside the bound site-packages, and its built-in
    # task files hold references and tests: hide it. The server gets its source on the command line.
    package_dir = str(Path(__file__).resolve().parents[1])
    own_package = [package_dir] if any(_under(package_dir, (d,)) for d in python_dirs) else []
    for hidden in [*settings.hide_paths, *own_package]:
        if os.path.exists(hidden):
            args += ["--tmpfs", os.path.abspath(hidden)]
    # /dev is bubblewrap's own (a few device nodes), read-only; POSIX shared memory and message
    # queues get private, size-limited file systems there, emptied by the server after every child.
    args += ["--dev", "/dev", "--perms", "1777", "--size", str(settings.tmpfs_mb << 20), "--tmpfs", "/dev/shm"]
    args += ["--mqueue", "/dev/mqueue", "--remount-ro", "/dev"]
    args += [
        "--proc",
        "/proc",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--",
    ]
    return args


def python_flags() -> list[str]:
    return ["-s", "-P"] if sys.version_info >= (3, 11) else ["-s"]


# --------------------------------------------------------------------------------------------
# Sandbox mode resolution (once per process)
# --------------------------------------------------------------------------------------------

_mode_lock = threading.Lock()
_bwrap_probe: dict[tuple, str | None] = {}  # command prefix -> None if it works, else why not
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    with _mode_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, SandboxWarning, stacklevel=3)


def probe_bwrap(prefix: list[str]) -> str | None:
    """Run ``true`` under the exact bubblewrap set-up once per process: None if it works, else
    the reason (user namespaces disabled in a container, missing privileges, ...)."""
    key = tuple(prefix)
    with _mode_lock:
        if key in _bwrap_probe:
            return _bwrap_probe[key]
    try:
        done = subprocess.run(
            [*prefix, "/bin/true"], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, env=sandbox_environment(),
            check=False,
        )
        stderr = done.stderr.decode("utf-8", "replace").strip()
        reason = None if done.returncode == 0 else (stderr or f"exit status {done.returncode}")
    except (OSError, subprocess.TimeoutExpired) as err:
        reason = str(err)
    with _mode_lock:
        _bwrap_probe[key] = reason
    return reason


def resolve_mode(requested: str, prefix: list[str] | None) -> str:
    """``"bwrap"`` or ``"none"`` for a requested ``"auto"``/``"bwrap"``/``"none"``.

    ``prefix`` is the bubblewrap command line to probe (None when ``bwrap`` is not on PATH).
    """
    if requested == "none":
        _warn_once(
            "none",
            "colbench_gym grader: sandbox='none' runs candidate code without bubblewrap: resource limits "
            "and process isolation apply, but the host filesystem and network are visible to it.",
        )
        return "none"
    reason = "bubblewrap (`bwrap`) is not on PATH" if prefix is None else probe_bwrap(prefix)
    if reason is None:
        return "bwrap"
    if requested == "bwrap":
        raise SandboxStartError(f"sandbox='bwrap' but bubblewrap does not work here: {reason}")
    _warn_once(
        "degraded",
        f"colbench_gym grader: {reason}; running candidate code WITHOUT network and filesystem "
        "isolation (resource limits, a separate process and a clean environment still apply). "
        "Install bubblewrap (and allow user namespaces) for the full sandbox.",
    )
    return "none"


# --------------------------------------------------------------------------------------------
# One fork server
# --------------------------------------------------------------------------------------------


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
        self._job = 0
        self._nonce_key = os.urandom(8)
        # Children handed to the server, in its order: the first is the one it is on; it may have
        # reported everything already (its exit record is still to come). See serve().
        self._flight: collections.deque[_Attempt] = collections.deque()
        self._cpu_mark = 0.0
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
        command = prefix + [self.python, *python_flags(), "-c", source, json.dumps(config)]
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
        for attempt in self._flight:  # anything still in flight there dies with the server
            self._close_attempt(attempt)
        self._flight.clear()
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

    # -- running code ------------------------------------------------------------------------
    def run(self, code: str, calls: list[str]) -> RunReport:
        """Define ``code`` in a fresh child and evaluate every call in its namespace."""
        return self.run_units([(code, calls)])[0]

    def run_units(self, units: list[tuple[str, list[str]]]) -> list[RunReport]:
        """Run each unit ``(code, calls)`` -- a fresh namespace per unit, its calls in order.

        All units go to one child (a batch of references); an answer is always a unit of its own.
        A test that hangs or kills its process is recorded, and the remaining tests resume in a
        fresh child, so each test gets its own budget and its own chance.
        """
        jobs: list[tuple[Any, list[tuple[str, list[str]]]]] = [(None, units)]
        reports: list[list[RunReport]] = []
        self.serve(lambda block: jobs.pop() if jobs else STOP, lambda _token, got: reports.append(got))
        return reports[0]

    def serve(
        self,
        source: Callable[[bool], tuple[Any, list[tuple[str, list[str]]]] | None | _Stop],
        deliver: Callable[[Any, list[RunReport]], None],
    ) -> None:
        """Run jobs from ``source`` until it returns :data:`STOP`, handing each job's reports to
        ``deliver(token, reports)`` as soon as they are known (in completion order).

        ``source(block)`` returns ``(token, units)`` (a job: what :meth:`run_units` takes), None
        when nothing is waiting (only asked with ``block=False``), or :data:`STOP`.

        The server is kept fed: the next job is sent while a child runs (at most
        ``_PIPELINE_DEPTH`` in flight), so it forks the next child the moment it has cleaned up
        after the last, without waiting for the grader. A running child's result pipe is read
        when its exit record arrives, and meanwhile every ``observe period`` (see
        :func:`_observe_period`) -- not on every frame: a child's frames then wake nobody, and a
        fast child is read once. Deadlines hold to within that period. Output is read as it comes.
        """
        self._cpu_mark = time.thread_time()
        waiting: collections.deque[_Run] = collections.deque()  # runs that need (another) child
        flight = self._flight
        for attempt in flight:  # a child left reporting from an earlier call gets a fresh grace period
            if attempt.settled and attempt.kill_sent_at is None:
                attempt.deadline = time.monotonic() + _EXIT_GRACE_S
        stopping = False
        try:
            while True:
                try:
                    while len(flight) < _PIPELINE_DEPTH:
                        if not waiting:
                            if stopping:
                                break
                            busy = any(not attempt.settled for attempt in flight)
                            job = source(not busy)
                            if job is None:
                                break
                            if isinstance(job, _Stop):
                                stopping = True
                                break
                            token, units = job
                            run = _Run(token, units, [[] for _ in units], time.monotonic())
                            if not run.pending():
                                self._deliver(run, deliver)
                                continue
                            waiting.append(run)
                        self._send(waiting.popleft(), flight, waiting, deliver)
                    if all(attempt.settled for attempt in flight) and len(flight) < _PIPELINE_DEPTH:
                        # No child is running or queued: send what waits, or go back to the source.
                        if waiting:
                            continue
                        if stopping:
                            return
                        continue  # back to the source, which may block now
                    self._step(flight, waiting, deliver)
                except Exception as err:  # noqa: BLE001 (a grader bug must not lose the jobs in flight)
                    detail = f"grader error: {err!r}"[:500]
                    runs = [attempt.run for attempt in flight if not attempt.settled] + list(waiting)
                    for attempt in flight:
                        self._close_attempt(attempt)
                    flight.clear()
                    waiting.clear()
                    self.stop()
                    for run in runs:
                        for u, done in run.pending():
                            run.results[u] += [Outcome("infra", detail=detail)] * (len(run.units[u][1]) - done)
                        self._deliver(run, deliver)
        finally:
            self._count_cpu()

    # -- the pipeline's steps ------------------------------------------------------------------
    def _count_cpu(self) -> None:
        now = time.thread_time()
        self.stats["supervise_s"] += now - self._cpu_mark
        self._cpu_mark = now

    def _deliver(self, run: _Run, deliver: Callable[[Any, list[RunReport]], None]) -> None:
        text = run.output.decode("utf-8", "replace")
        elapsed = time.monotonic() - run.started
        self._count_cpu()
        deliver(run.token, [RunReport(outcomes, text, elapsed) for outcomes in run.results])

    def _send(self, run: _Run, flight: collections.deque[_Attempt], waiting: collections.deque[_Run],
              deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """Hand the run's remaining tests to the server as one child (started at once if the server
        is idle, else queued there behind the child it is running)."""
        pending = run.pending()
        if not self.alive:
            if not all(attempt.settled for attempt in flight):
                self._server_gone(flight, waiting, deliver, "died")
            self.stop()
            try:
                self.start()
            except SandboxStartError as err:
                failure = Outcome("infra", detail=str(err)[:500])
                for u, done in pending:
                    run.results[u] += [failure] * (len(run.units[u][1]) - done)
                self._deliver(run, deliver)
                return
        assert self.ctl is not None
        self._job += 1
        job = self._job
        nonce = self._nonce_key + job.to_bytes(8, "little")  # fresh for every run of this server
        units = [(run.units[u][0], run.units[u][1][done:]) for u, done in pending]
        if self._ship_code:
            body = marshal.dumps((nonce, [(_compiled(code), [_compiled_call(c) for c in calls]) for code, calls in units]))
        else:
            body = marshal.dumps((nonce, [(code, list(calls)) for code, calls in units]))
        payload = len(body).to_bytes(8, "little") + body
        attempt = _Attempt(outcomes=[[] for _ in units], sizes=[len(calls) for _, calls in units])
        attempt.run, attempt.slots, attempt.job = run, pending, job
        attempt.reader = FrameReader(nonce, self.settings.max_result_bytes + 4096)
        payload_r, attempt.payload_w = os.pipe()
        attempt.result_r, result_w = os.pipe()
        attempt.output_r, output_w = os.pipe()
        try:
            socket.send_fds(self.ctl, [_MESSAGE.pack(b"r", job)], [payload_r, result_w, output_w])
        except OSError:  # the server died between jobs: this one never started
            attempt.not_started = True
        finally:
            for fd in (payload_r, result_w, output_w):
                os.close(fd)
        if attempt.not_started:
            run.restarts += 1
            self.stop()
            self._settle(attempt, waiting, deliver)
            return
        for fd in (attempt.payload_w, attempt.result_r, attempt.output_r):
            fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)  # a fresh pipe has no other status flag
        attempt.payload = memoryview(payload)
        self._write_payload(attempt)
        if not flight:  # the server is idle: it starts this one now
            self._begin(attempt, time.monotonic())
        flight.append(attempt)

    def _begin(self, attempt: _Attempt, now: float) -> None:
        """The server is on this attempt from now on: every one sent before it has exited."""
        timeout = self.settings.timeout_s
        attempt.begun = True
        attempt.deadline = now + timeout + max(1.0, timeout)  # the first unit's setup, plus the process start
        attempt.next_observe = now + _observe_period(timeout)

    def _write_payload(self, attempt: _Attempt) -> None:
        pending = attempt.payload
        if pending is not None and attempt.payload_w >= 0:
            try:
                pending = pending[os.write(attempt.payload_w, pending):]
            except BlockingIOError:
                pass
            except OSError:  # the child is gone without reading it
                pending = pending[:0]
            attempt.payload = pending
            if not pending:
                os.close(attempt.payload_w)
                attempt.payload_w = -1
                attempt.payload = None

    def _step(self, flight: collections.deque[_Attempt], waiting: collections.deque[_Run],
              deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """Wait for the next event (a control message, output, payload room, a deadline, the next
        look at the running child's results) and handle it."""
        assert self.ctl is not None
        head = flight[0]  # the attempt the server is on: every one before it has exited
        now = time.monotonic()
        if not head.begun:
            self._begin(head, now)
        if now >= head.next_observe and head.result_open and not head.settled:
            self._observe(head, now)
            if head.settled:
                self._report_done(head, waiting, deliver)
            return
        if now >= head.deadline:
            self._on_deadline(head, flight, waiting, deliver, now)
            return
        ctl_fd = self.ctl.fileno()
        poller = select.poll()
        poller.register(ctl_fd, select.POLLIN)
        by_fd: dict[int, tuple[_Attempt, str]] = {}
        for attempt in flight:
            if attempt.output_r >= 0 and attempt.output_eager:
                poller.register(attempt.output_r, select.POLLIN)
                by_fd[attempt.output_r] = (attempt, "output")
            if attempt.result_eager and attempt.result_open and not attempt.settled:
                poller.register(attempt.result_r, select.POLLIN)
                by_fd[attempt.result_r] = (attempt, "result")
            if attempt.payload_w >= 0:
                poller.register(attempt.payload_w, select.POLLOUT)
                by_fd[attempt.payload_w] = (attempt, "payload")
        wake = head.deadline
        if head.result_open and not head.settled:
            wake = min(wake, head.next_observe)
        for fd, _event in poller.poll(max(0.0, wake - now) * 1000.0):
            if fd == ctl_fd:
                message = self._read_control()
                if message is None:  # the server is gone
                    self._server_gone(flight, waiting, deliver, "died")
                    return
                if message.get("ev") == "exit" and message.get("job") == head.job:
                    self._on_exit(head, message.get("status"), flight, waiting, deliver)
                    return
                continue
            attempt, kind = by_fd.get(fd, (None, ""))
            if attempt is None:
                continue
            if kind == "payload":
                self._write_payload(attempt)
            elif kind == "output":
                self._read_output(attempt)
            elif kind == "result" and attempt is head and not head.settled:
                self._read_available(head, time.monotonic())
                if head.settled:
                    self._report_done(head, waiting, deliver)
                    return

    def _read_output(self, attempt: _Attempt) -> None:
        """What the child has printed since the last look (without blocking), against its limit.
        Read at each look at the child's results; once the pipe is found full (a child that
        prints a lot), at once whenever there is some."""
        while attempt.output_r >= 0:
            try:
                chunk = os.read(attempt.output_r, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                os.close(attempt.output_r)
                attempt.output_r = -1
                return
            attempt.output_total += len(chunk)
            head = attempt.output_head
            if len(head) < 4096:
                head += chunk[: 4096 - len(head)]
            if attempt.output_total > self.settings.output_limit_bytes:
                self._kill(attempt, "output")
                return
            if len(chunk) < 1 << 16:
                return
            attempt.output_eager = True

    def _report_done(self, head: _Attempt, waiting: collections.deque[_Run],
                     deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """The head has reported everything (its exit comes later): its results go out now, with
        what it has printed so far."""
        if head.output_r >= 0:
            head.output_total += self._drain_output(head.output_r, head.output_head)
        self._report(head, waiting, deliver)

    def _read_available(self, attempt: _Attempt, now: float) -> None:
        """Everything already in the result pipe, without waiting for more. A full pipe means a child
        writing a large value, held up until it is read: that pipe is then read whenever it has
        something (and made larger), not only at each look."""
        while attempt.result_open:
            try:
                chunk = os.read(attempt.result_r, 1 << 20)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                attempt.result_open = False
                return
            if len(chunk) >= 1 << 16 and not attempt.result_eager:
                attempt.result_eager = True
                try:
                    fcntl.fcntl(attempt.result_r, fcntl.F_SETPIPE_SZ, 1 << 20)
                except (AttributeError, OSError):
                    pass
            self._feed(attempt, chunk, now)

    def _observe(self, attempt: _Attempt, now: float) -> None:
        """Read what the child has reported and printed so far (without blocking) and apply it."""
        attempt.next_observe = now + _observe_period(self.settings.timeout_s)
        if not attempt.output_eager:
            self._read_output(attempt)
        self._read_available(attempt, now)

    def _feed(self, attempt: _Attempt, chunk: bytes, now: float) -> None:
        attempt.frames_seen = True
        assert attempt.reader is not None
        bodies, error = attempt.reader.read(chunk)
        timeout = self.settings.timeout_s
        for body in bodies:
            if attempt.phase == "protocol":
                break
            starting = not attempt.child_started
            try:
                self._on_frame(body, attempt)
            except Exception as err:  # noqa: BLE001 (a frame the child forged: its failure, not ours)
                reason = str(err) if isinstance(err, ProtocolError) else f"{type(err).__name__} while decoding"
                attempt.protocol(reason[:300])
                break
            if attempt.kill_sent_at is None and not starting:  # the set-up budget runs on past ["start"]
                attempt.deadline = now + (_EXIT_GRACE_S if attempt.phase == "done" else timeout)
        if error is not None:
            attempt.protocol(error)
        if attempt.phase == "protocol":
            self._kill(attempt, "protocol")
        elif attempt.phase == "done":
            attempt.settled = True  # everything is reported: its results go out now, its exit comes later

    def _kill(self, attempt: _Attempt, reason: str) -> None:
        if attempt.kill_sent_at is not None:
            return
        attempt.kill_reason = reason
        attempt.kill_sent_at = time.monotonic()
        attempt.deadline = attempt.kill_sent_at + _KILL_GRACE_S
        self._request_kill(attempt.job)

    def _on_deadline(self, head: _Attempt, flight: collections.deque[_Attempt], waiting: collections.deque[_Run],
                     deliver: Callable[[Any, list[RunReport]], None], now: float) -> None:
        if head.kill_sent_at is None and not head.settled and head.result_open:
            # What the child reported since the last look may move the deadline: look first.
            self._read_available(head, now)
            if head.settled:
                self._report_done(head, waiting, deliver)
            if now < head.deadline:
                return
        if head.kill_sent_at is None:
            self._kill(head, "timeout" if head.phase in ("setup", "tests") else "lingering")
            return
        # The server does not act on a kill (or never sends the exit record): give it up.
        head.kill_reason = head.kill_reason or "unresponsive"
        self._server_gone(flight, waiting, deliver, "unresponsive")

    def _on_exit(self, head: _Attempt, status: Any, flight: collections.deque[_Attempt],
                 waiting: collections.deque[_Run], deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """The head's child is gone and the server has cleaned up: read the rest, settle it, and
        start the clock of the next one."""
        now = time.monotonic()
        head.exit_status = status
        flight.popleft()
        if not head.settled:
            if head.result_open:
                for chunk in self._drain(head.result_r):
                    self._feed(head, chunk, now)
                assert head.reader is not None
                if head.reader.pending and head.phase != "protocol":
                    head.protocol("truncated frame")
                head.result_open = False
            self._finish_attempt(head)
        if not head.reported:
            self._report(head, waiting, deliver)
        self._close_attempt(head)
        if flight:
            self._begin(flight[0], now)

    def _finish_attempt(self, attempt: _Attempt) -> None:
        """Output last printed, then what ended the child where it stopped reporting."""
        if attempt.output_r >= 0:
            attempt.output_total += self._drain_output(attempt.output_r, attempt.output_head)
        kill_reason = attempt.kill_reason
        if attempt.output_total > self.settings.output_limit_bytes and kill_reason is None:
            kill_reason = "output"
        attempt.settled = True
        self._finish(attempt, kill_reason, attempt.exit_status)

    def _server_gone(self, flight: collections.deque[_Attempt], waiting: collections.deque[_Run],
                     deliver: Callable[[Any, list[RunReport]], None], how: str) -> None:
        """The server died (or stopped answering): the child it was on has what it reported; the
        ones queued behind it never started and go again to a new server."""
        attempts = list(flight)
        flight.clear()
        head = attempts[0]
        if not head.settled:
            head.server_died = True
            now = time.monotonic()
            if how == "died" and head.result_open:  # its child dies with it: read to the end
                for chunk in self._drain(head.result_r):
                    self._feed(head, chunk, now)
                head.result_open = False
            else:
                self._read_available(head, now)
            head.exit_status = None
            self._finish_attempt(head)
            head.run.restarts += 1
        self.stop()
        for attempt in attempts[1:]:
            attempt.not_started = True
        for attempt in attempts:
            if not attempt.reported:
                self._report(attempt, waiting, deliver)
            self._close_attempt(attempt)

    def _report(self, attempt: _Attempt, waiting: collections.deque[_Run],
                deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """Add the attempt's outcomes to its run; deliver the run if complete, else queue it for
        a fresh child (first in line)."""
        attempt.reported = True
        run = attempt.run
        if attempt.not_started:
            if run.restarts > 2:
                failure = Outcome("infra", detail="the sandbox server does not respond")
                for u, done in run.pending():
                    run.results[u] += [failure] * (len(run.units[u][1]) - done)
                self._deliver(run, deliver)
            else:
                waiting.appendleft(run)
            return
        for (u, _), got in zip(attempt.slots, attempt.outcomes):
            run.results[u] += got
        if len(run.output) < 4096:
            run.output += attempt.output_head[: 4096 - len(run.output)]
        if attempt.failure is not None:
            u = attempt.slots[attempt.unit][0]
            left = len(run.units[u][1]) - len(run.results[u])
            run.results[u] += [attempt.failure] * (left if attempt.in_setup else min(left, 1))
            if run.restarts > 2:  # the server keeps dying: do not loop on it
                for v in range(len(run.units)):
                    run.results[v] += [attempt.failure] * (len(run.units[v][1]) - len(run.results[v]))
        if run.pending():
            waiting.appendleft(run)
        else:
            self._deliver(run, deliver)

    @staticmethod
    def _close_attempt(attempt: _Attempt) -> None:
        for name in ("payload_w", "result_r", "output_r"):
            fd = getattr(attempt, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(attempt, name, -1)
        attempt.payload = None

    @staticmethod
    def _drain_output(output_r: int, head: bytearray, limit: int = 1 << 20) -> int:
        """Read (up to ``limit`` bytes of) the output already in the pipe, without blocking."""
        total = 0
        while total < limit:
            try:
                chunk = os.read(output_r, 1 << 16)
            except (BlockingIOError, OSError):
                return total
            if not chunk:
                return total
            total += len(chunk)
            if len(head) < 4096:
                head += chunk[: 4096 - len(head)]
        return total

    @staticmethod
    def _drain(result_r: int) -> list[bytes]:
        """What is left in the result pipe once the child is gone (its writers are all dead)."""
        chunks = []
        while True:  # usually all there, and then the end of the pipe: no waiting
            try:
                chunk = os.read(result_r, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                return chunks
            if not chunk:
                return chunks
            chunks.append(chunk)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            ready, _, _ = select.select([result_r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            try:
                chunk = os.read(result_r, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
        return chunks

    def _on_frame(self, body: Any, attempt: _Attempt) -> None:
        """Apply one frame to the attempt; anything unexpected puts it in the ``protocol`` phase."""
        phase = attempt.phase
        if phase == "tests" and type(body) is list and len(body) == 3 and body[0] == "ok":
            # The common case first: a value for the next test of the unit in progress.
            done = attempt.outcomes[attempt.unit]
            if body[1] == len(done) and type(body[1]) is int:
                done.append(Outcome("value", decode_value(body[2])))
                if len(done) >= attempt.sizes[attempt.unit]:
                    attempt.unit += 1
                    attempt.phase = attempt.position_phase = "setup"
                return
        if phase == "done":
            attempt.protocol("frame after the end")
            return
        if type(body) is not list or not body or type(body[0]) is not str:
            attempt.protocol("malformed frame")
            return
        tag = body[0]
        if not attempt.child_started:
            if tag == "start" and len(body) == 1:
                attempt.child_started = True
            else:
                attempt.protocol(f"frame {tag!r} before the start")
            return
        unit = attempt.unit
        units = len(attempt.sizes)
        if phase == "setup":
            if tag == "done" and unit == units and len(body) == 1:
                attempt.phase = "done"
            elif tag == "ready" and unit < units and len(body) == 1:
                attempt.phase = "tests"
                attempt.advance()
            elif tag == "setup" and unit < units and len(body) == 3:
                kind = "memory" if body[1] == "mem" else "error"
                failure = Outcome(kind, detail=str(body[2])[:500])
                attempt.outcomes[unit] += [failure] * attempt.sizes[unit]
                attempt.advance()
            else:
                attempt.protocol(f"unexpected frame {tag!r} before the tests")
            return
        done = attempt.outcomes[unit]
        if len(body) < 3 or body[1] != len(done):
            attempt.protocol(f"unexpected frame {tag!r}")
            return
        if tag == "ok" and len(body) == 3:
            outcome = Outcome("value", decode_value(body[2]))
        elif tag == "err" and len(body) == 4:
            outcome = Outcome("error", detail=f"{body[2]}: {body[3]}"[:500])
        elif tag == "fsz" and len(body) == 4:
            detail = f"file size limit ({self.settings.file_size_mb} MiB) exceeded: {body[2]}: {body[3]}"
            outcome = Outcome("output_limit", detail=detail[:500])
        elif tag == "mem" and len(body) == 3:
            outcome = Outcome("memory", detail=str(body[2])[:500])
        elif tag == "unser" and len(body) == 3:
            outcome = Outcome("unserializable", detail=str(body[2])[:500])
        elif tag == "big" and len(body) == 3:
            outcome = Outcome("output_limit", detail=f"return value too large ({body[2]} bytes encoded)")
        else:
            attempt.protocol(f"unexpected frame {tag!r}")
            return
        done.append(outcome)
        attempt.advance()

    def _finish(self, attempt: _Attempt, kill_reason: str | None, exit_status: Any) -> None:
        """Decide what happened at the position where the child stopped reporting, if anywhere."""
        if attempt.unit >= len(attempt.sizes):
            return  # every test reported; a missing "done" or a slow exit costs nothing
        attempt.in_setup = attempt.position_phase == "setup"
        where = "while defining the code" if attempt.in_setup else "during this test"
        if attempt.phase == "protocol" or kill_reason == "protocol":
            attempt.failure = Outcome("crashed", detail=f"malformed result from the sandbox: {attempt.protocol_error}")
        elif kill_reason == "timeout":
            attempt.failure = Outcome("timeout", detail=f"exceeded {self.settings.timeout_s:g} s {where}")
        elif kill_reason == "output":
            attempt.failure = Outcome(
                "output_limit", detail=f"printed more than {self.settings.output_limit_bytes} bytes {where}"
            )
        elif attempt.server_died:
            attempt.failure = self._server_death_outcome(f"sandbox server died {where}")
        else:
            attempt.failure = _outcome_from_status(exit_status, where, attempt.child_started)

    def _server_death_outcome(self, detail: str) -> Outcome:
        return Outcome("infra" if self.server_protected else "crashed", detail=detail)

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


def _decode_control(data: bytes) -> dict[str, Any]:
    if data[:1] == b"{":
        try:
            return json.loads(data)
        except ValueError:
            return {"ev": "garbled"}
    if len(data) == _EXIT.size and data[:1] == b"x":
        _, job, status, cpu, rss, faults, fork_s, clean_s, cleaned = _EXIT.unpack(data)
        return {
            "ev": "exit",
            "job": job,
            "status": None if status == -1 else status,
            "cpu_s": cpu,
            "max_rss_kb": rss,
            "minor_faults": faults,
            "fork_s": fork_s,
            "clean_s": clean_s,
            "cleaned": cleaned,
        }
    return {"ev": "garbled"}


# Compiling answers and test calls here, for children whose interpreter has our bytecode: the
# compiler's work -- and the fresh memory it writes, each page a copy-on-write fault in a forked
# child -- is then done in a warm process, and a task's calls once for all its answers. Parsing
# model-written code in this process is nothing new (extract_code does), and nothing compiled here
# runs here. Compiled exactly as the child would (no inherited flags, no -O), with the child's file
# names; anything the compiler rejects or warns about goes to the child as source, which then
# reports it as before.
# Only short code is compiled here: compiling takes time and memory that grow with the source (1 MiB of
# statements: seconds and hundreds of MB, holding the GIL), which a child spends under its own limits
# and deadline instead. ColBench answers are a few KiB.
warnings.filterwarnings("error", module="<answer>")
warnings.filterwarnings("error", module="<test>")
_COMPILE_HERE_MAX = 16 << 10  # characters
_CALL_CACHE: dict[str, Any] = {}
_CALL_CACHE_SIZE = 1 << 16


def _compiled(code: str) -> Any:
    if len(code) > _COMPILE_HERE_MAX:
        return code
    try:
        return compile(code, "<answer>", "exec", dont_inherit=True, optimize=0)
    except BaseException:  # noqa: BLE001 (SyntaxError, a warning made an error, MemoryError, RecursionError)
        return code


def _compiled_call(call: str) -> Any:
    if len(call) > _COMPILE_HERE_MAX:
        return call
    found = _CALL_CACHE.get(call)
    if found is None:
        try:
            found = compile(call, "<test>", "eval", dont_inherit=True, optimize=0)
        except BaseException:  # noqa: BLE001
            found = call
        if len(_CALL_CACHE) >= _CALL_CACHE_SIZE:
            _CALL_CACHE.clear()
        _CALL_CACHE[call] = found
    return found


class _Stop:
    """What a job source returns when there will be no more jobs."""


STOP = _Stop()
_PIPELINE_DEPTH = 2  # children handed to one server at once: the one running and the next


def _observe_period(timeout: float) -> float:
    """How often a running child's result pipe is read between its exit records: deadlines hold
    to within this (2% of the timeout, between 2 and 20 ms)."""
    return min(0.02, max(0.002, timeout / 50))


@dataclass(eq=False)
class _Run:
    """One job: its units, and their outcomes so far over however many children it takes."""

    token: Any
    units: list[tuple[str, list[str]]]
    results: list[list[Outcome]]
    started: float
    output: bytearray = field(default_factory=bytearray)
    restarts: int = 0

    def pending(self) -> list[tuple[int, int]]:
        """(unit, tests done) of every unit with tests left."""
        return [(u, len(done)) for u, done in enumerate(self.results) if len(done) < len(self.units[u][1])]


@dataclass(eq=False)
class _Attempt:
    """Progress of one child through its units: ``unit`` is the unit in progress, ``phase`` is
    ``setup`` (defining it, or expecting ``done`` after the last), ``tests``, ``done`` or
    ``protocol`` (a malformed frame: nothing more is trusted)."""

    outcomes: list[list[Outcome]]
    sizes: list[int]
    unit: int = 0
    phase: str = "setup"
    position_phase: str = "setup"
    failure: Outcome | None = None
    in_setup: bool = False
    server_died: bool = False
    not_started: bool = False
    child_started: bool = False  # the child reported ["start"]: from then on, its exit is the code's doing
    protocol_error: str = ""
    # The pipeline's bookkeeping (see SandboxProcess.serve).
    run: Any = None
    slots: list[tuple[int, int]] = field(default_factory=list)  # (unit of the run, its tests done before)
    job: int = 0
    reader: FrameReader | None = None
    payload: memoryview | None = None
    payload_w: int = -1
    result_r: int = -1
    output_r: int = -1
    begun: bool = False  # the server is on it (every attempt sent before it has exited)
    deadline: float = float("inf")
    next_observe: float = float("inf")
    kill_reason: str | None = None
    kill_sent_at: float | None = None
    exit_status: Any = None
    frames_seen: bool = False
    result_open: bool = True
    settled: bool = False  # its outcomes are final (all reported, or it has ended)
    reported: bool = False  # ... and added to its run
    output_total: int = 0
    output_head: bytearray = field(default_factory=bytearray)
    output_eager: bool = False  # its output pipe was found full: read it as soon as there is output
    result_eager: bool = False  # the same for its result pipe

    def advance(self) -> None:
        """After a frame: move to the next unit once this one has all its outcomes."""
        if len(self.outcomes[self.unit]) >= self.sizes[self.unit]:
            self.unit += 1
            self.phase = "setup"
        self.position_phase = self.phase

    def protocol(self, error: str) -> None:
        if self.phase != "protocol":
            self.protocol_error = error
            self.phase = "protocol"


def _outcome_from_status(status: Any, where: str, started: bool) -> Outcome:
    """What a child's wait status means; exit code 71 is the child's own set-up failing, an
    infrastructure error, only before it reported ``["start"]`` (after that, code could exit 71)."""
    if not isinstance(status, int):
        return Outcome("crashed", detail=f"the process ended {where} without reporting")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = _signal_name(sig)
        if sig == signal.SIGXCPU:
            return Outcome("timeout", detail=f"CPU time limit exceeded {where}")
        if sig == signal.SIGXFSZ:
            return Outcome("output_limit", detail=f"file size limit exceeded {where}")
        if sig == signal.SIGKILL:
            return Outcome("crashed", detail=f"killed by SIGKILL {where} (out of memory?)")
        if sig == signal.SIGSEGV:
            return Outcome("crashed", detail=f"segmentation fault {where} (stack overflow?)")
        return Outcome("crashed", detail=f"killed by {name} {where}")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if code == 71 and not started:
        return Outcome("infra", detail="the sandboxed child could not set itself up")
    return Outcome("crashed", detail=f"the process exited with code {code} {where} without returning")


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


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _count_user_tasks(uid: int) -> int:
    """Processes and threads owned by ``uid`` right now (RLIMIT_NPROC counts those)."""
    total = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                text = handle.read()
        except OSError:
            continue
        owner = threads = None
        for line in text.splitlines():
            if line.startswith("Uid:"):
                owner = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        if owner == uid:
            total += threads or 1
    return total
