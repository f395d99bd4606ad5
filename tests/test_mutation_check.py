"""The mutation check's deadline (scripts/mutation_check.py --deadline): CI on a slow machine starts no breakage that
cannot end in time, and says which were not run. (The breakages themselves are run by `make mutation-check`.)"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_spent_deadline_runs_no_breakage_and_names_each_as_not_run(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, "scripts/mutation_check.py", "--skip-baseline", "--deadline", "0",
                           "--only", "rft_imitates_failures,critic_without_c", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert results["not_run"] == ["rft_imitates_failures", "critic_without_c"]
    assert results["breakages"] == []
    assert "0 of 0 breakages run caught" in done.stdout
    assert "NOT RUN for lack of time before the deadline: rft_imitates_failures, critic_without_c" in done.stdout


def test_an_unknown_breakage_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "scripts/mutation_check.py", "--skip-baseline", "--only", "no_such_thing"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "unknown breakage(s) ['no_such_thing']" in done.stderr
