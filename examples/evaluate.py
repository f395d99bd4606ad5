"""Evaluate a policy on the test tasks, without privileged information: success rate and % tests passed.

    python examples/evaluate.py --policy runs/example/policy --tasks test --output_dir runs/example/eval-sweet
    python examples/evaluate.py --policy embedded --tasks test --output_dir runs/example/eval-zero-shot

A LoRA adapter folder is merged into its base model first. Greedy decoding, as in the paper.
"""

from dataclasses import dataclass, field

from trl import TrlParser

from sweet_trl.evaluation import evaluate
from sweet_trl.generation import SamplingParams, TransformersBackend
from sweet_trl.pipeline import AnswerForcing, load_causal_lm, resolve_model


@dataclass
class Args:
    policy: str = field(default="embedded", metadata={"help": "Model or adapter folder, Hub id, or 'embedded'."})
    env_id: str = field(default="ColBench-Backend-v0", metadata={"help": "Or ColBench-Frontend-v0."})
    tasks: str = field(default="test", metadata={"help": "'test', 'train', a JSONL path, or 'hub:test'."})
    max_turns: int = field(default=10, metadata={"help": "Agent messages per episode."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest agent message in tokens."})
    force_answer_on_last_turn: bool = field(default=False, metadata={
        "help": "Start the last allowed message with the answer marker (as the CPU demo does for a 135M model)."})
    output_dir: str = field(default="runs/example/eval", metadata={"help": "Trajectories and metrics go here."})


if __name__ == "__main__":
    (args,) = TrlParser([Args]).parse_args_and_config()
    model, tokenizer = load_causal_lm(resolve_model(args.policy))
    policy = TransformersBackend(model, tokenizer, name=args.policy)
    if args.force_answer_on_last_turn:
        policy = AnswerForcing(policy, args.max_turns, "python" if "Backend" in args.env_id else "html")
    evaluate(policy, tasks=args.tasks, env_id=args.env_id,
             output_dir=args.output_dir, env_kwargs={"max_turns": args.max_turns},
             sampling=SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens))
