"""``sweet-rl credit``: every critic scored against Monte Carlo returns, at question turns and at answer turns.

    sweet-rl credit --config study_cpu --run_dir runs/study_cpu $(python -m sweet_trl.precision) \\
        --credit.results_path benchmarks/results/critic_credit.json

It reads a study run: the warm-started policy, the zero-shot evaluation's episodes on the held-out tasks (the
states), the collection (the value function's training data), ``train_critic/`` and, when the run has it,
``no_privileged/train_critic/``. With ``--credit.prepare true`` it first runs whichever of those stages is missing
(each skipped when complete), so that one command measures from a fresh clone::

    sweet-rl credit --config study_cpu --run_dir runs/credit $(python -m sweet_trl.precision) --credit.prepare true \
        --credit.held_out_tasks procedural:validation --credit.train_variants "r64=--lora_r 64 --lora_alpha 128"
 It makes the ground truth (:mod:`~sweet_trl.study.credit.mc_values`),
fits the value-function baseline, scores every ranker (:mod:`~sweet_trl.study.credit.scoring`) and writes
``<run_dir>/credit/critic_credit.json``. Every part is cached under ``<run_dir>/credit/``: a stopped run goes on
where it stopped, and a finished one only recomputes the statistics. ``--credit.scaling 0.25x=runs/other_run``
adds the critic of another run (trained on another amount of data) to the ``scaling`` table;
``--credit.variants beta1=runs/other_critic`` the critic of a run trained on the same data with other settings to the
``variants`` table (the settings that differ are read from its stage marker), each under the run's ranking and
``critic_advantage``, paired with the untrained start and with this run's critic. Choosing settings this way reads
states of ``--credit.held_out`` episodes (a validation split), never the test tasks.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sweet_trl.study.credit import metrics, scoring
from sweet_trl.study.credit.mc_values import KINDS, MonteCarloSettings, monte_carlo_values

# what training adds (each ranking of the trained critic against its untrained start), what c adds, the baseline
PAIRED = (("trained_with_c", "untrained_with_c"), ("trained_with_c", "trained_without_c"),
          ("trained_with_c", "value_function"))


def paired_names(rankers: Sequence[str]) -> list[tuple[str, str]]:
    """:data:`PAIRED`, every ranking of the trained critic against the untrained one, and every ranker against a
    random pick, for the rankers present."""
    variants = [(name, "untrained_with_c") for name in rankers if name.startswith("trained_with_c:")]
    chance = [(name, "random") for name in rankers if name != "random"]
    return [(a, b) for a, b in (*PAIRED, *variants, *chance) if a in rankers and b in rankers]


@dataclass
class CreditArguments:
    r"""
    The `credit` command: the critics' per-turn credit against Monte Carlo returns on held-out turn states.

    Parameters:
        states_per_kind (`int`, *optional*, defaults to `48`):
            Held-out question turns and answer turns (each at most this many, one of each kind per episode) from
            the zero-shot evaluation's episodes.
        num_candidates (`int`, *optional*, defaults to `8`):
            Candidate messages the policy samples per state (N).
        continuations (`int`, *optional*, defaults to `4`):
            Episodes the policy plays from every candidate that does not end the episode (M); a candidate that
            answers is graded, its value exact.
        question_turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Draw question states at these agent turns only (0 the first): `1 2 3` in a family whose every episode
            opens with the same question. Every turn when unset.
        value_function (`bool`, *optional*, defaults to `True`):
            Fit and score the value-function baseline (a scalar head on returns, without c).
        value_function_learning_rate (`float`, *optional*, defaults to `2e-4`):
            Its learning rate (LoRA).
        value_function_epochs (`float`, *optional*, defaults to `2.0`):
            Its epochs over every agent turn of the collection.
        scaling (`list[str]`, *optional*, defaults to `[]`):
            `label=run_dir` of other runs whose `train_critic/` is complete (the same states and candidates are
            scored by each): the `scaling` table, with this run's own critic as `1x`.
        variants (`list[str]`, *optional*, defaults to `[]`):
            `label=run_dir` of runs whose critic was trained on this run's critic pairs with other settings (a
            folder linking `collect`, `critic_pairs` and `warm_start`, then `sweet-rl train-critic --beta 1.0`, say):
            the `variants` table.
        train_variants (`list[str]`, *optional*, defaults to `[]`):
            `label=options`: a critic trained on this run's critic pairs with these `train-critic` options
            (`r64=--lora_r 64 --lora_alpha 128`), in `<run_dir>/variant_<label>/` (which links the run's
            `collect` and `critic_pairs`), trained by `prepare`, then scored as a row of the `variants` table.
        without_c (`bool`, *optional*, defaults to `True`):
            Score the critic trained without c (`no_privileged/train_critic/`, the paper's ablation) where the run
            has it; `prepare` trains it. `false`: neither.
        prepare (`bool`, *optional*, defaults to `False`):
            First run the stages the measurement reads where they are missing, each skipped when complete (a
            stopped command goes on where it stopped): the warm start, the collection, the critic pairs, the
            critic, the critic without c, each `train_variants` critic and the zero-shot evaluation the states come
            from. Without it a missing stage is an error that names it.
        held_out_tasks (`str` or `None`, *optional*, defaults to `None`):
            The states come from the zero-shot policy's episodes on these tasks (`procedural:validation`), an
            evaluation in `<run_dir>/<output_name>/held_out/` that `prepare` makes. Not with `held_out`.
        held_out (`str` or `None`, *optional*, defaults to `None`):
            The held-out episodes the states come from (a trajectories file: an evaluation on
            `procedural:validation`, say, to choose critic settings without reading the test tasks). Default: the
            run's zero-shot evaluation on its `eval_tasks`.
        output_name (`str`, *optional*, defaults to `"credit"`):
            The folder under the run that holds the ground truth, the scores and the JSON (one per source of states).
        results_path (`str` or `None`, *optional*, defaults to `None`):
            Also write the JSON here (for example `benchmarks/results/critic_credit.json`). A file there that holds
            `scaling` or `variants` rows this command does not score is not rewritten (the command stops before any
            work and names them): a read-back with an older command line would drop the critics scored since.
        overwrite_results (`bool`, *optional*, defaults to `False`):
            Rewrite `results_path` even so.
        bootstrap_samples (`int`, *optional*, defaults to `10000`):
            Resamples of the tasks for every interval.
        seed (`int`, *optional*, defaults to `0`):
            The states' selection, the candidates, the continuations and the bootstrap.
    """

    states_per_kind: int = 48
    num_candidates: int = 8
    continuations: int = 4
    question_turns: list[int] | None = None
    value_function: bool = True
    value_function_learning_rate: float = 2e-4
    value_function_epochs: float = 2.0
    scaling: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    train_variants: list[str] = field(default_factory=list)
    without_c: bool = True
    prepare: bool = False
    held_out_tasks: str | None = None
    held_out: str | None = None
    output_name: str = "credit"
    results_path: str | None = None
    overwrite_results: bool = False
    bootstrap_samples: int = 10_000
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("states_per_kind", "num_candidates", "continuations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_candidates < 2:
            raise ValueError("num_candidates must be >= 2: one candidate has no order to agree with")
        if self.held_out and self.held_out_tasks:
            raise ValueError("held_out (episodes) and held_out_tasks (tasks to play them on) name the states twice: "
                             "give one")
        for option, value in (("scaling", "run_dir"), ("variants", "run_dir"), ("train_variants", "options")):
            for entry in getattr(self, option):
                if "=" not in entry or not entry.split("=", 1)[0] or not entry.split("=", 1)[1]:
                    raise ValueError(f"{option} entries are label={value}, got {entry!r}")
        for entry in self.train_variants:
            label, options = entry.split("=", 1)
            if not label.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"train_variants labels name folders (letters, digits, _ and -), got {label!r}")
            shlex.split(options)  # unbalanced quotes fail here, before any work
        for table, entries in (("scaling", self.scaling), ("variants", [*self.variants, *self.train_variants])):
            labels = [entry.split("=", 1)[0] for entry in entries]
            if len(set(labels)) != len(labels):
                raise ValueError(f"{table} labels must differ, got {labels}")

    def variant_runs(self, run_dir: Path) -> list[tuple[str, Path]]:
        """``(label, run folder)`` of every variant critic: those named by ``variants`` and those ``train_variants``
        trains under ``run_dir``."""
        named = [(e.split("=", 1)[0], Path(e.split("=", 1)[1])) for e in self.variants]
        return [*named, *((e.split("=", 1)[0], run_dir / f"variant_{e.split('=', 1)[0]}") for e in self.train_variants)]


def run_credit(config_path: Any, cli_args: Sequence[str] = (), stream: Any = None) -> dict[str, Any]:
    """The command: parse, measure, write the JSON; returns it."""
    import sys

    from sweet_trl.pipeline_config import ConfigError, make_parser, split_overrides
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
    study = Study(config_path, rest, stream=stream or sys.stdout)
    return Credit(study, args, command=["sweet-rl", "credit", "--config", str(config_path), *cli_args]).run()


def check_results_path(args: CreditArguments) -> None:
    """Refuse, before any work, to rewrite a results file that holds rows this command would not write again."""
    from sweet_trl.pipeline_config import ConfigError

    path = Path(args.results_path) if args.results_path else None
    if path is None or args.overwrite_results or not path.exists():
        return
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
        tables = {table: [row["label"] for row in earlier.get(table, [])] for table in ("scaling", "variants")}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f"credit: {path} is not a credit results file ({err}); write elsewhere "
                          "(--credit.results_path) or --credit.overwrite_results true") from err
    scored = {"scaling": {"1x", *(e.split("=", 1)[0] for e in args.scaling)},
              "variants": {e.split("=", 1)[0] for e in [*args.variants, *args.train_variants]}}
    lost = {table: [label for label in labels if label not in scored[table]] for table, labels in tables.items()}
    lost = {table: labels for table, labels in lost.items() if labels}
    if lost:
        rows = "; ".join(f"{table}: {', '.join(labels)}" for table, labels in lost.items())
        raise ConfigError(f"credit: {path} holds rows this command does not score ({rows}); rewriting it would lose "
                          "them. Name them again (--credit.scaling / --credit.variants label=run_dir), write "
                          "elsewhere (--credit.results_path), or --credit.overwrite_results true")


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
        critics += [(f"variant_{e.split('=', 1)[0]}", shlex.split(e.split("=", 1)[1]))
                    for e in self.args.train_variants]
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
                                  max_new_tokens=gen.max_new_tokens)
        release()
        return rows

    def scores(self, rows: list[dict[str, Any]], policy: str) -> dict[str, list[list[float]]]:
        """Every ranker's scores (each cached); a ranker whose model the run lacks is left out, and said."""
        from sweet_trl.pipeline import release
        from sweet_trl.turn_pairs import RANKINGS

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
        if self.args.without_c and (without_c / "_COMPLETE.json").exists():
            critic_block(without_c, {"trained_without_c": rank_args.ranking})
        elif self.args.without_c:
            self.log(f"no critic without c ({without_c} is not complete): its rows are left out")
        for entry in self.args.scaling:
            label, other = entry.split("=", 1)
            critic_block(Path(other) / "train_critic", {f"scaling:{label}": rank_args.ranking})
        for label, other in self.args.variant_runs(self.run_dir):
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
        if self.args.prepare:
            self.prepare()
        policy = self.policy()
        with self.timed("ground truth"):
            rows = self.ground_truth(policy)
        scores = self.scores(rows, policy)
        result = credit_report(rows, scores, self.args, scaling_runs=self.scaling_runs(),
                               variant_runs=self.variant_runs())
        result["seconds"] = self.seconds_per_part()
        result["run_dir"] = str(self.run_dir)
        result["provenance"] = provenance(self.command)
        text = json.dumps(result, indent=1)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "critic_credit.json").write_text(text, encoding="utf-8")
        if self.args.results_path:
            Path(self.args.results_path).parent.mkdir(parents=True, exist_ok=True)
            Path(self.args.results_path).write_text(text, encoding="utf-8")
        print(format_report(result), file=self.out, flush=True)
        return result

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
        for label, run_dir in self.args.variant_runs(self.run_dir):
            marker = self.marker(run_dir / "train_critic")
            settings = critic_settings(marker)
            out[label] = {"run_dir": str(run_dir), "steps": marker["counts"].get("steps"),
                          "train_loss": marker["metrics"].get("train_loss"),
                          "pairs_by_what_the_human_told": self.pair_signal(run_dir),
                          "settings": {key: value for key, value in sorted(settings.items())
                                       if shipped.get(key) != value}}
        return out


