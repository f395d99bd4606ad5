"""The mutation check's own wiring, in the default suite (the check itself, which retrains models once per
breakage, is ``make mutation-check``): every breakage still patches code that exists and names tests that exist,
and the plugin applies a breakage for a session and takes it back; the check's deadline (CI on a slow machine starts
no breakage that cannot end in time, and names the ones it did not run)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from mutations import BREAKAGES, counted, hits

ROOT = Path(__file__).resolve().parents[1]


def test_every_breakage_names_tests_that_exist():
    defined: dict[str, set[str]] = {}
    for breakage in BREAKAGES.values():
        assert breakage.tests, breakage.name
        for node_id in breakage.tests:
            path, name = node_id.split("::")
            if path not in defined:
                tree = ast.parse((ROOT / path).read_text())
                defined[path] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert name in defined[path], f"{breakage.name} names {node_id}, which does not exist"


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_every_breakage_patches_code_that_exists_and_is_undone(name):
    """``MonkeyPatch.setattr`` raises for an attribute that is gone: a renamed function cannot leave a breakage
    silently patching nothing. After ``undo`` the code is the original again."""
    from sweet_trl import losses, tokenization
    from sweet_trl.baselines import rejection_finetuning

    originals = (losses.turn_advantages, tokenization.critic_messages, rejection_finetuning.keep_for_rft)
    patch = pytest.MonkeyPatch()
    try:
        BREAKAGES[name].apply(patch)
        assert patch._setattr, f"{name} patched nothing"
    finally:
        patch.undo()
    assert (losses.turn_advantages, tokenization.critic_messages, rejection_finetuning.keep_for_rft) == originals


def test_a_patch_counts_the_calls_that_reach_it():
    before = hits.get("example", 0)
    double = counted("example", lambda x: 2 * x)
    assert double(3) == 6 and double(4) == 8
    assert hits["example"] == before + 2


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
