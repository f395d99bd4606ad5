"""The batched rollout collector: many ColBench episodes at once, one generate call per turn.

    from sweet_trl.generation import SamplingParams, TransformersBackend
    from sweet_trl.rollouts import collect

    backend = TransformersBackend("embedded")
    result = collect(backend, env_id="ColBench-Backend-v0", tasks="train", episodes_per_task=4,
                     output="runs/rollouts.jsonl", num_envs=16,
                     sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
    result.stats          # episodes, turns, tokens, success rate, episodes/s
    # interrupted? the same call with resume=True plays only the episodes not yet in the file

How a run goes. ``num_envs`` environments are kept busy. Every round, the dialogues of all
episodes waiting for an agent message go to the backend in *one* ``generate`` call; then those
environments step (simulated human, grader, renderer) concurrently on a thread pool. A round
waits for the steps still running, but at most ``max_step_wait`` seconds once some episodes are
ready, so one slow grading or rendering does not hold every other episode back. A finished
episode is written to the JSONL file at once (one fsynced line, see
:mod:`sweet_trl.trajectories`) and its slot starts the next planned episode. So a killed run
loses at most the episodes in flight, and ``resume=True`` finishes it without duplicates: every
episode has a stable id ``"<task_id>/<seed>"``, and those already in the file are skipped.

Determinism. Episode ``(task_id, seed)`` resets its environment with ``seed`` and samples turn
``t`` with the per-history seed ``derive_seed(task_id, seed, t)``, which the backends honour
row by row. The same plan therefore gives the same dialogues whatever ``num_envs`` is and
however often the run was interrupted (for the transformers backend up to floating-point
differences of padded batches; vLLM and OpenAI servers are seeded per request).

Failures are data. A failed policy call ends its episode with ``outcome="policy_error"`` and
``reward=None``; an exception from the environment ends it with ``outcome="env_error"``;
simulator failures are listed in ``simulator_errors`` while the episode goes on. With
``retry_errors=True`` a resumed run plays those episodes again, and those whose grader or renderer
failed (:func:`~sweet_trl.trajectories.has_infra_error`); the newer record wins.

Gymnasium's vector environments (``gym.make_vec``) step their sub-environments in lockstep,
autoreset them with tasks they draw themselves and stack observations; dialogue episodes end at
different turns and each needs a chosen task and seed, so the collector keeps a pool of single
environments instead. Pass ``envs=`` to use environments you made yourself, for example the
``envs`` of a ``gymnasium.vector.SyncVectorEnv``, or ``make_env=`` to build them.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweet_trl.generation.base import (
    Generation,
    GenerationBackend,
    SamplingParams,
    derive_seed,
)
from sweet_trl.trajectories import (
    TrajectoryWriter,
    episode_id,
    has_infra_error,
    json_safe,
    read_trajectories,
)

# Fields of the final ``info`` that are bookkeeping, not results worth a record field.
_INFO_SKIP = frozenset({"messages", "privileged", "task_id", "turn", "simulator_error", "score"})


@dataclass(frozen=True)
class EpisodeSpec:
    """One planned episode: which task, with which seed."""

    task_id: str
    seed: int

    @property
    def episode_id(self) -> str:
        return episode_id(self.task_id, self.seed)


def plan_episodes(task_ids: Sequence[str], episodes_per_task: int = 1, seed: int = 0) -> list[EpisodeSpec]:
    """``episodes_per_task`` episodes of every task, seeds ``seed, seed + 1, ...``, round by round
    (all tasks once, then all again), so a partial run covers the tasks evenly."""
    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task must be >= 1, got {episodes_per_task}")
    if len(set(task_ids)) != len(task_ids):
        raise ValueError("task ids must be unique")
    return [EpisodeSpec(task_id, seed + k) for k in range(episodes_per_task) for task_id in task_ids]


def turn_seed(spec: EpisodeSpec, turn: int) -> int:
    """Sampling seed of agent turn ``turn`` (0-based) of an episode."""
    return derive_seed(spec.task_id, spec.seed, turn)


@dataclass
class CollectStats:
    """Running totals of a collection (this run only; ``skipped`` were already in the file)."""

    planned: int = 0
    skipped: int = 0
    episodes: int = 0
    turns: int = 0
    generated_tokens: int = 0
    successes: int = 0
    policy_errors: int = 0
    env_errors: int = 0
    simulator_errors: int = 0
    generate_calls: int = 0
    generate_seconds: float = 0.0
    env_wait_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def episodes_per_second(self) -> float:
        return self.episodes / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out.update(episodes_per_second=self.episodes_per_second, tokens_per_second=self.tokens_per_second,
                   success_rate=self.success_rate)
        return out


@dataclass
class CollectResult:
    """``records``: every planned episode's record (from this run or the file), in plan order."""

    records: list[dict[str, Any]]
    stats: CollectStats
    path: Path | None = None


