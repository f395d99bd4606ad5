"""Roll out a policy on ColBench tasks and save one trajectory record per episode (resumable).

    python examples/collect.py --policy embedded --tasks train --episodes_per_task 4 \
        --max_new_tokens 128 --output runs/example/rollouts.jsonl
    python examples/collect.py --policy embedded --max_turns 2 --force_answer_on_last_turn   # a CPU smoke run

`--policy` is a model folder, a Hub id, or `embedded` (SmolLM2-135M-Instruct, CPU). Interrupted? Run the same
command again: the episodes already in the file are kept and only the missing ones are played.
"""

from dataclasses import dataclass, field

from trl import TrlParser

from sweet_trl.generation import SamplingParams, TransformersBackend
from sweet_trl.pipeline import AnswerForcing
from sweet_trl.rollouts import collect


@dataclass
class Args:
    policy: str = field(default="embedded", metadata={"help": "Model folder, Hub id, or 'embedded'."})
    env_id: str = field(default="ColBench-Backend-v0", metadata={"help": "Or ColBench-Frontend-v0."})
    tasks: str = field(default="train", metadata={"help": "'train', 'test', a JSONL path, or 'hub:train'."})
    episodes_per_task: int = field(default=4, metadata={"help": "Episodes (seeds) per task."})
    max_turns: int = field(default=10, metadata={"help": "Agent messages per episode."})
    max_new_tokens: int = field(default=128, metadata={"help": "Longest agent message in tokens."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    num_envs: int = field(default=16, metadata={"help": "Episodes played (and generated for) together."})
    force_answer_on_last_turn: bool = field(default=False, metadata={
        "help": "Start the last allowed message with the answer marker (small models rarely answer by themselves)."})
    output: str = field(default="runs/example/rollouts.jsonl", metadata={"help": "JSONL file of trajectory records."})


if __name__ == "__main__":
    (args,) = TrlParser([Args]).parse_args_and_config()
    policy = TransformersBackend(args.policy)
    if args.force_answer_on_last_turn:
        policy = AnswerForcing(policy, args.max_turns, "python" if "Backend" in args.env_id else "html")
    result = collect(policy, env_id=args.env_id, tasks=args.tasks,
                     episodes_per_task=args.episodes_per_task, output=args.output, resume=True,
                     num_envs=args.num_envs, env_kwargs={"max_turns": args.max_turns},
                     sampling=SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens))
    print(result.stats.to_dict())
