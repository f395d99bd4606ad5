"""The SSIM floor: fixed answers scored against every built-in frontend target through gym.make (the reward a
policy would get), quoted in SSIMSimilarity's docstring and the README.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/ssim_floor.py      # about a minute on 2 cores (100 renders)
"""

import statistics

import gymnasium as gym

import colbench_gym  # noqa: F401  (registers the environments)

ANSWERS = {
    "blank": "<html><body></body></html>",
    "one line": "<html><body><p>Welcome</p></body></html>",
    "white page, heading": "<html><body style='background:white'><h1>Home</h1></body></html>",
    "black page": "<html><body style='background:black'></body></html>",
}
scores = {name: [] for name in ANSWERS}
for split in ("train", "test"):
    env = gym.make("ColBench-Frontend-v0", tasks=split, similarity="ssim", max_turns=1)
    for index in range(len(env.unwrapped.tasks)):
        for name, html in ANSWERS.items():
            env.reset(seed=0, options={"task_index": index})
            _, reward, terminated, _, info = env.step("I WANT TO ANSWER: " + html)
            assert terminated and info["render_status"] == "ok", info.get("render_status")
            scores[name].append(reward)
    env.close()
for name, values in scores.items():
    print(f"{name:22s} n={len(values)} mean={statistics.mean(values):.3f} median={statistics.median(values):.3f} "
          f"min={min(values):.3f} max={max(values):.3f}")
