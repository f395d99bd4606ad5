"""``sweet-rl``: the SWEET-RL pipeline from the command line, one subcommand per stage.

    sweet-rl pipeline          --config examples/configs/demo_cpu.yaml     # every stage, then the report
    sweet-rl collect           --config run.yaml [--episodes_per_task 8]   # roll out the base policy
    sweet-rl critic-pairs      --config run.yaml                           # trajectory pairs per task
    sweet-rl train-critic      --config run.yaml [--push_to_hub]           # the asymmetric critic
    sweet-rl sample-candidates --config run.yaml                           # N candidate turns per turn state
    sweet-rl rank              --config run.yaml                           # critic advantages of the candidates
    sweet-rl policy-pairs      --config run.yaml                           # upper half over lower half
    sweet-rl train-policy      --config run.yaml [--push_to_hub]           # turn-level DPO
    sweet-rl evaluate          --config run.yaml --policy sweet            # or zero_shot, rft, mtdpo, a model path
    sweet-rl baseline rft|mtdpo|zero-shot --config run.yaml                # the paper's baselines
    sweet-rl report            --config run.yaml                           # <run_dir>/report.html

Every stage takes the same YAML file (shared keys and a section per stage, see
:mod:`sweet_trl.pipeline_config`) and command-line overrides. ``sweet-rl <command> --help`` lists a
stage's options. Stages write under ``<run_dir>/<stage>/`` and skip themselves once complete.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence

USAGE = __doc__.split("\n\n")[1]


def _pop_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take ``--config PATH`` (or ``--config=PATH``) out of the arguments."""
    rest, config = [], None
    iterator = iter(argv)
    for token in iterator:
        if token == "--config":
            config = next(iterator, None)
            if config is None:
                raise SystemExit("sweet-rl: --config needs a path")
        elif token.startswith("--config="):
            config = token.split("=", 1)[1]
        else:
            rest.append(token)
    return config, rest


def _print_usage(file=None) -> None:
    file = file or sys.stdout
    print("usage: sweet-rl <command> [--config run.yaml] [--option value ...]\n", file=file)
    print(USAGE, file=file)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        _print_usage()
        return 0
    command, rest = argv[0], argv[1:]
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

    try:
        config_path, rest = _pop_config(rest)
        if command == "pipeline" and ("-h" in rest or "--help" in rest):
            print(textwrap.dedent("    " + pipeline.run_pipeline.__doc__))
            pipeline.make_parser([pipeline.PipelineArguments], prog="sweet-rl pipeline (--pipeline.<option>)").print_help()
        elif command == "pipeline":
            pipeline.run_pipeline(config_path, rest)
        elif command == "report":
            pipeline.report_command(config_path, rest)
        else:
            stage_name = pipeline.COMMAND_ALIASES.get(command, command.replace("-", "_"))
            if stage_name not in pipeline.STAGES:
                print(f"sweet-rl: unknown command {command!r}\n", file=sys.stderr)
                _print_usage(sys.stderr)
                return 2
            pipeline.run_stage_from_config(stage_name, config_path, rest, prog=f"sweet-rl {command}")
    except pipeline.StageError as err:
        print(f"sweet-rl {command}: {err}", file=sys.stderr)
        return 1
    except pipeline.ConfigError as err:
        print(f"sweet-rl {command}: configuration error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"sweet-rl {command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nsweet-rl {command}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
