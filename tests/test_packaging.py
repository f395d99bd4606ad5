"""The environments install and run alone: no torch, no trainers, no browser."""

import os
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


# -- the built wheel -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel `pip install .` builds, from a copy of the checkout's packaging inputs."""
    import shutil

    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    for package in ("colbench_gym", "sweet_trl"):
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(out), str(source)], capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    [path] = out.glob("colbench_gym-*.whl")
    return path


def test_wheel_ships_the_configs_and_py_typed(wheel):
    import zipfile

    from sweet_trl.configs import names

    files = set(zipfile.ZipFile(wheel).namelist())
    assert {"colbench_gym/py.typed", "sweet_trl/py.typed", "sweet_trl/configs/__init__.py"} <= files
    assert {f"sweet_trl/configs/{name}.yaml" for name in names()} <= files
    assert {"demo_cpu", "study_cpu", "backend_8b", "frontend_8b", "study_8b"} <= set(names())
    # the shipped warm start that demo_cpu starts from
    adapter = "sweet_trl/adapters/smollm2-135m-procedural/"
    assert {adapter + name for name in ("adapter_config.json", "adapter_model.safetensors", "warm_start.json")} <= files


def test_installed_wheel_finds_a_config_by_name_away_from_the_checkout(wheel, tmp_path):
    """Unpacked as pip installs it, first on the path: `sweet-rl configs demo_cpu` and `--config demo_cpu` read the
    wheel's own file, from a folder with no checkout in it."""
    import zipfile

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import sweet_trl.configs as c, sweet_trl.cli as cli; "
             "print(c.resolve_config('demo_cpu')); raise SystemExit(cli.main(['configs', 'demo_cpu']))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    assert run.returncode == 0, run.stderr[-2000:]
    first, _, text = run.stdout.partition("\n")
    assert first == str(site / "sweet_trl" / "configs" / "demo_cpu.yaml")
    assert text == (site / "sweet_trl" / "configs" / "demo_cpu.yaml").read_text()
    assert text.startswith("# The short form of the study, on a laptop CPU")


# -- no deprecation noise from our own calls ------------------------------------------------------

# Imports every module of both packages (those whose optional dependency is missing are left out) and prints each
# warning that Python attributes to our own files: a deprecated call in our code, at import time.
IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys, warnings
import colbench_gym, sweet_trl
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for package in [importlib.import_module(name) for name in sys.argv[1:]]:
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if module.name.endswith("__main__"):  # a command, not a library module
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:
                pass
roots = [p.__path__[0] for p in (colbench_gym, sweet_trl)]
for warning in caught:
    if any(warning.filename.startswith(root) for root in roots):
        print(f"WARNED {warning.category.__name__} {warning.filename}:{warning.lineno} {warning.message}")
print(f"IMPORTED {len(sys.modules)} modules")
"""


@pytest.mark.parametrize("package", ["colbench_gym", pytest.param("sweet_trl", marks=pytest.mark.slow)])
def test_importing_our_modules_warns_nothing_from_our_code(package):
    """Every module (sweet_trl's import torch, transformers and TRL: 15-30 s on 2 cores, hence slow)."""
    run = subprocess.run([sys.executable, "-c", IMPORT_EVERY_MODULE, package], capture_output=True, text=True,
                         timeout=300, cwd=REPO_ROOT, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "IMPORTED" in run.stdout
    assert [line for line in run.stdout.splitlines() if line.startswith("WARNED")] == []


def test_trainer_configs_use_the_current_checkpointing_name():
    """TRL's configs turn gradient checkpointing on under the name transformers 5.2x deprecates; ours pass it on
    under the current one, with its value, and say nothing."""
    pytest.importorskip("trl")
    import warnings

    from sweet_trl.baselines.multiturn_dpo import MultiTurnDPOConfig
    from sweet_trl.baselines.rejection_finetuning import RejectionFinetuneConfig
    from sweet_trl.critic_config import SweetCriticConfig
    from sweet_trl.policy_config import TurnPreferenceConfig

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for config_class in (SweetCriticConfig, TurnPreferenceConfig, MultiTurnDPOConfig, RejectionFinetuneConfig):
            default = config_class("out", report_to=[])
            off = config_class("out", report_to=[], gradient_checkpointing=False)
            assert default.gradient_checkpointing is True and off.gradient_checkpointing is False, config_class
            if hasattr(default, "activation_checkpointing"):  # transformers 5.2x
                assert default.activation_checkpointing is True and off.activation_checkpointing is False


def test_reference_pass_switches_checkpointing_off_and_on_without_warnings():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import warnings

    from helpers_tiny_models import tiny_causal_lm, tiny_tokenizer

    from sweet_trl.transformers_compat import checkpointing_disabled

    model = tiny_causal_lm(tiny_tokenizer())
    current = hasattr(model, "activation_checkpointing_enable")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        (model.activation_checkpointing_enable if current else model.gradient_checkpointing_enable)()
        state = lambda: model.is_activation_checkpointing if current else model.is_gradient_checkpointing
        with torch.no_grad(), checkpointing_disabled(model):
            assert not state()
        assert state()
