"""The mutation check's own wiring, in the default suite (the check itself, which retrains models once per
breakage, is ``make mutation-check``): every breakage still patches code that exists and names tests that exist,
and the plugin applies a breakage for a session and takes it back."""

from __future__ import annotations

import ast
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
