"""The study: one collection, SWEET-RL and its ablation and baselines trained from it, one held-out evaluation.

    sweet-rl study --config study_cpu            # make study-cpu
    sweet-rl study --config study_cpu --study.rounds 2 --collect.collect_seed 1

Every step is a pipeline stage (:mod:`sweet_trl.pipeline`), so an interrupted study resumes and a finished one
only recomputes its statistics. The folders under ``run_dir``::

    collect/ critic_pairs/ train_critic/ sample_candidates/ rank/ policy_pairs/ train_policy/   SWEET-RL
    train_policy_best/                                    SWEET-RL's critic, best-of-N fine-tuning (same rank/)
    best_of_n/{sample_candidates,rank,train_policy_best}/ the same with its own candidates (study.best_of_n_states)
    best_of_n_round2/...                        again from the round-1 best-of-N policy (study.best_of_n_rounds)
    baseline_rft/ baseline_mtdpo/                                                                 the baselines
    no_privileged/{train_critic,rank,policy_pairs,train_policy}/   the critic without c (collect, pairs and
                                                                   candidates are links to the shared ones)
    round2/...                                                     SWEET-RL again from the round-1 policy
    evaluate/<policy>/  critic_eval/  study.json  report.html

Every policy is evaluated on the same test tasks with the same episode seeds, so differences are paired by task.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.configs import resolve_config
from sweet_trl.pipeline_config import ConfigError, load_yaml, make_parser, split_overrides
from sweet_trl.study.config import StudyArguments

SHARED_WITH_ABLATION = ("collect", "critic_pairs", "sample_candidates")
BEST_OF_N_SHARED = ("collect", "critic_pairs", "train_critic")  # sweet_best's own candidates, SWEET-RL's critic
SWEET_CHAIN = ("rank", "policy_pairs", "train_policy")
BASELINE_STAGES = {"rft": "baseline_rft", "mtdpo": "baseline_mtdpo"}
WARM_START = "warm_start"


def merged_policy(stage_dir: Path) -> Path:
    """A training stage's policy (``<stage_dir>/model``, a LoRA adapter or a full model) as a plain model in
    ``<stage_dir>/merged``, written once: the next round's stages load it as their ``policy_model``."""
    from sweet_trl.pipeline import load_causal_lm

    merged = stage_dir / "merged"
    if not (merged / "config.json").exists():
        model, tokenizer = load_causal_lm(str(stage_dir / "model"))
        model.save_pretrained(merged)
        tokenizer.save_pretrained(merged)
        del model
    return merged


def parse_section(arguments: type, name: str, section: Any, cli_args: Sequence[str] = (), prog: str = "") -> Any:
    """A config section (``study:``, ``fair:``) and its ``--<name>.*`` overrides as the ``arguments`` dataclass."""
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"the {name} section must be a mapping, got {type(section).__name__}")
    try:
        parser = make_parser([arguments], prog=prog or f"sweet-rl {name}")
        parser.set_defaults_with_config(**(section or {}))
        (args,) = parser.parse_args_into_dataclasses(args=list(cli_args))
    except ValueError as err:
        raise ConfigError(f"{name}: {err}") from err
    return args


def parse_study_arguments(section: Any, cli_args: Sequence[str] = ()) -> StudyArguments:
    return parse_section(StudyArguments, "study", section, cli_args)


