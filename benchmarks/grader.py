"""Throughput of the sandboxed backend grader against the original ColBench scorer's method.

    python benchmarks/grader.py                          # 200 real rows, workers = CPU count, 5 rounds
    python benchmarks/grader.py --workers 2 --repeat 7   # more rounds
    taskset -c 0,1 python benchmarks/grader.py           # pin to 2 cores
    python benchmarks/grader.py --json results.json

Each of the 200 backend tasks in ``../shared/colbench-data/backend_dev.jsonl`` is answered twice:
with its own reference (all tests pass) and with a mutant of it (one constant changed, usually
wrong). Every scorer below scores the same 400 answers, in the same run, round after round (each
round measures all four one after the other, so that they share the machine's load):

(a0) the anchor: the released ColBench scorer's *method*, re-implemented here (no code copied):
     for every test call, ``exec`` the reference and the answer afresh in this process and
     ``eval`` the call in each, under a one-second ``signal.alarm``; compare with ``==``. No
     isolation at all: this is what a user runs without this project.
(a)  the in-process floor: the same, but each code is ``exec``-ed once per answer and every call
     evaluated in that namespace (as ColBench's calls share one namespace). Cheaper than (a0),
     and still unsafe; no scorer that isolates answers can beat it.
(b)  the sandboxed :class:`colbench_gym.execution.Grader`, all protections on, over a warm pool
     of fork servers, with an empty reference cache: every reference is run once, in a child of
     its own (so 600 children for 400 answers);
(c)  the same grader again with the reference cache already filled (steady state of training,
     where the same tasks are graded over and over): one child per answer;
(d)  a fresh process with a new grader and the disk cache (b) left: a restarted run, which reads
     every reference's outputs from disk and runs none (one child per answer). Its start-up --
     the interpreter, imports, the pool -- is not counted, as for (b) and (c).

(b) writes a fresh, empty disk cache of its own each round (the cost of writing it is in (b)).

It prints answers/second for each (the best round), then on lines of their own::

    ratio vs original method: X        # (b) / (a0), median over the rounds of the paired ratios
    ratio vs in-process floor: Y       # (b) / (a)

and the same two for (c) and for (d), then the ratio by CPU time: ``cores x CPU(a0) / CPU(b)``, the best
wall-clock ratio the grader's CPU time allows on these cores (wall-clock ratios also depend on how
the machine's other load shares the cores between a one-process anchor and the grader's processes:
on a busy machine the grader's several processes get more of them); then how many per-answer
scores differ between (a) and (b)/(c) (must be 0); the CPU time per answer of each (this process plus, for the sandbox, the fork servers and all
their children) -- unlike wall-clock time it does not depend much on what else runs -- and where
the sandbox's CPU goes, per child:

- fork:        the fork server's time in ``fork()`` (copying its page tables);
- run:         the child's own time: set-up and limits, defining the code, the calls, encoding
               and writing results, copy-on-write page faults, exiting;
- clean-up:    the server's time after the child: reaping, the check of what it left, and
               removing it when there is something (how many children left something is shown);
- server rest: the rest of the server's time (waiting on the child, reading commands, sending
               exit records);
- supervision: the grader's worker threads (payload, pipes, reading and decoding results,
               deadlines, output limit);
- and, per answer, the rest of the grader's own time (preparing answers, comparing outputs).

``--looping`` measures instead what an answer that loops forever costs through
``gym.make("ColBench-Backend-v0")`` (the shared default grader: a 2 s timeout per test, one worker
per CPU) on a task of 10 tests, alone and 4 at once, with the default answer budget and without one
(``answer_budget_s=math.inf``, as before the budget), and prints the ratio.

It also measures the floor of any design that gives each answer a fresh process: a bare warm
interpreter that forks a child per answer, which runs the answer and exits (no sandbox, limits,
reference or supervision).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
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


def original_method_score(answer: str, reference: str, tests: dict[str, str]) -> float:
    """(a0) The released scorer's method: for each test call, a fresh ``exec`` of the reference
    and of the answer, the call ``eval``-ed in each, all under a one-second alarm; ``==``. A
    reference output of None (or one that raises) never passes."""
    passed = 0
    for call in tests.values():
        try:
            signal.alarm(1)
            try:
                reference_ns: dict = {}
                exec(reference, reference_ns)
                expected = eval(call, reference_ns)
                answer_ns: dict = {}
                exec(answer, answer_ns)
                got = eval(call, answer_ns)
            finally:
                signal.alarm(0)
        except BaseException:  # noqa: BLE001, S112 (the original counts a call that raises as failed and goes on)
            continue
        if expected is None:
            continue
        try:
            if expected == got:
                passed += 1
        except Exception:  # noqa: BLE001
            pass
    return passed / len(tests) if tests else 0.0


def baseline_score(answer: str, reference: str, tests: dict[str, str]) -> float:
    """(a) The in-process floor: one exec of each code, every call evaluated in its namespace
    under a one-second alarm, ``==``."""
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


def run_in_process(items, score) -> tuple[float, float, list[float]]:
    """Wall seconds, CPU seconds and scores of an in-process scorer over every item."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    devnull = open(os.devnull, "w")
    stdout = sys.stdout
    try:
        sys.stdout = devnull  # answers may print; the sandbox discards output too
        start, cpu = time.perf_counter(), _self_cpu()
        scores = [score(answer, reference, tests) for answer, reference, tests in items]
        elapsed, cpu = time.perf_counter() - start, _self_cpu() - cpu
    finally:
        sys.stdout = stdout
        devnull.close()
        signal.signal(signal.SIGALRM, previous)
    return elapsed, cpu, scores


