"""Ground truth per turn: the Monte Carlo value of each candidate message at held-out turn states.

For a held-out turn state (the dialogue of an episode up to one agent turn, on a task no critic trained on), the
policy samples N candidate messages. Each candidate is played in the environment from that state (the recorded agent
messages are replayed, the human answers them as before: :mod:`~sweet_trl.study.credit.replay`):

* a candidate that ends the episode (an answer, or the last allowed turn) gets its reward from the environment's own
  grader: its value is exact;
* any other candidate (a question) is continued ``M`` times by the same policy to the end of the episode, with the
  usual human and grader: its value is the mean return (fraction of hidden tests passed) with its standard error.

Every critic is scored against the same file, so the expensive part runs once. Files under the output folder:
``states.jsonl``, ``candidates/`` (resumable sampling), ``first_steps.jsonl``, ``continuations.jsonl`` (the
collector's file: a stopped run plays only the missing episodes) and ``values.jsonl`` (the result; its first line
records the settings it was made under, and other settings start the folder over).

    rows = monte_carlo_values(out_dir, trajectories, tasks, policy_backend, env_factory, settings)
    rows[0]["values"], rows[0]["value_se"], rows[0]["exact"]     # one entry per candidate
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweet_trl.study.credit.replay import ReplayScript, ReplayTurnState

KINDS = ("question", "answer")  # what the recorded message at the state was


@dataclass(frozen=True)
class MonteCarloSettings:
    """How the ground truth is made; every field is part of the cache key.

    Attributes:
        states_per_kind: held-out question turns and answer turns, each at most this many.
        num_candidates: candidate messages sampled per state (N).
        continuations: episodes played from each candidate that does not end the episode (M).
        temperature: sampling temperature of the candidates and of the continuations (the policy's own).
        seed: the states' selection and every sample.
        policy: the policy that samples and continues (its path or name), recorded to tell runs apart.
        source: the held-out trajectories the states come from.
        question_turns: the agent turns (0 the first) question states are drawn at; every turn when None. A family
            whose every episode opens with the same question (the multi-fact warm start asks in general first)
            spends no state on that turn this way.
    """

    states_per_kind: int = 48
    num_candidates: int = 8
    continuations: int = 4
    temperature: float = 0.7
    seed: int = 0
    policy: str = ""
    source: str = ""
    question_turns: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The cache key; an option added later is left out at its neutral value, so finished ground truths stay."""
        key = asdict(self)
        if key["question_turns"] is None:
            del key["question_turns"]
        else:
            key["question_turns"] = list(key["question_turns"])
        return key


def held_out_states(records: Sequence[Mapping[str, Any]], env_id: str, max_turns: int, per_kind: int,
                    seed: int = 0, question_turns: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Turn states of ``records`` (with ``c``, the recorded episode seed and the human replies so far), at most
    ``per_kind`` whose recorded message was a question (at ``question_turns`` only, when given) and ``per_kind``
    whose recorded message was an answer, drawn with ``seed`` and at most one of each kind per episode (turns of one
    episode are not independent)."""
    from colbench_gym.envs.dialogue import ANSWER_MARKER
    from sweet_trl.turn_pairs import TurnPairsConfig, turn_states_from_records

    records = list(records)
    config = TurnPairsConfig(state_fraction=1.0, env_id=env_id, max_turns=max_turns, seed=seed)
    states, _ = turn_states_from_records(records, config)
    episode_seed = {str(r.get("episode_id")): r.get("seed") for r in records}
    rng = random.Random(seed)
    chosen: list[dict[str, Any]] = []
    for kind in KINDS:
        by_episode: dict[str, list[dict[str, Any]]] = {}
        for state in states:
            if (ANSWER_MARKER in state["original"]) != (kind == "answer"):
                continue
            if kind == "question" and question_turns is not None and state["turn"] not in question_turns:
                continue
            by_episode.setdefault(state["episode_id"], []).append(state)
        picked = [rng.choice(group) for _, group in sorted(by_episode.items())]
        if len(picked) > per_kind:
            picked = rng.sample(picked, per_kind)
        for state in sorted(picked, key=lambda s: s["state_id"]):
            replies = [m["content"] for m in state["prompt"] if m["role"] == "user"][1:]
            chosen.append({**state, "kind": kind, "episode_seed": episode_seed.get(state["episode_id"]),
                           "replies": replies})
    return chosen


def script_of(state: Mapping[str, Any], candidate: str | None = None) -> ReplayScript:
    """The replay of ``state``'s recorded agent messages, then ``candidate`` if given."""
    played = [m["content"] for m in state["prompt"] if m["role"] == "assistant"]
    return ReplayScript(task_id=state["task_id"], episode_seed=state.get("episode_seed"),
                        agent_messages=[*played, *([candidate] if candidate is not None else [])],
                        expected_replies=list(state["replies"]))


def first_steps(rows: Sequence[Mapping[str, Any]], make_env: Callable[[], Any], workers: int = 4
                ) -> list[list[dict[str, Any]]]:
    """Each candidate of each row played once from its state: ``{"ended", "reward", "success", "error",
    "replay_mismatch"}``. A failure is kept as ``error`` (the candidate then has no value), never raised."""
    from sweet_trl.trajectories import has_infra_error

    jobs = [(i, j) for i, row in enumerate(rows) for j in range(len(row["candidates"]))]
    scripts = [script_of(rows[i]) for i, _ in jobs]
    local = threading.local()

    def play(index: int) -> dict[str, Any]:
        i, j = jobs[index]
        try:
            if not hasattr(local, "env"):
                local.env = ReplayTurnState(make_env(), [])
            env = local.env
            env.scripts = [scripts[index]]
            _, info = env.reset(seed=0, options={"task_id": rows[i]["task_id"]})
            _, reward, terminated, truncated, info = env.step(rows[i]["candidates"][j])
        except Exception as err:  # noqa: BLE001 (a broken state must not stop the others)
            return {"ended": False, "reward": None, "success": False, "error": f"{type(err).__name__}: {err}",
                    "replay_mismatch": False}
        ended = bool(terminated or truncated)
        infra = ended and has_infra_error(info)  # the grader's failure, not the candidate's: no value
        return {"ended": ended, "reward": float(reward) if ended and not infra else None,
                "success": bool(info.get("success", False)) if ended else False,
                "error": "grader infrastructure error" if infra else None,
                "replay_mismatch": bool(info.get("replay_mismatch"))}

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="credit-first-step") as pool:
        results = list(pool.map(play, range(len(jobs))))
    out: list[list[dict[str, Any]]] = [[] for _ in rows]
    for (i, _), result in zip(jobs, results):
        out[i].append(result)
    return out


def continuation_plan(rows: Sequence[Mapping[str, Any]], steps: Sequence[Sequence[Mapping[str, Any]]],
                      continuations: int) -> tuple[list[ReplayScript], list[tuple[int, int]]]:
    """One script per continuation of every candidate that did not end the episode, and its (row, candidate)."""
    scripts, owners = [], []
    for i, row in enumerate(rows):
        for j, step in enumerate(steps[i]):
            if step["ended"] or step["error"] or step["replay_mismatch"]:
                continue
            for _ in range(continuations):
                scripts.append(script_of(row, row["candidates"][j]))
                owners.append((i, j))
    return scripts, owners


def candidate_values(rows: Sequence[Mapping[str, Any]], steps: Sequence[Sequence[Mapping[str, Any]]],
                     owners: Sequence[tuple[int, int]], records: Mapping[int, Mapping[str, Any]]
                     ) -> list[dict[str, Any]]:
    """Each row with ``values``, ``value_se``, ``successes``, ``exact``, ``samples`` and ``returns`` per candidate:
    the reward of a candidate that ended the episode (exact, standard error 0), else the mean return of its
    continuations (those that failed for the infrastructure or whose replay did not reach the recorded state left
    out; ``returns`` lists them in the order played); nan when none. ``first_replies``: per candidate, the human's
    reply to it in each of those continuations (none for a candidate that ended the episode)."""
    from sweet_trl.trajectories import has_infra_error

    returns: dict[tuple[int, int], list[tuple[float, bool, str | None]]] = {}
    for k, owner in enumerate(owners):
        record = records.get(k)
        if record is None or record.get("reward") is None or record.get("replay_mismatch") or has_infra_error(record):
            continue
        reply = _reply_to_candidate(record, len(rows[owner[0]].get("replies", [])))
        returns.setdefault(owner, []).append((float(record["reward"]), bool(record.get("success")), reply))
    out = []
    for i, row in enumerate(rows):
        values, errors, successes, exact, samples, played_returns, replies = [], [], [], [], [], [], []
        for j, step in enumerate(steps[i]):
            if step["ended"] and step["reward"] is not None and not step["error"]:
                values.append(step["reward"]), errors.append(0.0), successes.append(float(step["success"]))
                exact.append(True), samples.append(1), played_returns.append([step["reward"]]), replies.append([])
                continue
            played = returns.get((i, j), [])
            played_returns.append([r for r, _, _ in played]), replies.append([reply for _, _, reply in played])
            n = len(played)
            mean = sum(r for r, _, _ in played) / n if n else math.nan
            spread = math.sqrt(sum((r - mean) ** 2 for r, _, _ in played) / (n - 1) / n) if n > 1 else math.nan
            values.append(mean), errors.append(spread), successes.append(sum(s for _, s, _ in played) / n if n else
                                                                         math.nan)
            exact.append(False), samples.append(n)
        out.append({**row, "values": values, "value_se": errors, "successes": successes, "exact": exact,
                    "samples": samples, "returns": played_returns, "first_replies": replies})
    return out


def _reply_to_candidate(record: Mapping[str, Any], replies_before: int) -> str | None:
    """The human's reply to the candidate in a continuation: its first reply after the state's own."""
    replies = [m.get("content") for m in record.get("dialogue_history", []) if m.get("role") == "user"][1:]
    return replies[replies_before] if len(replies) > replies_before else None


# what a finished ground truth's rows hold; one made before a field existed gets it from its own files
CONTINUATION_FIELDS = ("returns", "first_replies")


def monte_carlo_values(out_dir: Any, trajectories: Sequence[Mapping[str, Any]], backend: Any,
                       make_env: Callable[[], Any], settings: MonteCarloSettings, *, env_id: str, max_turns: int,
                       sampling: Any, num_envs: int = 128, max_new_tokens: int = 48, progress: bool = True,
                       expect: Callable[[int, str, Path], None] | None = None) -> list[dict[str, Any]]:
    """The whole ground truth, cached in ``out_dir`` (see the module docstring): states, N candidates each (from
    ``backend``, the policy), their first steps, ``settings.continuations`` continuations of each by the policy,
    and the values. A finished folder made under the same ``settings`` is read back without any work; ``backend``
    may then be a callable that returns one (loaded only when sampling is needed). ``expect(total, unit, file)`` is
    told how many continuations the file will hold before they are played."""
    from sweet_trl.rollouts import collect
    from sweet_trl.study.critic_eval import read_with_settings, write_with_settings
    from sweet_trl.turn_pairs import TurnPairsConfig, sample_candidates

    out_dir, key = Path(out_dir), settings.to_dict()
    finished = read_with_settings(out_dir / "values.jsonl", key)
    if finished is not None:
        if all(name in row for row in finished for name in CONTINUATION_FIELDS):
            return finished
        return with_continuation_fields(out_dir, finished, settings)
    _start_folder(out_dir, key)
    policy = backend() if callable(backend) and not hasattr(backend, "generate") else backend

    states = held_out_states(trajectories, env_id, max_turns, settings.states_per_kind, settings.seed,
                             settings.question_turns)
    if not states:
        raise ValueError("no held-out turn state: the trajectories hold no usable episode with privileged info")
    config = TurnPairsConfig(env_id=env_id, max_turns=max_turns, num_candidates=settings.num_candidates,
                             temperature=settings.temperature, max_new_tokens=max_new_tokens,
                             generation_batch_size=num_envs, seed=settings.seed)
    rows = sample_candidates(states, policy, config, output_dir=out_dir / "candidates").to_list()

    steps_path = out_dir / "first_steps.jsonl"
    steps_rows = read_with_settings(steps_path, key)
    if steps_rows is None:
        steps = first_steps(rows, make_env)
        write_with_settings(steps_path, key, [{"state_id": r["state_id"], "steps": s} for r, s in zip(rows, steps)])
    else:
        steps = [r["steps"] for r in steps_rows]

    scripts, owners = continuation_plan(rows, steps, settings.continuations)
    records: dict[int, Mapping[str, Any]] = {}
    if scripts:
        output = out_dir / "continuations.jsonl"
        if expect is not None:
            expect(len(scripts), "continuations", output)
        result = collect(policy, env_id=env_id, episodes=[(s.task_id, k) for k, s in enumerate(scripts)],
                         output=output, resume=output.exists(), num_envs=num_envs, sampling=sampling,
                         make_env=lambda: ReplayTurnState(make_env(), scripts), progress=progress,
                         policy_name=settings.policy, fsync=False)
        records = {int(r["seed"]): r for r in result.records}  # the episode seed is the script's index
    valued = candidate_values(rows, steps, owners, records)
    write_with_settings(out_dir / "values.jsonl", key, valued)
    return valued


def with_continuation_fields(out_dir: Path, rows: Sequence[Mapping[str, Any]], settings: MonteCarloSettings
                             ) -> list[dict[str, Any]]:
    """A finished ground truth made before every field of :data:`CONTINUATION_FIELDS` was kept, given them from its
    own files (its first steps and continuations; the values come out the same) and written back; as it is when
    those files are gone."""
    from sweet_trl.study.critic_eval import read_with_settings, write_with_settings
    from sweet_trl.trajectories import load_trajectories

    key = settings.to_dict()
    steps_rows = read_with_settings(out_dir / "first_steps.jsonl", key)
    continuations = out_dir / "continuations.jsonl"
    if steps_rows is None or [r["state_id"] for r in steps_rows] != [r["state_id"] for r in rows]:
        return [dict(row) for row in rows]
    steps = [r["steps"] for r in steps_rows]
    _, owners = continuation_plan(rows, steps, settings.continuations)
    if owners and not continuations.is_file():
        return [dict(row) for row in rows]
    records = {int(r["seed"]): r for r in load_trajectories(continuations)} if owners else {}
    valued = candidate_values(rows, steps, owners, records)
    write_with_settings(out_dir / "values.jsonl", key, valued)
    return valued


def _start_folder(out_dir: Path, key: Mapping[str, Any]) -> None:
    """Keep a half-made folder of the same settings (its parts resume); clear one made under other settings."""
    from sweet_trl.pipeline import clear_folder

    marker = out_dir / "settings.json"
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8")) != dict(key):
        clear_folder(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(dict(key)), encoding="utf-8")
