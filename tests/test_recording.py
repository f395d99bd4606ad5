"""Own rollouts into SWEET-RL: ``colbench_gym.wrappers.RecordTrajectories`` records a user's own agent loop (through
``gym.make``) in the trainers' trajectory format, the trainers' readers, ``sweet-rl critic-pairs`` and
``sweet-rl train-critic`` take the file as it is, and a file that cannot give pairs gets an error that says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from builtin_wrong_answers import WRONG_ANSWERS
from conftest import REPO_ROOT

import colbench_gym
from colbench_gym.tasks import load_builtin
from colbench_gym.wrappers import RecordTrajectories

gym.register_envs(colbench_gym)

TASKS = load_builtin("train")[:3]
REFERENCES = {task.task_id: task.ground_truth for task in TASKS}


class ScriptedAgent:
    """A user's own policy: asks one question, then answers with the reference (``"careful"``), with a plausible
    answer that gets one hidden detail wrong (``"hasty"``), or keeps asking until the turns run out (``"silent"``)."""

    def __init__(self, style: str):
        self.style = style

    def __call__(self, observation: str, task_id: str, turn: int) -> str:
        if turn == 0 or self.style == "silent":
            return WRONG_ANSWERS[task_id].question
        code = REFERENCES[task_id] if self.style == "careful" else WRONG_ANSWERS[task_id].code
        return "I WANT TO ANSWER:\n" + code


def play(env: gym.Env, agent: ScriptedAgent, task_id: str, seed: int) -> float:
    """The user's loop: reset, step until the episode ends, return the last reward."""
    observation, _ = env.reset(seed=seed, options={"task_id": task_id})
    turn, done, reward = 0, False, 0.0
    while not done:
        observation, reward, terminated, truncated, _ = env.step(agent(observation, task_id, turn))
        turn, done = turn + 1, terminated or truncated
    return reward


def record_episodes(path: Path, styles=("careful", "hasty", "silent"), tasks=TASKS, **env_kwargs) -> list[float]:
    env = RecordTrajectories(gym.make("ColBench-Backend-v0", tasks="train", max_turns=2, **env_kwargs), path,
                             policy="scripted")
    rewards = [play(env, ScriptedAgent(style), task.task_id, seed=7) for task in tasks for style in styles]
    env.close()
    return rewards


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, list[float]]:
    path = tmp_path_factory.mktemp("recorded") / "mine.jsonl"
    return path, record_episodes(path)


def test_an_own_loop_is_recorded_in_the_trainers_format(recorded):
    from sweet_trl.trajectories import Trajectory, read_trajectories

    path, rewards = recorded
    records = read_trajectories(path)
    assert [r["reward"] for r in records] == rewards and len(records) == 9
    by_style = {style: [Trajectory(r) for r in records[i::3]] for i, style in enumerate(("careful", "hasty",
                                                                                         "silent"))}
    assert all(t.reward == 1.0 and t.succeeded() and t.record["outcome"] == "answered" for t in by_style["careful"])
    assert all(0.0 < t.reward < 1.0 and not t.succeeded() for t in by_style["hasty"])  # one hidden detail wrong
    assert all(t.reward == 0.0 and t.record["outcome"] == "no_answer" and t.record["answer"] is None
               for t in by_style["silent"])
    for task, trajectory in zip(TASKS, by_style["careful"]):
        record = trajectory.record
        assert trajectory.task_id == task.task_id and trajectory.env_id == "ColBench-Backend-v0"
        assert trajectory.privileged() == task.ground_truth  # c, from info["privileged"]
        assert record["task"]["test_cases"] == task.test_cases
        assert record["task"]["problem_description"] == task.problem_description
        assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "user", "assistant"]
        assert trajectory.messages[0]["content"] == task.problem_description
        assert trajectory.messages[1]["content"] == WRONG_ANSWERS[task.task_id].question
        assert record["answer"].strip() == task.ground_truth.strip() and record["turns"] == 2
        assert record["seed"] == 7 and record["policy"] == "scripted" and record["grader"]["infra_error"] is False
        assert trajectory.drop_reason() is None
    # Same task, same seed, three policies: three episodes, none replacing another.
    assert len({r["episode_id"] for r in records}) == 9
    assert records[0]["episode_id"].startswith(f"{TASKS[0].task_id}/")


