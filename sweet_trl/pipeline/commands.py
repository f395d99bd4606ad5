"""The commands: the table of stages, parsing a run's configuration and overrides for a stage, and the entry points
(``run_stage_from_config`` for ``sweet-rl <stage>``, ``run_pipeline``, ``report_command``) with the evaluation table."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline.export import push_stage
from sweet_trl.pipeline.runner import (
    TRAINING_STAGES,
    EarlierForm,
    Stage,
    accepted_fingerprints,
    read_marker,
    run_stage,
)
from sweet_trl.pipeline.stages import (
    EVALUATION_METRICS,
    _evaluate_folder,
    _evaluate_inputs,
    is_run_policy,
    stage_collect,
    stage_critic_pairs,
    stage_evaluate,
    stage_policy_pairs,
    stage_rank,
    stage_sample_candidates,
)
from sweet_trl.pipeline.stages_training import (
    stage_baseline_mtdpo,
    stage_baseline_rft,
    stage_train_critic,
    stage_train_policy,
    stage_train_policy_best,
    stage_warm_start,
)
from sweet_trl.pipeline_config import (
    PIPELINE_SECTION,
    PRECISION_OPTIONS,
    CandidateArguments,
    CollectArguments,
    ConfigError,
    CriticPairsArguments,
    EvaluateArguments,
    GenerationArguments,
    PipelineArguments,
    PolicyPairsArguments,
    RankArguments,
    ReportArguments,
    RunArguments,
    check_config_keys,
    cli_keys,
    filter_cli_args,
    known_options,
    load_yaml,
    make_parser,
    parse_stage_args,
    split_overrides,
    without_options,
)

# --------------------------------------------------------------------------------------------------------------
# The stage table, and running stages from a configuration
# --------------------------------------------------------------------------------------------------------------

def _model_config():
    from trl import ModelConfig

    return ModelConfig


def _critic_types():
    from sweet_trl.critic_config import SweetCriticConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), SweetCriticConfig, ExportArguments)


def _policy_types():
    from sweet_trl.pipeline_config import ExportArguments
    from sweet_trl.policy_config import TurnPreferenceConfig

    return (_model_config(), TurnPreferenceConfig, ExportArguments)


def _best_of_n_types():
    from sweet_trl.best_of_n import BestOfNFinetuneConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), BestOfNFinetuneConfig, ExportArguments)


def _rft_types():
    from sweet_trl.baselines.rejection_finetuning import RejectionFinetuneConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), RejectionFinetuneConfig, ExportArguments)


def _warm_start_types():
    from sweet_trl.baselines.rejection_finetuning import RejectionFinetuneConfig
    from sweet_trl.pipeline_config import WarmStartArguments

    return (_model_config(), RejectionFinetuneConfig, WarmStartArguments)


def _warm_start_identity(model_config: Any, sft: Any, options: Any) -> dict[str, Any] | None:
    """From an adapter, the warm start is that adapter's weights (their digest, so that a changed file under the
    same name counts) and nothing of the training options; trained here, every option counts (None)."""
    if not options.adapter:
        return None
    from sweet_trl.warm_start import file_digest, resolve_adapter

    try:
        path = resolve_adapter(options.adapter)
    except FileNotFoundError:
        return {"adapter": options.adapter}  # the stage itself says what is missing
    return {"adapter": options.adapter, "sha256": file_digest(path / "adapter_model.safetensors")}


def _mtdpo_types():
    from sweet_trl.baselines.multiturn_dpo import MultiTurnDPOConfig
    from sweet_trl.pipeline_config import ExportArguments

    return (_model_config(), MultiTurnDPOConfig, ExportArguments)


STAGES: dict[str, Stage] = {stage.name: stage for stage in (
    Stage("warm_start", "supervised fine-tuning on scripted expert dialogues before RL", _warm_start_types,
          stage_warm_start, run_fields=("policy_model", "max_turns", "simulator", "simulator_base_url"),
          options_identity=_warm_start_identity),
    Stage("collect", "roll out the base policy on the training tasks",
          lambda: (GenerationArguments, CollectArguments), stage_collect, push=push_stage,
          run_fields=("train_tasks", "max_train_tasks", "simulator", "simulator_base_url", "max_turns", "policy_model")),
    Stage("critic_pairs", "pairs of trajectories of one task with different rewards",
          lambda: (CriticPairsArguments,), stage_critic_pairs,
          inputs=lambda args: [] if args.trajectories else ["collect"], push=push_stage),
    Stage("train_critic", "train the asymmetric turn-level critic", _critic_types, stage_train_critic,
          inputs=lambda *args: ["critic_pairs"], push=push_stage, run_fields=("critic_model", "policy_model")),
    Stage("sample_candidates", "sample N candidate turns per turn state from the policy",
          lambda: (GenerationArguments, CandidateArguments), stage_sample_candidates,
          inputs=lambda *args: ["collect"], run_fields=("max_turns", "policy_model")),
    Stage("rank", "score the candidates with the critic (or another selector)", lambda: (RankArguments,), stage_rank,
          inputs=lambda args: ["collect", *(["train_critic"] if args.uses_critic else []), "sample_candidates"],
          run_fields=("max_turns",),
          # f9cf3c5 to 0d92b3b the true-reward selector read the train tasks (it now grades the tasks as played) and
          # the selector options were hashed as given: the fair studies of that day carry that form
          earlier_forms=(EarlierForm(run_fields=("max_turns", "train_tasks", "max_train_tasks"),
                                     neutral_left_out=False),)),
    Stage("policy_pairs", "turn-level pairs: upper half over lower half", lambda: (PolicyPairsArguments,),
          stage_policy_pairs, inputs=lambda *args: ["rank"], push=push_stage, run_fields=("max_turns",)),
    Stage("train_policy", "train the policy with turn-level DPO", _policy_types, stage_train_policy,
          inputs=lambda *args: ["policy_pairs"], push=push_stage, run_fields=("policy_model",)),
    Stage("train_policy_best", "fine-tune the policy on the critic's best candidate per turn state",
          _best_of_n_types, stage_train_policy_best, inputs=lambda *args: ["rank"], push=push_stage,
          run_fields=("policy_model",)),
    Stage("baseline_rft", "baseline: rejection fine-tuning", _rft_types, stage_baseline_rft,
          inputs=lambda *args: ["collect"], push=push_stage, run_fields=("policy_model",)),
    Stage("baseline_mtdpo", "baseline: multi-turn DPO", _mtdpo_types, stage_baseline_mtdpo,
          inputs=lambda *args: ["collect"], push=push_stage, run_fields=("policy_model",)),
    Stage("evaluate", "evaluate a policy on the test tasks", lambda: (GenerationArguments, EvaluateArguments),
          stage_evaluate, inputs=lambda gen, args: _evaluate_inputs(args), folder=lambda gen, args: _evaluate_folder(args),
          run_fields=("eval_tasks", "max_eval_tasks", "simulator", "simulator_base_url", "max_turns", "policy_model")),
)}
COMMAND_ALIASES = {"train-rft": "baseline_rft", "train-mtdpo": "baseline_mtdpo"}
WARM_START = "warm_start"
# `study:` belongs to `sweet-rl study` (sweet_trl.study), `fair:` to `sweet-rl fair-study` (sweet_trl.study.fair); the
# pipeline accepts a file that has them and ignores them, so a study's config runs any of its stages alone.
STUDY_SECTION, FAIR_SECTION = "study", "fair"
SECTIONS = (*STAGES, "report", PIPELINE_SECTION, STUDY_SECTION, FAIR_SECTION)


def _parse(stage: Stage, config: dict[str, Any], cli_args: Sequence[str], prog: str | None = None) -> tuple:
    try:
        return parse_stage_args(stage.dataclass_types(), stage.name, config, cli_args, SECTIONS, prog=prog)
    except ValueError as err:
        raise ConfigError(f"{stage.name}: {err}") from err


@functools.cache
def _stage_options(name: str) -> frozenset[str]:
    if name == "report":
        return frozenset(known_options(make_parser([RunArguments, ReportArguments])))
    if name == STUDY_SECTION:
        from sweet_trl.study.config import StudyArguments

        return frozenset(known_options(make_parser([StudyArguments])))
    if name == FAIR_SECTION:
        from sweet_trl.study.fair.config import FairStudyArguments

        return frozenset(known_options(make_parser([FairStudyArguments])))
    if name == PIPELINE_SECTION:
        return frozenset(known_options(make_parser([PipelineArguments])))
    return frozenset(known_options(make_parser(STAGES[name].dataclass_types())))


@functools.cache
def _run_options() -> frozenset[str]:
    return frozenset(known_options(make_parser([RunArguments])))


def _check_keys(config: dict[str, Any], shared_cli: Sequence[str] = (), everything: bool = False
                ) -> dict[str, frozenset[str]]:
    """Fail on top-level keys and command-line options that no stage takes (typos), before anything runs.

    The trainer configurations (which import TRL's trainers) are consulted only for keys the other stages do
    not take, unless ``everything``.
    """
    light = [name for name in SECTIONS if name not in TRAINING_STAGES]
    known = {name: _stage_options(name) for name in light}
    asked = {k for k in config if k not in SECTIONS} | cli_keys(shared_cli)
    if everything or asked - set().union(*known.values()):
        known.update({name: _stage_options(name) for name in TRAINING_STAGES})
    try:
        check_config_keys({k: v for k, v in config.items() if k not in SECTIONS}, known)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    unknown = sorted(cli_keys(shared_cli) - set().union(*known.values()))
    if unknown:
        raise ConfigError(f"unknown options (no stage takes them): {['--' + k for k in unknown]}")
    return known


# The command that reads each section of its own options (the stages' sections are read by every command)
SECTION_COMMANDS = {STUDY_SECTION: "sweet-rl study", FAIR_SECTION: "sweet-rl fair-study",
                    PIPELINE_SECTION: "sweet-rl pipeline", "report": "sweet-rl pipeline and sweet-rl report",
                    "credit": "sweet-rl credit"}


def refuse_unread_options(shared_cli: Sequence[str], per_section: Mapping[str, Sequence[str]],
                          known: dict[str, frozenset[str]], readers: Sequence[str], command: str,
                          own_section: str | None) -> None:
    """Options this command would drop without a word, refused with the spelling that is read: an unprefixed one
    that only a section takes (``--rounds``, meant as ``--fair.rounds``: unprefixed options go to the stages), and
    one prefixed with a section another command reads (``--fair.read_test`` given to ``sweet-rl study``)."""
    elsewhere = sorted(name for name in per_section if name not in readers)
    if elsewhere:
        whose = "; ".join(f"--{name}.* are {SECTION_COMMANDS.get(name, name)}'s" for name in elsewhere)
        raise ConfigError(f"{command} reads no {', '.join(f'--{name}.*' for name in elsewhere)} options ({whose})")
    read = set().union(*(known[name] for name in readers))
    unread = sorted(cli_keys(shared_cli) - read)
    if not unread:
        return

    def meant(key: str) -> str:
        if own_section is not None and key in known.get(own_section, ()):
            return f"did you mean --{own_section}.{key}?"
        owners = [name for name in SECTIONS if name not in readers and key in known.get(name, ())]
        return "; ".join(f"an option of {SECTION_COMMANDS.get(name, name)}, --{name}.{key}" for name in owners)

    hints = ", ".join(f"--{key} ({meant(key)})" for key in unread)
    raise ConfigError(f"no stage of {command} reads {hints}: options without a prefix go to the stages"
                      + (f", its own are written --{own_section}.<option>" if own_section else ""))


def setup_logging() -> None:
    """Progress of the library modules (pair counts, resumes, dropped rows) on stderr."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("sweet_trl").setLevel(logging.INFO)
    # On CPUs with AVX512-BF16, importing bitsandbytes (with TRL) warns that a kernel it would fetch from the Hub is
    # missing; its own fallback runs instead. No stage here needs that kernel, so the warning says nothing useful.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def run_stage_from_config(name: str, config_path: str | os.PathLike | None = None, cli_args: Sequence[str] = (),
                          prog: str | None = None, stream: Any = None) -> dict[str, Any]:
    """``sweet-rl <stage> --config run.yaml [overrides]``: parse, then run the stage unless it is complete.

    The precision options (``--bf16``, ``--fp16``, ``--dtype``) are taken by every stage, so that the line
    ``python -m sweet_trl.precision`` prints works with any command; a stage uses those it has. An evaluation prints
    its success and tests passed with intervals over tasks.
    """
    setup_logging()
    config = load_yaml(config_path) if config_path else {}
    _check_keys(config)
    stage = STAGES[name]
    precision = filter_cli_args(cli_args, set(PRECISION_OPTIONS))
    cli_args = without_options(cli_args, set(PRECISION_OPTIONS) - _stage_options(name))
    if (name != WARM_START and WARM_START in config and "policy_model" not in cli_keys(cli_args)
            and _reads_the_run_policy(stage, config, cli_args, prog)):
        # the precision options given to every command are the warm start's too, as `sweet-rl warm-start` took them
        cli_args = [*cli_args, *_warm_started_policy(config, [*cli_args, *precision])]
    args = _parse(stage, config, cli_args, prog=prog)
    marker = run_stage(stage, args, stream=stream)
    if name == "evaluate":
        print_evaluation_intervals(Path(args[0].run_dir) / marker["dir"], stream or sys.stdout)
    return marker