def provenance(command: Sequence[str]) -> dict[str, Any]:
    """What wrote the file: the command line and the code's commit (cached parts may come from earlier calls;
    each score file's identity says which critic and ground truth it belongs to)."""
    from sweet_trl.study.protocol import running_code_state

    commit, dirty = running_code_state()
    return {"command": shlex.join(command), "git_commit": commit, "git_dirty": dirty}


# what says nothing about the critic itself: where it ran and was written
_PLACES = {"run_dir", "output_dir", "policy_model", "critic_model", "logging_dir", "hub_token", "force"}


def critic_settings(marker: Mapping[str, Any]) -> dict[str, Any]:
    """A ``train_critic`` marker's settings, every section's options in one mapping (places left out)."""
    return {key: value for section in marker.get("config", []) if isinstance(section, dict)
            for key, value in section.items() if key not in _PLACES}


def credit_report(rows: Sequence[Mapping[str, Any]], scores: Mapping[str, Sequence[Sequence[float]]],
                  args: CreditArguments, scaling_runs: Mapping[str, Mapping[str, Any]] | None = None,
                  variant_runs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON: per ranker and kind of turn the three figures; the paired differences; the scaling and variant
    tables; the ground truth's settings and what it holds."""
    scored = [{**row, "scores": {name: list(s[i]) for name, s in scores.items()}} for i, row in enumerate(rows)]
    by_kind = {kind: [r for r in scored if r["kind"] == kind] for kind in KINDS}
    samples, seed = args.bootstrap_samples, args.seed

    def figures(name: str) -> dict[str, Any]:
        return {f"{kind}_turns": metrics.summarise(by_kind[kind], name, seed=seed, samples=samples) for kind in KINDS}

    rankers = {name: figures(name) for name in [*scores, "random"]
               if not name.startswith(("scaling:", "variant:"))}

    def paired_with(name: str, other: str) -> dict[str, Any] | None:
        if other not in scores:
            return None
        return {f"{kind}_turns": metrics.paired(by_kind[kind], name, other, seed=seed, samples=samples)
                for kind in KINDS}

    paired = {f"{a} - {b}": {f"{kind}_turns": metrics.paired(by_kind[kind], a, b, seed=seed, samples=samples)
                             for kind in KINDS}
              for a, b in paired_names(list(rankers))}
    scaling = []
    for label, data in (scaling_runs or {}).items():
        name = "trained_with_c" if label == "1x" else f"scaling:{label}"
        if name not in scores:
            continue
        scaling.append({"label": label, **data, **figures(name),
                        "paired_with_untrained": paired_with(name, "untrained_with_c")})
    variants = []
    for label, data in (variant_runs or {}).items():
        rankings = {}
        for suffix, ranking in (("", "run_ranking"), (":critic_advantage", "critic_advantage")):
            name, shipped = f"variant:{label}{suffix}", f"trained_with_c{suffix}"
            if name in scores:
                rankings[ranking] = {**figures(name), "paired_with_untrained": paired_with(name, "untrained_with_c"),
                                     "paired_with_run_critic": paired_with(name, shipped)}
        variants.append({"label": label, **data, "rankings": rankings})
    return {"settings": {"N": args.num_candidates, "M": args.continuations, "states_per_kind": args.states_per_kind,
                         **({"question_turns": args.question_turns} if args.question_turns else {}),
                         "held_out": args.held_out or (f"the zero-shot policy on {args.held_out_tasks}"
                                                       if args.held_out_tasks else
                                                       "the run's zero-shot evaluation (evaluate/zero_shot)"),
                         "seed": seed, "bootstrap_samples": samples},
            "ground_truth": ground_truth_summary(rows),
            "noise_ceiling": {f"{kind}_turns": metrics.noise_ceiling(by_kind[kind], seed=seed, samples=samples)
                              for kind in KINDS if kind == "question"},  # answers are graded exactly
            "rankers": rankers, "paired": paired, "scaling": scaling, "variants": variants}


def ground_truth_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the ground truth holds per kind of turn: states, distinct candidates (a message sampled twice is one),
    the states whose distinct candidates' values differ (the only ones scored), exact values, continuations played,
    the mean standard error of an estimated value; at question turns, the share of the values' spread that is which
    reply each question drew (:func:`~sweet_trl.study.credit.metrics.reply_share`)."""
    import math

    out = {}
    for kind in KINDS:
        group = [r for r in rows if r["kind"] == kind]
        estimated = [se for r in group for se, exact in zip(r["value_se"], r["exact"])
                     if not exact and math.isfinite(se)]
        finite = [[v for v in metrics.distinct_values(r)[0] if math.isfinite(v)] for r in group]
        distinct = [len(set(r["candidates"])) if "candidates" in r else len(r["values"]) for r in group]
        out[f"{kind}_turns"] = {
            "states": len(group), "tasks": len({r["task_id"] for r in group}),
            "states_with_one_message": sum(n == 1 for n in distinct),
            "mean_distinct_candidates": sum(distinct) / len(distinct) if distinct else None,
            "states_with_value_spread": sum(len(v) >= 2 and max(v) > min(v) for v in finite),
            "candidates": sum(len(r["values"]) for r in group),
            "exact_values": sum(sum(r["exact"]) for r in group),
            "continuations": sum(n for r in group for n, exact in zip(r["samples"], r["exact"]) if not exact),
            "candidates_without_value": sum(not math.isfinite(v) for r in group for v in r["values"]),
            "mean_value_se": sum(estimated) / len(estimated) if estimated else None,
        }
        if kind == "question":
            share = metrics.reply_share(group)
            out[f"{kind}_turns"]["reply_share"] = None if share is None else share["share"]
    return out


def format_report(result: Mapping[str, Any]) -> str:
    """The table a terminal shows: per ranker, top-1 and Spearman at question and answer turns."""
    def cell(figure: Mapping[str, Any] | None, scale: float = 100.0) -> str:
        if not figure:
            return "-"
        return f"{figure['mean'] * scale:6.1f} [{figure['low'] * scale:6.1f}, {figure['high'] * scale:6.1f}]"

    lines = [f"{'ranker':<44} {'question top-1':>24} {'answer top-1':>24} {'question spearman':>24}"]
    for name, figures in result["rankers"].items():
        q, a = figures["question_turns"], figures["answer_turns"]
        lines.append(f"{name:<44} {cell(q['top1']):>24} {cell(a['top1']):>24} {cell(q['spearman'], 1.0):>24}")
    for name, figures in result["paired"].items():
        q, a = figures["question_turns"], figures["answer_turns"]
        lines.append(f"{name:<44} {cell(q['top1']):>24} {cell(a['top1']):>24} {cell(q['spearman'], 1.0):>24}")
    ceiling = result.get("noise_ceiling", {}).get("question_turns") or {}
    for name, label in (("split_half", "values, half against half"), ("random", "random, against half")):
        if ceiling.get(name):
            figure = ceiling[name]
            lines.append(f"{label:<44} {cell(figure['top1']):>24} {'':>24} {cell(figure['spearman'], 1.0):>24}")
    return "\n".join(lines)
