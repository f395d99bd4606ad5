"""The backend grader: ColBench's test-call scoring, run in sandboxed worker processes.

    from colbench_gym.execution import Grader

    with Grader(allow_code_execution=True) as grader:
        result = grader.grade(answer_code, reference_code, {"test1": "f(1, 2)", ...})
        results = grader.grade_many([(answer, reference, tests), ...])   # all cores, order kept
    result.score, result.success, result.status_counts(), result.to_dict()

Scoring follows the original ColBench scorer: each test call is evaluated against the reference
function and against the answer (each defined by ``exec`` of its code), the outputs are compared
with ``==``, and the score is the fraction of tests that pass. A test whose reference output is
``None`` or raises never passes (``REFERENCE_INVALID``). The denominator is always the number of
tests; tests that failed because of the grader itself are ``INFRA_ERROR`` and set
``GradeResult.infra_error`` so that training code can drop the episode.

Reference outputs are computed in sandboxed children of their own (task files are untrusted too), one
reference per child by default, so that nothing one reference does to its process (``random``'s
state, ``decimal``'s context, a patched module) can change another's output; they are cached per
``(reference, ordered test calls)`` -- the calls share one namespace, as in ColBench, so an output
may depend on the calls before it -- in memory and on disk (:mod:`colbench_gym.execution.reference_cache`),
so that a restarted run never runs a reference again. Answers never run in the same process as a
reference.

Each answer has a grading budget over all its tests (wall-clock time and CPU time, by default the
per-test timeout): an answer that loops costs about one test's timeout, not one per test. Once it
is spent, the test running stops and the remaining ones fail as ``timeout`` without running; the
result says so (``GradeResult.out_of_budget``, ``tests_cut``).
"""

from __future__ import annotations

import ast
import atexit
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import math
import os
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from colbench_gym.execution.codec import short_repr, values_equal
from colbench_gym.execution.reference_cache import ReferenceDiskCache, default_folder
from colbench_gym.execution.results import GradeResult, TestResult, TestStatus
from colbench_gym.execution.sandbox import (
    STOP,
    Outcome,
    RunReport,
    SandboxProcess,
    SandboxSettings,
    _Stop,
)
from colbench_gym.execution.sandbox.protocol import _SERVER_SOURCE

ALLOW_ENV_VAR = "COLBENCH_ALLOW_CODE_EXECUTION"
MAX_CODE_BYTES = 1 << 20


class CodeExecutionDisabled(RuntimeError):
    """Grading runs model-written code; it must be enabled explicitly."""


_DISABLED_MESSAGE = (
    "Grading executes model-generated Python code. colbench_gym runs it in a sandbox (separate "
    "process, resource limits, no network, a private filesystem view when bubblewrap is installed), "
    "but executing untrusted code is still a risk you must accept explicitly: pass "
    f"Grader(allow_code_execution=True), or set the environment variable {ALLOW_ENV_VAR}=1. "
    "(The ColBench environments do this for you through default_grader().)"
)


def execution_allowed(flag: bool) -> bool:
    return bool(flag) or os.environ.get(ALLOW_ENV_VAR) == "1"


@dataclass
class _Job:
    """Units ``(code, calls)`` for one child; the future gets a list of RunReport, one per unit.
    ``budget_s``: the wall-clock and CPU time all of them may take together (None: no limit)."""

    units: list[tuple[str, list[str]]]
    future: concurrent.futures.Future
    budget_s: float | None = None


def _failed(units: list[tuple[str, list[str]]], detail: str) -> list[RunReport]:
    return [RunReport([Outcome("infra", detail=detail[:500])] * len(calls)) for _, calls in units]