def _reads_the_run_policy(stage: Stage, config: dict[str, Any], cli_args: Sequence[str], prog: str | None) -> bool:
    """Whether the stage starts from the run's policy (so from its warm start, when it has one): every stage does
    but an evaluation of a policy of one's own (a folder, a Hub id, a served model), which needs nothing of the run."""
    if stage.name != "evaluate":
        return True
    return is_run_policy(_parse(stage, config, cli_args, prog=prog)[-1].policy)


def print_evaluation_intervals(folder: Path, stream: Any) -> None:
    """One evaluation's success and tests passed with 95% intervals over tasks, and how to compare it."""
    from sweet_trl.comparison import format_evaluation, intervals, load_evaluation

    evaluation = load_evaluation(folder)
    print(format_evaluation(evaluation, intervals(evaluation)), file=stream)
    print(f"compare it with another policy evaluated on the same tasks: sweet-rl compare {folder} <other folder>",
          file=stream, flush=True)


def warm_start_override(run_dir: str | os.PathLike, marker: dict[str, Any]) -> list[str]:
    """The option that starts a stage from a complete warm start (its marker): ``--policy_model <its policy>``."""
    return ["--policy_model", str(Path(run_dir) / marker["dir"] / marker["outputs"]["policy"])]


def _warm_started_policy(config: dict[str, Any], cli_args: Sequence[str]) -> list[str]:
    """For one stage run alone in a run with a ``warm_start:`` section: the override that starts it from the warm
    start, which must be complete.

    Only the run's own options (``--run_dir``, ``--env_id``, ...) on the command line count: the others are the
    stage's (``sweet-rl train-policy --learning_rate 3e-4`` sets the policy's learning rate, not the warm start's).
    The precision options every command takes (``--bf16``, ``--fp16``, ``--dtype``) are not part of the
    configuration's warm start: one made in any precision is accepted.
    """
    stage = STAGES[WARM_START]
    run_options = filter_cli_args(cli_args, _run_options())
    args = _parse(stage, config, run_options)
    run_dir = Path(args[0].run_dir)
    marker = read_marker(run_dir / stage.dir_name(args[1:]))
    if marker is None:
        raise StageError(f"this run starts from a warm start (the configuration's warm_start: section), which is not "
                         f"complete in {run_dir}: run `sweet-rl warm-start` with the same --config first")
    as_made = _parse(stage, config, [*run_options, *_recorded_precision(marker)])
    accepted = [*accepted_fingerprints(stage, args, {}), *accepted_fingerprints(stage, as_made, {})]
    if marker.get("fingerprint") not in accepted:
        raise StageError(f"the warm start in {run_dir} was made with other settings than this configuration's "
                         f"warm_start: section (or another adapter file): run `sweet-rl warm-start` with the same "
                         f"--config first")
    return warm_start_override(run_dir, marker)