@dataclass
class _Slot:
    env: Any
    spec: EpisodeSpec | None = None
    task: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    generations: list[Generation] = field(default_factory=list)
    simulator_errors: list[dict[str, Any]] = field(default_factory=list)
    policy_retries: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    replayed_turns: int = 0  # agent messages the environment played itself before the policy's first turn

    def start(self, spec: EpisodeSpec, task: Any) -> None:
        self.spec, self.task, self.info, self.generations = spec, task, {}, []
        self.simulator_errors, self.policy_retries, self.replayed_turns = [], [], 0
        self.started = time.perf_counter()

    def messages(self) -> list[dict[str, Any]]:
        """The dialogue as last seen (the problem statement alone before the first observation)."""
        if self.info.get("messages"):
            return [dict(m) for m in self.info["messages"]]
        return [{"role": "user", "content": self.task.problem_description}]


def _make_envs(env_id: str, count: int, tasks: Any, simulator: Any, env_kwargs: Mapping[str, Any],
               make_env: Callable[[], Any] | None) -> list[Any]:
    if make_env is not None:
        return [make_env() for _ in range(count)]
    import gymnasium as gym

    import colbench_gym  # noqa: F401  (registers the environment ids)

    kwargs = dict(env_kwargs)
    if simulator is not None:
        kwargs["simulator"] = simulator
    return [gym.make(env_id, tasks=tasks, **kwargs) for _ in range(count)]


def build_record(spec: EpisodeSpec, env_id: str, task: Any, messages: Sequence[Mapping[str, Any]],
                 final_info: Mapping[str, Any], reward: float | None, generations: Sequence[Generation],
                 simulator_errors: list[dict[str, Any]], policy_retries: list[dict[str, Any]], policy: str,
                 seconds: float, outcome: str | None = None,
                 errors: Sequence[Mapping[str, Any]] = (), replayed_turns: int = 0) -> dict[str, Any]:
    """The trajectory record of a finished (or aborted) episode; see :mod:`sweet_trl.trajectories`.

    The k-th agent message the policy wrote is annotated with the k-th generation's prompt, raw
    output, token ids and log-probabilities. An environment that starts its episodes from a recorded
    turn state (``info["replayed_turns"]`` at reset, see :class:`sweet_trl.study.credit.ReplayTurnState`)
    played its first ``replayed_turns`` agent messages itself: those carry no generation.
    """
    dialogue: list[dict[str, Any]] = []
    agent_turn = 0
    for message in messages:
        if message["role"] == "system":
            continue
        entry: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message["role"] == "assistant":
            if 0 <= agent_turn - replayed_turns < len(generations):
                g = generations[agent_turn - replayed_turns]
                extra = {"input": g.prompt_text, "output": g.text, "prompt_token_ids": g.prompt_token_ids,
                         "output_token_ids": list(g.token_ids), "logprobs": g.logprobs,
                         "prompt_messages_dropped": g.prompt_messages_dropped or None}
                entry.update({k: v for k, v in extra.items() if v is not None})
            agent_turn += 1
        dialogue.append(entry)
    record: dict[str, Any] = {
        "task": task.to_row(),
        "dialogue_history": dialogue,
        "answer": final_info.get("answer"),
        "reward": None if reward is None else float(reward),
        "episode_id": spec.episode_id,
        "env_id": env_id,
        "task_id": spec.task_id,
        "seed": spec.seed,
        "success": bool(final_info.get("success", False)) and reward is not None,
        "outcome": outcome or final_info.get("outcome") or "no_answer",
        "turns": agent_turn,
    }
    if replayed_turns:
        record["replayed_turns"] = replayed_turns
    for key, value in final_info.items():
        if key not in _INFO_SKIP and key not in record:
            record[key] = json_safe(value)
    record["simulator_errors"] = list(simulator_errors)
    record["policy_errors"] = [dict(e) for e in errors if e.get("source") == "policy"]
    record["env_errors"] = [dict(e) for e in errors if e.get("source") == "env"]
    record["policy_retries"] = list(policy_retries)
    record["generated_tokens"] = sum(len(g.token_ids) for g in generations)
    record["timing"] = {"seconds": round(seconds, 4)}
    record["policy"] = policy
    return record


