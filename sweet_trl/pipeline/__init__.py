"""The SWEET-RL pipeline as resumable stages; each reads and writes files under ``<run_dir>/<stage>/``.

    collect ─> critic_pairs ─> train_critic ─┐
       └──────> sample_candidates ─────────> rank ─> policy_pairs ─> train_policy ─> evaluate ─> report

A stage is complete when its folder holds ``_COMPLETE.json`` (written atomically, after the outputs): the
counts, metrics, timings, output files and a fingerprint of what it computes from: the run options it reads
(``Stage.run_fields``), its own options (a file or folder named there by its files' sizes and times), and which
run of each upstream stage it read. Running a complete stage again prints ``skipped``; a change to any of these
(a re-run upstream stage included) runs it again, and a change to anything else leaves it and its files alone.
An interrupted stage resumes where it can (the rollout collector appends to its JSONL).

    sweet-rl pipeline --config demo_cpu        # every stage (demo_cpu: a shipped config, or a file's path)
    sweet-rl collect  --config demo_cpu        # one stage

From Python::

    from sweet_trl.configs import config_path
    from sweet_trl.pipeline import run_stage_from_config, run_pipeline
    run_pipeline(config_path("demo_cpu"))
"""

from __future__ import annotations

from sweet_trl.pipeline.commands import (
    COMMAND_ALIASES,
    SECTIONS,
    STAGES,
    print_metrics,
    report_command,
    run_pipeline,
    run_stage_from_config,
    setup_logging,
    write_report,
)
from sweet_trl.pipeline.commands import _check_keys as _check_keys
from sweet_trl.pipeline.commands import _parse as _parse
from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline.export import DATASET_EXPORTS, HYPERPARAMETERS_SHOWN, MODEL_EXPORTS, export_stage, push_stage
from sweet_trl.pipeline.models import (
    AnswerForcing,
    ProgressBackend,
    load_causal_lm,
    make_backend,
    release,
    resolve_model,
    sampling_params,
)
from sweet_trl.pipeline.runner import (
    MARKER,
    MAX_FINGERPRINTED_FILES,
    NOT_FINGERPRINTED,
    RUNNING,
    TRAINING_STAGES,
    RunView,
    Stage,
    StageContext,
    StageResult,
    WouldRun,
    check_push_target,
    clear_folder,
    fingerprint,
    is_main_process,
    read_marker,
    run_stage,
    world_size,
    write_json_atomic,
)
from sweet_trl.pipeline.stages import (
    EVALUATION_METRICS,
    POLICY_STAGES,
    load_tasks,
    make_simulator,
    stage_collect,
    stage_critic_pairs,
    stage_evaluate,
    stage_policy_pairs,
    stage_rank,
    stage_sample_candidates,
    trajectories_source,
)
from sweet_trl.pipeline.stages import _render_pages as _render_pages
from sweet_trl.pipeline.stages_training import (
    final_metrics,
    stage_baseline_mtdpo,
    stage_baseline_rft,
    stage_train_critic,
    stage_train_policy,
)
from sweet_trl.pipeline_config import ConfigError, PipelineArguments, load_yaml, make_parser

__all__ = [
    "COMMAND_ALIASES", "DATASET_EXPORTS", "EVALUATION_METRICS", "HYPERPARAMETERS_SHOWN", "MARKER",
    "MAX_FINGERPRINTED_FILES", "MODEL_EXPORTS", "NOT_FINGERPRINTED", "POLICY_STAGES", "RUNNING", "SECTIONS", "STAGES",
    "TRAINING_STAGES", "AnswerForcing", "ConfigError", "PipelineArguments", "ProgressBackend", "RunView", "Stage",
    "StageContext", "StageError", "StageResult", "WouldRun", "check_push_target", "clear_folder", "export_stage", "final_metrics",
    "fingerprint", "is_main_process", "load_causal_lm", "load_tasks", "load_yaml", "make_backend", "make_parser",
    "make_simulator", "print_metrics", "push_stage", "read_marker", "release", "report_command", "resolve_model",
    "run_pipeline", "run_stage", "run_stage_from_config", "sampling_params", "setup_logging", "stage_baseline_mtdpo",
    "stage_baseline_rft", "stage_collect", "stage_critic_pairs", "stage_evaluate", "stage_policy_pairs", "stage_rank",
    "stage_sample_candidates", "stage_train_critic", "stage_train_policy", "trajectories_source", "world_size",
    "write_json_atomic", "write_report",
]
