"""The fair-study protocol: the test tasks read once per arm, every read recorded with the validation choice behind it,
arms compared at equal rounds (no models: the ledger and the checks alone).

Run: pytest tests/test_study_protocol.py -q
"""

from __future__ import annotations

import json
import multiprocessing
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sweet_trl.study.protocol import (
    ProtocolError,
    check_can_read_test,
    check_equal_compute,
    config_digest,
    git_state,
    ledger_path,
    protocol_summary,
    record_test_read,
    recorded_reads,
)

CHOSEN = {"tasks": "procedural:validation", "settings": {"rounds": 2, "learning_rate": 1e-5},
          "figures": {"success_rate": 0.31, "success_ci": [0.24, 0.38]}}
CONFIG = {"policy_model": "embedded", "learning_rate": 1e-5, "rounds": 2}
WHEN = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)


def read(run_dir: Path, arm: str = "sweet", **options):
    options = {"config": CONFIG, "validation": CHOSEN, "commit": "c0ffee", "time": WHEN, **options}
    return record_test_read(run_dir, arm, **options)


def test_a_read_is_recorded_with_the_validation_choice_behind_it(tmp_path):
    entry = read(tmp_path, evaluation="run-1", test_tasks="procedural:test")
    assert ledger_path(tmp_path) == tmp_path / "protocol" / "test_reads.json"
    ledger = json.loads(ledger_path(tmp_path).read_text(encoding="utf-8"))
    assert ledger["reads"] == [entry]
    assert entry == {"arm": "sweet", "read": 1, "forced": False, "time": "2025-06-01T12:00:00+00:00",
                     "config_digest": config_digest(CONFIG), "git_commit": "c0ffee", "git_dirty": None,
                     "evaluation": "run-1", "test_tasks": "procedural:test", "validation": CHOSEN}
    assert recorded_reads(tmp_path) == [entry]


def test_the_config_digest_follows_the_values_not_their_order():
    assert config_digest({"a": 1, "b": [2, 3]}) == config_digest({"b": [2, 3], "a": 1})
    assert config_digest({"a": 1, "b": [2, 3]}) != config_digest({"a": 1, "b": [3, 2]})
    assert re.fullmatch(r"[0-9a-f]{16}", config_digest(CONFIG))


def test_the_commit_is_asked_of_git_where_there_is_one(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=False)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    commit, dirty = git_state(repo)
    assert commit == head.stdout.strip() and isinstance(dirty, bool)
    from sweet_trl.study import protocol

    protocol.running_code_state.cache_clear()  # asked once per process: an earlier test may have asked before a commit
    assert read(tmp_path / "run", commit="detect")["git_commit"] == git_state()[0] == commit
    assert git_state(tmp_path) == (None, None)  # no checkout: recorded as unknown, not an error


def test_a_second_read_of_an_arm_is_refused_and_changes_nothing(tmp_path):
    read(tmp_path)
    before = ledger_path(tmp_path).read_bytes()
    with pytest.raises(ProtocolError, match=r"arm 'sweet' has already read the test tasks \(1 read\(s\), the first at "
                                            r"2025-06-01T12:00:00\+00:00 .*pass force=True"):
        read(tmp_path, config={**CONFIG, "learning_rate": 3e-5})
    with pytest.raises(ProtocolError, match="already read the test tasks"):
        check_can_read_test(tmp_path, "sweet", CHOSEN)
    assert ledger_path(tmp_path).read_bytes() == before
    read(tmp_path, "rft")  # another arm reads its own first time
    assert protocol_summary(tmp_path)["test_reads"] == {"sweet": 1, "rft": 1}


def test_a_forced_read_is_recorded_as_forced_next_to_the_first(tmp_path):
    first = read(tmp_path)
    again = {**CHOSEN, "figures": {"success_rate": 0.35}}
    second = read(tmp_path, validation=again, force=True, commit="beef")
    assert (second["read"], second["forced"], second["git_commit"]) == (2, True, "beef")
    assert recorded_reads(tmp_path) == [first, second]
    third = read(tmp_path, force=True)
    assert (third["read"], third["forced"]) == (3, True)
    assert recorded_reads(tmp_path)[:2] == [first, second]
    assert protocol_summary(tmp_path) == {"validation": {"sweet": CHOSEN}, "test_reads": {"sweet": 3},
                                          "forced_reads": {"sweet": 2}, "read_commits": {"sweet": "c0ffee"}}
    # force on an arm's first read is an ordinary first read
    assert read(tmp_path, "mtdpo", force=True)["forced"] is False


@pytest.mark.parametrize(("validation", "why"), [
    (None, r"arm 'sweet': a final test read needs the validation record its settings were chosen on"),
    ({}, r"lacks \['settings', 'figures'\]"),
    ({"settings": {"rounds": 2}}, r"lacks \['figures'\]"),
    ({"settings": {"rounds": 2}, "figures": {}}, "has no figures"),
    ({"settings": "rounds=2", "figures": {"success_rate": 0.3}}, "'settings' must be a dict"),
    ([("settings", {})], "must be a dict, got list"),
    ({"settings": {}, "figures": {"success_rate": float("nan")}}, "must be plain JSON"),
    ({**CHOSEN, "tasks": "procedural:test"}, "measured on 'procedural:test', the test tasks themselves"),
])
def test_a_read_without_a_validation_choice_is_refused(tmp_path, validation, why):
    with pytest.raises(ProtocolError, match=why):
        read(tmp_path, validation=validation, test_tasks="procedural:test")
    with pytest.raises(ProtocolError, match=why):
        check_can_read_test(tmp_path, "sweet", validation, test_tasks="procedural:test")
    assert not ledger_path(tmp_path).exists()