def _recorded_precision(marker: dict[str, Any]) -> list[str]:
    """The precision options a stage's marker records (``--bf16 true --dtype bfloat16``, say)."""
    options: dict[str, Any] = {}
    for section in marker.get("config") or []:
        if isinstance(section, dict):
            options.update({name: section[name] for name in PRECISION_OPTIONS if section.get(name) is not None})
    return [token for name, value in options.items()
            for token in (f"--{name}", str(value).lower() if isinstance(value, bool) else str(value))]


def report_command(config_path: str | os.PathLike | None, cli_args: Sequence[str] = (), stream: Any = None) -> Path:
    """``sweet-rl report``: write the HTML report of the run."""
    config = load_yaml(config_path) if config_path else {}
    cli_args = without_options(cli_args, PRECISION_OPTIONS)  # taken by every command; a report loads no model
    if cli_args and not str(cli_args[0]).startswith("-"):  # `sweet-rl report runs/x`, as status and show read it
        cli_args = ["--run_dir", *cli_args]
    if "-h" in cli_args or "--help" in cli_args:
        _print_report_help(config)
    try:
        run, report = parse_stage_args([RunArguments, ReportArguments], "report", config, cli_args, SECTIONS,
                                       prog="sweet-rl report")
    except ValueError as err:
        raise ConfigError(f"report: {err}") from err
    return write_report(run, report, stream)


