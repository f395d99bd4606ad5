"""Evaluate any policy backend on a ColBench task split, with the paper's metrics and per-task rows.

    from sweet_trl.evaluation import evaluate
    from sweet_trl.generation import TransformersBackend

    result = evaluate(TransformersBackend("runs/demo/policy"), tasks="test", env_id="ColBench-Backend-v0",
                      output_dir="runs/demo/eval-sweet")
    result.metrics["tests_passed"], result.metrics["success_rate"]

    # frontend, against a reference run (for example GPT-4o's or the base model's trajectories):
    evaluate(backend, tasks="test", env_id="ColBench-Frontend-v0", reference="runs/eval-base/trajectories.jsonl")

Metrics (as in the SWEET-RL paper):

* backend: **% tests passed** (``tests_passed``: the mean reward, i.e. the mean fraction of hidden
  unit tests passed, times 100) and **success rate** (``success_rate``: the share of episodes whose
  answer passes every test);
* frontend: **cosine similarity** (``mean_similarity``: the mean final similarity between the
  agent's page and the target, CLIP by default) and **win rate** (``win_rate``: the share of tasks
  where this policy's similarity beats the reference run's; ties count half).

A win rate only compares like with like: a reference run played in another environment (backend
rewards against frontend similarities) or scored with another similarity metric (SSIM against CLIP)
is refused with a ``ValueError``. Reference records that do not say which metric scored them (the
original ColBench runs) are compared as they are.

An episode that stopped on an infrastructure failure (``outcome`` ``policy_error``/``env_error``)
counts as reward 0; it and the episodes whose grader or renderer failed are counted in
``infra_errors``, and running ``evaluate`` again with the same ``output_dir`` replays only those and
the missing episodes. That resumes the *same* evaluation only: the folder's ``settings.json`` (and
the ``policy``/``env_id`` of its records) must match the call, else ``evaluate`` raises a
``ValueError`` instead of reporting one policy's episodes under another's name; pass another
``output_dir``, or ``overwrite=True`` to start the folder over. The environments are made with
``privileged=False``: the policy never sees training-time information.

Files written to ``output_dir``: ``trajectories.jsonl`` (every episode), ``settings.json`` (what
identifies the run: policy, env_id, sampling, environment keywords, simulator), ``metrics.json``,
``per_task.json`` (one row per task), and the printed table as ``summary.txt``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweet_trl.generation.base import GenerationBackend, SamplingParams
from sweet_trl.rollouts import collect
from sweet_trl.trajectories import Trajectory, read_trajectories

DEFAULT_EVAL_SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=512)

TRAJECTORIES_FILE = "trajectories.jsonl"
SETTINGS_FILE = "settings.json"
RESULT_FILES = ("metrics.json", "per_task.json", "summary.txt")

# Sampling fields that do not change the dialogues: ``collect`` seeds every turn itself, and log-probabilities
# are only recorded. Environment keywords that only say how pages are rendered or shown, not what is scored.
_SAMPLING_NOT_IDENTIFYING = ("seed", "logprobs")
_ENV_KWARGS_NOT_IDENTIFYING = ("renderer", "render_workers", "render_mode")


@dataclass
class EvaluationResult:
    """Headline ``metrics``, one row per task in ``rows``, and the episode ``records``."""

    metrics: dict[str, Any]
    rows: list[dict[str, Any]]
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    output_dir: Path | None = None

    @property
    def kind(self) -> str:
        return self.metrics["kind"]

    def table(self, max_rows: int | None = None) -> str:
        return format_table(self.metrics, self.rows, max_rows)

    def save(self, output_dir: str | os.PathLike) -> Path:
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        _write_json(output_dir / "metrics.json", self.metrics)
        _write_json(output_dir / "per_task.json", self.rows)
        (output_dir / "summary.txt").write_text(self.table() + "\n", encoding="utf-8")
        return output_dir


def _write_json(path: Path, data: Any) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _kind(env_id: str, records: Sequence[Mapping[str, Any]]) -> str:
    if "frontend" in env_id.lower():
        return "frontend"
    if "backend" in env_id.lower():
        return "backend"
    return "frontend" if any("similarity" in r for r in records) else "backend"


def _score(record: Mapping[str, Any], kind: str) -> float:
    """The episode's reward (a frontend episode's page similarity when it has one); an infrastructure failure
    scores 0 (it never produced an answer)."""
    trajectory = Trajectory(record)
    score = trajectory.similarity if kind == "frontend" and trajectory.similarity is not None else trajectory.reward
    return 0.0 if score is None else score


def _declared(records: Sequence[Mapping[str, Any]], key: str) -> set[str]:
    """The values of ``key`` the records state (records without it state nothing)."""
    return {str(r[key]) for r in records if r.get(key)}


def _env_kind(env_id: str) -> str | None:
    lowered = env_id.lower()
    return "frontend" if "frontend" in lowered else "backend" if "backend" in lowered else None


def _check_comparable(records: Sequence[Mapping[str, Any]], kind: str,
                      reference: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a win rate between runs whose scores mean different things (another environment or metric)."""
    ours_ids, theirs_ids = _declared(records, "env_id"), _declared(reference, "env_id")
    theirs_kinds = {k for k in map(_env_kind, theirs_ids) if k is not None}
    if (theirs_kinds and theirs_kinds != {kind}) or (ours_ids and theirs_ids and ours_ids != theirs_ids):
        raise ValueError(
            f"the reference run was played in {sorted(theirs_ids)} but these records in {sorted(ours_ids) or [kind]}: "
            "a win rate only compares runs of the same environment (backend rewards are the share of tests passed, "
            "frontend rewards a page similarity); pass a reference run of the same environment")
    ours_metrics, theirs_metrics = _declared(records, "similarity_metric"), _declared(reference, "similarity_metric")
    if ours_metrics and theirs_metrics and ours_metrics != theirs_metrics:
        raise ValueError(
            f"the reference run is scored with {'/'.join(sorted(theirs_metrics))} similarity but these records "
            f"with {'/'.join(sorted(ours_metrics))}: the scores are on different scales and a win rate between them "
            "means nothing; pass a reference run scored with the same similarity metric (the environment's "
            "`similarity=` keyword)")


