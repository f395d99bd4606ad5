"""The sandbox's settings and results: what every child may do, and what one test call produced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    ``timeout``, ``output_limit``, ``crashed``, ``unserializable`` or ``infra``. ``encoded`` is a
    value's tagged form as the child sent it (what the reference cache stores on disk).
    """

    kind: str
    value: Any = None
    detail: str = ""
    encoded: Any = None


@dataclass
class RunReport:
    """All outcomes of running one piece of code against a list of test calls.

    ``output`` is the head of what the child printed; ``elapsed_s`` the wall-clock time its runs
    took (all attempts, from sending the job to its last result).

    For a job with a budget (see :meth:`JobPipeline.serve`): ``budget_s``; ``spent_s``, the
    wall-clock time its children ran (from the moment the server was on each to its end, queueing
    not included); ``out_of_budget``, ``"wall"`` or ``"cpu"`` when the budget ran out (else
    ``""``); ``cut``, how many of its tests the budget decided (the one running when it ran out,
    and every one after, which never ran).
    """

    outcomes: list[Outcome]
    output: str = ""
    elapsed_s: float = 0.0
    budget_s: float | None = None
    spent_s: float = 0.0
    out_of_budget: str = ""
    cut: int = 0
