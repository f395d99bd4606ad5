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

The package's parts: :mod:`.settings` (limits, outcomes, warnings), :mod:`.isolation` (environment,
bubblewrap command line, sandbox mode), :mod:`.protocol` (the server's source, control messages,
code compiled here), :mod:`.server` (one fork server's lifecycle) and :mod:`.jobs` (the pipeline
that supervises each job's children on it).
"""

from colbench_gym.execution.sandbox.isolation import (
    bwrap_command,
    probe_bwrap,
    python_flags,
    resolve_mode,
    sandbox_environment,
)
from colbench_gym.execution.sandbox.jobs import STOP
from colbench_gym.execution.sandbox.jobs import _Stop as _Stop  # typed job sources (grader.py)
from colbench_gym.execution.sandbox.server import SandboxProcess
from colbench_gym.execution.sandbox.settings import (
    Outcome,
    RunReport,
    SandboxSettings,
    SandboxStartError,
    SandboxWarning,
)

__all__ = [
    "STOP",
    "Outcome",
    "RunReport",
    "SandboxProcess",
    "SandboxSettings",
    "SandboxStartError",
    "SandboxWarning",
    "bwrap_command",
    "probe_bwrap",
    "python_flags",
    "resolve_mode",
    "sandbox_environment",
]
