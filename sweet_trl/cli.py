"""``sweet-rl``: the SWEET-RL pipeline from the command line, one subcommand per stage.

    sweet-rl pipeline          --config demo_cpu                           # every stage, then the report
    sweet-rl study             --config study_cpu                          # SWEET-RL vs ablation and baselines
    sweet-rl study-report      benchmarks/results/study_cpu.json           # its JSON as the table it printed
    sweet-rl warm-start        --config demo_cpu                           # the starting policy (SFT or a shipped adapter)
    sweet-rl collect           --config run.yaml [--episodes_per_task 8]   # roll out the base policy
    sweet-rl critic-pairs      --config run.yaml                           # trajectory pairs per task
    sweet-rl train-critic      --config run.yaml [--push_to_hub]           # the asymmetric critic
    sweet-rl sample-candidates --config run.yaml                           # N candidate turns per turn state
    sweet-rl rank              --config run.yaml                           # critic advantages of the candidates
    sweet-rl policy-pairs      --config run.yaml                           # upper half over lower half
    sweet-rl train-policy      --config run.yaml [--push_to_hub]           # turn-level DPO
    sweet-rl train-policy-best --config run.yaml [--turns 1]               # or: fine-tune on the critic's top pick
    sweet-rl evaluate          --config run.yaml --policy sweet            # or zero_shot, sweet_best, rft, mtdpo, a path
    sweet-rl evaluate          --run_dir new --policy my_model             # your model or adapter, any --eval_tasks
    sweet-rl compare           EVAL_A EVAL_B                               # two evaluations, paired by task
    sweet-rl baseline rft|mtdpo|zero-shot --config run.yaml                # the paper's baselines
    sweet-rl report            --config run.yaml                           # <run_dir>/report.html
    sweet-rl credit            --config study_cpu --run_dir runs/study_cpu # critics against Monte Carlo returns
    sweet-rl credit-report     benchmarks/results/critic_credit.json       # its JSON as Markdown tables
    sweet-rl fair-study        --config fair_cpu                           # every arm at equal compute, test read once
    sweet-rl fair-report       benchmarks/results/fair_study_seed0.json    # its JSON as Markdown tables
    sweet-rl status            runs/fair_cpu                               # every stage: done, stale, running, failed
    sweet-rl show              runs/credit --failed [-n 3] [--task ID]     # a run's dialogues, as a person reads them
    sweet-rl configs [NAME]                                                # the shipped configs; print one

Every stage takes the same YAML file (shared keys and a section per stage, see
:mod:`sweet_trl.pipeline_config`) and command-line overrides. ``--config`` is a file's path or the name of
a configuration shipped with the package (:mod:`sweet_trl.configs`: demo_cpu, study_cpu, fair_cpu, fair_multi_cpu,
warm_start_cpu, warm_start_multi_cpu, backend_8b, frontend_8b, study_8b); ``sweet-rl configs demo_cpu >
my_run.yaml`` starts a copy of your own.
``sweet-rl <command> --help`` lists a stage's options. Stages write under ``<run_dir>/<stage>/`` and skip
themselves once complete. Every command takes the precision options ``--bf16``, ``--fp16`` and ``--dtype``, so that
``sweet-rl <command> ... $(python -m sweet_trl.precision)`` works with any of them: the trainers use all three,
generation (collect, sample-candidates, evaluate) loads its weights in ``--dtype``, and a stage without a trainer
ignores ``--bf16``/``--fp16``.

``sweet-rl evaluate --policy`` takes the run's policies (``zero_shot``: the starting policy, or a stage's: ``sweet``,
``sweet_best``, ``rft``, ``mtdpo``) or one of your own: a model folder, a LoRA adapter folder (merged into the base
its ``adapter_config.json`` names, or into ``--policy_base``), a Hub id, or the model an OpenAI-compatible server
serves (``--backend openai --policy_base_url URL``). A policy of your own needs no stage of the run, not even the
warm start, so it is evaluated in a fresh ``--run_dir`` on any ``--eval_tasks`` (a JSONL file of ColBench rows or a
split name); evaluate prints success and tests passed with 95% intervals over tasks. ``sweet-rl compare EVAL_A
EVAL_B`` (evaluation folders, or run folders of one evaluation each, on the same tasks) prints both and B minus A
paired by task with its interval (:mod:`sweet_trl.comparison`).

Errors the user can fix end in one line on stderr (``sweet-rl <command>: error: ...``, or ``configuration
error: ...``) and an exit status: 1 when a stage cannot run (an input stage is not complete, a model or data it
cannot use) or an upload failed; 2 for a wrong configuration or option, a missing file, a bad value, a model that
cannot be loaded or a missing extra (``sweet-rl <stage> --push_to_hub`` without ``hub_prefix`` is refused before
the stage runs); 130 when interrupted. ``SWEET_RL_DEBUG=1 sweet-rl ...`` shows the full traceback instead.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from colbench_gym._optional import MissingExtraError
from sweet_trl.generation.embedded import EmbeddedModelMissing
from sweet_trl.pipeline_config import ConfigError

USAGE = __doc__.split("\n\n")[1]
# Commands that only read what runs wrote (a results JSON as the tables RESULTS.md quotes, a run's stages): the
# module whose ``main`` prints it.
READERS = {"fair-report": "sweet_trl.study.fair.report", "credit-report": "sweet_trl.study.credit.report",
           "study-report": "sweet_trl.study.results", "status": "sweet_trl.pipeline.status", "show": "sweet_trl.show"}


class StudyCommand(NamedTuple):
    """A command that runs stages from a configuration with options of its own (``--<section>.<option>``)."""

    runner: str  # "module:function", called as function(config_path, cli_args)
    arguments: str  # "module:Dataclass" of its own options
    section: str  # their configuration section and command-line prefix
    needs: str  # what --config must give
    help_from_module: bool = False  # its help is the runner's module docstring, else the function's


STUDY_COMMANDS = {
    "study": StudyCommand("sweet_trl.study:run_study", "sweet_trl.study.config:StudyArguments", "study",
                          "a file, or a shipped name (sweet-rl configs)"),
    "credit": StudyCommand("sweet_trl.study.credit.command:run_credit",
                           "sweet_trl.study.credit.arguments:CreditArguments", "credit", "the study run's configuration",
                           help_from_module=True),
    "fair-study": StudyCommand("sweet_trl.study.fair:run_fair_study",
                               "sweet_trl.study.fair.config:FairStudyArguments", "fair",
                               "a file, or a shipped name (sweet-rl configs)", help_from_module=True),
}


def _load(path: str) -> Any:
    """The object ``"module:name"`` names (the study commands import torch-free modules only when run)."""
    import importlib

    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _study_command(command: str, config_path: str | os.PathLike | None, rest: list[str]) -> None:
    spec = STUDY_COMMANDS[command]
    runner = _load(spec.runner)
    if "-h" in rest or "--help" in rest:
        text = sys.modules[runner.__module__].__doc__ if spec.help_from_module else runner.__doc__
        print(inspect.cleandoc(text) + "\n")
        _print_section_help(_load(spec.arguments), spec.section, f"sweet-rl {command}", config_path)
    elif config_path is None:
        raise ConfigError(f"{command} needs --config: {spec.needs}")
    else:
        runner(config_path, rest)


def _configs_command(rest: list[str]) -> int:
    """``sweet-rl configs``: each shipped configuration's name and first comment line; with a name, its text."""
    from sweet_trl import configs

    if not rest:
        names = configs.names()
        width = max(map(len, names))
        for name in names:
            print(f"{name:{width}s}  {_first_sentence(configs.config_path(name).read_text(encoding='utf-8'))}")
        return 0
    if len(rest) > 1 or rest[0].startswith("-"):
        print("sweet-rl configs: name at most one configuration (sweet-rl configs demo_cpu)", file=sys.stderr)
        return 2
    try:
        path = configs.config_path(rest[0])
    except KeyError as err:
        return _fail("configs", f"error: {err.args[0]}", 2)
    sys.stdout.write(path.read_text(encoding="utf-8"))
    return 0