def test_the_critic_pairs_command_and_the_python_api_take_the_file(recorded, tmp_path, capsys):
    pytest.importorskip("trl")
    from sweet_trl import cli
    from sweet_trl.pairs import critic_pair_dataset

    path, _ = recorded
    run_dir = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(f"run_dir: {run_dir}\n")
    assert cli.main(["critic-pairs", "--config", str(config), "--trajectories", str(path)]) == 0
    assert "pairs=6" in capsys.readouterr().out
    pairs = [json.loads(line) for line in (run_dir / "critic_pairs" / "pairs.jsonl").read_text().splitlines()]
    # backend recipe: each task's successful (careful) episode against its hasty and its silent one
    assert sorted((p["task_id"], p["chosen_reward"], p["rejected_reward"] > 0) for p in pairs) == sorted(
        (task.task_id, 1.0, hasty) for task in TASKS for hasty in (True, False))
    assert all(p["privileged"] == REFERENCES[p["task_id"]] for p in pairs)
    dataset = critic_pair_dataset(path, preset="backend")
    assert len(dataset) == 6 and dataset[0]["chosen"][0]["role"] == "user"


@pytest.mark.slow
def test_train_critic_trains_on_a_recorded_file(recorded, tmp_path, capsys, one_torch_thread):
    """The whole door: a recorded file, `sweet-rl critic-pairs`, then one step of `sweet-rl train-critic` on a tiny
    model."""
    pytest.importorskip("trl")
    from helpers_tiny_models import save_tiny_model

    from sweet_trl import cli

    path, _ = recorded
    model = save_tiny_model(tmp_path / "tiny")
    run_dir = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(
        f"run_dir: {run_dir}\npolicy_model: {model}\nbf16: false\nuse_peft: true\nlora_r: 2\nlora_alpha: 4\n"
        "lora_target_modules: [q_proj, v_proj]\ngradient_checkpointing: false\nreport_to: []\nmax_length: 2048\n"
        "per_device_train_batch_size: 2\nmax_steps: 1\nsave_strategy: 'no'\nlogging_steps: 1\n"
        f"critic_pairs:\n  trajectories: {path}\n")
    assert cli.main(["critic-pairs", "--config", str(config)]) == 0
    assert cli.main(["train-critic", "--config", str(config)]) == 0
    marker = json.loads((run_dir / "train_critic" / "_COMPLETE.json").read_text())
    assert marker["counts"]["steps"] == 1 and marker["counts"]["pairs"] == 6
    assert (run_dir / "train_critic" / "model" / "sweet_critic.json").exists()


# -- files that cannot give pairs say why ------------------------------------------------------------------------


def test_every_task_played_once_says_to_play_tasks_again(tmp_path):
    pytest.importorskip("datasets")
    from sweet_trl.pairs import critic_pair_dataset

    path = tmp_path / "once.jsonl"
    record_episodes(path, styles=("careful",), tasks=TASKS[:2])
    with pytest.raises(ValueError, match=r"no critic pair could be built: 2 of 2 tasks have a single usable "
                                         r"trajectory: .*episodes_per_task >= 2"):
        critic_pair_dataset(path, preset="backend")


def test_equal_rewards_and_no_success_are_named(recorded, tmp_path):
    pytest.importorskip("datasets")
    from sweet_trl.pairs import critic_pair_dataset

    silent = tmp_path / "silent.jsonl"
    record_episodes(silent, styles=("silent", "silent"), tasks=TASKS[:1])
    with pytest.raises(ValueError, match="1 of 1 tasks have trajectories whose rewards are all equal"):
        critic_pair_dataset(silent, preset="backend")

    path, _ = recorded
    unsuccessful = tmp_path / "unsuccessful.jsonl"
    unsuccessful.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                                    if json.loads(line)["success"] is False))
    with pytest.raises(ValueError, match=r"in 3 of 3 tasks the best trajectory did not succeed.*"
                                         r"require_success=False") as error:
        critic_pair_dataset(unsuccessful, preset="backend")
    assert "(0 pairs from 0/3 tasks and 6 trajectories" in str(error.value)
    assert len(critic_pair_dataset(unsuccessful, preset="backend", require_success=False)) == 3  # the advice works
    with pytest.raises(ValueError, match=r"in 3 of 3 tasks the rewards differ by less than min_reward_gap=0.99"):
        critic_pair_dataset(unsuccessful, rule="all_pairs", require_success=False, min_reward_gap=0.99)