def _print_report_help(config: Mapping[str, Any]) -> None:
    """The report's options and the run folder it reads; the run's other options are taken (a pipeline's command
    line works as it is) but read by no report, so the help leaves them out."""
    import argparse
    import dataclasses

    from sweet_trl.pipeline_config import make_parser

    parser = make_parser([ReportArguments, RunArguments], prog="sweet-rl report")
    parser.epilog = ("Every other option of the run (--env_id, --max_turns, ...) is taken and ignored: a report reads "
                     "only what the run's stages wrote. `sweet-rl report RUN_DIR` works too.")
    section = config.get("report") or {}
    parser.set_defaults(**{key: value for key, value in {**config, **section}.items()
                           if key in ("run_dir", "report_examples", "report_path")})  # as the configuration sets them
    unread = {field.name for field in dataclasses.fields(RunArguments)} - {"run_dir"}
    for action in parser._actions:  # argparse keeps no public list; the options stay, only their help goes
        if action.dest in unread:
            action.help = argparse.SUPPRESS
    parser.print_help()
    raise SystemExit(0)


def write_report(run: RunArguments, report: ReportArguments, stream: Any = None) -> Path:
    from sweet_trl.report import build_report

    path = build_report(run.run_dir, report.report_path, examples=report.report_examples)
    print(f"[report] {path}", file=stream or sys.stdout, flush=True)
    return path


