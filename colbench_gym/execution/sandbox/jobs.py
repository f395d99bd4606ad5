"""The supervision pipeline of jobs on one fork server: sending each child its payload, reading its
results and output, deadlines and kills, and turning what it reported into outcomes."""

from __future__ import annotations

import collections
import fcntl
import marshal
import math
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from colbench_gym.execution.codec import FrameReader, ProtocolError, decode_value
from colbench_gym.execution.sandbox.protocol import _MESSAGE, _compiled, _compiled_call
from colbench_gym.execution.sandbox.settings import Outcome, RunReport, SandboxSettings, SandboxStartError

if TYPE_CHECKING:
    from colbench_gym.execution.sandbox.server import SandboxProcess

_KILL_GRACE_S = 5.0
_EXIT_GRACE_S = 2.0


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
    """One job: its units, and their outcomes so far over however many children it takes.

    With a budget (``budget_s``), the wall-clock time its children run (``spent_s``) and their CPU
    time (``cpu_s``, known as each exits) count against it; once either reaches it, the test
    running is stopped and the rest are not run (``out_of_budget``: ``"wall"`` or ``"cpu"``;
    ``cut``: the tests that decided)."""

    token: Any
    units: list[tuple[str, list[str]]]
    results: list[list[Outcome]]
    started: float
    output: bytearray = field(default_factory=bytearray)
    restarts: int = 0
    budget_s: float | None = None
    spent_s: float = 0.0
    cpu_s: float = 0.0
    out_of_budget: str = ""
    cut: int = 0

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
    # The pipeline's bookkeeping (see JobPipeline.serve).
    run: Any = None
    slots: list[tuple[int, int]] = field(default_factory=list)  # (unit of the run, its tests done before)
    job: int = 0
    reader: FrameReader | None = None
    payload: memoryview | None = None
    payload_w: int = -1
    result_r: int = -1
    output_r: int = -1
    begun: bool = False  # the server is on it (every attempt sent before it has exited)
    begun_at: float = 0.0
    deadline: float = float("inf")
    budget_deadline: float = float("inf")  # when its run's wall-clock budget runs out
    cpu_budget: int = 0  # the RLIMIT_CPU its run's budget set (whole seconds; 0: none)
    cpu_s: float = 0.0  # its child's CPU time, from the exit record
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


