"""``sweet-rl credit``: every critic scored against Monte Carlo returns, at question turns and at answer turns.

    sweet-rl credit --config study_cpu --run_dir runs/study_cpu $(python -m sweet_trl.precision) \\
        --credit.results_path runs/critic_credit.json

It reads a study run: the warm-started policy, the zero-shot evaluation's episodes on the held-out tasks (the
states), the collection (the value function's training data), ``train_critic/`` and, when the run has it,
``no_privileged/train_critic/``. With ``--credit.prepare true`` it first runs whichever of those stages is missing
(each skipped when complete), so that one command measures from an empty folder, here on validation states with a
variant critic trained on the run's pairs::

    sweet-rl credit --config study_cpu --run_dir runs/credit $(python -m sweet_trl.precision) --credit.prepare true \\
        --credit.held_out_tasks procedural:validation --credit.train_variants "r64=--lora_r 64 --lora_alpha 128"

It makes the ground truth (:mod:`~sweet_trl.study.credit.mc_values`), fits the value-function baseline, scores every
ranker (:mod:`~sweet_trl.study.credit.scoring`) and writes ``<run_dir>/credit/critic_credit.json``
(:mod:`~sweet_trl.study.credit.results`). Every part is cached under ``<run_dir>/credit/``: a stopped run goes on
where it stopped, and a finished one only recomputes the statistics. ``--credit.scaling 0.25x=runs/other_run``
adds the critic of another run (trained on another amount of data) to the ``scaling`` table;
``--credit.variants beta1=runs/other_critic`` the critic of a run trained on the same data with other settings to the
``variants`` table (the settings that differ are read from its stage marker), each under the run's ranking and
``critic_advantage``, paired with the untrained start and with this run's critic. Choosing settings this way reads
states of held-out episodes of a validation split (``--credit.held_out_tasks`` or ``--credit.held_out``), never
the test tasks.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from colbench_gym.tasks import is_test_split
from sweet_trl.study.credit import scoring
from sweet_trl.study.credit.arguments import CreditArguments, check_results_path
from sweet_trl.study.credit.mc_values import MonteCarloSettings, monte_carlo_values
from sweet_trl.study.credit.results import credit_report, critic_settings, format_report, provenance


def run_credit(config_path: Any, cli_args: Sequence[str] = (), stream: Any = None) -> dict[str, Any]:
    """The command: parse, measure, write the JSON; returns it."""
    import sys

    from sweet_trl.configs import display_name
    from sweet_trl.pipeline import STAGES, _check_keys
    from sweet_trl.pipeline_config import ConfigError, cli_keys, make_parser, split_overrides
    from sweet_trl.study.runner import Study

    shared, per_section = split_overrides(cli_args)
    credit_cli = per_section.pop("credit", [])
    rest = [*shared, *(f"--{s}.{t[2:]}" if t.startswith("--") else t for s, ts in per_section.items() for t in ts)]
    try:
        (args,) = make_parser([CreditArguments], prog="sweet-rl credit").parse_args_into_dataclasses(
            args=credit_cli)
    except ValueError as err:
        raise ConfigError(f"credit: {err}") from err
    check_results_path(args)
    stage_options = set().union(*(_check_keys({}, (), everything=True)[name] for name in STAGES))
    meant = sorted(cli_keys(shared) & {field.name for field in dataclasses.fields(CreditArguments)} - stage_options)
    if meant:
        raise ConfigError(f"no stage reads {', '.join('--' + key for key in meant)}: the measurement's own options "
                          f"are written {', '.join('--credit.' + key for key in meant)}")
    study = Study(config_path, rest, stream=stream or sys.stdout, command="credit")
    return Credit(study, args, command=["sweet-rl", "credit", "--config", display_name(config_path), *cli_args]).run()


class Credit:
    def __init__(self, study: Any, args: CreditArguments, command: Sequence[str] = ()):
        self.study, self.args, self.out = study, args, study.out
        self.command = list(command)
        self.run_dir = study.run_dir
        self.folder = self.run_dir / args.output_name
        self.seconds: dict[str, float] = {}
        self.made: set[str] = set()  # the parts this run computed (the others were read back from the cache)

    def log(self, message: str) -> None:
        print(f"[credit] {message}", file=self.out, flush=True)

    def marker(self, stage_dir: Path) -> dict[str, Any]:
        from sweet_trl.pipeline import StageError

        path = stage_dir / "_COMPLETE.json"
        if not path.exists():
            raise StageError(f"{stage_dir} is not complete: run the study (or that stage) first, or this command "
                             "with --credit.prepare true")
        return json.loads(path.read_text(encoding="utf-8"))

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - started, 1)

    def making(self, name: str, make: Any) -> Any:
        """``make`` (called only when a cached part is computed), noting that ``name`` was computed by this run."""
        def call(*args: Any, **kwargs: Any) -> Any:
            self.made.add(name)
            return make(*args, **kwargs)
        return call

    def seconds_per_part(self) -> dict[str, float]:
        """This run's seconds for the parts it computed; for a part read back, the seconds of the run that made it
        (from the folder's last JSON), so that reading a finished folder back keeps what making it took."""
        path = self.folder / "critic_credit.json"
        try:
            earlier = json.loads(path.read_text(encoding="utf-8")).get("seconds", {}) if path.exists() else {}
        except json.JSONDecodeError:
            earlier = {}
        return {name: (seconds if name in self.made or name not in earlier else earlier[name])
                for name, seconds in self.seconds.items()}

    # -- the parts -----------------------------------------------------------------------------------------------

    def held_out_run(self) -> Path:
        """Where ``held_out_tasks``' zero-shot evaluation runs."""
        return self.folder / "held_out"

    def prepare(self) -> None:
        """``--credit.prepare``: every stage the measurement reads, run where it is missing (a complete one is
        skipped), in the folders the study would give it."""
        from sweet_trl.pipeline.commands import warm_start_override
        from sweet_trl.study.runner import WARM_START

        study, base = self.study, self.run_dir
        if WARM_START in study.config:  # every stage below starts from the warm-started policy, as in the study
            study.shared = [*study.shared, *warm_start_override(base, study.stage(WARM_START, base))]
        for name in ("collect", "critic_pairs", "train_critic"):
            study.stage(name, base)
        critics = [("no_privileged", ["--use_privileged", "false"])] if self.args.without_c else []
        critics += [(f"variant_{label}", options) for label, options in self.args.trained_variants()]
        for folder, options in critics:
            study.link_shared(base / folder, ("collect", "critic_pairs"))
            study.stage("train_critic", base / folder, *options, key=f"{folder}/train_critic")
        if self.args.held_out_tasks:
            study.stage("evaluate", self.held_out_run(), "--policy", "zero_shot",
                        "--eval_tasks", self.args.held_out_tasks, key="held_out/evaluate/zero_shot")
        elif not self.args.held_out:
            study.stage("evaluate", base, "--policy", "zero_shot", key="evaluate/zero_shot")

    def policy(self) -> str:
        """The policy the study's stages start from: the warm start's when the run has one."""
        from sweet_trl.study.runner import WARM_START

        run = self.study.stage_options("collect", [])[0]
        if WARM_START in self.study.config:
            marker = self.marker(self.run_dir / WARM_START)
            return str(self.run_dir / marker["dir"] / marker["outputs"]["policy"])
        return run.policy_model

    def ground_truth(self, policy: str) -> list[dict[str, Any]]:
        import gymnasium as gym

        import colbench_gym  # noqa: F401  (registers the ids)
        from colbench_gym.tasks import resolve_tasks
        from sweet_trl.pipeline import make_simulator, models, release
        from sweet_trl.trajectories import read_trajectories

        run, gen, _ = self.study.stage_options("sample_candidates", ["--policy_model", policy])
        if self.args.held_out:
            trajectories, source = read_trajectories(self.args.held_out), str(Path(self.args.held_out).resolve())
        else:
            evaluated = self.held_out_run() if self.args.held_out_tasks else self.run_dir
            zero_shot = self.marker(evaluated / "evaluate" / "zero_shot")
            trajectories = read_trajectories(evaluated / zero_shot["dir"] / zero_shot["outputs"]["trajectories"])
            source = zero_shot["run_id"]
            tasks_read = zero_shot["config"][0].get("eval_tasks") if zero_shot.get("config") else None
            if not self.args.held_out_tasks and is_test_split(tasks_read):
                self.log(f"the states are of the run's zero-shot evaluation on {tasks_read}: a final read; choose "
                         "settings on --credit.held_out_tasks procedural:validation")
        settings = MonteCarloSettings(states_per_kind=self.args.states_per_kind,
                                      num_candidates=self.args.num_candidates, continuations=self.args.continuations,
                                      temperature=gen.temperature, seed=self.args.seed, policy=policy,
                                      source=source, question_turns=(tuple(self.args.question_turns)
                                                                     if self.args.question_turns else None))
        # the episodes carry their tasks: held-out episodes of any task source replay against their own rows
        rows = {str(record["task"]["task_id"]): record["task"] for record in trajectories if record.get("task")}
        tasks = resolve_tasks(list(rows.values()), run.kind)

        def make_env() -> Any:
            simulator = make_simulator(run)
            return gym.make(run.env_id, tasks=tasks, max_turns=run.max_turns,
                            **({"simulator": simulator} if simulator is not None else {}))

        def backend() -> Any:
            return models.make_backend(gen, policy, name=policy, run=run)

        rows = monte_carlo_values(self.folder / "ground_truth", trajectories, self.making("ground truth", backend),
                                  make_env, settings, env_id=run.env_id, max_turns=run.max_turns,
                                  sampling=models.sampling_params(gen), num_envs=gen.generation_batch_size,
                                  max_new_tokens=gen.max_new_tokens, expect=self.expect)
        release()
        return rows

    def scores(self, rows: list[dict[str, Any]], policy: str) -> dict[str, list[list[float]]]:
        """Every ranker's scores (each cached); a ranker whose model the run lacks is left out, and said."""
        from sweet_trl.losses import RANKING_MODES as RANKINGS
        from sweet_trl.pipeline import release

        _, rank_args = self.study.stage_options("rank", [])
        batch = rank_args.scoring_batch_size
        from sweet_trl.study.critic_eval import settings_of

        # scores belong to one ground truth: its settings (policy, states' source, N, M, seed) key every score file
        values_key = {"ground_truth": settings_of(self.folder / "ground_truth" / "values.jsonl")}
        folder = self.folder / "scores"
        out: dict[str, list[list[float]]] = {}

        def critic_block(stage_dir: Path, rankings: Mapping[str, str], untrained: bool = False) -> None:
            identity = {"critic": self.marker(stage_dir)["run_id"], **values_key}
            loaded: dict[str, Any] = {}

            def critic() -> Any:
                if "critic" not in loaded:
                    loaded["critic"] = scoring.load_critic(stage_dir, batch)
                return loaded["critic"]

            for name, ranking in rankings.items():
                with self.timed(f"score {name}"):
                    out[name] = scoring.cached_scores(folder, name, {**identity, "ranking": ranking}, rows,
                                                      self.making(f"score {name}", partial(
                                                          lambda r: scoring.critic_ranker(critic(), r), ranking)))
            if untrained:
                ranking = rank_args.ranking
                with self.timed("score untrained_with_c"):
                    out["untrained_with_c"] = scoring.cached_scores(
                        folder, "untrained_with_c", {"base_of": identity["critic"], "ranking": ranking, **values_key},
                        rows, self.making("score untrained_with_c", lambda: scoring.critic_ranker(
                            scoring.untrained_critic(critic(), batch), ranking)))
            loaded.clear()
            release()

        rankings = {"trained_with_c": rank_args.ranking,
                    **{f"trained_with_c:{r}": r for r in RANKINGS if r != rank_args.ranking}}
        critic_block(self.run_dir / "train_critic", rankings, untrained=True)
        without_c = self.run_dir / "no_privileged" / "train_critic"
        if self.args.without_c:
            if (without_c / "_COMPLETE.json").exists():
                critic_block(without_c, {"trained_without_c": rank_args.ranking})
            else:
                self.log(f"no critic without c ({without_c} is not complete): its rows are left out")
        for entry in self.args.scaling:
            label, other = entry.split("=", 1)
            critic_block(Path(other) / "train_critic", {f"scaling:{label}": rank_args.ranking})
        for label, other in self.args.variant_folders(self.run_dir):
            critic_block(other / "train_critic", {
                f"variant:{label}": rank_args.ranking,
                **({f"variant:{label}:critic_advantage": "critic_advantage"}
                   if rank_args.ranking != "critic_advantage" else {})})
        out["policy_likelihood"] = [scoring.policy_likelihood(row) for row in rows]
        if self.args.value_function:
            with self.timed("value function"):
                out["value_function"] = self.value_function_scores(rows, policy, values_key)
        return out

    def value_function_scores(self, rows: list[dict[str, Any]], policy: str, values_key: Mapping[str, Any]
                              ) -> list[list[float]]:
        from sweet_trl.pipeline import release
        from sweet_trl.study.credit.value_function import (
            ValueFunctionScorer,
            ValueFunctionSettings,
            train_value_function,
        )
        from sweet_trl.trajectories import read_trajectories

        options = self.study.stage_options("train_critic", [])
        run, bf16 = options[0], any(getattr(o, "bf16", False) for o in options[1:])
        collect = self.marker(self.run_dir / "collect")
        settings = ValueFunctionSettings(learning_rate=self.args.value_function_learning_rate,
                                         epochs=self.args.value_function_epochs,
                                         bf16=bf16, seed=self.args.seed)
        records = read_trajectories(self.run_dir / collect["dir"] / collect["outputs"]["trajectories"])
        model_dir = train_value_function(records, policy, self.folder / "value_function", settings,
                                         env_id=run.env_id, max_turns=run.max_turns)
        identity = {"value_function": json.loads((model_dir / "value_function_settings.json").read_text()),
                    **values_key}
        scores = scoring.cached_scores(self.folder / "scores", "value_function", identity, rows,
                                       self.making("value function", lambda: scoring.value_function_ranker(
                                           ValueFunctionScorer(model_dir, bf16=settings.bf16))))
        release()
        return scores

    # -- the result ----------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from sweet_trl.pipeline import StageError
        from sweet_trl.pipeline.runner import seen_by_status

        # the other runs' critics are read after the ground truth (the slow part): a missing one is said now
        for option, label, run_dir in [*(("scaling", *entry.split("=", 1)) for entry in self.args.scaling),
                                       *(("variants", label, str(folder))
                                         for label, folder in self.args.variants_named())]:
            if not (Path(run_dir) / "train_critic" / "_COMPLETE.json").is_file():
                raise StageError(f"--credit.{option} {label}={run_dir}: {Path(run_dir) / 'train_critic'} is not a "
                                 "finished critic (sweet-rl train-critic --run_dir ... trains one there)")
        if self.args.prepare:
            self.prepare()  # stages of their own, each seen by `sweet-rl status` as it runs
        with seen_by_status(self.folder):
            started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            policy = self.policy()
            with self.timed("ground truth"):
                rows = self.ground_truth(policy)
            scores = self.scores(rows, policy)
            result = credit_report(rows, scores, self.args, scaling_runs=self.scaling_runs(),
                                   variant_runs=self.variant_runs())
            # the ranking of the rows named without one (trained_with_c, untrained_with_c, scaling, variants)
            result["settings"]["run_ranking"] = self.study.stage_options("rank", [])[1].ranking
            result["seconds"] = self.seconds_per_part()
            result["run_dir"] = str(self.run_dir)
            result["provenance"] = provenance(self.command)
            text = json.dumps(result, indent=1)
            (self.folder / "critic_credit.json").write_text(text, encoding="utf-8")
            if self.args.results_path:
                Path(self.args.results_path).parent.mkdir(parents=True, exist_ok=True)
                Path(self.args.results_path).write_text(text, encoding="utf-8")
            self.write_marker(result, started)
        print(format_report(result), file=self.out, flush=True)
        return result

    def write_marker(self, result: Mapping[str, Any], started: str) -> None:
        """``_COMPLETE.json`` as a stage's, so that ``sweet-rl status`` lists the measurement with its key figures:
        what training adds at each kind of turn (top-1, trained minus untrained), the states scored, and the seconds
        the parts took when they were made."""
        from sweet_trl.pipeline.runner import MARKER, write_json_atomic

        paired = result.get("paired", {}).get("trained_with_c - untrained_with_c", {})
        metrics = {f"{kind}_top1_trained_minus_untrained": (paired.get(f"{kind}_turns", {}).get("top1") or {}).get("mean")
                   for kind in ("question", "answer")}
        counts = {f"{kind}_states": result.get("ground_truth", {}).get(f"{kind}_turns", {}).get("states")
                  for kind in ("question", "answer")}
        # the run's stages it read, as a stage records its inputs: made again since, `status` calls it stale
        read = {}
        for name in ("warm_start", "collect", "train_critic", "no_privileged/train_critic"):
            path = self.run_dir / name / MARKER
            if path.is_file():
                read[name] = json.loads(path.read_text(encoding="utf-8"))
        write_json_atomic(self.folder / MARKER, {
            "stage": "credit", "dir": str(self.folder.relative_to(self.run_dir)), "started_at": started,
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": sum(result.get("seconds", {}).values()),
            "counts": {k: v for k, v in counts.items() if v is not None},
            "metrics": {k: v for k, v in metrics.items() if v is not None},
            "outputs": {"results": "critic_credit.json"}, "info": {"command": self.command},
            "inputs": {name: marker.get("fingerprint") for name, marker in read.items()},
            "input_runs": {name: marker.get("run_id") for name, marker in read.items()},
            "holds_stages": True})  # --credit.prepare's held-out evaluation runs in its folder

    def expect(self, total: int, unit: str, path: Path) -> None:
        """Say how many rows of ``path`` (a file under the measurement's folder) a part has to write: ``sweet-rl
        status`` counts them (the ground truth's continuations, the slow part)."""
        from sweet_trl.pipeline.runner import EXPECTED, write_json_atomic

        write_json_atomic(self.folder / EXPECTED, {"total": total, "unit": unit,
                                                   "file": str(Path(path).relative_to(self.folder))})

    def scaling_runs(self) -> dict[str, dict[str, Any]]:
        """Per scaling label, how much data its critic saw (episodes collected, critic pairs)."""
        runs = {"1x": self.run_dir, **{e.split("=", 1)[0]: Path(e.split("=", 1)[1]) for e in self.args.scaling}}
        out = {}
        for label, run_dir in runs.items():
            collect = self.marker(run_dir / "collect")
            pairs = self.marker(run_dir / "critic_pairs")
            out[label] = {"run_dir": str(run_dir), "trajectories": collect["counts"].get("episodes"),
                          "critic_pairs": pairs["counts"].get("pairs"),
                          "pairs_by_what_the_human_told": self.pair_signal(run_dir)}
        return out

    def pair_signal(self, run_dir: Path) -> dict[str, Any] | None:
        """Where the run's critic pairs differ before the answer (:mod:`~sweet_trl.study.credit.pair_signal`)."""
        from sweet_trl.study.credit.pair_signal import pair_signal_of_file

        path = run_dir / "critic_pairs" / "_COMPLETE.json"
        if not path.exists():
            return None
        marker = json.loads(path.read_text(encoding="utf-8"))
        return pair_signal_of_file(path.parent / marker["outputs"]["pairs"])

    def variant_runs(self) -> dict[str, dict[str, Any]]:
        """Per variant label, its run and the critic settings in which it differs from this run's critic."""
        shipped = critic_settings(self.marker(self.run_dir / "train_critic"))
        out = {}
        for label, run_dir in self.args.variant_folders(self.run_dir):
            marker = self.marker(run_dir / "train_critic")
            settings = critic_settings(marker)
            out[label] = {"run_dir": str(run_dir), "steps": marker["counts"].get("steps"),
                          "train_loss": marker["metrics"].get("train_loss"),
                          "pairs_by_what_the_human_told": self.pair_signal(run_dir),
                          "settings": {key: value for key, value in sorted(settings.items())
                                       if shipped.get(key) != value}}
        return out