def run_pipeline(config_path: str | os.PathLike | None, cli_args: Sequence[str] = (), stream: Any = None
                 ) -> dict[str, dict[str, Any]]:
    """sweet-rl pipeline --config run.yaml [--key value ...] [--<stage>.key value ...]

    Runs every stage in order (a complete stage prints "skipped"), prints the evaluation table of the
    policies, and writes <run_dir>/report.html.

      --key value              goes to every stage that takes `key`   (--max_new_tokens 64)
      --<stage>.key value      goes to one stage                     (--train_critic.max_steps 20)
      --pipeline.<option> ...  the options below                     (--pipeline.baselines rft mtdpo)

    Each stage's own options: sweet-rl <stage> --help (for example sweet-rl train-critic --help).
    """
    setup_logging()
    out = stream or sys.stdout
    config = load_yaml(config_path) if config_path else {}
    shared, per_section = split_overrides(cli_args)
    unknown_sections = sorted(set(per_section) - set(SECTIONS))
    if unknown_sections:
        raise ConfigError(f"unknown stages in overrides: {unknown_sections} (stages: {list(SECTIONS)})")
    known = _check_keys(config, shared, everything=True)
    refuse_unread_options(shared, {k: v for k, v in per_section.items() if k != PIPELINE_SECTION}, known,
                          [*STAGES, "report"], "sweet-rl pipeline", PIPELINE_SECTION)
    try:
        parser = make_parser([PipelineArguments], prog="sweet-rl pipeline")
        parser.set_defaults_with_config(**(config.get(PIPELINE_SECTION) or {}))
        (pipeline_args,) = parser.parse_args_into_dataclasses(args=per_section.get(PIPELINE_SECTION, []))
    except ValueError as err:
        raise ConfigError(f"pipeline: {err}") from err
    order = list(pipeline_args.stages)
    unknown = [s for s in order if s not in STAGES and s != "report"]
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; choose from {[*STAGES, 'report']}")
    for baseline in pipeline_args.baselines:
        if baseline not in ("rft", "mtdpo"):
            raise ConfigError(f"unknown baseline {baseline!r}; choose from rft, mtdpo")
        stage_name = f"baseline_{baseline}"
        if stage_name not in order:
            order.insert(order.index("evaluate") if "evaluate" in order else len(order), stage_name)
    if WARM_START in config and WARM_START not in order:
        order.insert(0, WARM_START)  # a run configured with a warm start starts from it
    policies = list(dict.fromkeys([*pipeline_args.evaluate_policies, *pipeline_args.baselines]))

    def stage_cli(name: str) -> list[str]:
        return filter_cli_args(shared, known[name]) + per_section.get(name, [])

    for name in order:  # a misspelt --<stage>.<option> is refused before the first stage runs
        if name in STAGES:
            _parse(STAGES[name], config, stage_cli(name), prog=f"sweet-rl {STAGES[name].command}")
    started = time.perf_counter()
    markers: dict[str, dict[str, Any]] = {}
    run = None
    for index, name in enumerate(order, 1):
        print(f"\n=== stage {index}/{len(order)}: {name} ===", file=out, flush=True)
        if name == "report":
            continue
        stage = STAGES[name]
        if name == "evaluate":
            for policy in policies:
                args = _parse(stage, config, [*stage_cli(name), "--policy", policy], prog="sweet-rl evaluate")
                markers[f"evaluate/{policy}"] = run_stage(stage, args, stream=out)
                run = args[0]
        else:
            args = _parse(stage, config, stage_cli(name), prog=f"sweet-rl {stage.command}")
            markers[name] = run_stage(stage, args, stream=out)
            run = args[0]
            if name == WARM_START:  # every later stage starts from the warm-started policy
                shared = [*shared, *warm_start_override(run.run_dir, markers[name])]
    if run is None:
        run = _parse(STAGES["collect"], config, stage_cli("collect"))[0]
    evaluations = {k.split("/", 1)[1]: m for k, m in markers.items() if k.startswith("evaluate/")}
    if evaluations:
        print_metrics(evaluations, out)
    if "report" in order:
        try:
            run_args, report_args = parse_stage_args([RunArguments, ReportArguments], "report", config,
                                                     stage_cli("report"), SECTIONS)
        except ValueError as err:
            raise ConfigError(f"report: {err}") from err
        write_report(run_args, report_args, out)
    print(f"\npipeline finished in {(time.perf_counter() - started) / 60:.1f} min (run folder {run.run_dir})",
          file=out, flush=True)
    return markers


def print_metrics(evaluations: dict[str, dict[str, Any]], stream: Any) -> None:
    """The evaluation table: one row per policy (zero-shot first)."""
    columns = list(EVALUATION_METRICS)
    columns = [c for c in columns if any(c in m["metrics"] for m in evaluations.values())]
    width = max(len(name) for name in evaluations) + 2
    print("\nEvaluation on the test tasks (no privileged information):", file=stream)
    print("policy".ljust(width) + "".join(c.rjust(14) for c in columns) + "episodes".rjust(10), file=stream)
    for name, marker in evaluations.items():
        cells = "".join(f"{marker['metrics'].get(c, float('nan')):14.3f}" for c in columns)
        print(name.ljust(width) + cells + f"{marker['counts'].get('episodes', 0):10d}", file=stream)
    stream.flush()
