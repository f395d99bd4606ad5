"""The environments install and run alone: no torch, no trainers, no browser."""

import subprocess
import sys

import pytest
import tomllib
from conftest import REPO_ROOT

HEAVY = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm", "playwright",
         "open_clip", "datasets", "huggingface_hub", "PIL")

# Runs in a fresh interpreter where importing any heavy package fails, as in a bare `pip install .`.
BLOCKED_EPISODE = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ImportError("blocked heavy import: " + name)
sys.meta_path.insert(0, Block())
import gymnasium as gym, colbench_gym
env = gym.make("ColBench-Backend-v0")
obs, info = env.reset(seed=1)
obs, r, term, trunc, info = env.step("What exactly should the function return?")
obs, r, term, trunc, info = env.step("I WANT TO ANSWER:\\n" + info["privileged"]["ground_truth"])
assert term and r == 1.0, (r, info.get("grader"))
print("ok", [m for m in sys.modules if m.split(".")[0] in {HEAVY!r}])
"""


def test_base_dependencies_are_light():
    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    base = " ".join(meta["project"]["dependencies"]).lower()
    for name in ("torch", "transformers", "trl", "playwright", "vllm", "bitsandbytes"):
        assert name not in base
    extras = meta["project"]["optional-dependencies"]
    assert {"frontend", "clip", "llm", "train", "quant", "vllm", "test"} <= set(extras)


def test_backend_episode_runs_without_heavy_packages():
    out = subprocess.run([sys.executable, "-c", BLOCKED_EPISODE], capture_output=True, text=True, timeout=120,
                         cwd=REPO_ROOT, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok []"


def test_missing_extra_error_names_the_extra():
    from colbench_gym._optional import MissingExtraError, require

    with pytest.raises(MissingExtraError, match=r"pip install 'colbench-gym\[vllm\]'"):
        require("surely_not_installed_module_xyz", "vllm")