def _reference_scores(reference: Any, kind: str, records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean score per task of a reference run (records, a JSONL/dataset path, an EvaluationResult or a mapping).

    Reference records must come from the same environment and, when both sides say which one, be scored
    with the same similarity metric as ``records`` (``ValueError`` otherwise); a ``{task_id: score}``
    mapping states neither and is taken as it is.
    """
    if isinstance(reference, EvaluationResult):
        reference = reference.records
    if isinstance(reference, Mapping):
        return {str(k): float(v) for k, v in reference.items()}
    reference_records = read_trajectories(reference)  # normalizes original ColBench rows (guessing their env_id)
    _check_comparable(records, kind, reference_records)
    scores: dict[str, list[float]] = defaultdict(list)
    for record in reference_records:
        scores[Trajectory(record).task_id].append(_score(record, kind))
    return {task_id: sum(values) / len(values) for task_id, values in scores.items()}


def _win_outcomes(ours: Mapping[str, float], theirs: Mapping[str, float], tie_tolerance: float) -> dict[str, float]:
    """Per shared task: 1 win, 0.5 tie, 0 loss (the rule of :func:`colbench_gym.rewards.win_rate`)."""
    from colbench_gym.rewards.win_rate import win_rate

    if not set(ours) & set(theirs):
        return {}
    return dict(win_rate(dict(ours), dict(theirs), tie_tolerance=tie_tolerance).per_task)


def pass_at_k(successes: int, samples: int, k: int) -> float:
    """The chance that at least one of ``k`` answers drawn without replacement from ``samples`` succeeds, when
    ``successes`` of them do: 1 - C(n - c, k) / C(n, k), the unbiased estimator of pass@k."""
    if not 0 < k <= samples or not 0 <= successes <= samples:
        raise ValueError(f"need 0 < k <= samples and 0 <= successes <= samples, got k={k}, "
                         f"samples={samples}, successes={successes}")
    return 1.0 - math.comb(samples - successes, k) / math.comb(samples, k)


def episode_pass_at_k(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``{"pass@k": ...}`` for k = 1, 2, 4, ... up to the fewest episodes of a task: the chance that one of k
    episodes of a task succeeds, averaged over tasks (how much a method that picks among its own episodes has to
    find)."""
    fewest = min((int(row["episodes"]) for row in rows), default=0)
    out, k = {}, 1
    while k <= fewest:
        out[f"pass@{k}"] = sum(pass_at_k(round(row["success_rate"] * row["episodes"]), int(row["episodes"]), k)
                               for row in rows) / len(rows)
        k *= 2
    return out


def told_facts_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Where the episodes of multi-fact tasks (rows with ``hidden_facts``, ``colbench_gym.tasks.procedural_multi``)
    fail, asking or answering: ``outline_told`` and ``all_facts_told``, the share of those episodes whose human said
    the outline / every hidden fact; ``facts_told``, the mean share of a task's facts said; ``success_when_all_told``,
    the success rate of the episodes told every fact (``None`` when none was). Empty without such records."""
    told, outline, every, succeeded = [], [], [], []
    for record in records:
        task = record.get("task") or {}
        facts = [f.get("fact", "") for f in task.get("hidden_facts") or [] if isinstance(f, Mapping)]
        if not facts:
            continue
        said = " ".join(str(m.get("content", "")) for m in (record.get("dialogue_history") or [])[1:]
                        if isinstance(m, Mapping) and m.get("role") == "user")
        share = sum(fact in said for fact in facts) / len(facts)
        told.append(share)
        outline.append(bool(task.get("outline")) and str(task["outline"]) in said)
        every.append(share == 1.0)
        if share == 1.0:
            succeeded.append(Trajectory(record).succeeded())
    if not told:
        return {}
    return {"outline_told": sum(outline) / len(told), "facts_told": sum(told) / len(told),
            "all_facts_told": sum(every) / len(told),
            "success_when_all_told": sum(succeeded) / len(succeeded) if succeeded else None}


def evaluate_records(records: Sequence[Mapping[str, Any]], env_id: str | None = None, reference: Any = None,
                     policy: str | None = None, tie_tolerance: float = 1e-6) -> EvaluationResult:
    """The paper's metrics and per-task rows from finished trajectory records (no generation).

    ``reference`` (see :func:`evaluate`) adds the win rate. It raises ``ValueError`` when the reference
    records were played in another environment than ``records``, or when both sides name their
    ``similarity_metric`` and the names differ; also when ``records`` themselves mix similarity metrics.
    """
    records = [dict(r) for r in records]
    if not records:
        raise ValueError("no trajectory records to evaluate")
    env_id = env_id or records[0].get("env_id") or "ColBench-Backend-v0"
    kind = _kind(env_id, records)
    similarity_metrics = _declared(records, "similarity_metric")
    if len(similarity_metrics) > 1:
        raise ValueError(f"the records mix similarity metrics {sorted(similarity_metrics)}: a mean over "
                         "different scales means nothing; evaluate each metric's records apart")
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_task[Trajectory(record).task_id].append(record)

    reference_scores = _reference_scores(reference, kind, records) if reference is not None else None
    rows = []
    for task_id, episodes in by_task.items():
        scores = [_score(r, kind) for r in episodes]
        row: dict[str, Any] = {
            "task_id": task_id,
            "episodes": len(episodes),
            "mean_reward": sum(scores) / len(scores),
            "success_rate": sum(Trajectory(r).succeeded() for r in episodes) / len(episodes),
            "answered": sum(r.get("outcome") == "answered" for r in episodes) / len(episodes),
            "mean_turns": sum(int(r.get("turns") or 0) for r in episodes) / len(episodes),
            "infra_errors": sum(Trajectory(r).has_infra_error for r in episodes),
            "simulator_errors": sum(len(r.get("simulator_errors") or []) for r in episodes),
        }
        if kind == "frontend":
            row["mean_similarity"] = row["mean_reward"]
        rows.append(row)
    if reference_scores is not None:
        outcomes = _win_outcomes({row["task_id"]: row["mean_reward"] for row in rows}, reference_scores,
                                 tie_tolerance)
        for row in rows:
            if row["task_id"] in outcomes:
                row["reference"] = reference_scores[row["task_id"]]
                row["win"] = outcomes[row["task_id"]]

    n = len(records)
    mean_reward = sum(_score(r, kind) for r in records) / n
    metrics: dict[str, Any] = {
        "env_id": env_id,
        "kind": kind,
        "policy": policy or records[0].get("policy"),
        "episodes": n,
        "tasks": len(by_task),
        "mean_reward": mean_reward,
        "success_rate": sum(Trajectory(r).succeeded() for r in records) / n,
        "answered_rate": sum(r.get("outcome") == "answered" for r in records) / n,
        "mean_turns": sum(int(r.get("turns") or 0) for r in records) / n,
        "infra_errors": sum(Trajectory(r).has_infra_error for r in records),
        "simulator_errors": sum(len(r.get("simulator_errors") or []) for r in records),
        "generated_tokens": sum(int(r.get("generated_tokens") or 0) for r in records),
    }
    if kind == "backend":
        metrics["tests_passed"] = 100.0 * mean_reward
        metrics.update(episode_pass_at_k(rows))
        metrics.update(told_facts_metrics(records))
    else:
        metrics["mean_similarity"] = mean_reward
        metrics["similarity_metric"] = next((r["similarity_metric"] for r in records if r.get("similarity_metric")),
                                            None)
    if reference_scores is not None:
        compared = [row for row in rows if "win" in row]
        metrics["reference_tasks"] = len(compared)
        metrics["missing_in_reference"] = len(rows) - len(compared)
        if compared:
            metrics["win_rate"] = sum(row["win"] for row in compared) / len(compared)
            metrics["wins"] = sum(row["win"] == 1.0 for row in compared)
            metrics["ties"] = sum(row["win"] == 0.5 for row in compared)
            metrics["losses"] = sum(row["win"] == 0.0 for row in compared)
        else:
            metrics["win_rate"] = None
    rows.sort(key=lambda row: row["task_id"])
    return EvaluationResult(metrics=metrics, rows=rows, records=records)


def summarize(records: Sequence[Mapping[str, Any]], env_id: str | None = None, reference: Any = None) -> dict[str, Any]:
    """The headline metrics of finished records (``evaluate_records(...).metrics``)."""
    return evaluate_records(records, env_id=env_id, reference=reference).metrics


def evaluate(
    backend: GenerationBackend,
    tasks: Any = "test",
    env_id: str = "ColBench-Backend-v0",
    *,
    episodes_per_task: int = 1,
    seed: int = 1000,
    output_dir: str | os.PathLike | None = None,
    reference: Any = None,
    sampling: SamplingParams | None = None,
    num_envs: int = 16,
    simulator: Any = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_workers: int | None = None,
    progress: bool = True,
    verbose: bool = True,
    overwrite: bool = False,
) -> EvaluationResult:
    """Roll out ``backend`` on every task of ``tasks`` and compute the metrics.

    Args:
        backend: any generation backend (transformers, vLLM, OpenAI-compatible).
        tasks: a split name, JSONL path or rows (the environments' ``tasks=``).
        env_id: ``"ColBench-Backend-v0"`` or ``"ColBench-Frontend-v0"``.
        episodes_per_task, seed: episode seeds ``seed .. seed + episodes_per_task - 1`` per task.
        output_dir: where the trajectories and metrics go. An existing run there is completed, not redone,
            if it is the same evaluation: the same policy (the backend's ``name``), ``env_id``, ``sampling``
            (all but ``seed`` and ``logprobs``, which do not change the dialogues), ``env_kwargs`` and
            simulator, as stored in ``settings.json`` and in the records. Otherwise ``ValueError``, naming
            both; more tasks, episodes or seeds extend the run.
        reference: a reference run for the win rate (trajectory JSONL path, records, an
            :class:`EvaluationResult` or ``{task_id: score}``) of the same environment and, when its records
            say so, the same similarity metric (``ValueError`` otherwise).
        sampling: default greedy decoding with 512 new tokens.
        num_envs, simulator, env_kwargs, max_workers, progress: passed to :func:`~sweet_trl.rollouts.collect`
            (``privileged`` defaults to ``False`` here).
        verbose: print the metrics and the per-task table.
        overwrite: start ``output_dir`` over: its trajectories, settings and metrics files are replaced
            (other files in it are left alone), whatever run they belonged to.
    """
    env_kwargs = {"privileged": False, **dict(env_kwargs or {})}
    sampling = sampling or DEFAULT_EVAL_SAMPLING
    policy = getattr(backend, "name", type(backend).__name__)  # the name collect() records
    output = None
    if output_dir is not None:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        output = folder / TRAJECTORIES_FILE
        settings = run_settings(policy, env_id, sampling, env_kwargs, simulator)
        if overwrite:
            for name in RESULT_FILES:  # stale results of the previous run must not outlive its trajectories
                (folder / name).unlink(missing_ok=True)
        else:
            _check_same_run(folder, settings)
        _write_json(folder / SETTINGS_FILE, settings)
    resume = output is not None and not overwrite
    collected = collect(backend, env_id=env_id, tasks=tasks, episodes_per_task=episodes_per_task, seed=seed,
                        output=output, resume=resume, overwrite=overwrite, retry_errors=resume,
                        num_envs=num_envs, sampling=sampling, simulator=simulator, env_kwargs=env_kwargs,
                        max_workers=max_workers, progress=progress)
    result = evaluate_records(collected.records, env_id=env_id, reference=reference, policy=policy)
    result.metrics["seconds"] = round(collected.stats.seconds, 3)  # of this call (0 when all was on disk)
    if output_dir is not None:
        result.output_dir = result.save(output_dir)
    if verbose:
        print(result.table())
    return result


# -- what identifies a run -----------------------------------------------------------------------

def _describe(value: Any) -> Any:
    """A JSON view of a setting that is the same in every process: objects by type (and name/model)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_describe(v) for v in value), key=repr)
    kind = type(value)
    described: dict[str, Any] = {"type": f"{kind.__module__}.{kind.__qualname__}"}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        described.update({f.name: _describe(getattr(value, f.name)) for f in dataclasses.fields(value)})
    else:
        for attribute in ("name", "model"):
            if isinstance(getattr(value, attribute, None), str):
                described[attribute] = getattr(value, attribute)
    return described


def run_settings(policy: str | None, env_id: str, sampling: SamplingParams, env_kwargs: Mapping[str, Any],
                 simulator: Any = None) -> dict[str, Any]:
    """What identifies an evaluation run, as :func:`evaluate` stores it in ``settings.json``."""
    return {
        "policy": policy,
        "env_id": env_id,
        "sampling": _describe({f.name: getattr(sampling, f.name) for f in dataclasses.fields(sampling)
                               if f.name not in _SAMPLING_NOT_IDENTIFYING}),
        "env_kwargs": _describe({k: v for k, v in env_kwargs.items() if k not in _ENV_KWARGS_NOT_IDENTIFYING}),
        "simulator": _describe(simulator),
    }


def _settings_on_disk(folder: Path) -> dict[str, Any] | None:
    path = folder / SETTINGS_FILE
    if not path.exists():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is unreadable ({err}), so the run in {folder} cannot be resumed safely; "
                         "pass another output_dir, or overwrite=True to start it over") from err
    if not isinstance(settings, dict):
        raise ValueError(f"{path} is not a JSON object; pass another output_dir, or overwrite=True to start over")
    return settings


