"""The training stages: the critic, the SWEET policy and the two baselines (RFT, multi-turn DPO), each a TRL
trainer fitted on the pairs or trajectories of the stage before it, resuming from its last checkpoint."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline.models import release, resolve_model
from sweet_trl.pipeline.runner import StageContext, StageResult


def _fit(ctx: StageContext, trainer: Any, output_dir: Path) -> dict[str, Any]:
    """Train (resuming from the last checkpoint of an interrupted run), save the model, the tokenizer and the
    trainer's ``log_history``; returns the last logged value of every metric."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

    checkpoint = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
    if checkpoint:
        ctx.log(f"resuming training from {checkpoint}")
    if trainer.is_world_process_zero():
        ctx.training_from(int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0)
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(output_dir))
    history = trainer.state.log_history
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(str(output_dir))
        (ctx.dir / "log_history.json").write_text(json.dumps(history, indent=1, default=str), encoding="utf-8")
        # Checkpoints only serve a resume; the finished model replaces them (each holds optimizer state too).
        for path in output_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
            shutil.rmtree(path)
    return final_metrics(history) | {"global_step": trainer.state.global_step}


def final_metrics(history: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each logged metric averaged over the last quarter of the logged steps (one step alone is noisy with
    small batches); the summary row's values (``train_loss``: the mean over all steps, runtimes) as they are."""
    steps = [row for row in history if "train_runtime" not in row]
    summary = {k: v for row in history if "train_runtime" in row for k, v in row.items()}
    keys = {k for row in steps for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("epoch", "step")}
    out: dict[str, float] = {}
    for key in keys:
        values = [row[key] for row in steps if isinstance(row.get(key), (int, float))]
        tail = values[-max(1, len(values) // 4):]
        out[key] = sum(tail) / len(tail)
    out.update({k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and k not in ("epoch", "step")})
    return out


def _prepare_training(ctx: StageContext, model_config: Any, config: Any, base: str) -> Any:
    """Fill the model path and output folder of a training stage; returns its ``TrainerInputs``."""
    from sweet_trl.trainer_utils import trainer_inputs

    if not model_config.model_name_or_path:
        model_config.model_name_or_path = resolve_model(base)
    config.output_dir = str(ctx.dir / "model")
    # The stage pushes its own export (with the card); a Trainer pushing by itself would need the network early.
    config.push_to_hub = False
    if config.report_to in ("all", ["all"]):
        config.report_to = []
    inputs = trainer_inputs(config, model_config)
    if inputs.tokenizer.pad_token is None:
        inputs.tokenizer.pad_token = inputs.tokenizer.eos_token
    return inputs


def _train(ctx: StageContext, trainer_class: Any, inputs: Any, config: Any, dataset: Any
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build the stage's trainer on ``_prepare_training``'s inputs, fit it and free its memory; returns the last
    metrics and the trainer's report on its training rows (empty when it keeps none)."""
    model, tokenizer, peft_config, quantization_config = inputs
    ctx.log(f"base {model}, {'LoRA' if peft_config else 'full fine-tuning'}")
    trainer = trainer_class(model, args=config, train_dataset=dataset, processing_class=tokenizer,
                            peft_config=peft_config, quantization_config=quantization_config)
    last = _fit(ctx, trainer, ctx.dir / "model")
    report = getattr(trainer, "data_report", {}).get("train", {})
    del trainer
    release()
    return last, report


def _training_result(ctx: StageContext, last: dict[str, Any], counts: dict[str, int], keys: Sequence[str],
                     model_config: Any, config: Any) -> StageResult:
    return StageResult(
        counts=counts,
        metrics={k: float(last[k]) for k in keys if k in last},
        outputs={"model": "model", "log_history": "log_history.json"},
        info={"base_model": model_config.model_name_or_path, "adapter": bool(model_config.use_peft),
              "train_runtime": last.get("train_runtime")},
    )


def stage_train_critic(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Train the asymmetric critic on the trajectory pairs (Bradley-Terry on turn-advantage scores)."""
    from sweet_trl.critic_trainer import SweetCriticTrainer
    from sweet_trl.trainer_utils import load_rows

    pairs = load_rows(ctx.input_path("critic_pairs", "pairs"))
    inputs = _prepare_training(ctx, model_config, config, ctx.run.critic_base)
    ctx.log(f"{len(pairs)} trajectory pairs")
    last, report = _train(ctx, SweetCriticTrainer, inputs, config, pairs)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "pairs": len(pairs),
                                        "pairs_used": report.get("kept", len(pairs))},
                            ("train_loss", "pair_accuracy", "margin"), model_config, config)


def stage_train_policy(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Train the policy with turn-level DPO on the critic-ranked pairs (no privileged information)."""
    from sweet_trl.policy_trainer import TurnPreferenceTrainer
    from sweet_trl.trainer_utils import load_rows

    pairs = load_rows(ctx.input_path("policy_pairs", "pairs"))
    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    ctx.log(f"{len(pairs)} turn pairs")
    last, report = _train(ctx, TurnPreferenceTrainer, inputs, config, pairs)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "pairs": len(pairs),
                                        "pairs_used": report.get("kept", len(pairs))},
                            ("train_loss", "rewards/accuracies", "rewards/margins"), model_config, config)


def stage_train_policy_best(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Fine-tune the policy on the critic's top candidate per ranked turn state (best-of-N; no privileged
    information in what it learns from)."""
    from trl import SFTTrainer

    from sweet_trl.best_of_n import best_of_n_dataset

    try:
        dataset = best_of_n_dataset(ctx.input_path("rank", "ranked"), config)
    except ValueError as err:
        raise StageError(f"train_policy_best: {err}") from err
    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    ctx.log(f"{len(dataset)} turn states, the critic's top candidate of each to imitate")
    last, _ = _train(ctx, SFTTrainer, inputs, config, dataset)
    result = _training_result(ctx, last, {"steps": int(last["global_step"]), "turn_states": len(dataset)},
                              ("train_loss",), model_config, config)
    result.metrics["mean_score_margin"] = sum(dataset["margin"]) / len(dataset)
    return result


def stage_baseline_rft(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Baseline: supervised fine-tuning on the successful collected trajectories."""
    from trl import SFTTrainer

    from sweet_trl.baselines.rejection_finetuning import rft_dataset

    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    try:
        dataset = rft_dataset(ctx.input_path("collect", "trajectories"), inputs.tokenizer, config)
    except ValueError as err:
        raise StageError(str(err)) from err
    ctx.log(f"{len(dataset)} successful trajectories to imitate")
    last, _ = _train(ctx, SFTTrainer, inputs, config, dataset)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "trajectories": len(dataset)},
                            ("train_loss",), model_config, config)


def stage_baseline_mtdpo(ctx: StageContext, model_config: Any, config: Any, export: Any) -> StageResult:
    """Baseline: DPO on whole trajectories (the pairs the critic is trained on, without privileged information)."""
    from sweet_trl.baselines.multiturn_dpo import MultiTurnDPOTrainer, multiturn_dpo_pairs

    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    if config.pair_preset is None:  # the released recipe of this environment, as for the critic's pairs
        config.apply_pair_preset(ctx.run.kind)
    try:
        pairs = multiturn_dpo_pairs(ctx.input_path("collect", "trajectories"), config)
    except ValueError as err:
        raise StageError(str(err)) from err
    ctx.log(f"{len(pairs)} trajectory pairs")
    last, _ = _train(ctx, MultiTurnDPOTrainer, inputs, config, pairs)
    return _training_result(ctx, last, {"steps": int(last["global_step"]), "pairs": len(pairs)},
                            ("train_loss", "rewards/accuracies", "rewards/margins"), model_config, config)


def stage_warm_start(ctx: StageContext, model_config: Any, config: Any, args: Any) -> StageResult:
    """Supervised fine-tuning on scripted expert dialogues of the warm-start template pool (or on the given
    demonstrations); writes the adapter (``model``) and the policy later stages start from (``policy``: the adapter
    merged into its base, or the fine-tuned model itself)."""
    from trl import SFTTrainer

    from sweet_trl.baselines.rejection_finetuning import rft_dataset
    from sweet_trl.pipeline.models import load_causal_lm
    from sweet_trl.pipeline.runner import _barrier, is_main_process
    from sweet_trl.pipeline.stages import make_simulator
    from sweet_trl.trajectories import read_trajectories, write_trajectories
    from sweet_trl.warm_start import dialogue_summary, expert_dialogues

    if args.adapter:
        return _warm_start_from_adapter(ctx, args.adapter)
    dialogues = ctx.dir / "dialogues.jsonl"
    if args.demonstrations:
        if not Path(args.demonstrations).exists():
            raise StageError(f"warm_start: no demonstrations at {args.demonstrations}")
        source = args.demonstrations
        records = read_trajectories(source)
        if not records:
            raise StageError(f"warm_start: {args.demonstrations} holds no trajectory: nothing to imitate")
    else:
        if ctx.run.kind != "backend":
            raise StageError("warm_start: expert dialogues exist for backend tasks only; give the frontend's own "
                             "demonstrations (warm_start.demonstrations)")
        from colbench_gym.tasks.procedural import task_families

        warm_start_tasks = task_families()[args.warm_start_family][0].warm_start_tasks
        if dialogues.exists():
            records = read_trajectories(dialogues)
        else:
            try:
                rows = warm_start_tasks(args.warm_start_tasks, seed=args.warm_start_seed,
                                        templates=args.warm_start_templates)
            except ValueError as err:
                raise StageError(f"warm_start: {err}") from err
            if is_main_process():
                ctx.log(f"{len(rows)} expert dialogues on the warm-start templates ({ctx.run.max_turns} turns)")
                records = expert_dialogues(rows, env_id=ctx.run.env_id, max_turns=ctx.run.max_turns,
                                           simulator=make_simulator(ctx.run), seed=args.warm_start_seed,
                                           forms=args.expert_forms)
                write_trajectories(records, dialogues)
            _barrier()
            records = read_trajectories(dialogues)
        source = str(dialogues)
    summary = dialogue_summary(records)
    ctx.log(f"expert episodes: {summary['successes']}/{summary['episodes']} pass every test, "
            f"{summary['dont_know_replies']} replies were \"I don't know\"")

    inputs = _prepare_training(ctx, model_config, config, ctx.run.policy_model)
    try:
        dataset = rft_dataset(source, inputs.tokenizer, config)
    except ValueError as err:
        raise StageError(f"warm_start: {err}") from err
    ctx.log(f"{len(dataset)} dialogues to imitate")
    last, _ = _train(ctx, SFTTrainer, inputs, config, dataset)
    policy = "model"
    if model_config.use_peft:
        policy = "merged"
        if is_main_process():  # later stages load a plain model: merged once here, not by each of them
            model, tokenizer = load_causal_lm(str(ctx.dir / "model"))
            model.save_pretrained(str(ctx.dir / policy))
            tokenizer.save_pretrained(str(ctx.dir / policy))
            del model
            release()
        _barrier()
    result = _training_result(ctx, last, {"steps": int(last["global_step"]), "dialogues": len(dataset),
                                          "expert_episodes": int(summary["episodes"]),
                                          "expert_successes": int(summary["successes"])},
                              ("train_loss",), model_config, config)
    result.metrics["expert_success_rate"] = summary["success_rate"]
    result.outputs.update({"policy": policy, **({} if args.demonstrations else {"dialogues": dialogues.name})})
    return result


def _warm_start_from_adapter(ctx: StageContext, spec: str) -> StageResult:
    """The warm start from a trained adapter (``warm_start.adapter``): merged into the run's base, nothing trained."""
    from sweet_trl.pipeline.runner import world_size
    from sweet_trl.warm_start import HISTORY, file_digest, merge_adapter, read_provenance, resolve_adapter, same_base

    if world_size() > 1:  # nothing to share out, and a failure on one process would leave the others waiting
        raise StageError("warm_start: a warm start from an adapter trains nothing; run it in one process "
                         "(`sweet-rl warm-start`), then launch the later stages")
    try:
        adapter = resolve_adapter(spec)
    except FileNotFoundError as err:
        raise StageError(f"warm_start: {err}") from err
    provenance = read_provenance(adapter)
    if provenance and not same_base(provenance, ctx.run.policy_model):
        raise StageError(f"warm_start: the adapter {spec!r} was trained on policy_model "
                         f"{provenance.get('base_model')!r}, and this run's policy_model is {ctx.run.policy_model!r}: "
                         f"set policy_model to {provenance.get('base_model')!r}, or train the warm start here (remove "
                         f"warm_start.adapter)")
    if provenance.get("env_id", ctx.run.env_id) != ctx.run.env_id:
        raise StageError(f"warm_start: the adapter {spec!r} was trained on {provenance['env_id']} dialogues, and this "
                         f"run plays {ctx.run.env_id}")
    if provenance.get("max_turns", ctx.run.max_turns) != ctx.run.max_turns:
        ctx.log(f"note: the adapter was trained on {provenance['max_turns']}-turn dialogues, this run allows "
                f"{ctx.run.max_turns}")
    if provenance.get("sha256") and file_digest(adapter / "adapter_model.safetensors") != provenance["sha256"]:
        raise StageError(f"warm_start: {adapter}/adapter_model.safetensors does not match the digest in its "
                         f"warm_start.json: the file was changed or damaged")
    base = resolve_model(ctx.run.policy_model)
    ctx.log(f"warm start from the adapter {adapter} (trained {provenance.get('counts', {}).get('steps', '?')} steps; "
            f"nothing is trained here)")
    shutil.copytree(adapter, ctx.dir / "model", dirs_exist_ok=True)
    if (adapter / HISTORY).is_file():  # its training curve, for the report
        shutil.copyfile(adapter / HISTORY, ctx.dir / HISTORY)
    merge_adapter(base, adapter, ctx.dir / "merged")
    release()
    counts = {k: int(v) for k, v in provenance.get("counts", {}).items()}
    return StageResult(counts=counts, metrics={k: float(v) for k, v in provenance.get("metrics", {}).items()},
                       outputs={"model": "model", "policy": "merged",
                                **({"log_history": HISTORY} if (ctx.dir / HISTORY).is_file() else {})},
                       info={"adapter": str(adapter), "adapter_sha256": provenance.get("sha256"), "trained": False})