def test_records_without_the_privileged_text_are_named(recorded, tmp_path):
    pytest.importorskip("datasets")
    from sweet_trl.pairs import critic_pair_dataset

    path, _ = recorded
    stripped = tmp_path / "stripped.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        del row["task"]["ground_truth"]
    stripped.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match=r"9 of 9 trajectories dropped as no_privileged: the records lack the "
                                         r"privileged text c \(task\['ground_truth'\].*privileged=True"):
        critic_pair_dataset(stripped)
    for row in rows[:3]:  # c restored, but the agent's turns under a role no chat template knows
        row["task"]["ground_truth"] = REFERENCES[row["task_id"]]
        row["dialogue_history"][1]["role"] = "agent"
    stripped.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match=r"6 of 9 trajectories dropped as no_privileged: .*; 3 of 9 trajectories "
                                         r"dropped as malformed_dialogue: the dialogues are not lists of \{role: "):
        critic_pair_dataset(stripped)
    with pytest.raises(ValueError, match="the input holds no trajectory record"):
        critic_pair_dataset([])


def test_an_environment_without_privileged_information_is_refused(tmp_path):
    env = gym.make("ColBench-Backend-v0", tasks="train", privileged=False)
    with pytest.raises(ValueError, match=r"needs the privileged information in info\['privileged'\].*"
                                         r"privileged=True"):
        RecordTrajectories(env, tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()

    class HidesPrivileged(gym.Wrapper):  # an environment the recorder cannot inspect: refused at reset
        def reset(self, **kwargs):
            observation, info = self.env.reset(**kwargs)
            return observation, {k: v for k, v in info.items() if k != "privileged"}

    recorder = RecordTrajectories(HidesPrivileged(gym.make("ColBench-Backend-v0", tasks="train")), tmp_path / "y.jsonl")
    with pytest.raises(ValueError, match="privileged=False is for evaluation"):
        recorder.reset(seed=0)
    recorder.close()


# -- the file ----------------------------------------------------------------------------------------------------


def test_the_file_is_never_overwritten_silently_and_a_torn_last_line_is_repaired(recorded, tmp_path, caplog):
    from sweet_trl.trajectories import read_trajectories

    path = tmp_path / "mine.jsonl"
    record_episodes(path, styles=("careful",), tasks=TASKS[:1])
    with pytest.raises(FileExistsError, match="already holds trajectories: pass append=True"):
        RecordTrajectories(gym.make("ColBench-Backend-v0"), path)
    # A process killed in the middle of a write leaves a partial last line: readers skip it, append removes it.
    with path.open("ab") as handle:
        handle.write(b'{"task": {"task_id": "b-0')
    assert len(read_trajectories(path)) == 1
    env = RecordTrajectories(gym.make("ColBench-Backend-v0", max_turns=2), path, append=True)
    assert "removed a partial last record (25 bytes)" in caplog.text
    with pytest.raises(RuntimeError, match="being written by another recorder"):
        RecordTrajectories(gym.make("ColBench-Backend-v0"), path, append=True)
    play(env, ScriptedAgent("hasty"), TASKS[0].task_id, seed=7)
    assert len(read_trajectories(path)) == 2  # on disk as soon as the episode ends, not at close
    env.reset(seed=1)  # abandoned before its end: no reward, not written
    env.close()
    assert env.recorded == 1 and env.abandoned == 1
    records = read_trajectories(path)
    assert [r["success"] for r in records] == [True, False]
    assert all(line.startswith("{") for line in path.read_text().splitlines())
    RecordTrajectories(gym.make("ColBench-Backend-v0"), path, overwrite=True).close()
    assert path.read_bytes() == b""


def test_recordings_of_several_recorders_read_as_one_folder(tmp_path):
    from sweet_trl.pairs import build_critic_pairs

    record_episodes(tmp_path / "runs" / "a.jsonl", styles=("careful",), tasks=TASKS[:1])
    record_episodes(tmp_path / "runs" / "b.jsonl", styles=("hasty",), tasks=TASKS[:1])  # same task, same seed
    pairs, stats = build_critic_pairs(tmp_path / "runs")
    assert (stats.trajectories, stats.pairs) == (2, 1) and pairs[0]["chosen_reward"] == 1.0


def test_the_wrapper_needs_neither_torch_nor_sweet_trl(tmp_path):
    code = ("import sys; sys.modules['torch'] = None; sys.modules['sweet_trl'] = None\n"
            "import colbench_gym.wrappers, gymnasium as gym\n"
            "env = colbench_gym.wrappers.RecordTrajectories(gym.make('ColBench-Backend-v0'), sys.argv[1])\n"
            "env.reset(seed=0); env.close(); print('ok')")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.jsonl")], capture_output=True, text=True, timeout=120,
                            cwd=REPO_ROOT, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_turn_states_and_turn_pairs_say_why_there_are_none(recorded, tmp_path):
    pytest.importorskip("datasets")
    from sweet_trl.turn_pairs import TurnPairsConfig, build_turn_pairs, select_turn_states

    path, _ = recorded
    stripped = tmp_path / "stripped.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["task"]["solution"] = row["task"].pop("ground_truth")
    stripped.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError, match=r"no turn state could be made: 9 left out as trajectory_no_privileged: the "
                                         r"records lack the privileged text c \(task\['ground_truth'\]"):
        select_turn_states(stripped, TurnPairsConfig())
    assert len(select_turn_states(stripped, TurnPairsConfig(privileged_key="solution", state_fraction=1.0))) == 18

    state = {"state_id": "e/turn0", "task_id": "t", "turn": 0, "prompt": [{"role": "user", "content": "Hi"}],
             "candidates": ["Which unit?", "What range?"], "ranking_scores": [0.5, 0.5], "ranking_error": None}
    with pytest.raises(ValueError, match=r"no turn-level pair could be built: 1 left out as state_no_distinct_pair: "
                                         r".*lower min_score_gap"):
        build_turn_pairs([state], TurnPairsConfig())
    assert len(build_turn_pairs([{**state, "ranking_scores": [0.9, 0.5]}], TurnPairsConfig())) == 1