def run_baseline(items) -> tuple[float, float, list[float]]:
    return run_in_process(items, baseline_score)


def run_grader(grader: Grader, items) -> tuple[float, float, list, dict[str, float]]:
    """Wall seconds, CPU seconds (this process, the servers and their children), results, and the
    change of the grader's CPU breakdown (plus ``process_s``: this process's own CPU time)."""
    before = grader.cpu_breakdown()
    start, own, workers = time.perf_counter(), _self_cpu(), grader.worker_cpu_seconds()
    results = grader.grade_many(items)
    elapsed = time.perf_counter() - start
    own, workers = _self_cpu() - own, grader.worker_cpu_seconds() - workers
    after = grader.cpu_breakdown()
    breakdown = {key: after[key] - before[key] for key in after}
    breakdown["process_s"] = own
    return elapsed, own + workers, results, breakdown


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


def fresh_process_run(args, cache_dir: str) -> dict:
    """(d) in a new interpreter: a new grader over ``cache_dir``; its wall and CPU time, scores, cache
    figures and CPU breakdown (see :func:`_fresh_process_main`)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--fresh-process-run", cache_dir, "--data", str(args.data),
               "--timeout", str(args.timeout), "--sandbox", args.sandbox, "--workers", str(args.workers or 0)]
    if args.limit:
        command += ["--limit", str(args.limit)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1200)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fresh_process_main(args) -> None:
    items = load_items(args.data, args.limit)
    workers = args.workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    with Grader(workers=workers, timeout_s=args.timeout, allow_code_execution=True, sandbox=args.sandbox,
                reference_disk_cache=args.fresh_process_run) as grader:
        grader.warm_up()
        elapsed, used, results, breakdown = run_grader(grader, items)
        info = grader.cache_info()
    print(json.dumps({"elapsed": elapsed, "cpu": used, "scores": [r.score for r in results],
                      "infra": sum(r.infra_error for r in results), "breakdown": breakdown,
                      "reference_runs": info["reference_runs"], "disk_hits": info["disk_hits"]}))


_LOOPING_ROW = {
    "task_id": "loop",
    "problem_description": "Scale a number. The signature of the function is: def scale(x)",
    "ground_truth": "def scale(x):\n    return x * 3\n",
    "hidden_information": "def scale(x):\n    return x * 3\n",
    "test_cases": {f"t{i}": f"scale({i})" for i in range(10)},
}
_LOOPING_ANSWER = "I WANT TO ANSWER:\ndef scale(x):\n    while True:\n        pass\n"


def looping_costs(at_once: int = 4) -> dict:
    """Seconds a looping answer takes through gym.make, alone and ``at_once`` together, with the default
    budget and with none; each answer's ``info["grader"]``."""
    import math
    import threading

    import gymnasium as gym

    import colbench_gym  # noqa: F401 (registers the ids)
    from colbench_gym.execution import default_grader
    from colbench_gym.simulators import ScriptedSimulator

    default_grader().warm_up()

    def play(budget: float | None, out: list, index: int) -> None:
        env = gym.make("ColBench-Backend-v0", tasks=[_LOOPING_ROW], simulator=ScriptedSimulator(["x3"]),
                       answer_budget_s=budget)
        env.reset(seed=0)
        started = time.perf_counter()
        info = env.step(_LOOPING_ANSWER)[4]
        out[index] = (time.perf_counter() - started, info["grader"])
        env.close()

    numbers = {}
    for label, budget in (("default budget", None), ("no budget", math.inf)):
        alone: list = [None]
        play(budget, alone, 0)
        together: list = [None] * at_once
        threads = [threading.Thread(target=play, args=(budget, together, i)) for i in range(at_once)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        numbers[label] = {"alone_s": alone[0][0], "alone_grader": alone[0][1], "together_wall_s": time.perf_counter() - started,
                          "together_each_s": [seconds for seconds, _ in together],
                          "together_grader": [grader for _, grader in together]}
    return numbers


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


def _per_child(breakdown: dict[str, float], answers: int) -> dict[str, float]:
    """Milliseconds per child of each part of the sandbox's CPU, and the grader's rest per answer."""
    children = max(1.0, breakdown["children"])
    parts = {
        "fork": breakdown["fork_s"],
        "run": breakdown["child_s"],
        "clean_up": breakdown["clean_s"],
        "server_rest": breakdown["server_other_s"],
        "supervision": breakdown["supervise_s"],
    }
    out = {name: round(1000 * value / children, 3) for name, value in parts.items()}
    out["total_per_child"] = round(sum(out.values()), 3)
    out["children"] = int(breakdown["children"])
    out["children_cleaned_up_after"] = int(breakdown["cleaned"])
    out["page_faults_per_child"] = round(breakdown["minor_faults"] / children, 1)
    out["grader_rest_per_answer"] = round(1000 * max(0.0, breakdown["process_s"] - breakdown["supervise_s"]) / answers, 3)
    return out


def _print_looping(numbers: dict, json_path: Path | None) -> None:
    budgeted, unlimited = numbers["default budget"], numbers["no budget"]
    grader = budgeted["alone_grader"]
    spent = [g["spent_s"] for g in budgeted["together_grader"]]
    print(f"a looping answer through gym.make, 10 tests, 2 s per test, {os.cpu_count()} workers, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"default budget ({grader['budget_s']:g} s): alone {budgeted['alone_s']:.2f} s (spent {grader['spent_s']:.2f} s, "
          f"{grader['tests_cut']} tests cut); 4 at once {budgeted['together_wall_s']:.2f} s wall, each "
          f"{min(budgeted['together_each_s']):.2f} to {max(budgeted['together_each_s']):.2f} s, spent "
          f"{min(spent):.2f} to {max(spent):.2f} s")
    print(f"no budget (as before): alone {unlimited['alone_s']:.2f} s; 4 at once {unlimited['together_wall_s']:.2f} s wall, "
          f"each {min(unlimited['together_each_s']):.2f} to {max(unlimited['together_each_s']):.2f} s")
    print(f"ratio no budget / default budget: alone {unlimited['alone_s'] / budgeted['alone_s']:.1f}, "
          f"4 at once {unlimited['together_wall_s'] / budgeted['together_wall_s']:.1f}")
    if json_path:
        json_path.write_text(json.dumps(numbers, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workers", type=int, default=None, help="sandboxes at once (default: CPU count)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; rates are the best round, ratios the median")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N tasks")
    parser.add_argument("--timeout", type=float, default=1.0, help="per-test timeout of the sandbox (s)")
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    parser.add_argument("--no-floor", action="store_true", help="skip the fresh-process floor")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument("--looping", action="store_true", help="measure a looping answer through gym.make instead")
    parser.add_argument("--fresh-process-run", default=None, metavar="CACHE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fresh_process_run:
        _fresh_process_main(args)
        return
    if args.looping:
        _print_looping(looping_costs(), args.json)
        return

    if not args.data.exists():
        sys.exit(f"no ColBench rows at {args.data} (pass --data)")
    items = load_items(args.data, args.limit)
    n = len(items)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = args.workers or cpus
    load_before = os.getloadavg()[0]

    names = ("original", "floor", "cold", "cached", "disk")
    graded = ("cold", "cached", "disk")
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    breakdowns: dict[str, list[dict[str, float]]] = {name: [] for name in graded}
    startup: list[float] = []
    scores: dict[str, list[float]] = {}
    mismatches = {name: 0 for name in graded}
    disk_reference_runs = 0
    infra = 0
    mode = None
    for _ in range(args.repeat):
        for name, scorer in (("original", original_method_score), ("floor", baseline_score)):
            elapsed, used, got = run_in_process(items, scorer)
            times[name].append(elapsed)
            cpu[name].append(used)
            scores[name] = got
        cache_dir = tempfile.mkdtemp(prefix="colbench-bench-references-")
        try:
            start = time.perf_counter()
            grader = Grader(workers=workers, timeout_s=args.timeout, allow_code_execution=True, sandbox=args.sandbox,
                            reference_disk_cache=cache_dir)
            grader.warm_up()
            startup.append(time.perf_counter() - start)
            mode = grader.sandbox_mode
            try:
                for name in ("cold", "cached"):
                    elapsed, used, results, breakdown = run_grader(grader, items)
                    times[name].append(elapsed)
                    cpu[name].append(used)
                    breakdowns[name].append(breakdown)
                    got = [r.score for r in results]
                    mismatches[name] = max(mismatches[name], sum(abs(a - b) > 1e-9 for a, b in zip(scores["floor"], got)))
                    infra += sum(r.infra_error for r in results)
            finally:
                grader.close()
            fresh = fresh_process_run(args, cache_dir)
        finally:
            subprocess.run(["rm", "-rf", "--", cache_dir], check=False)
        times["disk"].append(fresh["elapsed"])
        cpu["disk"].append(fresh["cpu"])
        breakdowns["disk"].append(fresh["breakdown"])
        mismatches["disk"] = max(mismatches["disk"], sum(abs(a - b) > 1e-9 for a, b in zip(scores["floor"], fresh["scores"])))
        disk_reference_runs += fresh["reference_runs"]
        infra += fresh["infra"]
    if infra:
        print(f"warning: {infra} infrastructure errors", file=sys.stderr)

    rate = {name: n / min(values) for name, values in times.items()}
    # Paired ratios: each round measured the anchor and the grader back to back, under the same load.
    paired = {
        (name, anchor): [t_anchor / t_name for t_anchor, t_name in zip(times[anchor], times[name])]
        for name in graded for anchor in ("original", "floor")
    }
    ratio = {key: statistics.median(values) for key, values in paired.items()}
    cpu_ms = {name: 1000 * min(values) / n for name, values in cpu.items()}
    # The best ratio the cores allow: the anchors use one core, the grader all of them.
    cpu_bound = {name: cpus * cpu_ms["original"] / cpu_ms[name] for name in graded}
    # Breakdown of the round with the least CPU (the least disturbed one).
    best_round = {name: min(range(args.repeat), key=lambda i, name=name: cpu[name][i]) for name in graded}
    parts = {name: _per_child(breakdowns[name][best_round[name]], n) for name in graded}
    floor_ms = None if args.no_floor else fresh_process_floor_ms(items)
    original_vs_floor = sum(abs(a - b) > 1e-9 for a, b in zip(scores["original"], scores["floor"]))

    numbers = {
        "answers": n,
        "tasks": n // 2,
        "cpus": cpus,
        "workers": workers,
        "sandbox": mode,
        "rounds": args.repeat,
        "answers_per_s": {name: round(value, 1) for name, value in rate.items()},
        "ratio_vs_original_method": round(ratio[("cold", "original")], 3),
        "ratio_vs_in_process_floor": round(ratio[("cold", "floor")], 3),
        "ratio_vs_original_method_cached_references": round(ratio[("cached", "original")], 3),
        "ratio_vs_in_process_floor_cached_references": round(ratio[("cached", "floor")], 3),
        "ratio_vs_original_method_fresh_process_warm_disk_cache": round(ratio[("disk", "original")], 3),
        "ratio_vs_in_process_floor_fresh_process_warm_disk_cache": round(ratio[("disk", "floor")], 3),
        "reference_runs_fresh_process_warm_disk_cache": disk_reference_runs,
        "paired_ratios": {f"{a}/{b}": [round(x, 3) for x in v] for (a, b), v in paired.items()},
        "cpu_ms_per_answer": {name: round(value, 3) for name, value in cpu_ms.items()},
        "cpu_bound_ratio_vs_original_method": {name: round(value, 3) for name, value in cpu_bound.items()},
        "sandbox_cpu_ms": parts,
        "score_mismatches_vs_in_process_floor": mismatches,
        "score_differences_original_method_vs_floor": original_vs_floor,
        "fresh_process_floor_cpu_ms_per_answer": None if floor_ms is None else round(floor_ms, 3),
        "pool_startup_s": round(min(startup), 3),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "mean_score": {name: round(sum(values) / n, 4) for name, values in scores.items()},
    }
    print(f"{n} answers ({n // 2} tasks x reference + mutant), {cpus} CPUs, {workers} workers, sandbox={mode}, "
          f"{args.repeat} rounds, load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"(a0) original scorer's method (fresh exec per call)  : {rate['original']:8.1f} answers/s")
    print(f"(a)  in-process floor (one exec per answer)          : {rate['floor']:8.1f} answers/s")
    print(f"(b)  sandboxed Grader, cold (each reference run once): {rate['cold']:8.1f} answers/s")
    print(f"(c)  sandboxed Grader, cached references             : {rate['cached']:8.1f} answers/s")
    print(f"(d)  fresh process, new Grader, warm disk cache      : {rate['disk']:8.1f} answers/s "
          f"({disk_reference_runs} references run)")
    print(f"ratio vs original method: {ratio[('cold', 'original')]:.2f}")
    print(f"ratio vs in-process floor: {ratio[('cold', 'floor')]:.2f}")
    print(f"ratio vs original method, cached references: {ratio[('cached', 'original')]:.2f}")
    print(f"ratio vs in-process floor, cached references: {ratio[('cached', 'floor')]:.2f}")
    print(f"ratio vs original method, fresh process with a warm disk cache: {ratio[('disk', 'original')]:.2f}")
    print(f"ratio vs in-process floor, fresh process with a warm disk cache: {ratio[('disk', 'floor')]:.2f}")
    # Wall-clock ratios depend on how the machine's load shares the cores between a one-process anchor
    # and the grader's processes; these do not (the best ratio the CPU time allows on these cores).
    print(f"ratio vs original method by CPU time ({cpus} cores x CPU(a0) / CPU(b)): {cpu_bound['cold']:.2f}")
    print(f"ratio vs original method by CPU time, cached references: {cpu_bound['cached']:.2f}")
    print(f"ratio vs original method by CPU time, fresh process with a warm disk cache: {cpu_bound['disk']:.2f}")
    print("paired ratios per round, (b)/(a0): " + " ".join(f"{x:.2f}" for x in paired[("cold", "original")])
          + "; (c)/(a0): " + " ".join(f"{x:.2f}" for x in paired[("cached", "original")])
          + "; (d)/(a0): " + " ".join(f"{x:.2f}" for x in paired[("disk", "original")]))
    print(f"per-answer score mismatches vs (a): (b) {mismatches['cold']}, (c) {mismatches['cached']}, "
          f"(d) {mismatches['disk']}; (a0) vs (a): {original_vs_floor}")
    print(
        f"CPU per answer: (a0) {cpu_ms['original']:.3f} ms, (a) {cpu_ms['floor']:.3f} ms, (b) {cpu_ms['cold']:.3f} ms, "
        f"(c) {cpu_ms['cached']:.3f} ms, (d) {cpu_ms['disk']:.3f} ms -> best ratio vs (a0) {cpus} cores allow: "
        f"(b) {cpu_bound['cold']:.2f}, (c) {cpu_bound['cached']:.2f}, (d) {cpu_bound['disk']:.2f}"
    )
    for name, label in (("cold", "(b)"), ("cached", "(c)"), ("disk", "(d)")):
        p = parts[name]
        print(
            f"sandbox CPU per child {label}, {p['children']} children: fork {p['fork']:.3f} ms, run {p['run']:.3f} ms "
            f"({p['page_faults_per_child']:.0f} page faults), clean-up {p['clean_up']:.3f} ms "
            f"({p['children_cleaned_up_after']} left something), server rest {p['server_rest']:.3f} ms, "
            f"supervision {p['supervision']:.3f} ms = {p['total_per_child']:.3f} ms; grader rest "
            f"{p['grader_rest_per_answer']:.3f} ms per answer"
        )
    if floor_ms is not None:
        print(f"floor of a fresh process per answer (bare interpreter forks, child runs the answer, no sandbox): "
              f"{floor_ms:.3f} ms CPU per answer")
    print(f"pool start-up {min(startup):.3f} s (not in (b)/(c)/(d))")
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")


if __name__ == "__main__":
    main()