def test_an_arm_needs_a_name(tmp_path):
    for arm in ("", "  ", None):
        with pytest.raises(ProtocolError, match="an arm needs a name"):
            read(tmp_path, arm)


def test_recording_the_same_evaluation_again_reads_nothing_new(tmp_path):
    """A resumed study reports the evaluation it already recorded: the same read, not a second one."""
    first = read(tmp_path, evaluation="run-1")
    check_can_read_test(tmp_path, "sweet", CHOSEN, evaluation="run-1")
    assert read(tmp_path, evaluation="run-1", time=datetime(2026, 1, 1, tzinfo=timezone.utc)) == first
    assert recorded_reads(tmp_path) == [first]
    with pytest.raises(ProtocolError, match="already read the test tasks"):
        read(tmp_path, evaluation="run-2")
    read(tmp_path, "rft", evaluation="run-9")
    with pytest.raises(ProtocolError, match="arm 'rft' has already read"):  # run-1 is sweet's evaluation, not rft's
        read(tmp_path, "rft", evaluation="run-1")


def test_check_can_read_test_writes_nothing(tmp_path):
    check_can_read_test(tmp_path, "sweet", CHOSEN)
    assert not (tmp_path / "protocol").exists()


def test_an_unreadable_ledger_is_refused_not_replaced(tmp_path):
    path = ledger_path(tmp_path)
    path.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"version": 1})):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ProtocolError, match="ledger .* (cannot be read|is not a ledger)"):
            read(tmp_path)
        with pytest.raises(ProtocolError, match="repair it or move it aside by hand"):
            protocol_summary(tmp_path)
        assert path.read_text(encoding="utf-8") == text


def test_the_summary_of_a_run_without_reads_is_empty(tmp_path):
    assert protocol_summary(tmp_path) == {"validation": {}, "test_reads": {}, "forced_reads": {}, "read_commits": {}}
    read(tmp_path, "sweet")
    later = {**CHOSEN, "settings": {"rounds": 2, "learning_rate": 3e-5}}
    read(tmp_path, "sweet", validation=later, force=True)
    read(tmp_path, "rft", commit="beef")
    assert protocol_summary(tmp_path) == {"validation": {"sweet": later, "rft": CHOSEN},
                                          "test_reads": {"sweet": 2, "rft": 1},
                                          "forced_reads": {"sweet": 1, "rft": 0},
                                          "read_commits": {"sweet": "c0ffee", "rft": "beef"}}


def _record_one(run_dir: str, arm: str) -> None:
    record_test_read(run_dir, arm, config={"arm": arm}, validation=CHOSEN, commit=None)


def test_reads_recorded_at_once_by_several_processes_all_land(tmp_path):
    arms = [f"arm{i}" for i in range(12)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(6) as pool:
        pool.starmap(_record_one, [(str(tmp_path), arm) for arm in arms])
    assert sorted(r["arm"] for r in recorded_reads(tmp_path)) == sorted(arms)


# -- equal compute --------------------------------------------------------------------------------------------------

def test_arms_at_equal_rounds_are_compared_and_their_other_compute_reported():
    report = check_equal_compute({
        "sweet": {"rounds": 2, "episodes": 640, "candidates_sampled": 2048, "gradient_steps": 300},
        "rft": {"rounds": 2, "episodes": 640, "gradient_steps": 120},
    })
    assert report["rounds"] == 2
    assert report["arms"]["rft"] == {"rounds": 2, "episodes": 640, "candidates_sampled": None, "gradient_steps": 120}
    assert report["unequal"] == {"candidates_sampled": {"sweet": 2048, "rft": None},
                                 "gradient_steps": {"sweet": 300, "rft": 120}}
    assert check_equal_compute({"zero_shot": {"rounds": 1}})["unequal"] == {}


def test_arms_at_unequal_rounds_are_refused():
    with pytest.raises(ProtocolError, match=r"unequal rounds \(sweet: 3, rft: 1\)"):
        check_equal_compute({"sweet": {"rounds": 3, "episodes": 640}, "rft": {"rounds": 1, "episodes": 640}})


@pytest.mark.parametrize(("arms", "why"), [
    ({}, "at least one arm"),
    ({"sweet": {"episodes": 640}}, r"arm 'sweet': 'rounds' must be an int >= 1, got None"),
    ({"sweet": {"rounds": 0}}, "'rounds' must be an int >= 1, got 0"),
    ({"sweet": {"rounds": True}}, "'rounds' must be an int >= 1, got True"),
    ({"sweet": {"rounds": 1, "epochs": 3}}, r"unknown compute fields \['epochs'\]"),
    ({"sweet": {"rounds": 1, "episodes": -1}}, "'episodes' must be a number >= 0 or None"),
    ({"sweet": [1, 2]}, "its compute must be a dict"),
])
def test_compute_that_cannot_be_compared_is_refused(arms, why):
    with pytest.raises(ProtocolError, match=why):
        check_equal_compute(arms)


def test_a_run_records_the_commit_it_started_from_even_if_its_checkout_moves(tmp_path, monkeypatch):
    """A long run on a fixed worktree that is moved forward for later jobs: the test read (and the fair study's
    JSON) record the commit of the code the process loaded, asked once, not the checkout's HEAD at the end."""
    from sweet_trl.study import protocol

    heads = iter([("a" * 40, False), ("b" * 40, False)])
    monkeypatch.setattr(protocol, "git_state", lambda path=None: next(heads))
    protocol.running_code_state.cache_clear()
    try:
        assert protocol.running_code_state() == ("a" * 40, False)  # asked at the start
        assert read(tmp_path / "run", commit="detect")["git_commit"] == "a" * 40  # the checkout has moved since
    finally:
        protocol.running_code_state.cache_clear()
