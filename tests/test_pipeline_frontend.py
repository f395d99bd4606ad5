"""The SWEET-RL pipeline on ColBench frontend design, end to end on a tiny model (needs Chromium).

collect -> critic_pairs -> train_critic -> sample_candidates -> rank -> policy_pairs -> train_policy -> evaluate ->
report on ``ColBench-Frontend-v0`` with the built-in pages (two training, two test), the offline simulated human
who looks at both renders, and the weight-free SSIM reward. As in ``test_pipeline.py`` the policy is a two-layer
Llama built in the test, whose answering turns are scripted (a random model never writes a page): from its second
turn on an episode submits the target page or another task's page, so that similarities differ within a task.
Every page is rendered by the real renderer and scored against the rendered target.

The environment's default reward is CLIP, whose weights are not here (tests never reach the Hub) and which the
pipeline does not choose; the test makes SSIM the default of the registered environment.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers_tiny_models import save_tiny_model

pytest.importorskip("trl")
pytest.importorskip("playwright")

from sweet_trl import pipeline
from sweet_trl.pipeline import MARKER

pytestmark = pytest.mark.browser

ENV_ID = "ColBench-Frontend-v0"
STAGE_ORDER = ["collect", "critic_pairs", "train_critic", "sample_candidates", "rank", "policy_pairs",
               "train_policy", "evaluate/zero_shot", "evaluate/sweet"]


class ScriptedPages:
    """The tiny model's turns, except that from the second agent turn on an episode answers with a page: even
    episodes of a task (seeds 0, 2, ...) submit its target page, odd ones the page of another task."""

    def __init__(self, inner, tasks):
        self.inner, self.name, self.tasks = inner, inner.name, tasks
        self.pages = [task.ground_truth for task in tasks.values()]

    @staticmethod
    def episode_seed(task_id: str, turn_seed: int, turn: int) -> int | None:
        from sweet_trl.rollouts import EpisodeSpec
        from sweet_trl.rollouts import turn_seed as seed_of

        return next((k for k in (*range(16), *range(1000, 1016))
                     if seed_of(EpisodeSpec(task_id, k), turn) == turn_seed), None)

    def generate(self, histories, n=1, sampling=None, seeds=None):
        from sweet_trl.generation.base import Generation

        out = self.inner.generate(histories, n=n, sampling=sampling, seeds=seeds)
        for i, history in enumerate(histories):
            task = self.tasks.get(next(m["content"] for m in history if m["role"] == "user"))
            agent_turns = sum(m["role"] == "assistant" for m in history)
            if task is None or n > 1 or agent_turns < 1:
                continue  # candidates (n > 1) and first turns are the model's own text
            episode = self.episode_seed(task.task_id, seeds[i], agent_turns)
            good = episode is not None and episode % 2 == 0
            page = task.ground_truth if good else next(p for p in self.pages if p != task.ground_truth)
            out[i][0] = Generation(text="I WANT TO ANSWER:\n" + page, token_ids=[1], logprobs=[-1.0])
        return out


@pytest.fixture(scope="module")
def frontend_run(tmp_path_factory):
    import gymnasium as gym
    import torch
    import yaml

    import colbench_gym  # noqa: F401  (registers the environment ids)
    from colbench_gym.rendering import AssetsMissingError, RendererUnavailable, shared_renderer
    from colbench_gym.tasks import load_builtin

    try:
        shared_renderer()
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")
    torch.set_num_threads(1)  # a tiny model gains nothing from threads, and other tests share the cores
    root = tmp_path_factory.mktemp("frontend-pipeline")
    tasks = {t.problem_description: t for t in load_builtin("all", "frontend")}
    # Pages in the tokenizer's corpus keep the dialogues (a page, the human's reply, the target) within max_length.
    model = save_tiny_model(root / "tiny-llama", extra_corpus=[t.ground_truth for t in tasks.values()])
    real = pipeline.make_backend
    patch = pytest.MonkeyPatch()
    patch.setitem(gym.spec(ENV_ID).kwargs, "similarity", "ssim")
    patch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedPages(real(*a, **k), tasks))
    config = {
        "run_dir": str(root / "run"), "env_id": ENV_ID, "train_tasks": "train", "eval_tasks": "test",
        "policy_model": model, "max_train_tasks": 2, "max_eval_tasks": 2, "max_turns": 3,
        "max_new_tokens": 8, "generation_batch_size": 8, "num_workers": 2,
        # trainers (shared by the critic and the policy)
        "bf16": False, "use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"],
        "gradient_checkpointing": False, "logging_steps": 1, "report_to": [], "max_length": 4096,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "max_steps": 2, "learning_rate": 1e-3,
        "save_strategy": "no",
        "collect": {"episodes_per_task": 4},
        "sample_candidates": {"num_candidates": 4, "state_fraction": 0.5, "max_states": 4},
        "policy_pairs": {"pairs_per_turn": 2},
        "rank": {"report_trajectories": 4},
        "evaluate": {"eval_episodes_per_task": 2},  # seeds 1000 (the target page) and 1001 (another page)
    }
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    try:
        markers = pipeline.run_pipeline(path, stream=out)
    finally:
        patch.undo()
    return {"root": root, "run": root / "run", "markers": markers, "out": out.getvalue(), "tasks": tasks}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rows(path: Path) -> list[dict]:
    from sweet_trl.trainer_utils import load_rows

    return load_rows(path).to_list()


def test_frontend_pipeline_runs_every_stage_on_real_renders(frontend_run):
    run, markers, tasks = frontend_run["run"], frontend_run["markers"], frontend_run["tasks"]
    assert list(markers) == STAGE_ORDER
    for name in STAGE_ORDER:
        marker = json.loads((run / name / MARKER).read_text())
        assert marker == markers[name] and marker["fingerprint"] and marker["config"][0]["env_id"] == ENV_ID
        for rel in marker["outputs"].values():
            assert (run / name / rel).exists()

    # Rollouts: every episode answered with a page, scored by SSIM against the rendered target.
    trajectories = _jsonl(run / "collect" / "trajectories.jsonl")
    assert len(trajectories) == 2 * 4 == markers["collect"]["counts"]["episodes"]
    assert markers["collect"]["counts"]["infra_failures"] == 0
    for record in trajectories:
        assert record["env_id"] == ENV_ID and record["outcome"] == "answered"
        assert record["render_status"] == "ok" and record["similarity_metric"] == "ssim"
        assert 0 <= record["similarity"] <= 1 and record["reward"] == record["similarity"]
        assert record["task"]["ground_truth"] == tasks[record["dialogue_history"][0]["content"]].ground_truth
        assert "<html" in record["answer"]
    by_task: dict[str, set] = {}
    for record in trajectories:
        by_task.setdefault(record["task_id"], set()).add(round(record["reward"], 6))
    assert all(len(rewards) > 1 for rewards in by_task.values())  # the target page and a wrong one

    # Critic pairs: the frontend recipe pairs trajectories of one task whose similarity differs by >= 0.1.
    pairs = _jsonl(run / "critic_pairs" / "pairs.jsonl")
    assert len(pairs) == markers["critic_pairs"]["counts"]["pairs"] > 0
    assert json.loads((run / "critic_pairs" / MARKER).read_text())["info"]["rule"]["rule"] == "all_pairs"
    for pair in pairs:
        assert pair["chosen_reward"] - pair["rejected_reward"] >= 0.1 - 1e-9
        assert pair["privileged"] == tasks[pair["chosen"][0]["content"]].ground_truth
    assert (run / "train_critic" / "model" / "sweet_critic.json").exists()
    assert markers["train_critic"]["counts"]["steps"] == 2 and markers["train_critic"]["counts"]["pairs_used"] > 0

    # Candidates ranked by the critic, then turn pairs (no privileged page in the policy's prompt).
    candidates = _rows(run / "sample_candidates" / "candidates")
    assert len(candidates) == markers["sample_candidates"]["counts"]["turn_states"] > 0
    for row in candidates:
        assert all(row["privileged"] not in m["content"] for m in row["prompt"])
    ranked = _rows(run / "rank" / "ranked")
    assert markers["rank"]["counts"]["ranking_errors"] == 0
    for row in ranked:
        assert row["ranking_error"] is None and len(row["ranking_scores"]) == len(row["candidates"]) > 0
        assert all(isinstance(score, float) and score == score for score in row["ranking_scores"])
    turn_pairs = _rows(run / "policy_pairs" / "pairs")
    assert len(turn_pairs) == markers["policy_pairs"]["counts"]["pairs"] > 0
    for pair in turn_pairs:
        assert pair["chosen_score"] > pair["rejected_score"]
    assert (run / "train_policy" / "model" / "adapter_config.json").exists()
    assert markers["train_policy"]["counts"]["steps"] == 2

    # Evaluation on the test pages: similarity rewards from real renders, both pages rendered for the report.
    from colbench_gym.tasks import load_builtin

    test_ids = {r["task_id"] for r in _jsonl(run / "evaluate" / "zero_shot" / "trajectories.jsonl")}
    assert test_ids == {t.task_id for t in load_builtin("test", "frontend")[:2]} and not test_ids & set(by_task)
    for policy in ("zero_shot", "sweet"):
        marker = markers[f"evaluate/{policy}"]
        records = _jsonl(run / "evaluate" / policy / "trajectories.jsonl")
        assert len(records) == marker["counts"]["episodes"] == 4 and marker["counts"]["infra_errors"] == 0
        for record in records:
            assert record["policy"] == policy and record["render_status"] == "ok"
            assert record["similarity_metric"] == "ssim" and 0 <= record["similarity"] <= 1
            assert record["reward"] == record["similarity"]
        similarities = sorted(r["similarity"] for r in records)
        assert similarities[-1] == pytest.approx(1.0) and similarities[0] < 0.9  # the target page, another one
        assert marker["metrics"]["mean_similarity"] == pytest.approx(sum(similarities) / len(similarities))
        renders = _jsonl(run / "evaluate" / policy / marker["outputs"]["renders"])
        assert len(renders) == 4
        for row in renders:
            for key in ("agent", "target"):
                png = (run / "evaluate" / policy / "renders" / row[key]).read_bytes()
                assert png.startswith(b"\x89PNG") and len(png) > 1000
    assert "mean_similarity" in frontend_run["out"] and "Evaluation on the test tasks" in frontend_run["out"]
    html = (run / "report.html").read_text()
    assert "Pages: agent and target" in html and html.count("src='data:image/png;base64,") >= 8
