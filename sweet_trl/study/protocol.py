"""The test-read protocol: every setting is chosen on validation tasks, and the test tasks are read once per arm.

A study that tries its settings (rounds, learning rate, NLL weight, ``top_fraction``, precision) on the test tasks
reports the best of many tries as if it were one, and its intervals no longer mean what they say. The protocol:

1. choose each arm's settings on the validation split (``procedural:validation``, which shares no hidden value and
   no unseen template with ``procedural:test``), keeping the figures they were chosen on;
2. evaluate each arm's final policy on the test tasks once, recording the read in the run's ledger,
   ``<run_dir>/protocol/test_reads.json``, with what it was chosen on;
3. compare arms only at equal rounds (:func:`check_equal_compute`), reporting the rest of their compute.

::

    from sweet_trl.study.protocol import check_can_read_test, record_test_read, protocol_summary

    chosen = {"tasks": "procedural:validation", "settings": {"rounds": 2, "learning_rate": 1e-5},
              "figures": {"success_rate": 0.31, "success_ci": [0.24, 0.38]}}
    check_can_read_test(run_dir, "sweet", chosen)            # before the evaluation: refuses what record would
    ...                                                      # the one evaluation on the test tasks
    record_test_read(run_dir, "sweet", config=arm_options, validation=chosen, evaluation=marker["run_id"])
    results["protocol"] = protocol_summary(run_dir)          # {"validation": {...}, "test_reads": {"sweet": 1}, ...}

Refusals (:class:`ProtocolError`, each message says what to do): a read without a validation record (``None``, or
one without its ``settings`` and ``figures``); a validation record measured on the test tasks themselves; a second
read of an arm, unless ``force=True``, which is recorded as forced next to the first (the ledger only grows: no read
is overwritten or removed); a ledger that cannot be read (it is never replaced by a fresh one); arms compared at
unequal rounds.

Each read in the ledger::

    {"arm": "sweet", "read": 1, "forced": false, "time": "2025-06-01T12:00:00+00:00",
     "config_digest": "3f2a...", "git_commit": "a9c27fb...", "git_dirty": false,
     "evaluation": "<the evaluate stage's run_id>", "test_tasks": "procedural:test",
     "validation": {"tasks": "procedural:validation", "settings": {...}, "figures": {...}}}
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

LEDGER = Path("protocol") / "test_reads.json"
LEDGER_VERSION = 1
VALIDATION_KEYS = ("settings", "figures")
COMPUTE_FIELDS = ("rounds", "episodes", "candidates_sampled", "gradient_steps")
# ``commit=`` default of record_test_read: ask git for the commit of the code that runs (:func:`running_code_state`).
DETECT = "detect"


class ProtocolError(ValueError):
    """A test read or a comparison that the protocol refuses; the message says why and what to do instead."""


def ledger_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / LEDGER


def config_digest(config: Any) -> str:
    """A short digest of an arm's configuration (any JSON-serialisable value; key order does not count)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_state(path: str | os.PathLike | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``path`` (default: this package's), or ``(None, None)`` where
    there is none (an installed wheel, no git): the ledger records what is known, never fails for it."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (commit or None), bool(status.strip())


@functools.cache
def running_code_state() -> tuple[str | None, bool | None]:
    """:func:`git_state` of this package's checkout when first asked in this process: the code a long run loaded. A
    run that outlives a move of its checkout (a fixed worktree moved forward for later jobs) still records the
    commit it started from; the fair study asks at its start."""
    return git_state()


