"""``python -m colbench_gym.openenv``: serve a ColBench environment to OpenEnv clients over HTTP and WebSocket."""

from __future__ import annotations

import argparse
import inspect
import os
from pathlib import Path
from typing import Any

from colbench_gym._optional import require


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in ``--help``; options without a fixed default say in words what happens."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


def _budget_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds (inf: no budget), got {text}")
    return value


def default_answer_budget() -> str:
    """The backend's answer budget when none is given, in words for ``--help`` (read from the code, not copied)."""
    from colbench_gym.envs.backend import BackendEnv
    from colbench_gym.execution.grader import Grader

    def default(function: Any, name: str) -> Any:
        parameter = inspect.signature(function).parameters.get(name)
        return None if parameter is None else parameter.default

    budget = default(BackendEnv.__init__, "answer_budget_s")
    if isinstance(budget, (int, float)):
        return f"{budget:g} s"
    budget, timeout = default(Grader.__init__, "answer_budget_s"), default(Grader.__init__, "timeout_s")
    if isinstance(budget, (int, float)):
        return f"the grader's, {budget:g} s"
    if budget is None and isinstance(timeout, (int, float)):  # the grader's budget is then one test's timeout
        return f"the grader's: one test's timeout, {timeout:g} s"
    return "the environment's own"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m colbench_gym.openenv", description=__doc__,
                                     formatter_class=_HelpFormatter)
    parser.add_argument("--env", default="ColBench-Backend-v0", choices=("ColBench-Backend-v0", "ColBench-Frontend-v0"),
                        help="the environment every session plays")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines (put it behind a "
                                                            "firewall or a proxy: the server has no authentication)")
    parser.add_argument("--port", type=int, default=8000, help="the HTTP and WebSocket port")
    parser.add_argument("--tasks", default="train",
                        help="train, test, all, a JSONL file, hub:<split>, procedural:<...>, procedural_multi:<...>, "
                             "websight:<split>")
    parser.add_argument("--split", default=None, help="the name of the served tasks in OpenEnv's Task API "
                                                      "(default: --tasks, or the file's stem)")
    parser.add_argument("--max-turns", type=int, default=10, help="agent messages per episode, the answer included")
    parser.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions")
    parser.add_argument("--answer-budget-s", type=_budget_seconds, default=None,
                        help="backend: seconds of grading one answer may use over all its tests (wall and CPU); "
                             "the tests left when it is spent fail; inf: none, each test has only its own timeout "
                             f"(default: {default_answer_budget()})")
    parser.add_argument("--allow-privileged", action="store_true",
                        help="let reset(privileged=True) send training-time information (for critics) "
                             "(default: off)")
    parser.add_argument("--similarity", default=None, help="frontend: clip or ssim (default: clip)")
    parser.add_argument("--render-workers", type=int, default=None,
                        help="frontend: browser processes (default: the renderer's own)")
    parser.add_argument("--simulator-base-url", default=None,
                        help="an OpenAI-compatible endpoint for the simulated human (default: the offline one)")
    parser.add_argument("--simulator-model", default=None,
                        help="the model name at --simulator-base-url (needed with it)")
    parser.add_argument("--log-level", default="warning", help="uvicorn's log level")
    args = parser.parse_args(argv)
    if args.answer_budget_s is not None and args.env != "ColBench-Backend-v0":
        parser.error("--answer-budget-s is for ColBench-Backend-v0 (it bounds the grading of code answers)")
    return args


def make_kwargs(args: argparse.Namespace) -> dict:
    kwargs: dict = {"tasks": args.tasks, "max_turns": args.max_turns}
    if args.answer_budget_s is not None:
        kwargs["answer_budget_s"] = args.answer_budget_s
    if args.env == "ColBench-Frontend-v0":
        if args.similarity:
            kwargs["similarity"] = args.similarity
        if args.render_workers:
            kwargs["render_workers"] = args.render_workers
    if args.simulator_base_url:
        from colbench_gym.simulators import OpenAISimulator

        if not args.simulator_model:
            raise SystemExit("--simulator-base-url needs --simulator-model")
        kwargs["simulator"] = OpenAISimulator(args.simulator_base_url, model=args.simulator_model)
    return kwargs


def split_name(args: argparse.Namespace) -> str:
    if args.split:
        return args.split
    tasks = args.tasks
    return Path(tasks).stem if os.sep in tasks or tasks.endswith(".jsonl") else tasks


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    uvicorn = require("uvicorn", "openenv")
    from colbench_gym.openenv.server import create_colbench_app

    app = create_colbench_app(args.env, max_sessions=args.max_sessions, split=split_name(args),
                              allow_privileged=args.allow_privileged, **make_kwargs(args))
    print(f"serving {args.env} ({split_name(args)}) on http://{args.host}:{args.port} "
          f"(WebSocket /ws, {args.max_sessions} sessions{', privileged allowed' if args.allow_privileged else ''})",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