@pytest.mark.browser
def test_a_frontend_loop_is_recorded_for_the_frontend_recipe(tmp_path):
    pytest.importorskip("datasets")
    from colbench_gym.rendering import AssetsMissingError, RendererUnavailable, shared_renderer
    from sweet_trl.pairs import critic_pair_dataset
    from sweet_trl.trajectories import Trajectory, read_trajectories

    try:
        renderer = shared_renderer()
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")
    path = tmp_path / "pages.jsonl"
    env = RecordTrajectories(gym.make("ColBench-Frontend-v0", tasks="test", similarity="ssim", renderer=renderer),
                             path)
    for page in ("target", "<html><body><p>Hello</p></body></html>"):
        _, info = env.reset(seed=0, options={"task_id": "frontend-signup-form"})
        target = info["privileged"]["ground_truth"]
        env.step("I WANT TO ANSWER: " + (target if page == "target" else page))
    env.close()
    records = [Trajectory(r) for r in read_trajectories(path)]
    assert [t.env_id for t in records] == ["ColBench-Frontend-v0"] * 2
    assert records[0].privileged() == target and records[0].reward > records[1].reward + 0.1
    assert records[0].record["similarity_metric"] == "ssim"
    (pair,) = critic_pair_dataset(path, preset="frontend")
    assert pair["privileged"] == target and pair["chosen_reward"] == records[0].reward


def test_the_critic_pairs_command_says_why_too(recorded, tmp_path, capsys):
    pytest.importorskip("trl")
    from sweet_trl import cli

    path, _ = recorded
    once = tmp_path / "once.jsonl"
    once.write_text(path.read_text().splitlines()[0] + "\n")
    assert cli.main(["critic-pairs", "--run_dir", str(tmp_path / "run"), "--trajectories", str(once)]) == 1
    err = capsys.readouterr().err
    assert "sweet-rl critic-pairs: error: no critic pair: 1 of 1 tasks have a single usable trajectory" in err
