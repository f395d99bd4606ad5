"""Throughput of the sandboxed backend grader against the original in-process scorer.

    python benchmarks/grader.py                          # 200 real rows, workers = CPU count
    python benchmarks/grader.py --workers 2 --repeat 3   # best of 3 runs
    taskset -c 0,1 python benchmarks/grader.py           # pin to 2 cores
    python benchmarks/grader.py --json results.json

Each of the 200 backend tasks in ``../shared/colbench-data/backend_dev.jsonl`` is answered twice:
with its own reference (all tests pass) and with a mutant of it (one constant changed, usually
wrong). Both graders score the same 400 answers:

(a) baseline -- the original unsafe method, re-implemented here: ``exec`` the reference and the
    answer in this process, ``eval`` every test call in each under ``signal.alarm(1)``, compare
    with ``==``;
(b) the sandboxed :class:`colbench_gym.execution.Grader`, all protections on, over a warm pool
    of fork servers, with an empty reference cache (each reference computed once per run);
(c) the same grader again with the reference cache already filled (steady state of training,
    where the same tasks are graded over and over).

It prints answers/second for each, the ratios (b)/(a) and (c)/(a), how many per-answer scores
differ between (a) and (b), and the CPU time per answer of each (this process plus, for the
sandbox, the worker processes and their children): unlike wall-clock time, that does not depend on
what else runs on the machine, and ``cores x CPU(a) / CPU(b)`` is the best ratio the cores allow.

Where the sandbox's time goes: an answer in-process costs well under a millisecond of CPU. In the
sandbox it costs a fork of the warm server, a few hundred copy-on-write page faults as the child
runs Python (each page the interpreter writes is copied; expensive in virtual machines), the
child's exit, the server's clean-up and the grader's supervision. Batching every test of an answer
into one child, batching references, caching their outputs, pipelining jobs per worker and running
workers on all cores are what bring it back within a small factor of the unsafe baseline.

It also measures the floor of any design that gives each answer a fresh process: a bare warm
interpreter that forks a child per answer, which runs the answer and exits (no sandbox, limits,
reference or supervision), and the best ratio that floor would allow on the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from colbench_gym.execution import Grader
from colbench_gym.execution.mutation import constant_mutants

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "colbench-data" / "backend_dev.jsonl"


class _Alarm(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Alarm()


def baseline_score(answer: str, reference: str, tests: dict[str, str]) -> float:
    """The original scorer: in-process exec/eval, one-second alarm per call, ``==``."""
    reference_ns: dict = {}
    answer_ns: dict = {}
    try:
        exec(reference, reference_ns)
    except Exception:  # noqa: BLE001
        return 0.0
    try:
        exec(answer, answer_ns)
    except Exception:  # noqa: BLE001
        return 0.0
    passed = 0
    for call in tests.values():
        try:
            signal.alarm(1)
            expected = eval(call, reference_ns)
            signal.alarm(0)
        except BaseException:  # noqa: BLE001
            signal.alarm(0)
            continue
        if expected is None:
            continue
        try:
            signal.alarm(1)
            got = eval(call, answer_ns)
            signal.alarm(0)
        except BaseException:  # noqa: BLE001
            signal.alarm(0)
            continue
        try:
            if expected == got:
                passed += 1
        except Exception:  # noqa: BLE001
            pass
    return passed / len(tests) if tests else 0.0


def load_items(path: Path, limit: int | None) -> list[tuple[str, str, dict[str, str]]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if limit:
        rows = rows[:limit]
    items = []
    for row in rows:
        reference, tests = row["ground_truth"], row["test_cases"]
        mutants = constant_mutants(reference, limit=1)
        items.append((reference, reference, tests))
        items.append((mutants[0] if mutants else reference + "\n_unused = 1\n", reference, tests))
    return items


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_baseline(items) -> tuple[float, float, list[float]]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    devnull = open(os.devnull, "w")
    stdout = sys.stdout
    try:
        sys.stdout = devnull  # answers may print; the sandbox discards output too
        start, cpu = time.perf_counter(), _self_cpu()
        scores = [baseline_score(answer, reference, tests) for answer, reference, tests in items]
        elapsed, cpu = time.perf_counter() - start, _self_cpu() - cpu
    finally:
        sys.stdout = stdout
        devnull.close()
        signal.signal(signal.SIGALRM, previous)
    return elapsed, cpu, scores


# The cheapest possible design with a fresh process per answer, as a bound for every real one: a bare
# warm interpreter (no site, no project imports; the modules answers import most already loaded, as in
# the sandbox's server) forks a child per answer, the child runs the answer and its test calls and
# exits -- no limits, no sandbox, no reference, no result sent back, no supervision.
_FRESH_PROCESS_FLOOR = """
import gc, json, os, resource, sys
import bisect, collections, copy, datetime, decimal, fractions, functools, heapq, itertools, math, operator, re
import string, typing
def cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
answers = json.load(open(sys.argv[1]))
sys.stdout = open(os.devnull, "w")
gc.collect(); gc.freeze()
start = cpu()
for code, calls in answers:
    pid = os.fork()
    if pid == 0:
        try:
            namespace = {}
            exec(code, namespace)
            for call in calls:
                try:
                    eval(call, namespace)
                except BaseException:
                    pass
        except BaseException:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