class _Pool:
    """Worker threads, each driving one warm fork server. Holds no reference to the Grader."""

    def __init__(self, settings: SandboxSettings, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        self.queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.sandboxes: list[SandboxProcess] = []
        self.ready = threading.Condition()
        self.ready_count = 0
        self.closed = False
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.started = False

    def start(self, wait: bool = False) -> None:
        with self.lock:
            if not self.started:
                self._spawn()
        if wait:
            with self.ready:
                self.ready.wait_for(lambda: self.ready_count >= self.workers, timeout=120)

    def _spawn(self) -> None:
        self.started = True
        for index in range(self.workers):
            sandbox = SandboxProcess(self.settings)
            self.sandboxes.append(sandbox)
            # Fork servers die with the thread that started them (PR_SET_PDEATHSIG), so each
            # long-lived worker thread starts and restarts its own.
            thread = threading.Thread(
                target=self._work, args=(sandbox,), name=f"colbench-grader-{index}", daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def _work(self, sandbox: SandboxProcess) -> None:
        try:
            sandbox.start()
        except Exception:  # noqa: BLE001
            pass  # recorded as INFRA_ERROR by the first job; retried then
        with self.ready:
            self.ready_count += 1
            self.ready.notify_all()
        queue_get = self.queue.get

        def source(block: bool) -> tuple[_Job, list[tuple[str, list[str]]], float | None] | None | _Stop:
            """The next job, if any (waiting for one when asked to block); STOP at close."""
            while True:
                try:
                    job = queue_get(block)
                except queue.Empty:
                    return None
                if job is None:
                    return STOP
                if job.future.set_running_or_notify_cancel():
                    return job, job.units, job.budget_s

        try:
            # One loop per worker keeps its server fed: the next job is taken and sent while a
            # child runs (see SandboxProcess.serve).
            sandbox.serve(source, lambda job, reports: job.future.set_result(reports))
        finally:
            sandbox.stop()

    def submit(self, units: list[tuple[str, list[str]]], budget_s: float | None = None) -> concurrent.futures.Future:
        """Queue units for one child; the future's result is one RunReport per unit."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        if not any(calls for _, calls in units):
            future.set_result([RunReport([]) for _ in units])
        elif self.closed:
            future.set_result(_failed(units, "grader is closed"))
        else:
            self.queue.put(_Job(units, future, budget_s))
        return future

    def sandbox_identity(self, timeout: float = 120.0) -> tuple[dict[str, Any], str | None] | None:
        """The hello and mode of a started fork server (waiting for one); None if none could start."""

        def started() -> tuple[dict[str, Any], str | None] | None:
            return next(((sandbox.hello, sandbox.mode) for sandbox in self.sandboxes if sandbox.hello), None)

        with self.ready:
            self.ready.wait_for(lambda: started() is not None or self.ready_count >= self.workers, timeout=timeout)
        return started()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if os.getpid() != self.pid:
            return  # a forked copy: the servers belong to the parent process
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join(timeout=30)
        while True:
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                break
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_result(_failed(job.units, "grader closed"))


@dataclass
class _Prepared:
    candidate: str
    reference_key: str
    reference: str
    names: list[str]
    calls: list[str]
    valid: list[bool]
    error: str = ""

    @property
    def reference_run_key(self) -> tuple[str, tuple[str, ...]]:
        """(reference hash, the valid calls in order): what one reference run computes."""
        return self.reference_key, tuple(c for c, ok in zip(self.calls, self.valid) if ok)


class Grader:
    """Grades backend answers against reference functions in sandboxed processes.

    Args:
        workers: number of sandboxes running at once (default: ``os.cpu_count()``).
        timeout_s: wall-clock limit of each test call, and of defining the answer.
        memory_mb: address-space limit of each sandboxed process.
        answer_budget_s: the grading budget of each answer, over all its tests and the definition
            of its code: its processes may run this much wall-clock time in all (time spent queueing
            behind other answers does not count) and use this much CPU time (enforced by
            ``RLIMIT_CPU``, to the second; extra processes an answer starts are bounded by the
            wall clock, as the whole sandboxed process tree is killed). Once it is spent, the test
            running stops and every remaining test fails as ``timeout`` without running, with a
            detail that says so. Default: ``timeout_s``, so that an answer that loops costs about one
            test's timeout, not one per test; an answer whose tests take longer than that in all is
            cut as well. ``math.inf`` turns it off (each test then has only its own limit). Each call
            of :meth:`grade` / :meth:`grade_many` may set its own (``budget_s``), so one grader
            serves callers with different budgets. References have no budget.
        allow_code_execution: opt-in to run model-generated code (like HF ``evaluate``'s
            ``code_eval``); without it, or ``COLBENCH_ALLOW_CODE_EXECUTION=1``, grading raises
            :class:`CodeExecutionDisabled`.
        sandbox: ``"auto"``, ``"bwrap"`` or ``"none"`` (see :class:`SandboxSettings`).
        reference_cache_size: reference runs kept in memory, per ``(reference, ordered test calls)``.
        reference_disk_cache: where reference outputs are also kept on disk, content-addressed
            (see :mod:`colbench_gym.execution.reference_cache`), so that a new grader -- in a
            restarted run, another process -- never runs a reference again: ``True`` (default)
            for ``$COLBENCH_REFERENCE_CACHE`` (``0`` turns it off), else
            ``$COLBENCH_CACHE/references``, else ``~/.cache/colbench/references``; a folder; or
            ``False`` for memory only.
        reference_batch_size: most references run in one child. The default, ``1``, gives every
            reference a process of its own (a fork of a warm server: about a millisecond each, paid
            once per reference thanks to the cache). Larger batches save those forks, but the
            references of a batch share their process: each gets a fresh namespace and restored
            builtins, yet module state (``random``'s generator, ``decimal.getcontext()``, attributes
            set on imported modules, the working directory, ...) carries from one to the next, so
            one task's reference can change another's expected outputs. Only for references known
            to leave their process alone.
        **limits: further :class:`SandboxSettings` fields (``output_limit_bytes``, ``file_size_mb``,
            ``tmpfs_mb``, ``max_processes``, ``open_files``, ``max_result_bytes``, ``hide_paths``, ...).

    Worker processes start on first use (or :meth:`warm_up`) and live until :meth:`close`.
    Thread-safe: several threads may grade at once; the work is shared by the same workers.
    """

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: float = 2.0,
        memory_mb: int = 1024,
        allow_code_execution: bool = False,
        *,
        sandbox: str = "auto",
        answer_budget_s: float | None = None,
        reference_cache_size: int = 100_000,
        reference_disk_cache: bool | str | os.PathLike = True,
        reference_batch_size: int = 1,
        **limits: Any,
    ) -> None:
        if workers is None:
            workers = os.cpu_count() or 1
        if int(workers) < 1:
            raise ValueError(f"workers must be at least 1, got {workers!r}")
        self.workers = int(workers)
        self.allow_code_execution = bool(allow_code_execution)
        self.settings = SandboxSettings(timeout_s=float(timeout_s), memory_mb=int(memory_mb), sandbox=sandbox, **limits)
        self.answer_budget_s = _check_budget(self.settings.timeout_s if answer_budget_s is None else answer_budget_s,
                                             "answer_budget_s")
        self.reference_cache_size = int(reference_cache_size)
        if reference_disk_cache is True:
            folder = default_folder()
        elif reference_disk_cache is False or reference_disk_cache is None:
            folder = None
        else:
            folder = os.fspath(reference_disk_cache)
        self.reference_disk_cache = ReferenceDiskCache(folder) if folder is not None else None
        self._disk_environment: str | None = None  # what a reference's outputs depend on, besides itself
        if int(reference_batch_size) < 1:
            raise ValueError(f"reference_batch_size must be at least 1, got {reference_batch_size!r}")
        self.reference_batch_size = int(reference_batch_size)
        self._cache: OrderedDict[tuple[str, tuple[str, ...]], list[Outcome]] = OrderedDict()
        self._inflight: dict[tuple[str, tuple[str, ...]], concurrent.futures.Future] = {}
        self._reference_runs = 0
        self._cache_lock = threading.RLock()  # a done-callback may run inside _schedule_references
        self._pool: _Pool | None = None
        self._pool_lock = threading.Lock()
        self._closed = False
        self._finalizer: weakref.finalize | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def timeout_s(self) -> float:
        return self.settings.timeout_s

    @property
    def memory_mb(self) -> int:
        return self.settings.memory_mb

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sandbox_mode(self) -> str | None:
        """``"bwrap"`` or ``"none"`` once a worker has started; None before."""
        pool = self._pool
        if pool is None:
            return None
        modes = {sandbox.mode for sandbox in pool.sandboxes if sandbox.mode}
        return modes.pop() if len(modes) == 1 else (None if not modes else "mixed")

    def _get_pool(self) -> _Pool:
        if self._closed:
            raise RuntimeError("this Grader is closed")
        with self._pool_lock:
            pool = self._pool
            if pool is not None and pool.pid != os.getpid():
                # We are a forked copy of the process that started the workers: start our own.
                pool = None
                with self._cache_lock:
                    self._inflight.clear()
            if pool is None:
                pool = _Pool(self.settings, self.workers)
                self._pool = pool
                if self._finalizer is not None:
                    self._finalizer.detach()
                self._finalizer = weakref.finalize(self, pool.close)
            pool.start()
            return pool

    def warm_up(self) -> Grader:
        """Start every worker now and wait until they are ready (otherwise done on first use)."""
        self._check_allowed()
        pool = self._get_pool()
        pool.start(wait=True)
        return self

    def close(self) -> None:
        """Stop every worker process. Idempotent."""
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        if self._finalizer is not None:
            self._finalizer.detach()

    def __reduce__(self) -> tuple:
        """Pickle (or deep-copy) the configuration only: the copy starts its own workers on use."""
        settings = dataclasses.asdict(self.settings)
        timeout_s, memory_mb = settings.pop("timeout_s"), settings.pop("memory_mb")
        settings["hide_paths"], settings["preload"] = tuple(settings["hide_paths"]), tuple(settings["preload"])
        disk = self.reference_disk_cache
        options = {
            "answer_budget_s": self.answer_budget_s,
            "reference_cache_size": self.reference_cache_size,
            "reference_disk_cache": str(disk.folder) if disk is not None else False,
            "reference_batch_size": self.reference_batch_size,
            **settings,
        }
        return (_rebuild_grader, (self.workers, timeout_s, memory_mb, self.allow_code_execution, options))

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_allowed(self) -> None:
        if not execution_allowed(self.allow_code_execution):
            raise CodeExecutionDisabled(_DISABLED_MESSAGE)

    # -- grading -----------------------------------------------------------------------------
    def grade(self, candidate_code: str, reference_code: str, test_calls: Mapping[str, str], *,
              budget_s: float | None = None) -> GradeResult:
        """Grade one answer. Never raises for a bad answer; raises for bad arguments.

        ``budget_s``: this answer's grading budget (default: the grader's ``answer_budget_s``).
        """
        return self.grade_many([(candidate_code, reference_code, test_calls)], budget_s=budget_s)[0]

    def grade_many(self, items: Iterable[tuple[str, str, Mapping[str, str]]], *,
                   budget_s: float | None = None) -> list[GradeResult]:
        """Grade many answers concurrently over all workers; results in input order.

        ``budget_s``: the grading budget of each answer (default: the grader's ``answer_budget_s``).
        """
        self._check_allowed()
        budget = self.answer_budget_s if budget_s is None else _check_budget(budget_s, "budget_s")
        prepared = [self._prepare(item, index) for index, item in enumerate(items)]
        if not prepared:
            return []
        pool = self._get_pool()
        reference_slots = self._schedule_references(pool, prepared)
        job_budget = None if math.isinf(budget) else budget
        candidate_futures = [
            pool.submit([(p.candidate, list(p.reference_run_key[1]))], job_budget) if not p.error else None
            for p in prepared
        ]
        results = []
        for index, p in enumerate(prepared):
            future = candidate_futures[index]
            report = future.result()[0] if future is not None else RunReport([], budget_s=job_budget)
            valid_references = iter(self._reference_outcomes(reference_slots, p))
            references = [next(valid_references) if ok else None for ok in p.valid]
            results.append(self._assemble(p, references, report))
        return results

    def _prepare(self, item: Any, index: int) -> _Prepared:
        try:
            candidate, reference, tests = item
        except (TypeError, ValueError):
            raise TypeError(f"item {index}: expected (candidate_code, reference_code, test_calls)") from None
        for label, value in (("candidate_code", candidate), ("reference_code", reference)):
            if not isinstance(value, str):
                raise TypeError(f"item {index}: {label} must be a str, got {type(value).__name__}")
        if not isinstance(tests, Mapping):
            raise TypeError(f"item {index}: test_calls must be a mapping name -> call, got {type(tests).__name__}")
        names, calls, valid = [], [], []
        for name, call in tests.items():
            if not isinstance(call, str):
                raise TypeError(f"item {index}: test {name!r} must be a str call expression")
            names.append(str(name))
            calls.append(call)
            valid.append(_is_expression(call))
        error = ""
        if not names:
            error = "no test calls"
        elif len(candidate.encode("utf-8", "surrogatepass")) > MAX_CODE_BYTES:
            error = f"answer longer than {MAX_CODE_BYTES} bytes"
        key = hashlib.sha256(reference.encode("utf-8", "surrogatepass")).hexdigest()
        return _Prepared(candidate, key, reference, names, calls, valid, error)

    def _schedule_references(self, pool: _Pool, prepared: list[_Prepared]) -> dict[tuple[str, tuple[str, ...]], Any]:
        """Find cached reference outputs, join runs already in flight, start the missing ones.

        The key is the reference and its whole ordered list of calls: as in ColBench, every call
        is evaluated in the namespace the previous ones left, so an output depends on the calls
        before it (a reference with state gives 1, 2, 3 for three identical calls). Missing
        references are run in batches of ``reference_batch_size`` (one child per batch, a fresh
        namespace per reference; one reference per child by default), spread over the workers.
        Before a reference is run, the disk cache is asked (outside the lock: reading and decoding
        an entry takes a while); a run it answers is never started.
        """
        slots: dict[tuple[str, tuple[str, ...]], Any] = {}
        missing = self._find_references(prepared, slots)
        disk = self.reference_disk_cache
        environment = self._environment(pool) if missing and disk is not None else None
        disk_keys: dict[tuple[str, tuple[str, ...]], str] = {}
        if environment is not None:
            assert disk is not None
            found: dict[tuple[str, tuple[str, ...]], list[Outcome]] = {}
            for key, reference in missing.items():
                disk_keys[key] = disk.key(environment, reference, key[1])
                outcomes = disk.load(disk_keys[key], len(key[1]))
                if outcomes is not None:
                    found[key] = outcomes
            if found:
                with self._cache_lock:
                    for key, outcomes in found.items():
                        self._remember(key, outcomes)
                        slots[key] = outcomes
                missing = {key: reference for key, reference in missing.items() if key not in found}
        if not missing:
            return slots
        with self._cache_lock:
            # Another thread may have found or started one of them meanwhile.
            missing = self._find_references([], slots, missing)
            if not missing:
                return slots
            batches = list(missing.items())
            size = max(1, min(self.reference_batch_size, -(-len(batches) // pool.workers)))
            for begin in range(0, len(batches), size):
                batch = batches[begin : begin + size]
                future = pool.submit([(reference, list(key[1])) for key, reference in batch])
                self._reference_runs += len(batch)
                keys = [(key, disk_keys.get(key)) for key, _ in batch]
                for position, (key, _) in enumerate(keys):
                    self._inflight[key] = slots[key] = (future, position)
                future.add_done_callback(lambda f, k=keys: self._store_references(k, f))
        return slots

    def _find_references(
        self,
        prepared: list[_Prepared],
        slots: dict[tuple[str, tuple[str, ...]], Any],
        wanted: dict[tuple[str, tuple[str, ...]], str] | None = None,
    ) -> dict[tuple[str, tuple[str, ...]], str]:
        """Fill ``slots`` from the memory cache and the runs in flight, for the answers'
        references (or the ``wanted`` ones); return the rest, ``{run key: reference}``."""
        if wanted is None:
            wanted = {}
            for p in prepared:
                key = p.reference_run_key
                if not p.error and key[1] and key not in slots:
                    wanted.setdefault(key, p.reference)
        missing = {}
        with self._cache_lock:
            for key, reference in wanted.items():
                cached = self._cache.get(key)
                if cached is not None:
                    self._cache.move_to_end(key)
                    slots[key] = cached
                elif key in self._inflight:
                    slots[key] = self._inflight[key]
                else:
                    missing[key] = reference
        return missing

    def _environment(self, pool: _Pool) -> str | None:
        """What every reference output depends on besides the reference and its calls (the disk
        cache's key): the grader's version, the sandbox's interpreter and its mode and limits, and
        how many references share a child. Known once a fork server has started (None until then,
        and always without a sandbox: the disk is not used)."""
        if self._disk_environment is None:
            identity = pool.sandbox_identity()
            if identity is None:
                return None
            hello, mode = identity
            if mode == "none":  # answers run unconfined there: they could forge entries later runs would trust
                return None
            from colbench_gym import __version__

            settings = dataclasses.asdict(self.settings)
            for name in ("timeout_s", "python"):  # the interpreter is named by what it says it is
                settings.pop(name)
            settings["hide_paths"], settings["preload"] = list(settings["hide_paths"]), list(settings["preload"])
            described = {
                "grader": [__version__, hashlib.sha256(_SERVER_SOURCE.encode("utf-8")).hexdigest()],
                "interpreter": [hello.get("version") or hello.get("python"), hello.get("magic")],
                "sandbox": [mode, settings],
                # references batched in one child share its module state: their outputs are not a lone run's
                "reference_batch_size": self.reference_batch_size,
            }
            self._disk_environment = json.dumps(described, sort_keys=True)
        return self._disk_environment

    def _remember(self, key: tuple[str, tuple[str, ...]], outcomes: list[Outcome]) -> None:
        """Keep a reference run in memory (the caller holds the cache lock)."""
        self._cache[key] = outcomes
        self._cache.move_to_end(key)
        while len(self._cache) > self.reference_cache_size:
            self._cache.popitem(last=False)

    def _store_references(self, keys: list[tuple[tuple[str, tuple[str, ...]], str | None]],
                          future: concurrent.futures.Future) -> None:
        reports: list[RunReport] = future.result()
        stored = []
        with self._cache_lock:
            for (key, disk_key), report in zip(keys, reports):
                slot = self._inflight.get(key)
                if slot is not None and slot[0] is future:
                    del self._inflight[key]
                # Only deterministic outcomes are cached; a timeout may be the machine's load.
                if all(outcome.kind in ("value", "error", "unserializable") for outcome in report.outcomes):
                    # In memory without the values' encoded form, which only the disk needs.
                    self._remember(key, [Outcome(o.kind, o.value, o.detail) for o in report.outcomes])
                    if disk_key is not None:
                        stored.append((disk_key, report.outcomes))
        disk = self.reference_disk_cache
        if disk is not None:
            for disk_key, outcomes in stored:
                disk.store(disk_key, outcomes)

    @staticmethod
    def _reference_outcomes(slots: dict[tuple[str, tuple[str, ...]], Any], p: _Prepared) -> list[Outcome]:
        slot = slots.get(p.reference_run_key)
        if slot is None:
            return []
        if isinstance(slot, list):
            outcomes = slot
        else:
            future, position = slot
            reports = future.result()
            outcomes = reports[position].outcomes if position < len(reports) else []
        missing = len(p.reference_run_key[1]) - len(outcomes)
        return outcomes + [Outcome("infra", detail="reference result missing")] * max(0, missing)

    def _assemble(self, p: _Prepared, references: list[Outcome | None], report: RunReport) -> GradeResult:
        if p.error:
            tests = [TestResult(name, TestStatus.ERROR, p.error) for name in p.names]
            return GradeResult.from_tests(tests, error=p.error, budget_s=report.budget_s)
        candidate_outcomes = iter(report.outcomes)
        tests = []
        for name, call, ok, reference in zip(p.names, p.calls, p.valid, references):
            if not ok or reference is None:
                detail = "test call is not a valid Python expression"
                tests.append(TestResult(name, TestStatus.REFERENCE_INVALID, detail))
                continue
            candidate = next(candidate_outcomes, None) or Outcome("infra", detail="candidate result missing")
            tests.append(TestResult(name, *_judge(reference, candidate)))
        return GradeResult.from_tests(
            tests, output=report.output, elapsed_s=report.elapsed_s, budget_s=report.budget_s,
            spent_s=report.spent_s, out_of_budget=bool(report.out_of_budget), tests_cut=report.cut,
        )

    # -- introspection -----------------------------------------------------------------------
    def cache_info(self) -> dict[str, int]:
        """Reference cache size, runs in flight, and reference runs started so far; from the disk
        cache, runs read (``disk_hits``), written (``disk_writes``) and damaged entries found
        (``disk_corrupt``, each then run again), all 0 when it is off."""
        disk = self.reference_disk_cache
        with self._cache_lock:
            return {
                "entries": len(self._cache),
                "in_flight": len(self._inflight),
                "max_entries": self.reference_cache_size,
                "reference_runs": self._reference_runs,
                "disk_hits": disk.hits if disk is not None else 0,
                "disk_writes": disk.writes if disk is not None else 0,
                "disk_corrupt": disk.corrupt if disk is not None else 0,
            }

    def worker_cpu_seconds(self) -> float:
        """CPU time used so far by the worker processes (fork servers and all their children)."""
        pool = self._pool
        return sum(sandbox.cpu_seconds() for sandbox in pool.sandboxes) if pool is not None else 0.0

    def cpu_breakdown(self) -> dict[str, float]:
        """Where the sandbox's CPU time has gone so far, summed over the workers, in seconds.

        ``children`` (count) and ``cleaned`` (how many of them left something the server had to
        remove); ``fork_s`` the servers' time in ``fork()``; ``child_s`` the children's own time
        (defining the code, the test calls, encoding, exiting); ``clean_s`` the servers' clean-up
        after each child, reaping included; ``server_other_s`` the rest of the servers' time
        (waiting on the child, reading commands, sending exit records); ``supervise_s`` the
        grader's worker threads (payloads, pipes, reading and decoding frames, deadlines);
        ``minor_faults`` the children's page faults. Server totals come from ``/proc`` in clock
        ticks; the rest is exact.
        """
        pool = self._pool
        totals: dict[str, float] = dict.fromkeys(
            ("children", "cleaned", "fork_s", "child_s", "clean_s", "server_other_s", "supervise_s", "minor_faults"), 0
        )
        if pool is None:
            return totals
        for sandbox in pool.sandboxes:
            for key, value in sandbox.stats.items():
                totals[key] += value
            totals["server_other_s"] += sandbox.cpu_times()[0]
        totals["server_other_s"] = max(0.0, totals["server_other_s"] - totals["fork_s"] - totals["clean_s"])
        return totals

    def clear_cache(self) -> None:
        """Empty the memory cache (the disk cache stays: delete its folder to drop it)."""
        with self._cache_lock:
            self._cache.clear()


def _check_budget(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds (math.inf: no budget), got {value!r}")
    if not value > 0:  # NaN too
        raise ValueError(f"{name} must be positive (math.inf: no budget), got {value!r}")
    return float(value)


def _rebuild_grader(
    workers: int, timeout_s: float, memory_mb: int, allow_code_execution: bool, options: dict[str, Any]
) -> Grader:
    return Grader(workers, timeout_s, memory_mb, allow_code_execution, **options)


@functools.lru_cache(maxsize=1 << 16)
def _is_expression(call: str) -> bool:
    """Whether a test call parses as an expression (cached: a task's calls are checked once for all
    its answers, not once per answer)."""
    try:
        ast.parse(call, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


_CANDIDATE_STATUS = {
    "error": TestStatus.ERROR,
    "memory": TestStatus.MEMORY,
    "timeout": TestStatus.TIMEOUT,
    "output_limit": TestStatus.OUTPUT_LIMIT,
    "crashed": TestStatus.CRASHED,
    "infra": TestStatus.INFRA_ERROR,
}


def _judge(reference: Outcome, candidate: Outcome) -> tuple[TestStatus, str]:
    if reference.kind == "infra":
        return TestStatus.INFRA_ERROR, f"reference could not be run: {reference.detail}"
    if reference.kind != "value":
        return TestStatus.REFERENCE_INVALID, f"reference {reference.kind}: {reference.detail}"[:500]
    if reference.value is None:
        return TestStatus.REFERENCE_INVALID, "reference output is None"
    if candidate.kind == "value":
        if values_equal(reference.value, candidate.value):
            return TestStatus.PASSED, ""
        return TestStatus.WRONG, f"returned {short_repr(candidate.value)}"
    if candidate.kind == "unserializable":
        return TestStatus.WRONG, f"return value cannot be compared: {candidate.detail}"
    return _CANDIDATE_STATUS.get(candidate.kind, TestStatus.CRASHED), candidate.detail


# ------------------------------------------------------------------------------------------------
# Process-wide shared grader
# ------------------------------------------------------------------------------------------------

_defaults: dict[tuple, Grader] = {}
_defaults_lock = threading.Lock()


def default_grader(**kwargs: Any) -> Grader:
    """A process-wide, shared, warm :class:`Grader` with code execution enabled.

    The ColBench environments use it (and document that they execute answers by default). Calls
    with the same keyword arguments share one instance; it is closed at interpreter exit.
    """
    kwargs.setdefault("allow_code_execution", True)
    key = tuple(sorted((name, repr(value)) for name, value in kwargs.items()))
    with _defaults_lock:
        grader = _defaults.get(key)
        if grader is None or grader.closed:
            grader = Grader(**kwargs)
            _defaults[key] = grader
            if grader.allow_code_execution:
                grader._get_pool()  # start the workers in the background: warm by first use
        return grader


@atexit.register
def _close_defaults() -> None:
    with _defaults_lock:
        graders = list(_defaults.values())
        _defaults.clear()
    for grader in graders:
        grader.close()