class Study:
    """Runs the study's stages in order (each skipped when complete) and gathers the results.

    ``section`` names the config section (and ``--<section>.*`` overrides) of the study's own options, parsed by
    :meth:`parse_arguments`; a study of another design (:mod:`sweet_trl.study.fair`) changes both.
    """

    section = "study"
    command = "study"

    @staticmethod
    def parse_arguments(section: Any, cli_args: Sequence[str]) -> Any:
        return parse_study_arguments(section, cli_args)

    def __init__(self, config_path: str | os.PathLike, cli_args: Sequence[str] = (), stream: Any = None,
                 command: str | None = None):
        """``command``: the command that runs this study's stages, as errors name it (``credit`` measures with
        one); by default the study's own."""
        from sweet_trl.pipeline import SECTIONS, STAGES, _check_keys
        from sweet_trl.pipeline.commands import refuse_unread_options

        self.out = stream or sys.stdout
        self.config = load_yaml(config_path)
        self.config_path = resolve_config(config_path)  # a shipped configuration's name becomes its file
        shared, per_section = split_overrides(cli_args)
        self.args = self.parse_arguments(self.config.pop(self.section, None), per_section.pop(self.section, []))
        unknown = sorted(set(per_section) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"unknown stages in overrides: {unknown} (stages: {list(SECTIONS)})")
        self.shared, self.per_section = shared, per_section
        self.known = _check_keys(self.config, shared, everything=True)
        # the study's own report is drawn with the report's defaults: only the stages read options
        refuse_unread_options(shared, per_section, self.known, list(STAGES), f"sweet-rl {command or self.command}",
                              None if command else self.section)
        self.run_dir = Path(self.stage_options("collect", [])[0].run_dir)
        for name in per_section:  # a misspelt --<stage>.<option> is refused now, not hours in when the stage runs
            if name in STAGES:
                self.stage_options(name, [])
        self.markers: dict[str, dict[str, Any]] = {}
        self.failed: dict[str, str] = {}  # method -> why it could not be trained or evaluated
        self.critic_selection: dict[str, Any] | None = None
        self.answer_turns: dict[str, Any] | None = None
        self.started = time.perf_counter()

    # -- stages ----------------------------------------------------------------------------------------------

    def stage_options(self, name: str, extra: Sequence[str]) -> tuple:
        """One stage's parsed options (``RunArguments`` first) as the study runs it: the config, the shared and
        per-stage overrides, then ``extra``."""
        from sweet_trl.pipeline import STAGES, _parse
        from sweet_trl.pipeline_config import filter_cli_args

        stage = STAGES[name]
        cli = filter_cli_args(self.shared, self.known[name]) + self.per_section.get(name, []) + list(extra)
        return _parse(stage, self.config, cli, prog=f"sweet-rl {stage.command}")

    def stage(self, name: str, run_dir: Path, *extra: str, key: str | None = None) -> dict[str, Any]:
        """Run one pipeline stage in ``run_dir`` with extra options; its marker is kept under ``key``."""
        from sweet_trl.pipeline import STAGES, run_stage

        args = self.stage_options(name, ["--run_dir", str(run_dir), *extra])
        print(f"\n=== {key or name} ===", file=self.out, flush=True)
        marker = run_stage(STAGES[name], args, stream=self.out)
        # A marker's "dir" is relative to the run it ran in; the ablation and later rounds run in sub-folders, so
        # the study keeps it relative to its own run_dir (else their evaluations would be read from the main run).
        marker = {**marker, "dir": os.path.relpath(Path(run_dir) / marker["dir"], self.run_dir)}
        self.markers[key or name] = marker
        return marker

    def link_shared(self, variant_dir: Path, names: Sequence[str] = SHARED_WITH_ABLATION) -> None:
        """A variant reads the main run's stages (the ablation: the same trajectories, critic pairs and
        candidates): links, not copies."""
        variant_dir.mkdir(parents=True, exist_ok=True)
        for name in names:
            link = variant_dir / name
            if link.is_symlink() or link.exists():
                if link.is_symlink() and os.readlink(link) == os.path.join("..", name):
                    continue
                raise ConfigError(f"{link} exists and is not a link to the shared {name} stage; remove it")
            link.symlink_to(os.path.join("..", name), target_is_directory=True)

    def sweet(self, run_dir: Path, label: str, *extra: str, critic_extra: Sequence[str] = ()) -> None:
        self.stage("train_critic", run_dir, *extra, *critic_extra, key=f"{label}/train_critic")
        for name in SWEET_CHAIN:
            self.stage(name, run_dir, *extra, key=f"{label}/{name}")

    def sweet_best(self, base: Path) -> None:
        """SWEET-RL's critic, best-of-N fine-tuning: on SWEET-RL's ranked candidates (complete stages are skipped),
        or on candidates of its own (``best_of_n_states``) in a folder that links the collection and the critic."""
        self.stage("train_critic", base, key="round1/train_critic")
        run_dir, label = base, "round1"
        if self.args.best_of_n_states:
            run_dir, label = base / "best_of_n", "best_of_n"
            self.link_shared(run_dir, BEST_OF_N_SHARED)
            self.stage("sample_candidates", run_dir, *self.best_of_n_sample_options(), key=f"{label}/sample_candidates")
        self.stage("rank", run_dir, key=f"{label}/rank")
        self.stage("train_policy_best", run_dir, key=f"{label}/train_policy_best")
        self.evaluate(run_dir, "sweet_best", "sweet_best")

    def best_of_n_sample_options(self) -> list[str]:
        """``sample_candidates`` options of sweet_best's own candidates: every state at its turns, up to the cap."""
        turns = self.stage_options("train_policy_best", [])[2].turns
        return ["--state_fraction", "1.0", "--max_states", str(self.args.best_of_n_states),
                *(["--state_turns", *map(str, turns)] if turns else [])]

    def best_of_n_round(self, previous: Path, round_index: int) -> Path:
        """Round r of sweet_best: the round r-1 policy (merged into its base) samples at the same turn states, the
        same critic ranks, and that policy is fine-tuned on the new picks."""
        run_dir, label = self.run_dir / f"best_of_n_round{round_index}", f"best_of_n_round{round_index}"
        self.link_shared(run_dir, BEST_OF_N_SHARED)
        policy = ["--policy_model", str(merged_policy(previous / "train_policy_best").resolve())]
        self.stage("sample_candidates", run_dir, *policy, *self.best_of_n_sample_options(), key=f"{label}/sample_candidates")
        self.stage("rank", run_dir, *policy, key=f"{label}/rank")
        self.stage("train_policy_best", run_dir, *policy, key=f"{label}/train_policy_best")
        self.evaluate(run_dir, "sweet_best", f"sweet_best_round{round_index}", *policy)
        return run_dir

    def evaluate(self, run_dir: Path, policy: str, label: str, *extra: str) -> dict[str, Any]:
        return self.stage("evaluate", run_dir, "--policy", policy, *extra, key=f"evaluate/{label}")

    # -- the study -------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Every method in turn; ``study.json`` is rewritten after each, so a stopped study keeps what it measured."""
        self.started = time.perf_counter()
        base, methods = self.run_dir, self.args.methods
        if WARM_START in self.config:  # every stage below starts from the warm-started policy
            from sweet_trl.pipeline.commands import warm_start_override

            self.shared = [*self.shared, *warm_start_override(base, self.stage(WARM_START, base, key=WARM_START))]
        self.stage("collect", base, key="round1/collect")
        self.evaluate(base, "zero_shot", "zero_shot")
        self.stage("critic_pairs", base, key="round1/critic_pairs")
        ranks_sweet_states = {"sweet", "sweet_no_privileged"} & set(methods) or (
            "sweet_best" in methods and not self.args.best_of_n_states)
        if ranks_sweet_states:
            self.stage("sample_candidates", base, key="round1/sample_candidates")
        if "sweet" in methods:
            self.method("sweet", lambda: (self.sweet(base, "round1"), self.evaluate(base, "sweet", "sweet")))
        if "sweet_best" in methods:
            self.method("sweet_best", lambda: self.sweet_best(base))
            self.later_rounds("sweet_best", base / "best_of_n", self.args.best_of_n_rounds, "best_of_n_round",
                              self.best_of_n_round)
        for name in ("rft", "mtdpo"):
            if name in methods:
                self.method(name, lambda name=name: (
                    self.stage(BASELINE_STAGES[name], base, key=f"round1/{BASELINE_STAGES[name]}"),
                    self.evaluate(base, name, name)))
        variant = base / "no_privileged"
        if "sweet_no_privileged" in methods:
            # its critic first: the critics' judgement below compares it with the privileged one
            self.link_shared(variant)
            self.method("sweet_no_privileged", lambda: self.stage(
                "train_critic", variant, "--use_privileged", "false", key="no_privileged/train_critic"))
        if self.args.critic_eval_states:
            self.critic_selection = self.judge_critics()
            self.write()
        if "sweet_no_privileged" in methods and "sweet_no_privileged" not in self.failed:
            self.method("sweet_no_privileged", lambda: (
                [self.stage(name, variant, key=f"no_privileged/{name}") for name in SWEET_CHAIN],
                self.evaluate(variant, "sweet", "sweet_no_privileged")))
        self.later_rounds("sweet", base, self.args.rounds, "round", self.next_round)
        if self.args.answer_turn_states:
            self.compare_answer_turns()
        return self.write(final=True)

    def later_rounds(self, method: str, first: Path, rounds: int, folder: str,
                     run_round: Callable[[Path, int], Path]) -> None:
        """Rounds 2..``rounds`` of ``method`` (round r in ``<run_dir>/<folder><r>``, evaluated as
        ``<method>_round<r>``), each from the one before; they stop at the first round that could not run."""
        previous = first
        for round_index in range(2, rounds + 1):
            if method in self.failed or f"{method}_round{round_index - 1}" in self.failed:
                break
            self.method(f"{method}_round{round_index}", lambda p=previous, r=round_index: run_round(p, r))
            previous = self.run_dir / f"{folder}{round_index}"

    def write(self, final: bool = False) -> dict[str, Any]:
        """``study.json`` from every evaluation so far; the HTML report once the study is done (its figures take
        seconds to draw, each time: ``sweet-rl report`` draws it from a study stopped half-way)."""
        from sweet_trl.study.results import study_results, write_results

        results = study_results(self, self.critic_selection, wall_seconds=time.perf_counter() - self.started)
        results["complete"] = final
        write_results(self, results, report=final)
        return results

    def method(self, name: str, steps: Callable[[], Any]) -> None:
        """Run one method's stages; a stage that cannot run (no data for it, say) is recorded as that method's
        failure and the other methods go on."""
        from sweet_trl.pipeline import StageError

        try:
            steps()
            self.write()
        except StageError as err:
            self.failed[name] = str(err)
            print(f"[study] {name} could not be trained or evaluated: {err}", file=self.out, flush=True)

    def next_round(self, previous: Path, round_index: int) -> Path:
        """Round r: collect with the round r-1 SWEET-RL policy (merged into its base), train SWEET-RL from it."""
        run_dir = self.run_dir / f"round{round_index}"
        policy = ["--policy_model", str(merged_policy(previous / "train_policy").resolve())]
        label = f"round{round_index}"
        for name in ("collect", "critic_pairs", "sample_candidates"):
            self.stage(name, run_dir, *policy, key=f"{label}/{name}")
        self.sweet(run_dir, label, *policy)
        self.evaluate(run_dir, "sweet", f"sweet_round{round_index}", *policy)
        return run_dir

    def compare_answer_turns(self) -> None:
        """Every evaluated policy's answers on the same held-out answer turns; a comparison that cannot run is
        recorded in its place, the policies' results stand."""
        from sweet_trl.study.answer_turns import answer_turn_comparison

        try:
            self.answer_turns = answer_turn_comparison(self)
        except ValueError as err:
            self.answer_turns = {"error": str(err)}
            print(f"[answer_turns] not measured: {err}", file=self.out, flush=True)

    def judge_critics(self) -> dict[str, Any]:
        """The critics' best-of-N judgement; one that cannot run is recorded in its place, as above."""
        from sweet_trl.study.critic_eval import NoAnswerTurns
        from sweet_trl.study.critic_run import judge_critics

        try:
            return judge_critics(self)
        except NoAnswerTurns as err:
            print(f"[critic_eval] not measured: {err}", file=self.out, flush=True)
            return {"error": str(err)}


def run_study(config_path: str | os.PathLike, cli_args: Sequence[str] = (), stream: Any = None) -> dict[str, Any]:
    """``sweet-rl study --config study.yaml [--key value] [--<stage>.key value] [--study.key value]``."""
    from sweet_trl.pipeline import setup_logging

    setup_logging()
    study = Study(config_path, cli_args, stream)
    return study.run()


def load_results(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(run_dir) / "study.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