def _compare_command(rest: list[str]) -> int:
    """``sweet-rl compare EVAL_A EVAL_B``: two evaluations, paired by task (:mod:`sweet_trl.comparison`)."""
    from sweet_trl import comparison

    try:
        return comparison.main(rest)
    except (ValueError, OSError) as err:  # folders that are not evaluations of the same tasks, a bad option value
        if _debug():
            raise
        return _fail("compare", f"error: {err}", 2)


def _first_sentence(text: str) -> str:
    """The first sentence of a config's opening comment, which may wrap over several lines."""
    words = []
    for line in text.splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        words.append(line.lstrip("# ").strip())
    return " ".join(words).split(". ")[0].rstrip(".")


def _pop_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take ``--config PATH`` (or ``--config=PATH``) out of the arguments."""
    rest, config = [], None
    iterator = iter(argv)
    for token in iterator:
        if token == "--config":
            config = next(iterator, None)
            if config is None:
                raise ConfigError("--config needs a path")
        elif token.startswith("--config="):
            config = token.split("=", 1)[1]
        else:
            rest.append(token)
    return config, rest


def _print_usage(file=None) -> None:
    file = file or sys.stdout
    print("usage: sweet-rl <command> [--config run.yaml] [--option value ...]\n", file=file)
    print(USAGE, file=file)


def _debug() -> bool:
    return os.environ.get("SWEET_RL_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def _fail(command: str, message: str, status: int) -> int:
    """Print one line on stderr (the message's own line breaks folded) and return the exit status."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    print(f"sweet-rl {command}: {text}", file=sys.stderr)
    return status


def _print_section_help(arguments: type, section: str, prog: str, config_path: str | os.PathLike | None = None) -> None:
    """A command's own options as they are written on its command line: ``--<section>.<option>`` (an option
    without the prefix goes to the stages), with the defaults of ``config_path``'s section where it sets them."""
    from sweet_trl.pipeline_config import load_yaml, make_parser

    parser = make_parser([arguments], prog=prog)
    configured = (load_yaml(config_path).get(section) or {}) if config_path is not None else {}
    if configured:
        parser.set_defaults_with_config(**configured)
    for action in parser._actions:  # argparse keeps no public list; the names are only rewritten for the help
        if "--help" not in action.option_strings:
            action.option_strings = [f"--{section}.{name[2:]}" for name in action.option_strings]
    parser.print_help()
    if configured:
        print(f"\nDefaults as {config_path} sets them where its `{section}:` section does "
              f"({', '.join(sorted(configured))}).")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `sweet-rl status RUN | head -1`: the reader took what it wanted. Python's documented way out: point stdout
        # at devnull, so that flushing at exit does not raise again, and leave quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        _print_usage()
        return 0
    command, rest = argv[0], argv[1:]
    if command == "configs":
        return _configs_command(rest)
    if command == "compare":
        return _compare_command(rest)
    if command in READERS:
        import importlib

        reader = importlib.import_module(READERS[command])
        try:
            return reader.main(rest)
        except BrokenPipeError:
            raise  # the reader of the output stopped (`| head`): not an error of the file
        except (ValueError, OSError) as err:  # not a file of that kind, a missing file
            if _debug():
                raise
            return _fail(command, f"error: {err}", 2)
    if command == "baseline":
        if not rest or rest[0].startswith("-"):
            print("sweet-rl baseline: name one of rft, mtdpo, zero-shot", file=sys.stderr)
            return 2
        method, rest = rest[0].replace("_", "-"), rest[1:]
        if method == "zero-shot":  # the base policy, evaluated as any other
            command, rest = "evaluate", [*rest, "--policy", "zero_shot"]
        elif method in ("rft", "mtdpo"):
            command = f"baseline-{method}"
        else:
            print(f"sweet-rl baseline: unknown baseline {method!r}; choose rft, mtdpo or zero-shot", file=sys.stderr)
            return 2

    from sweet_trl import pipeline
    from sweet_trl.configs import resolve_config

    try:
        config_path, rest = _pop_config(rest)
        if config_path is not None:
            try:
                config_path = resolve_config(config_path)
            except FileNotFoundError as err:
                raise ConfigError(str(err)) from err
        if command == "pipeline" and ("-h" in rest or "--help" in rest):
            print(inspect.cleandoc(pipeline.run_pipeline.__doc__) + "\n")
            _print_section_help(pipeline.PipelineArguments, "pipeline", "sweet-rl pipeline", config_path)
        elif command == "pipeline":
            pipeline.run_pipeline(config_path, rest)
        elif command in STUDY_COMMANDS:
            _study_command(command, config_path, rest)
        elif command == "report":
            pipeline.report_command(config_path, rest)
        else:
            stage_name = pipeline.COMMAND_ALIASES.get(command, command.replace("-", "_"))
            if stage_name not in pipeline.STAGES:
                print(f"sweet-rl: unknown command {command!r}\n", file=sys.stderr)
                _print_usage(sys.stderr)
                return 2
            pipeline.run_stage_from_config(stage_name, config_path, rest, prog=f"sweet-rl {command}")
    except (pipeline.StageError, OSError, ValueError, MissingExtraError) as err:
        if isinstance(err, BrokenPipeError) and ("-h" in rest or "--help" in rest):
            raise  # the reader of the help stopped (`sweet-rl fair-study --help | head`): main leaves quietly
        if _debug():
            raise
        if isinstance(err, pipeline.StageError):
            return _fail(command, f"error: {err}", 1)
        if isinstance(err, pipeline.ConfigError):
            return _fail(command, f"configuration error: {err}", 2)
        if isinstance(err, (MissingExtraError, EmbeddedModelMissing)):  # the message is the line that fixes it
            return _fail(command, f"error: {err}", 2)
        return _fail(command, f"error: {str(err) or type(err).__name__} (SWEET_RL_DEBUG=1 shows the traceback)", 2)
    except KeyboardInterrupt:
        print(f"\nsweet-rl {command}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
