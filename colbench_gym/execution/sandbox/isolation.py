"""Isolation of the fork server: its clean environment, the bubblewrap command line, and whether
bubblewrap works here (resolved once per process, with a warning when it does not)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import warnings
from pathlib import Path

from colbench_gym.execution.sandbox.settings import SandboxSettings, SandboxStartError, SandboxWarning

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


# Host folders under /tmp that the sandbox needs (a checkout or virtual environment there: CI often puts them there)
# are shown at the same place under this one, so that the sandbox's /tmp is wholly its own: answers write there, the
# server empties it, and nothing of the host is in it. A Python installation under /tmp whose files link to absolute
# paths in another folder under /tmp (a venv whose base interpreter is under /tmp too) does not start there.
HOST_TMP = "/run/host-tmp"


def sandbox_path(path: str) -> str:
    """Where a host path of the Python installation is seen inside the sandbox: itself, unless under /tmp."""
    path = os.path.abspath(path)
    return HOST_TMP + path[len("/tmp"):] if _under(path, ("/tmp",)) else path


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
    # The private /tmp: nothing of the host's /tmp is in it (see HOST_TMP).
    args += ["--perms", "0755", "--size", str(settings.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    created: set[str] = {"/tmp"}
    for directory in python_dirs:
        inside = sandbox_path(directory)
        parents = []
        parent = os.path.dirname(inside)
        while parent not in ("/", ""):
            parents.append(parent)
            parent = os.path.dirname(parent)
        for ancestor in reversed(parents):
            if ancestor not in created:
                created.add(ancestor)
                args += ["--perms", "0755", "--dir", ancestor]
        args += ["--ro-bind", directory, inside]
    # An installed (non-editable) colbench_gym sits inside the bound site-packages, and its built-in
    # task files hold references and tests: hide it. The server gets its source on the command line.
    package_dir = str(Path(__file__).resolve().parents[2])  # colbench_gym/, above execution/sandbox/
    own_package = [package_dir] if any(_under(package_dir, (d,)) for d in python_dirs) else []
    for hidden in [*settings.hide_paths, *own_package]:
        if os.path.exists(hidden):
            args += ["--tmpfs", sandbox_path(hidden)]
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
