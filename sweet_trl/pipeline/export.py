"""Hub export of a stage's artefacts: its datasets and models with their cards, written and pushed.

A stage with ``push`` set in the stage table uploads with ``push_stage`` once it is complete (``--push_to_hub``);
``export_stage`` writes what would be uploaded to ``<stage_dir>/hub`` without the network.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline_config import asdict_public


def _export_rows(stage_dir: Path, marker: dict[str, Any], output: str) -> list[dict[str, Any]]:
    path = stage_dir / marker["outputs"][output]
    if path.is_dir():
        from sweet_trl.trainer_utils import load_rows

        return load_rows(path).to_list()
    from sweet_trl.report.data import iter_jsonl

    return list(iter_jsonl(path))


DATASET_EXPORTS = {  # stage -> (output, dataset kind, repo suffix)
    "collect": ("trajectories", "rollouts", "rollouts"),
    "critic_pairs": ("pairs", "critic-pairs", "critic-pairs"),
    "policy_pairs": ("pairs", "turn-pairs", "turn-pairs"),
}
MODEL_EXPORTS = {  # stage -> (card role, repo suffix, method)
    "train_critic": ("critic", "critic", None),
    "train_policy": ("policy", "policy", None),
    "train_policy_best": ("policy", "policy-best", None),
    "baseline_rft": ("baseline", "rft", "Rejection fine-tuning (SFT on the successful trajectories)"),
    "baseline_mtdpo": ("baseline", "mtdpo", "Multi-turn DPO on whole trajectories"),
}


def export_stage(stage_dir: Path, marker: dict[str, Any], *args: Any) -> tuple[Path, str, str]:
    """Write what ``--push_to_hub`` uploads for a stage to ``<stage_dir>/hub``: (folder, repo id, repo type)."""
    from sweet_trl import hub

    run, stage = args[0], marker["stage"]
    folder = stage_dir / "hub"
    if stage in DATASET_EXPORTS:
        output, kind, suffix = DATASET_EXPORTS[stage]
        repo_id = hub.hub_repo_id(run.hub_prefix, suffix)
        rows = _export_rows(stage_dir, marker, output)
        stats = {**marker["counts"], **marker["metrics"]}
        card = hub.dataset_card(kind, repo_id, num_rows=len(rows), env_id=run.env_id, policy=run.policy_model,
                                source=f"Stage `{stage}` of a `sweet-rl` run (configuration fingerprint "
                                       f"`{marker['fingerprint']}`).",
                                stats=stats, columns=sorted(rows[0]) if rows else ())
        return hub.export_dataset(rows, folder, card), repo_id, "dataset"
    role, suffix, method = MODEL_EXPORTS[stage]
    training = args[-2]
    export = args[-1]
    repo_id = training.hub_model_id or hub.hub_repo_id(run.hub_prefix, suffix)
    model_dir = stage_dir / marker["outputs"]["model"]
    adapter = (model_dir / "adapter_config.json").exists() and not export.push_merged
    # the data a model learned from, by the export of its stage (best-of-N reads the rank stage, which has none)
    data_stage = {"train_critic": "critic_pairs", "train_policy": "policy_pairs"}.get(stage, "collect")
    data_suffix = {"critic_pairs": "critic-pairs", "policy_pairs": "turn-pairs", "collect": "rollouts"}[data_stage]
    datasets = [f"{run.hub_prefix}-{data_suffix}" if run.hub_prefix else f"{data_stage} stage of the run"]
    metrics = dict(marker["metrics"])
    base = marker["info"].get("base_model") or run.policy_model
    base_name = run.critic_base if role == "critic" else run.policy_model
    hyper = {k: v for k, v in asdict_public(training).items() if k in HYPERPARAMETERS_SHOWN}
    if role in ("critic", "policy"):
        from sweet_trl.model_cards import sweet_model_card

        notes = (f"Trained on {', '.join(f'{k}: {v}' for k, v in marker['counts'].items())} from "
                 f"`{datasets[0]}`, base model `{base_name}`"
                 + (" (resolved to a local copy)" if base != base_name else "") + ".")
        if adapter:
            notes += (" This repository holds a LoRA adapter: load it with "
                      "`peft.AutoPeftModelForCausalLM.from_pretrained`.")
        card = str(sweet_model_card(
            role=role, model_name=repo_id.split("/")[-1], base_model=_hub_name(base_name), hub_model_id=repo_id,
            dataset_name=datasets[0] if run.hub_prefix else None,
            tags=["lora"] if adapter else None, hyperparameters=hyper, metrics=metrics, notes=notes,
            best_of_n=stage == "train_policy_best"))
    else:
        card = hub.model_card(repo_id, role, base_model=base_name, datasets=datasets, metrics=metrics, training=hyper,
                              adapter=adapter, method=method, env_id=run.env_id)
    hub_base = _hub_name(base_name)
    if hub_base is None:
        print(f"[{stage}] note: the base model {base_name} is a local folder, so the export names that path "
              "(point base_model_name_or_path at a copy of it to load the upload elsewhere)", file=sys.stderr)
    return hub.export_model(model_dir, folder, card, merge=export.push_merged, base_model=hub_base), repo_id, "model"


HYPERPARAMETERS_SHOWN = {
    "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
    "beta", "nll_coef", "max_length", "score_normalization", "use_privileged", "lr_scheduler_type", "warmup_steps",
    "seed", "bf16",
}


def _hub_name(model: str) -> str | None:
    """A base model name fit for a card's metadata (a Hub id, not a local path)."""
    from sweet_trl.generation.transformers_backend import EMBEDDED_ALIASES

    if model.lower() in EMBEDDED_ALIASES:
        return "HuggingFaceTB/SmolLM2-135M-Instruct"
    return None if os.path.exists(model) else model


def push_stage(stage_dir: Path, marker: dict[str, Any], *args: Any) -> dict[str, str]:
    from sweet_trl import hub

    folder, repo_id, repo_type = export_stage(stage_dir, marker, *args)
    try:
        hub.push_folder(folder, repo_id, repo_type=repo_type)
    except Exception as err:
        raise StageError(f"could not push {repo_id}: {err}. The export is complete in {folder}; run the same "
                         "command again to retry the upload (the stage itself is kept)") from err
    return {repo_type: repo_id}