def recorded_reads(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every recorded test read of the run, oldest first (empty when none was recorded)."""
    return _read_ledger(ledger_path(run_dir))["reads"]


def _read_ledger(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"version": LEDGER_VERSION, "reads": []}
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ProtocolError(f"the test-read ledger {path} cannot be read ({err}); it is the record of which arms have "
                            "seen the test tasks, so it is never replaced: repair it or move it aside by hand") from err
    if not isinstance(ledger, dict) or not isinstance(ledger.get("reads"), list):
        raise ProtocolError(f"the test-read ledger {path} is not a ledger (no list of reads); repair it or move it "
                            "aside by hand")
    return ledger


def _locked(path: Path) -> contextlib.AbstractContextManager[None]:
    """Hold the ledger's lock while it is read and rewritten, so that two processes recording at once both land."""
    from sweet_trl.generation.embedded import file_lock

    return file_lock(path.with_name(path.name + ".lock"))


def _check_validation(arm: str, validation: Any, test_tasks: str | None) -> dict[str, Any]:
    if validation is None:
        raise ProtocolError(f"arm {arm!r}: a final test read needs the validation record its settings were chosen on "
                            "(a dict with 'settings' and 'figures'); choose them on the validation tasks "
                            "(procedural:validation) first, then read the test tasks once")
    if not isinstance(validation, Mapping):
        raise ProtocolError(f"arm {arm!r}: the validation record must be a dict, got {type(validation).__name__}")
    missing = [key for key in VALIDATION_KEYS if key not in validation]
    if missing:
        raise ProtocolError(f"arm {arm!r}: the validation record lacks {missing}: it must say which settings were "
                            "chosen ('settings') and on which validation figures ('figures')")
    for key in VALIDATION_KEYS:
        if not isinstance(validation[key], Mapping):
            raise ProtocolError(f"arm {arm!r}: the validation record's {key!r} must be a dict, got "
                                f"{type(validation[key]).__name__}")
    if not validation["figures"]:
        raise ProtocolError(f"arm {arm!r}: the validation record has no figures: settings chosen on nothing measured "
                            "are not a validation choice")
    if test_tasks is not None and validation.get("tasks") == test_tasks:
        raise ProtocolError(f"arm {arm!r}: the validation record was measured on {test_tasks!r}, the test tasks "
                            "themselves; choose the settings on the validation tasks")
    try:
        return json.loads(json.dumps(dict(validation), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ProtocolError(f"arm {arm!r}: the validation record must be plain JSON (numbers, text, lists, dicts): "
                            f"{err}") from err


def _check_second_read(arm: str, reads: list[dict[str, Any]], force: bool) -> None:
    earlier = [read for read in reads if read.get("arm") == arm]
    if earlier and not force:
        first = earlier[0]
        raise ProtocolError(
            f"arm {arm!r} has already read the test tasks ({len(earlier)} read(s), the first at {first.get('time')} "
            f"with config {first.get('config_digest')}); reading them again and keeping the better figures would "
            "choose on the test tasks. Choose on the validation tasks; to read again anyway (a crashed evaluation, "
            "say) pass force=True, and the read is recorded as forced next to the earlier ones")


def _same_evaluation(arm: str, reads: list[dict[str, Any]], evaluation: str | None) -> dict[str, Any] | None:
    """The read of ``arm`` whose evaluation is ``evaluation``: a resumed study reporting an evaluation it already
    recorded reads nothing new."""
    if evaluation is None:
        return None
    return next((read for read in reads if read.get("arm") == arm and read.get("evaluation") == evaluation), None)


def _check_arm(arm: Any) -> str:
    if not isinstance(arm, str) or not arm.strip():
        raise ProtocolError(f"an arm needs a name (a non-empty string), got {arm!r}")
    return arm


def check_can_read_test(run_dir: str | os.PathLike, arm: str, validation: Mapping[str, Any] | None, *,
                        force: bool = False, evaluation: str | None = None, test_tasks: str | None = None) -> None:
    """Raise :class:`ProtocolError` where :func:`record_test_read` would refuse, writing nothing: call it before an
    evaluation on the test tasks, so that a refused read costs no evaluation."""
    arm = _check_arm(arm)
    _check_validation(arm, validation, test_tasks)
    reads = recorded_reads(run_dir)
    if _same_evaluation(arm, reads, evaluation) is None:
        _check_second_read(arm, reads, force)


def record_test_read(run_dir: str | os.PathLike, arm: str, *, config: Any, validation: Mapping[str, Any] | None,
                     force: bool = False, evaluation: str | None = None, test_tasks: str | None = None,
                     commit: str | None = DETECT, time: datetime | None = None) -> dict[str, Any]:
    """Record ``arm``'s final evaluation on the test tasks in ``<run_dir>/protocol/test_reads.json``; return the
    read as recorded.

    Args:
        config: the arm's configuration (any JSON-serialisable value); the ledger keeps its digest.
        validation: what the arm's settings were chosen on: a dict with ``settings`` (the chosen values) and
            ``figures`` (the validation results they were chosen by, not empty), and where known ``tasks`` (the
            validation task source). Kept in the ledger as given.
        force: read the test tasks of an arm that has read them before; the read is recorded with
            ``"forced": true`` and the earlier reads stay.
        evaluation: an id of the evaluation run (the evaluate stage's ``run_id``, say): recording the same
            evaluation of the same arm again returns its read and records nothing, as no new read took place.
        test_tasks: the test task source; a validation record measured on it is refused.
        commit: the git commit of the code; by default asked of git (``None`` where there is none).
        time: when the read happened (default: now, UTC).
    """
    arm = _check_arm(arm)
    chosen_on = _check_validation(arm, validation, test_tasks)
    path = ledger_path(run_dir)
    with _locked(path):
        ledger = _read_ledger(path)
        reads = ledger["reads"]
        same = _same_evaluation(arm, reads, evaluation)
        if same is not None:
            return same
        _check_second_read(arm, reads, force)
        earlier = sum(read.get("arm") == arm for read in reads)
        if commit == DETECT:
            commit, dirty = running_code_state()
        else:
            dirty = None
        read = {
            "arm": arm,
            "read": earlier + 1,
            "forced": earlier > 0,
            "time": (time or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
            "config_digest": config_digest(config),
            "git_commit": commit,
            "git_dirty": dirty,
            "evaluation": evaluation,
            "test_tasks": test_tasks,
            "validation": chosen_on,
        }
        from sweet_trl.pipeline.runner import write_json_atomic

        write_json_atomic(path, {**ledger, "version": LEDGER_VERSION, "reads": [*reads, read]})
    return read


def protocol_summary(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What the study JSON reports of the protocol: ``{"validation": {arm: record}, "test_reads": {arm: count},
    "forced_reads": {arm: count}}``, each arm's validation record from its latest read (the one whose figures the
    study reports), and ``"read_commits": {arm: commit}``, the code of that read: a study read back later by other
    code (its JSON's ``settings.git_commit``) still says which code made each arm's figures."""
    validation: dict[str, Any] = {}
    counts: dict[str, int] = {}
    forced: dict[str, int] = {}
    commits: dict[str, Any] = {}
    for read in recorded_reads(run_dir):
        arm = str(read.get("arm"))
        validation[arm] = read.get("validation")
        counts[arm] = counts.get(arm, 0) + 1
        forced[arm] = forced.get(arm, 0) + bool(read.get("forced"))
        commits[arm] = read.get("git_commit")
    return {"validation": validation, "test_reads": counts, "forced_reads": forced, "read_commits": commits}


def check_equal_compute(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Check that arms are compared at equal compute; return what each spent.

    ``arms``: ``{arm: {"rounds", "episodes", "candidates_sampled", "gradient_steps"}}``. Unequal ``rounds`` raise
    :class:`ProtocolError` (an arm trained for more rounds has been given more chances, not a better method). The
    other fields are reported, not required equal (methods spend differently by design); a field an arm does not
    give is reported as ``None``. Returns ``{"rounds": r, "arms": {arm: {field: value}}, "unequal": {field: {arm:
    value}}}``, ``unequal`` naming the fields whose values differ.
    """
    if not isinstance(arms, Mapping) or not arms:
        raise ProtocolError("check_equal_compute needs at least one arm: {arm: {'rounds': ..., ...}}")
    spent: dict[str, dict[str, Any]] = {}
    for arm, compute in arms.items():
        if not isinstance(compute, Mapping):
            raise ProtocolError(f"arm {arm!r}: its compute must be a dict of {list(COMPUTE_FIELDS)}, got "
                                f"{type(compute).__name__}")
        unknown = sorted(set(compute) - set(COMPUTE_FIELDS))
        if unknown:
            raise ProtocolError(f"arm {arm!r}: unknown compute fields {unknown}; known: {list(COMPUTE_FIELDS)}")
        rounds = compute.get("rounds")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ProtocolError(f"arm {arm!r}: 'rounds' must be an int >= 1, got {rounds!r}: arms are compared at "
                                "equal rounds, so every arm must say how many it trained for")
        for name in COMPUTE_FIELDS[1:]:
            value = compute.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise ProtocolError(f"arm {arm!r}: {name!r} must be a number >= 0 or None, got {value!r}")
        spent[str(arm)] = {name: compute.get(name) for name in COMPUTE_FIELDS}
    rounds = {arm: compute["rounds"] for arm, compute in spent.items()}
    if len(set(rounds.values())) > 1:
        listed = ", ".join(f"{arm}: {r}" for arm, r in rounds.items())
        raise ProtocolError(f"arms are compared at unequal rounds ({listed}); train every arm for the same number of "
                            "rounds, or compare each round with the same round of the other arms")
    unequal = {name: {arm: compute[name] for arm, compute in spent.items()} for name in COMPUTE_FIELDS[1:]
               if len({compute[name] for compute in spent.values()}) > 1}
    return {"rounds": next(iter(rounds.values())), "arms": spent, "unequal": unequal}