def _recorded(path: Path) -> tuple[int, set[Any], set[Any]]:
    """How many records the trajectory file holds, and the ``policy`` and ``env_id`` values they name.

    A lenient scan: a line torn by a killed writer is skipped here and repaired by the collector.
    """
    count, policies, env_ids = 0, set(), set()
    if not path.exists():
        return count, policies, env_ids
    with path.open("rb") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(record, dict):
                count += 1
                policies.add(record.get("policy"))
                env_ids.add(record.get("env_id"))
    return count, policies, env_ids


def _check_same_run(folder: Path, settings: Mapping[str, Any]) -> None:
    """Refuse to resume the run in ``folder`` with different settings: its records would be reported as ours."""
    count, policies, env_ids = _recorded(folder / TRAJECTORIES_FILE)
    if not count:
        return  # nothing to reuse: the folder's old settings, if any, are simply replaced
    stored = _settings_on_disk(folder) or {}
    differences = {key: f"{key}: {stored[key]!r} on disk, {settings[key]!r} now" for key in settings
                   if key in stored and _as_json(stored[key]) != _as_json(settings[key])}
    # The records say which policy and environment played them (also for runs without settings.json).
    for key, recorded in (("policy", policies), ("env_id", env_ids)):
        if key not in differences and recorded != {settings[key]}:
            shown = repr(next(iter(recorded))) if len(recorded) == 1 else sorted(map(str, recorded))
            differences[key] = f"{key}: records of {shown} on disk, {settings[key]!r} now"
    if differences:
        raise ValueError(
            f"{folder} already holds {count} episode(s) of another evaluation ({'; '.join(differences.values())}); "
            "resuming would report them under this call's settings. Pass another output_dir, or overwrite=True to "
            "delete the previous results and start over")


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