sys.__stdout__.write(repr((cpu() - start) / len(answers)))
"""


def fresh_process_floor_ms(items) -> float:
    """CPU milliseconds per answer of :data:`_FRESH_PROCESS_FLOOR` on these answers (best of three runs)."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump([(answer, list(tests.values())) for answer, _, tests in items], handle)
        handle.flush()
        runs = [
            float(subprocess.run([sys.executable, "-S", "-s", "-c", _FRESH_PROCESS_FLOOR, handle.name], check=True,
                                 capture_output=True, text=True, timeout=600).stdout)
            for _ in range(3)
        ]
    return 1000 * min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workers", type=int, default=None, help="sandboxes at once (default: CPU count)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N tasks")
    parser.add_argument("--timeout", type=float, default=1.0, help="per-test timeout of the sandbox (s)")
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    if not args.data.exists():
        sys.exit(f"no ColBench rows at {args.data} (pass --data)")
    items = load_items(args.data, args.limit)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = args.workers or cpus

    baseline_times, baseline_cpus = [], []
    for _ in range(args.repeat):
        elapsed, cpu, baseline_scores = run_baseline(items)
        baseline_times.append(elapsed)
        baseline_cpus.append(cpu)

    cold_times, warm_times, startup_times, cold_cpus, warm_cpus = [], [], [], [], []
    sandbox_scores: list[float] = []
    mode = None
    for _ in range(args.repeat):
        start = time.perf_counter()
        grader = Grader(workers=workers, timeout_s=args.timeout, allow_code_execution=True, sandbox=args.sandbox)
        grader.warm_up()
        startup_times.append(time.perf_counter() - start)
        mode = grader.sandbox_mode
        try:
            # CPU of this process (the grader's threads) plus the worker processes and children.
            start, cpu = time.perf_counter(), _self_cpu() + grader.worker_cpu_seconds()
            results = grader.grade_many(items)
            cold_times.append(time.perf_counter() - start)
            cold_cpus.append(_self_cpu() + grader.worker_cpu_seconds() - cpu)
            start, cpu = time.perf_counter(), _self_cpu() + grader.worker_cpu_seconds()
            grader.grade_many(items)
            warm_times.append(time.perf_counter() - start)
            warm_cpus.append(_self_cpu() + grader.worker_cpu_seconds() - cpu)
        finally:
            grader.close()
        sandbox_scores = [r.score for r in results]
        if any(r.infra_error for r in results):
            print("warning: infrastructure errors:", sum(r.infra_error for r in results), file=sys.stderr)

    n = len(items)
    baseline_rate = n / min(baseline_times)
    cold_rate = n / min(cold_times)
    warm_rate = n / min(warm_times)
    mismatches = sum(abs(a - b) > 1e-9 for a, b in zip(baseline_scores, sandbox_scores))
    per_answer_ms = {
        "baseline": 1000 * min(baseline_cpus) / n,
        "sandbox": 1000 * min(cold_cpus) / n,
        "sandbox_cached_reference": 1000 * min(warm_cpus) / n,
    }
    # The best wall-clock ratio these CPU costs allow: the baseline uses one core, we use them all.
    cpu_bound_ratio = cpus * per_answer_ms["baseline"] / per_answer_ms["sandbox"]
    # No design that runs each answer in a fresh forked process can beat the bare floor.
    floor_ms = fresh_process_floor_ms(items)
    fresh_process_bound = cpus * per_answer_ms["baseline"] / floor_ms
    cpu_bound_ratio_cached = cpus * per_answer_ms["baseline"] / per_answer_ms["sandbox_cached_reference"]
    numbers = {
        "answers": n,
        "tasks": n // 2,
        "cpus": cpus,
        "workers": workers,
        "sandbox": mode,
        "baseline_answers_per_s": round(baseline_rate, 1),
        "sandbox_answers_per_s": round(cold_rate, 1),
        "sandbox_cached_reference_answers_per_s": round(warm_rate, 1),
        "ratio": round(cold_rate / baseline_rate, 3),
        "ratio_cached_reference": round(warm_rate / baseline_rate, 3),
        "cpu_ms_per_answer": {k: round(v, 3) for k, v in per_answer_ms.items()},
        "cpu_bound_ratio": round(cpu_bound_ratio, 3),
        "cpu_bound_ratio_cached_reference": round(cpu_bound_ratio_cached, 3),
        "fresh_process_floor_cpu_ms_per_answer": round(floor_ms, 3),
        "fresh_process_per_answer_bound": round(fresh_process_bound, 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "pool_startup_s": round(min(startup_times), 3),
        "score_mismatches": mismatches,
        "mean_score_baseline": round(sum(baseline_scores) / n, 4),
        "mean_score_sandbox": round(sum(sandbox_scores) / n, 4),
    }
    print(f"{n} answers ({n // 2} tasks x reference + mutant), {cpus} CPUs, {workers} workers, sandbox={mode}")
    print(f"(a) in-process exec/eval + alarm : {baseline_rate:8.1f} answers/s")
    print(f"(b) sandboxed grader            : {cold_rate:8.1f} answers/s   (b)/(a) = {cold_rate / baseline_rate:.2f}")
    print(f"(c) sandboxed, cached references: {warm_rate:8.1f} answers/s   (c)/(a) = {warm_rate / baseline_rate:.2f}")
    print(
        f"CPU per answer: (a) {per_answer_ms['baseline']:.3f} ms, (b) {per_answer_ms['sandbox']:.3f} ms, "
        f"(c) {per_answer_ms['sandbox_cached_reference']:.3f} ms -> best ratio {cpus} cores allow: "
        f"(b) {cpu_bound_ratio:.2f}, (c) {cpu_bound_ratio_cached:.2f}"
    )
    print(
        f"floor of a fresh process per answer (bare interpreter forks, child runs the answer, no sandbox): "
        f"{floor_ms:.3f} ms CPU per answer -> any such design: at most {fresh_process_bound:.2f}x on {cpus} cores"
    )
    print(
        f"pool start-up {min(startup_times):.3f} s (not in (b)/(c)); per-answer score mismatches (a) vs (b): "
        f"{mismatches}; load average {os.getloadavg()[0]:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")


if __name__ == "__main__":
    main()