class JobPipeline:
    """The grader's side of running jobs on one fork server (:meth:`serve`): the ``jobs`` of a
    :class:`~colbench_gym.execution.sandbox.server.SandboxProcess`.

    The process owns the server (``alive``, ``start``, ``stop``, ``ctl``, ``_request_kill``,
    ``_read_control``, ``server_protected``), how code travels to it (``_ship_code``,
    ``_nonce_key``) and the CPU counters (``stats``). The pipeline owns the children handed to
    the server (``flight``, in the server's order), which end with it (:meth:`abandon`).
    """

    def __init__(self, process: SandboxProcess) -> None:
        self.process = process
        # The first is the child the server is on; it may have reported everything already (its
        # exit record is still to come). See serve().
        self.flight: collections.deque[_Attempt] = collections.deque()
        self._job = 0
        self._cpu_mark = 0.0

    @property
    def settings(self) -> SandboxSettings:
        return self.process.settings

    def abandon(self) -> None:
        """The server is going away: every child in flight goes with it."""
        for attempt in self.flight:
            self._close_attempt(attempt)
        self.flight.clear()

    # -- running code ------------------------------------------------------------------------
    def run(self, code: str, calls: list[str], budget_s: float | None = None) -> RunReport:
        """Define ``code`` in a fresh child and evaluate every call in its namespace."""
        return self.run_units([(code, calls)], budget_s)[0]

    def run_units(self, units: list[tuple[str, list[str]]], budget_s: float | None = None) -> list[RunReport]:
        """Run each unit ``(code, calls)`` -- a fresh namespace per unit, its calls in order.

        All units go to one child (a batch of references); an answer is always a unit of its own.
        A test that hangs or kills its process is recorded, and the remaining tests resume in a
        fresh child, so each test gets its own time limit and its own chance, within ``budget_s``
        over them all (see :meth:`serve`).
        """
        jobs: list[tuple[Any, list[tuple[str, list[str]]], float | None]] = [(None, units, budget_s)]
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

        ``source(block)`` returns ``(token, units)`` (a job: what :meth:`run_units` takes) or
        ``(token, units, budget_s)``, None when nothing is waiting (only asked with
        ``block=False``), or :data:`STOP`. A job's budget (seconds, None: none) bounds the
        wall-clock time of all its children together (queueing not counted) and their CPU time
        (each child's ``RLIMIT_CPU`` is what is left, in whole seconds): when it runs out, the test
        running fails as a ``timeout`` and the ones after it are not run (see :class:`RunReport`).

        The server is kept fed: the next job is sent while a child runs (at most
        ``_PIPELINE_DEPTH`` in flight), so it forks the next child the moment it has cleaned up
        after the last, without waiting for the grader. A running child's result pipe is read
        when its exit record arrives, and meanwhile every ``observe period`` (see
        :func:`_observe_period`) -- not on every frame: a child's frames then wake nobody, and a
        fast child is read once. Deadlines hold to within that period. Output is read as it comes.
        """
        self._cpu_mark = time.thread_time()
        waiting: collections.deque[_Run] = collections.deque()  # runs that need (another) child
        flight = self.flight
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
                            token, units, *budget = job
                            run = _Run(token, units, [[] for _ in units], time.monotonic(),
                                       budget_s=budget[0] if budget else None)
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
                    self.process.stop()
                    for run in runs:
                        for u, done in run.pending():
                            run.results[u] += [Outcome("infra", detail=detail)] * (len(run.units[u][1]) - done)
                        self._deliver(run, deliver)
        finally:
            self._count_cpu()

    # -- the pipeline's steps ------------------------------------------------------------------
    def _count_cpu(self) -> None:
        now = time.thread_time()
        self.process.stats["supervise_s"] += now - self._cpu_mark
        self._cpu_mark = now

    def _deliver(self, run: _Run, deliver: Callable[[Any, list[RunReport]], None]) -> None:
        text = run.output.decode("utf-8", "replace")
        elapsed = time.monotonic() - run.started
        self._count_cpu()
        deliver(run.token, [
            RunReport(outcomes, text, elapsed, run.budget_s, run.spent_s, run.out_of_budget, run.cut)
            for outcomes in run.results
        ])

    def _send(self, run: _Run, flight: collections.deque[_Attempt], waiting: collections.deque[_Run],
              deliver: Callable[[Any, list[RunReport]], None]) -> None:
        """Hand the run's remaining tests to the server as one child (started at once if the server
        is idle, else queued there behind the child it is running)."""
        pending = run.pending()
        if not self.process.alive:
            if not all(attempt.settled for attempt in flight):
                self._server_gone(flight, waiting, deliver, "died")
            self.process.stop()
            try:
                self.process.start()
            except SandboxStartError as err:
                failure = Outcome("infra", detail=str(err)[:500])
                for u, done in pending:
                    run.results[u] += [failure] * (len(run.units[u][1]) - done)
                self._deliver(run, deliver)
                return
        assert self.process.ctl is not None
        self._job += 1
        job = self._job
        nonce = self.process._nonce_key + job.to_bytes(8, "little")  # fresh for every run of this server
        units = [(run.units[u][0], run.units[u][1][done:]) for u, done in pending]
        # RLIMIT_CPU counts whole seconds: what is left of the budget, rounded up.
        cpu_budget = 0 if run.budget_s is None else max(1, math.ceil(run.budget_s - run.cpu_s))
        if self.process._ship_code:
            shipped = [(_compiled(code), [_compiled_call(c) for c in calls]) for code, calls in units]
        else:
            shipped = [(code, list(calls)) for code, calls in units]
        body = marshal.dumps((nonce, shipped, cpu_budget))
        payload = len(body).to_bytes(8, "little") + body
        attempt = _Attempt(outcomes=[[] for _ in units], sizes=[len(calls) for _, calls in units])
        attempt.cpu_budget = cpu_budget
        attempt.run, attempt.slots, attempt.job = run, pending, job
        attempt.reader = FrameReader(nonce, self.settings.max_result_bytes + 4096)
        payload_r, attempt.payload_w = os.pipe()
        attempt.result_r, result_w = os.pipe()
        attempt.output_r, output_w = os.pipe()
        try:
            socket.send_fds(self.process.ctl, [_MESSAGE.pack(b"r", job)], [payload_r, result_w, output_w])
        except OSError:  # the server died between jobs: this one never started
            attempt.not_started = True
        finally:
            for fd in (payload_r, result_w, output_w):
                os.close(fd)
        if attempt.not_started:
            run.restarts += 1
            self.process.stop()
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
        """The server is on this attempt from now on: every one sent before it has exited. Its
        run's budget (what its earlier children left of it) starts to run down now."""
        timeout = self.settings.timeout_s
        attempt.begun = True
        attempt.begun_at = now
        run = attempt.run
        if run is not None and run.budget_s is not None:
            attempt.budget_deadline = now + max(0.0, run.budget_s - run.spent_s)
        # The first unit's setup, plus the process start.
        attempt.deadline = min(now + timeout + max(1.0, timeout), attempt.budget_deadline)
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
        assert self.process.ctl is not None
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
        ctl_fd = self.process.ctl.fileno()
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
                message = self.process._read_control()
                if message is None:  # the server is gone
                    self._server_gone(flight, waiting, deliver, "died")
                    return
                if message.get("ev") == "exit" and message.get("job") == head.job:
                    head.cpu_s = message.get("cpu_s") or 0.0
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
                attempt.deadline = min(now + (_EXIT_GRACE_S if attempt.phase == "done" else timeout),
                                       attempt.budget_deadline)
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
        self.process._request_kill(attempt.job)

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
            if head.phase in ("setup", "tests"):
                self._kill(head, "budget" if now >= head.budget_deadline else "timeout")
            else:
                self._kill(head, "lingering")
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
        self.process.stop()
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
        if attempt.begun:
            run.spent_s += max(0.0, time.monotonic() - attempt.begun_at)
        run.cpu_s += attempt.cpu_s
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
            failed = left if attempt.in_setup else min(left, 1)
            run.results[u] += [attempt.failure] * failed
            if run.out_of_budget:  # the budget ran out in this child: it decided these tests
                run.cut += failed
            if run.restarts > 2:  # the server keeps dying: do not loop on it
                for v in range(len(run.units)):
                    run.results[v] += [attempt.failure] * (len(run.units[v][1]) - len(run.results[v]))
        if run.pending() and run.budget_s is not None:
            if not run.out_of_budget:
                run.out_of_budget = "wall" if run.spent_s >= run.budget_s else "cpu" if run.cpu_s >= run.budget_s else ""
            if run.out_of_budget:  # no further child: the tests left fail without running
                skipped = Outcome("timeout", detail=_budget_detail(run.budget_s, run.out_of_budget, None))
                for u, done in run.pending():
                    run.cut += len(run.units[u][1]) - done
                    run.results[u] += [skipped] * (len(run.units[u][1]) - done)
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
                done.append(Outcome("value", decode_value(body[2]), encoded=body[2]))
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
            outcome = Outcome("value", decode_value(body[2]), encoded=body[2])
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
        elif kill_reason == "budget":
            attempt.run.out_of_budget = "wall"
            attempt.failure = Outcome("timeout", detail=_budget_detail(attempt.run.budget_s, "wall", where))
        elif kill_reason == "output":
            attempt.failure = Outcome(
                "output_limit", detail=f"printed more than {self.settings.output_limit_bytes} bytes {where}"
            )
        elif attempt.server_died:
            attempt.failure = self._server_death_outcome(f"sandbox server died {where}")
        elif attempt.cpu_budget and _killed_at_cpu_limit(exit_status) and attempt.cpu_s >= attempt.cpu_budget - 0.05:
            # Its RLIMIT_CPU was what the budget left (SIGXCPU; SIGKILL at the hard limit if ignored).
            attempt.run.out_of_budget = "cpu"
            attempt.failure = Outcome("timeout", detail=_budget_detail(attempt.run.budget_s, "cpu", where))
        else:
            attempt.failure = _outcome_from_status(exit_status, where, attempt.child_started)

    def _server_death_outcome(self, detail: str) -> Outcome:
        return Outcome("infra" if self.process.server_protected else "crashed", detail=detail)


def _budget_detail(budget_s: float | None, limit: str, where: str | None) -> str:
    """Why a test failed on its answer's budget: it ran out ``where`` (None: before the test ran)."""
    what = "wall-clock time" if limit == "wall" else "CPU time"
    budget = f"the answer's grading budget ({budget_s:g} s of wall-clock and of CPU time over all its tests)"
    if where is None:
        return f"not run: {budget} was spent ({what})"
    return f"{budget} ran out {where} ({what})"


def _killed_at_cpu_limit(status: Any) -> bool:
    return isinstance(status, int) and os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)


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


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