# -- printing ------------------------------------------------------------------------------------

def format_table(metrics: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], max_rows: int | None = None) -> str:
    """The headline metrics, then one line per task."""
    kind = metrics["kind"]
    lines = [f"{metrics['env_id']}  policy={metrics.get('policy')}  episodes={metrics['episodes']}  "
             f"tasks={metrics['tasks']}"]
    if kind == "backend":
        lines.append(f"  % tests passed: {metrics['tests_passed']:.1f}    success rate: {metrics['success_rate']:.1%}")
    else:
        metric = metrics.get("similarity_metric") or "similarity"
        lines.append(f"  mean {metric} similarity: {metrics['mean_similarity']:.3f}")
    if metrics.get("win_rate") is not None:
        lines.append(f"  win rate vs reference: {metrics['win_rate']:.1%}  (wins {metrics['wins']}, ties "
                     f"{metrics['ties']}, losses {metrics['losses']} over {metrics['reference_tasks']} tasks)")
    lines.append(f"  answered: {metrics['answered_rate']:.1%}    mean turns: {metrics['mean_turns']:.2f}    "
                 f"simulator errors: {metrics['simulator_errors']}")
    if metrics["infra_errors"]:
        lines.append(f"  WARNING: {metrics['infra_errors']} episode(s) hit infrastructure errors (policy server, "
                     "grader or renderer) and are scored as the environment left them (0 when no answer was "
                     "scored); evaluate again with the same output_dir to replay them")

    score_name = "tests%" if kind == "backend" else "similarity"
    header = ["task_id", "eps", score_name, "success" if kind == "backend" else "answered", "turns", "errors"]
    has_reference = any("win" in row for row in rows)
    if has_reference:
        header += ["reference", "win"]
    table = [header]
    shown = rows if max_rows is None else rows[:max_rows]
    for row in shown:
        score = f"{100 * row['mean_reward']:.1f}" if kind == "backend" else f"{row['mean_reward']:.3f}"
        second = row["success_rate"] if kind == "backend" else row["answered"]
        cells = [_clip(row["task_id"], 40), str(row["episodes"]), score, f"{second:.0%}", f"{row['mean_turns']:.1f}",
                 str(row["infra_errors"] + row["simulator_errors"])]
        if has_reference:
            cells += [f"{row['reference']:.3f}" if "reference" in row else "-",
                      {1.0: "win", 0.5: "tie", 0.0: "loss"}.get(row.get("win"), "-")]
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines.append("")
    for index, cells in enumerate(table):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    if max_rows is not None and len(rows) > max_rows:
        lines.append(f"... {len(rows) - max_rows} more tasks")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = ["DEFAULT_EVAL_SAMPLING", "EvaluationResult", "evaluate", "evaluate_records", "format_table", "run_settings",
           "summarize"]