def collect(
    backend: GenerationBackend,
    *,
    env_id: str = "ColBench-Backend-v0",
    tasks: Any = "train",
    episodes_per_task: int = 1,
    seed: int = 0,
    episodes: Iterable[EpisodeSpec | tuple[str, int]] | None = None,
    output: str | os.PathLike | None = None,
    resume: bool = False,
    overwrite: bool = False,
    retry_errors: bool = False,
    num_envs: int = 16,
    sampling: SamplingParams | None = None,
    simulator: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
    make_env: Callable[[], Any] | None = None,
    envs: Sequence[Any] | None = None,
    max_workers: int | None = None,
    progress: bool = True,
    policy_name: str | None = None,
    fsync: bool = True,
    max_step_wait: float | None = 1.0,
) -> CollectResult:
    """Play the planned episodes with ``backend`` and write one record per episode to ``output``.

    Args:
        backend: any :class:`~sweet_trl.generation.GenerationBackend`.
        env_id: a registered ColBench id (with ``envs=``, taken from their spec when they have one).
        tasks: the environments' ``tasks=`` (split name, JSONL path, rows).
        episodes_per_task, seed: the plan (see :func:`plan_episodes`); or give ``episodes`` explicitly
            as ``EpisodeSpec``s or ``(task_id, seed)`` pairs.
        output: JSONL file; ``None`` keeps the records in memory only.
        resume: keep the file's episodes and play only the missing ones.
        overwrite: start the file over (otherwise an existing file without ``resume`` is an error).
        retry_errors: with ``resume``, play again the episodes whose record shows an infrastructure failure.
        num_envs: episodes played at once (the generation batch size, in episodes).
        sampling: the policy's sampling parameters (default: temperature 1, 512 new tokens).
        simulator: the simulated human of every environment (default: the environment's own).
        env_kwargs: more keywords for ``gym.make`` (``max_turns``, ``privileged``, ...).
        make_env / envs: build, or pass, the environments yourself (``envs`` caps ``num_envs``).
        max_workers: threads stepping environments (default: ``num_envs``).
        progress: show a tqdm bar with episodes, turns, tokens and the success rate so far.
        fsync: fsync every record (the crash-safety guarantee; turn off only for throwaway runs).
        max_step_wait: seconds a round waits for slow environment steps (grading, rendering, a slow
            simulator) once some episodes are ready; the others join a later round. ``None`` waits for
            every step (strict lockstep). The dialogues do not depend on it (per-turn seeds).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if retry_errors and not resume:
        raise ValueError("retry_errors=True needs resume=True")
    sampling = sampling or SamplingParams()
    policy = policy_name or getattr(backend, "name", type(backend).__name__)
    env_kwargs = dict(env_kwargs or {})

    if envs is not None:
        pool = list(envs)
        if not pool:
            raise ValueError("envs= is empty")
        spec_id = getattr(getattr(pool[0], "spec", None), "id", None)
        env_id = spec_id or env_id
    else:
        if make_env is None:  # resolve the tasks once; the environments share the task objects
            from colbench_gym.tasks import resolve_tasks

            tasks = resolve_tasks(tasks, "frontend" if "frontend" in env_id.lower() else "backend")
        pool = _make_envs(env_id, 1, tasks, simulator, env_kwargs, make_env)
    task_by_id = {task.task_id: task for task in pool[0].unwrapped.tasks}

    if episodes is None:
        plan = plan_episodes(list(task_by_id), episodes_per_task, seed)
    else:
        plan = [e if isinstance(e, EpisodeSpec) else EpisodeSpec(str(e[0]), int(e[1])) for e in episodes]
    unknown = sorted({spec.task_id for spec in plan} - set(task_by_id))
    if unknown:
        raise KeyError(f"planned tasks not in the environments' task set: {unknown[:5]}")
    if len({spec.episode_id for spec in plan}) != len(plan):
        raise ValueError("the plan holds the same (task_id, seed) twice")

    writer = TrajectoryWriter(output, resume=resume, overwrite=overwrite, fsync=fsync) if output else None
    stats = CollectStats(planned=len(plan))
    try:
        existing = {r["episode_id"]: r for r in (writer.existing if writer else [])}
        done = {key for key, r in existing.items() if not (retry_errors and has_infra_error(r))}
        pending = deque(spec for spec in plan if spec.episode_id not in done)
        stats.skipped = len(plan) - len(pending)
        if pending:
            count = min(num_envs, len(pending))
            if envs is not None:
                count = min(count, len(pool))
            elif len(pool) < count:
                pool += _make_envs(env_id, count - len(pool), tasks, simulator, env_kwargs, make_env)
            runner = _Runner(backend, [_Slot(env) for env in pool[:count]], pending, task_by_id, env_id, sampling,
                             policy, writer, stats, max_workers or count, progress, max_step_wait)
            new_records = runner.run()
        else:
            new_records = []
    finally:
        if writer is not None:
            writer.close()

    if writer is not None:
        on_file = {r["episode_id"]: r for r in read_trajectories(output)}
    else:
        on_file = {r["episode_id"]: r for r in new_records}
    records = [on_file[spec.episode_id] for spec in plan if spec.episode_id in on_file]
    return CollectResult(records=records, stats=stats, path=Path(output) if output else None)


class _Runner:
    """The collection loop.

    Slots move between two states: *stepping* (a reset or step runs on the thread pool) and *ready*
    (the episode waits for its next agent message). Each round generates for every ready slot in
    one call, then hands their actions to the pool. Before generating, the round waits for the
    environments still stepping, but at most ``max_step_wait`` seconds once one slot is ready, so a
    slow grader or renderer delays its own episode, not every other one.
    """

    def __init__(self, backend, slots, pending, task_by_id, env_id, sampling, policy, writer, stats, workers,
                 progress, max_step_wait):
        self.backend, self.slots, self.pending, self.task_by_id = backend, slots, pending, task_by_id
        self.env_id, self.sampling, self.policy, self.writer, self.stats = env_id, sampling, policy, writer, stats
        self.workers, self.max_step_wait = workers, max_step_wait
        self.records: list[dict[str, Any]] = []
        self.bar = _progress_bar(progress, stats)
        self.ready: list[_Slot] = []
        self.stepping: dict[Future, tuple[_Slot, str | None]] = {}  # future -> (slot, action; None for a reset)

    def run(self) -> list[dict[str, Any]]:
        started = time.perf_counter()
        try:
            with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="colbench-env") as executor:
                self.executor = executor
                self.refill(self.slots)
                while self.ready or self.stepping:
                    self.wait_for_environments()
                    if self.ready:
                        self.generate_round()
        finally:
            self.stats.seconds += time.perf_counter() - started
            if self.bar is not None:
                self.bar.close()
        return self.records

    def wait_for_environments(self) -> None:
        waited = time.perf_counter()
        deadline = None
        while self.stepping:
            if self.ready and self.max_step_wait is not None:
                deadline = deadline or time.perf_counter() + self.max_step_wait
                timeout = max(0.0, deadline - time.perf_counter())
            else:
                timeout = None
            done, _ = wait(list(self.stepping), timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:
                break  # the stragglers go on stepping; the ready slots generate now
            for future in done:
                slot, action = self.stepping.pop(future)
                self.on_environment(slot, action, future.result())
        self.stats.env_wait_seconds += time.perf_counter() - waited
        if self.bar is not None:
            self.bar.set_postfix(_postfix(self.stats), refresh=True)

    def generate_round(self) -> None:
        active, self.ready = self.ready, []
        histories = [slot.info["messages"] for slot in active]
        seeds = [turn_seed(slot.spec, len(slot.generations)) for slot in active]
        generate_started = time.perf_counter()
        outputs = self.backend.generate(histories, n=1, sampling=self.sampling, seeds=seeds)
        self.stats.generate_seconds += time.perf_counter() - generate_started
        self.stats.generate_calls += 1
        if len(outputs) != len(active):
            raise RuntimeError(f"the backend returned {len(outputs)} results for {len(active)} histories")

        freed: list[_Slot] = []
        for slot, samples in zip(active, outputs):
            generation = samples[0]
            turn = len(slot.generations) + 1
            if generation.retries:
                slot.policy_retries.append({"turn": turn, "errors": list(generation.retries)})
            if not generation.ok:
                error = {"source": "policy", "turn": turn, "error": generation.error, "attempts": generation.attempts}
                self.finish(slot, None, {}, slot.messages(), outcome="policy_error", errors=[error])
                freed.append(slot)
                continue
            slot.generations.append(generation)
            self.stats.turns += 1
            self.stats.generated_tokens += len(generation.token_ids)
            self.stepping[self.executor.submit(_step, slot, generation.text)] = (slot, generation.text)
        self.refill(freed)

    def on_environment(self, slot: _Slot, action: str | None, result: Any) -> None:
        """A reset (``action is None``) or a step came back: the slot is ready, or its episode is over."""
        if isinstance(result, BaseException):
            turn = len(slot.generations) if action is not None else 0
            messages = slot.messages() + ([{"role": "assistant", "content": action}] if action is not None else [])
            self.finish(slot, None, {}, messages, outcome="env_error",
                        errors=[{"source": "env", "turn": turn, "error": _describe(result)}])
            self.refill([slot])
            return
        if action is None:
            slot.info = result
            slot.replayed_turns = int(result.get("replayed_turns") or 0)
            self.ready.append(slot)
            return
        _, reward, terminated, truncated, info = result
        slot.info = info
        if info.get("simulator_error"):
            slot.simulator_errors.append({"turn": info.get("turn", len(slot.generations)),
                                          "error": str(info["simulator_error"])})
        if terminated or truncated:
            self.finish(slot, reward, info, slot.messages())
            self.refill([slot])
        else:
            self.ready.append(slot)

    def refill(self, free: list[_Slot]) -> None:
        """Start pending episodes in free slots (the resets run on the pool like steps)."""
        for slot in free:
            if not self.pending:
                return
            spec = self.pending.popleft()
            slot.start(spec, self.task_by_id[spec.task_id])
            self.stepping[self.executor.submit(_reset, slot)] = (slot, None)

    def finish(self, slot: _Slot, reward: float | None, info: Mapping[str, Any], messages: list[dict[str, Any]],
               outcome: str | None = None, errors: Sequence[Mapping[str, Any]] = ()) -> None:
        record = build_record(slot.spec, self.env_id, slot.task, messages, info, reward, slot.generations,
                              slot.simulator_errors, slot.policy_retries, self.policy,
                              time.perf_counter() - slot.started, outcome, errors, slot.replayed_turns)
        if self.writer is not None:
            self.writer.write(record)
        self.records.append(record)
        stats = self.stats
        stats.episodes += 1
        stats.successes += bool(record["success"])
        stats.simulator_errors += len(slot.simulator_errors)
        stats.policy_errors += record["outcome"] == "policy_error"
        stats.env_errors += record["outcome"] == "env_error"
        slot.spec = None
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(_postfix(stats), refresh=False)


def _reset(slot: _Slot) -> Any:
    try:
        _, info = slot.env.reset(seed=slot.spec.seed, options={"task_id": slot.spec.task_id})
        return info
    except Exception as err:  # noqa: BLE001 (a broken task must not stop the others)
        return err


def _step(slot: _Slot, action: str) -> Any:
    try:
        return slot.env.step(action)
    except Exception as err:  # noqa: BLE001
        return err


def _describe(err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def _postfix(stats: CollectStats) -> dict[str, Any]:
    return {"turns": stats.turns, "tokens": stats.generated_tokens,
            "success": f"{stats.success_rate:.0%}" if stats.episodes else "-",
            "errors": stats.policy_errors + stats.env_errors}


def _progress_bar(enabled: bool, stats: CollectStats):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress is a nicety; tqdm comes with the llm extra
        return None
    return tqdm(total=stats.planned, initial=stats.skipped, unit="episode", desc="collect", dynamic_ncols=True)


__all__ = ["CollectResult", "CollectStats", "EpisodeSpec", "build_record", "collect", "plan_episodes", "turn_seed"]
