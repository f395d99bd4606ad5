"""``python -m colbench_gym.openenv``: serve a ColBench environment to OpenEnv clients over HTTP and WebSocket."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from colbench_gym._optional import require


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m colbench_gym.openenv", description=__doc__)
    parser.add_argument("--env", default="ColBench-Backend-v0", choices=("ColBench-Backend-v0", "ColBench-Frontend-v0"))
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept other machines (put it behind a "
                                                            "firewall or a proxy: the server has no authentication)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tasks", default="train",
                        help="train, test, all, a JSONL file, hub:<split>, procedural:<...>, websight:<split>")
    parser.add_argument("--split", default=None, help="the name of the served tasks in OpenEnv's Task API "
                                                      "(default: --tasks, or the file's stem)")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions")
    parser.add_argument("--allow-privileged", action="store_true",
                        help="let reset(privileged=True) send training-time information (for critics)")
    parser.add_argument("--similarity", default=None, help="frontend: clip (default) or ssim")
    parser.add_argument("--render-workers", type=int, default=None, help="frontend: browser processes")
    parser.add_argument("--simulator-base-url", default=None,
                        help="an OpenAI-compatible endpoint for the simulated human (default: the offline one)")
    parser.add_argument("--simulator-model", default=None)
    parser.add_argument("--log-level", default="warning")
    return parser.parse_args(argv)


def make_kwargs(args: argparse.Namespace) -> dict:
    kwargs: dict = {"tasks": args.tasks, "max_turns": args.max_turns}
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
