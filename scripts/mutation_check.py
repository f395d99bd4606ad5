"""The mutation check: every named breakage of the trainers (tests/mutations.py) must turn its tests red.

    python scripts/mutation_check.py                       # all breakages, after one unbroken run of their tests
    python scripts/mutation_check.py --only rft_imitates_failures,critic_without_c
    python scripts/mutation_check.py --skip-baseline       # right after a green `make test` (CI)
    python scripts/mutation_check.py --json mutation_check.json
    python scripts/mutation_check.py --skip-baseline --deadline 1800   # CI: start no breakage that cannot end in time

First the tests the breakages name run once on the code as it is: they must pass, or a breakage that "fails"
them proves nothing. Then, for each breakage, a fresh pytest process applies it (``-p mutations --mutation NAME``)
and runs its tests. A breakage is caught when every one of its tests fails on an assertion and the patch was
reached; a test that errors (an exception other than ``AssertionError``), passes or is skipped leaves it uncaught.
The table (breakage -> test -> outcome) is printed in Markdown; the exit status is 1 unless every breakage is caught.

With ``--deadline SECONDS`` (CI's time left after the suite) a breakage is started only while its run can still end
before the deadline, judged by the slowest breakage run so far; the ones left are printed as not run, in the table and
the JSON. CI machines differ in speed by 3x and more: on a slow one the check is cut short, loudly, rather than CI run
out of time with nothing landed. Only breakages that ran and were not caught make the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def run_pytest(tests: list[str], mutation: str | None, timeout: float) -> tuple[dict, float, str]:
    """(the plugin's report, wall seconds, pytest's output tail) of one pytest process over ``tests``."""
    with tempfile.TemporaryDirectory() as folder:
        report_path = Path(folder) / "report.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "mutations", "--mutation-report", str(report_path),
                   *(["--mutation", mutation] if mutation else []), *tests]
        env = {**os.environ, "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
        start = time.monotonic()
        try:
            completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                                       check=False)
            tail = (completed.stdout + completed.stderr)[-3000:]
        except subprocess.TimeoutExpired as err:
            tail = f"timed out after {timeout:.0f} s: {str(err.stdout or '')[-2000:]}"
        seconds = time.monotonic() - start
        report = json.loads(report_path.read_text()) if report_path.exists() else {"hits": None, "tests": {}}
    return report, seconds, tail


def verdict(test: str, outcome: dict | None) -> tuple[bool, str]:
    """(caught, how it ended) for one test under a breakage."""
    if outcome is None:
        return False, "not run"
    if outcome["outcome"] == "failed" and outcome["exception"] == "AssertionError":
        message = " ".join((outcome["message"] or "").split())
        return True, f"failed: {message[:100]}"
    if outcome["outcome"] == "failed":
        return False, f"error ({outcome['exception']} in {outcome['when']}), not an assertion"
    return False, outcome["outcome"]


def main() -> int:
    from mutations import BREAKAGES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated breakage names (default: all)")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="do not run the tests unbroken first (they have just passed in the suite)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per pytest process")
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("--deadline", type=float,
                        help="seconds from now after which no breakage may still run (default: none)")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(BREAKAGES)
    unknown = sorted(set(names) - set(BREAKAGES))
    if unknown:
        parser.error(f"unknown breakage(s) {unknown}; known: {sorted(BREAKAGES)}")
    started = time.monotonic()
    deadline = started + args.deadline if args.deadline is not None else None
    results: dict = {"baseline": None, "breakages": [], "not_run": []}

    if not args.skip_baseline:
        tests = sorted({test for name in names for test in BREAKAGES[name].tests})
        report, seconds, tail = run_pytest(tests, None, args.timeout)
        failing = [t for t in tests if (report["tests"].get(t) or {}).get("outcome") != "passed"]
        results["baseline"] = {"tests": tests, "failing": failing, "seconds": round(seconds)}
        print(f"unbroken: {len(tests) - len(failing)} of {len(tests)} tests pass ({seconds:.0f} s)", flush=True)
        if failing:
            print(f"these tests fail on the code as it is, so no breakage can be judged by them: {failing}\n{tail}")
            return 1

    rows, uncaught, slowest = [], [], 0.0
    for name in names:
        breakage = BREAKAGES[name]
        timeout = args.timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < max(slowest, 60.0):
                results["not_run"].append(name)
                rows.append((name, "", f"not run: {left:.0f} s left before the deadline"))
                continue
            timeout = min(timeout, left)
        report, seconds, tail = run_pytest(list(breakage.tests), name, timeout)
        slowest = max(slowest, seconds)
        if timeout < args.timeout and tail.startswith("timed out"):  # cut by the deadline, not by its own timeout
            results["not_run"].append(name)
            rows.append((name, "", f"not run: stopped at the deadline after {seconds:.0f} s"))
            continue
        reached = bool(report.get("hits"))
        caught_all = reached
        for test in breakage.tests:
            caught, how = verdict(test, report["tests"].get(test))
            caught_all &= caught
            rows.append((name, test.split("::")[-1], how if reached else f"{how} (patch never reached)"))
        if not caught_all:
            uncaught.append(name)
            print(f"NOT CAUGHT: {name}\n{tail}", flush=True)
        print(f"{name}: {'caught' if caught_all else 'NOT caught'} ({seconds:.0f} s, patch reached "
              f"{report.get('hits')} times)", flush=True)
        results["breakages"].append({"name": name, "what": breakage.what, "caught": caught_all,
                                     "hits": report.get("hits"), "seconds": round(seconds), "tests": report["tests"]})

    print("\n| breakage | test that must fail | outcome |\n| --- | --- | --- |")
    for name, test, how in rows:
        print(f"| `{name}`: {BREAKAGES[name].what} | {f'`{test}`' if test else '-'} | {how.replace('|', '/')} |")
    total = time.monotonic() - started
    ran = len(names) - len(results["not_run"])
    print(f"\n{ran - len(uncaught)} of {ran} breakages run caught in {total / 60:.1f} min"
          + (f"; NOT caught: {', '.join(uncaught)}" if uncaught else "")
          + (f"; NOT RUN for lack of time before the deadline: {', '.join(results['not_run'])}"
             if results["not_run"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({**results, "minutes": round(total / 60, 1)}, indent=2))
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
