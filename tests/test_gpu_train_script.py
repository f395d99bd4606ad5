"""benchmarks/gpu_train.py on CPU: the synthetic data, the 8B shape and a real tiny run of both trainers.

The GPU figures themselves come from ``bash scripts/gpu_bench.sh`` on a CUDA machine; these tests make sure that
command's code path (random model on disk, QLoRA through the trainers' own arguments, measurement, JSON) works.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "benchmarks" / "gpu_train.py"
sys.path.insert(0, str(SCRIPT.parent))

import gpu_train  # after the path set-up above


@pytest.fixture(scope="module")
def tokenizer():
    return gpu_train.build_tokenizer(4000)


@pytest.mark.parametrize("seq_len", [192, 1000, 4096])
def test_critic_pairs_have_exactly_the_requested_length(tokenizer, seq_len):
    from sweet_trl.tokenization import DEFAULT_PRIVILEGED_TEMPLATE, tokenize_critic_input

    rows = gpu_train.critic_pairs(tokenizer, 2, seq_len, seed=1, privileged_template=DEFAULT_PRIVILEGED_TEMPLATE)
    for row in rows:
        assert row["chosen_task_id"] == row["rejected_task_id"] and row["chosen_reward"] > row["rejected_reward"]
        for side in ("chosen", "rejected"):
            critic_input = tokenize_critic_input(tokenizer, row[side], row["privileged"])
            assert critic_input.drop_reason is None
            assert critic_input.length == seq_len - 2
            assert critic_input.conversation.num_turns == gpu_train.AGENT_TURNS
    assert rows[0]["chosen"] != rows[0]["rejected"]  # two different trajectories of the task


@pytest.mark.parametrize("seq_len", [192, 4096])
def test_policy_pairs_have_exactly_the_requested_length(tokenizer, seq_len):
    from sweet_trl.policy_trainer import check_turn_pairs

    rows = gpu_train.policy_pairs(tokenizer, 3, seq_len, seed=2)
    check_turn_pairs(rows)  # the trainer's own format check
    for row in rows:
        for side in ("chosen", "rejected"):
            ids = tokenizer.apply_chat_template(row["prompt"] + row[side], tokenize=True, return_dict=True)
            assert len(ids["input_ids"]) == seq_len - 2
        assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"


def test_word_level_tokenizer_is_one_token_per_word(tokenizer):
    text = "w1 w22 w333 w3999"
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == 4
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_the_8b_config_is_llama_31_8b():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**gpu_train.LLAMA_31_8B)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248  # Llama-3.1-8B's parameter count
    assert gpu_train.model_parameters("8b") == 8_030_261_248  # what the disk-space check assumes
    assert config.rope_parameters["rope_theta"] == 500000.0
    assert (config.num_attention_heads, config.num_key_value_heads, config.vocab_size) == (32, 8, 128256)


def test_the_smollm2_config_is_the_embedded_models_shape():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**gpu_train.SMOLLM2_135M)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M's count (tied embeddings)
    assert gpu_train.model_parameters("smollm2") == 134_515_008


def test_a_profiled_step_says_where_its_time_went(tmp_path):
    """--profile traces the first measured step: its wall time, the host operators' time and the top operators (on
    a GPU also the device-busy time and the kernel launches); --micro-batch puts several pairs in one forward."""
    report, _ = run_script(tmp_path, "--trainer", "critic", "--mode", "lora-bf16", "--in-process", "--micro-batch", "2",
                           "--no-gradient-checkpointing", "--profile", grad_accum=1)
    (result,) = report["results"]
    assert result["status"] == "ok", result.get("error")
    assert result["micro_batch"] == 2 and result["gradient_checkpointing"] is False
    assert result["tokens_per_step"] == 2 * 2 * (192 - 2)  # two pairs of two sequences in the one micro-batch
    profile = result["profile"]
    assert profile["operator_calls"] > 100  # a forward, a reference forward and a backward of two layers
    assert 0 < profile["host_operator_ms"] and 0 < profile["step_seconds"] <= max(result["step_seconds"]) + 0.5
    assert profile["top_by_host"] and all(row["calls"] >= 1 for row in profile["top_by_host"])
    names = {row["name"] for row in profile["top_by_host"]}
    assert any(name.startswith("aten::") for name in names)
    hosts = [row["self_host_ms"] for row in profile["top_by_host"]]
    assert hosts == sorted(hosts, reverse=True)


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        gpu_train.parse_args(["--size", "tiny", "--seq-len", "64"])
    with pytest.raises(SystemExit):
        gpu_train.parse_args(["--size", "tiny", "--steps", "0"])
    with pytest.raises(SystemExit):
        gpu_train.parse_args(["--size", "tiny", "--micro-batch", "0"])
    args = gpu_train.parse_args(["--size", "tiny"])
    assert args.seq_len == 256 and args.vocab_words == gpu_train.TINY["vocab_size"] - 16


def test_8b_without_a_gpu_exits_with_a_clear_message():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(SCRIPT), "--size", "8b"], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "needs a CUDA GPU" in done.stderr


def test_failures_are_classified():
    assert gpu_train.classify_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate") == "oom"
    assert gpu_train.classify_failure("ValueError: bad") == "failed"
    table = gpu_train.format_table([{"trainer": "critic", "mode": "qlora", "status": "oom"}])
    assert "critic" in table and "oom" in table


def check_result(result: dict, seq_len: int, grad_accum: int, steps: int, warmup_steps: int) -> None:
    assert result["status"] == "ok", result.get("error")
    # every micro-batch is one pair: a chosen and a rejected sequence of seq_len - 2 tokens each
    assert result["tokens_per_step"] == grad_accum * 2 * (seq_len - 2)
    assert result["tokens_per_second"] > 0 and result["seconds_per_step"] > 0
    assert len(result["step_seconds"]) == warmup_steps + steps
    assert len(result["losses"]) == warmup_steps + steps and result["loss_finite"]
    assert all(math.isfinite(loss) for loss in result["losses"])
    assert result["trainable_parameters"] > 0
    assert result["quantized_4bit"] is (result["mode"] == "qlora")
    assert result["peak_rss_gib"] > 0


def run_script(tmp_path: Path, *extra: str, grad_accum: int = 2) -> tuple[dict, str]:
    json_path = tmp_path / "gpu_train.json"
    command = [sys.executable, str(SCRIPT), "--size", "tiny", "--seq-len", "192", "--steps", "1",
               "--warmup-steps", "1", "--grad-accum", str(grad_accum), "--cache-dir", str(tmp_path / "cache"),
               "--json", str(json_path), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}  # two cores shared by parallel tests
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(json_path.read_text()), done.stdout


def test_tiny_run_of_both_trainers_with_cpu_qlora(tmp_path):
    report, stdout = run_script(tmp_path, "--trainer", "both", "--mode", "qlora", "--in-process", grad_accum=1)
    assert report["size"] == "tiny" and report["device"].startswith(("CPU", "NVIDIA"))
    assert report["versions"]["trl"] and report["versions"]["peft"] and report["versions"]["bitsandbytes"]
    assert "--in-process" in report["command"]
    assert report["model_build"]["parameters"] == gpu_train.model_parameters("tiny")
    assert [(r["trainer"], r["mode"]) for r in report["results"]] == [("critic", "qlora"), ("policy", "qlora")]
    for result in report["results"]:
        check_result(result, seq_len=192, grad_accum=1, steps=1, warmup_steps=1)
    # critic and policy train the same LoRA (rank 16 on every linear layer of the same model)
    assert report["results"][0]["trainable_parameters"] == report["results"][1]["trainable_parameters"]
    # the printed table and the machine-readable line carry the same run
    assert "| critic  | qlora" in stdout
    printed = json.loads(stdout.split("GPU_TRAIN_JSON ", 1)[1].splitlines()[0])
    assert printed["results"] == report["results"]


@pytest.mark.slow
def test_isolated_runs_of_every_trainer_and_mode(tmp_path):
    """The GPU command's path: the random model written by a child process, one process per (trainer, mode)."""
    report, _ = run_script(tmp_path, "--trainer", "both", "--mode", "both")
    assert report["isolated"] is True
    assert [(r["trainer"], r["mode"]) for r in report["results"]] == [
        ("critic", "qlora"), ("policy", "qlora"), ("critic", "lora-bf16"), ("policy", "lora-bf16")]
    for result in report["results"]:
        check_result(result, seq_len=192, grad_accum=2, steps=1, warmup_steps=1)
    # a second invocation reuses the model on disk instead of writing it again
    again, _ = run_script(tmp_path, "--trainer", "critic", "--mode", "lora-bf16")
    assert "model_build" not in again and again["results"][0]["status"] == "ok"


@pytest.mark.gpu
def test_tiny_run_on_a_gpu_reports_gpu_memory(tmp_path):
    """On a CUDA machine (``pytest -m gpu``): the GPU memory fields the 8B figures are read from."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    report, stdout = run_script(tmp_path, "--trainer", "both", "--mode", "both")
    assert report["device"] == torch.cuda.get_device_name(0) and report["gpu_memory_gib"] > 0
    for result in report["results"]:
        check_result(result, seq_len=192, grad_accum=2, steps=1, warmup_steps=1)
        assert 0 <= result["steady_peak_allocated_gib"] <= result["peak_allocated_gib"] <= result["peak_reserved_gib"]
        assert result["peak_reserved_gib"] > 0
        assert result["driver_and_context_gib"] >= 0 and result["fits_24gb"] is True
        assert result["model_allocated_gib"] >= 0
    assert "True" in stdout.split("GPU_TRAIN_JSON", 1)[0]  # the fits-24-GB column of the table
