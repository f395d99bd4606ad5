"""Inference with a trained SWEET-RL critic: per-turn advantages and candidate ranking.

    >>> critic = SweetCritic.from_pretrained("runs/critic")                 # saved by SweetCriticTrainer
    >>> critic.advantages(trajectory)                                       # one float per agent turn
    [0.013, 0.241, -0.002]
    >>> critic.score_candidates(history, ["Which unit?", "Any edge cases?"], privileged=task["ground_truth"])
    [0.19, -0.04]                                                           # one batched forward per batch

The advantage of a turn is the mean over its tokens of ``log pi_critic - log pi_ref`` given the privileged
information ``c`` and everything before the turn (see ``sweet_trl.losses``). ``pi_ref`` is the frozen initial model:
the base model with adapters disabled for a LoRA/QLoRA critic, or an explicit reference model for a full fine-tune.
Turns or candidates that cannot be scored (empty, or an input over ``max_length``) get ``nan`` and a logged warning.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from colbench_gym._optional import require
from sweet_trl.tokenization import (
    CriticInputFormat,
    TokenizedConversation,
    conversation_messages,
    tokenize_critic_input,
)
from sweet_trl.trajectories import Trajectory
from sweet_trl.transformers_compat import returned_cache, with_cache

logger = logging.getLogger(__name__)

CRITIC_METADATA_FILE = "sweet_critic.json"


def forward_turn_logps(model: Any, input_ids: Any, attention_mask: Any, turn_ids: Any, num_turns: int,
                       **model_kwargs: Any):
    """Per-turn sums of the model's token log-probs ``[B, T]`` (one forward; logits never materialised).

    ``model`` must carry TRL's fused LM head (``trl.trainer.utils.add_fused_lm_head``), as trainer models do.
    ``model_kwargs`` (the cache, ``position_ids``) continue a cached prefix.
    """
    from sweet_trl.losses import sum_by_turn

    labels = input_ids.masked_fill(turn_ids == 0, -100)
    outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True,
                    use_cache=False, **model_kwargs)
    shift_turn_ids = turn_ids[:, 1:]
    logps = outputs.log_probs[:, -shift_turn_ids.size(1):]  # prompt-learning PEFT prepends virtual tokens
    return sum_by_turn(logps.float(), shift_turn_ids, num_turns), outputs


def add_fused_head_once(model: Any) -> None:
    """Add TRL's fused LM head to ``model`` (the base model of a PEFT model) unless it already has one."""
    from accelerate.utils import is_peft_model
    from trl.trainer.utils import add_fused_lm_head

    base = model.get_base_model() if is_peft_model(model) else model
    if not getattr(base, "_has_fused_lm_head", False):
        add_fused_lm_head(base)
        base._has_fused_lm_head = True


@dataclass
class CandidateScores:
    """Scores of candidate actions for one turn (lists aligned with the candidates; ``nan`` when unscorable)."""

    advantages: list[float]
    critic_mean_logps: list[float]
    ref_mean_logps: list[float]
    num_tokens: list[int]


class SweetCritic:
    """A trained SWEET-RL critic, ready to score trajectories and candidate turns.

    Args:
        model: the critic (a causal LM, or a ``peft.PeftModel`` whose disabled adapters give the reference).
        tokenizer: its tokenizer (with the chat template used in training).
        ref_model: the frozen initial model; required for a fully fine-tuned critic, unused with PEFT.
        input_format: how the critic reads ``c`` and the dialogue (saved with the model by the trainer).
        score_normalization: ``"per_turn_sum"`` or ``"trajectory_mean"`` for :meth:`trajectory_scores`.
        batch_size: sequences per forward pass.
        share_prefix: in :meth:`score_candidates`, encode the history the candidates share once (its KV
            cache is reused by every candidate) instead of once per candidate.
    """

    def __init__(self, model: Any, tokenizer: Any, *, ref_model: Any = None,
                 input_format: CriticInputFormat | None = None, score_normalization: str = "per_turn_sum",
                 batch_size: int = 8, share_prefix: bool = True):
        from accelerate.utils import is_peft_model

        self.model = model.eval()
        self.tokenizer = tokenizer
        self.is_peft = is_peft_model(model)
        if ref_model is None and not self.is_peft:
            raise ValueError("a fully fine-tuned critic needs its reference model (the initial model it was "
                             "trained from): pass ref_model=")
        self.ref_model = ref_model.eval() if ref_model is not None else None
        self.input_format = input_format or CriticInputFormat()
        self.score_normalization = score_normalization
        self.batch_size = batch_size
        self.share_prefix = share_prefix
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        for m in (self.model, self.ref_model):
            if m is not None:
                add_fused_head_once(m)

    # ----------------------------------------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(cls, path: str | Path, *, ref_model: Any = None, base_model: Any = None,
                        tokenizer: Any = None, batch_size: int = 8, **model_kwargs: Any) -> SweetCritic:
        """Load a critic saved by :class:`~sweet_trl.critic_trainer.SweetCriticTrainer` (full model or adapter).

        ``ref_model`` (a model or a path) defaults to the reference recorded at training time for a full fine-tune.
        ``base_model`` (a model or a path) overrides the base model an adapter records (when it has moved).
        ``model_kwargs`` go to ``from_pretrained`` (``dtype``, ``device_map``, ``quantization_config``...).
        """
        transformers = require("transformers", "llm")
        path = Path(path)
        metadata_file = path / CRITIC_METADATA_FILE
        metadata = json.loads(metadata_file.read_text()) if metadata_file.exists() else {}
        if not metadata:
            logger.warning("%s has no %s; using the default critic input format", path, CRITIC_METADATA_FILE)
        tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(path)
        if (path / "adapter_config.json").exists():
            peft = require("peft", "train")
            if base_model is None:
                model = peft.AutoPeftModelForCausalLM.from_pretrained(path, **model_kwargs)
            else:
                if isinstance(base_model, (str, Path)):
                    base_model = transformers.AutoModelForCausalLM.from_pretrained(base_model, **model_kwargs)
                model = peft.PeftModel.from_pretrained(base_model, path)
        else:
            model = transformers.AutoModelForCausalLM.from_pretrained(path, **model_kwargs)
            if ref_model is None:
                ref_model = metadata.get("reference_model")
            if ref_model is None:
                raise ValueError(f"{path} holds a fully fine-tuned critic whose reference model is unknown; "
                                 "pass ref_model= (the model the critic was initialised from)")
            if isinstance(ref_model, (str, Path)):
                ref_model = transformers.AutoModelForCausalLM.from_pretrained(ref_model, **model_kwargs)
        return cls(model, tokenizer, ref_model=ref_model, batch_size=batch_size,
                   input_format=CriticInputFormat.from_dict(metadata.get("input_format", {})),
                   score_normalization=metadata.get("score_normalization", "per_turn_sum"))

    @classmethod
    def from_trainer(cls, trainer: Any, batch_size: int | None = None) -> SweetCritic:
        """The critic being trained by a :class:`~sweet_trl.critic_trainer.SweetCriticTrainer` (shares its weights)."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        ref_model = None if trainer.ref_model is None else trainer.accelerator.unwrap_model(trainer.ref_model)
        if ref_model is None and not _is_peft(model):
            raise ValueError("the trainer holds no reference model (precompute_ref_log_probs with full "
                             "fine-tuning); load the critic with SweetCritic.from_pretrained(..., ref_model=...)")
        return cls(model, trainer.processing_class, ref_model=ref_model, input_format=trainer.critic_format,
                   score_normalization=trainer.args.score_normalization,
                   batch_size=batch_size or trainer.args.per_device_eval_batch_size)

    def to(self, device: Any) -> SweetCritic:
        """Move the critic and its reference to ``device``; returns the critic."""
        self.model.to(device)
        if self.ref_model is not None and self.ref_model is not self.model:
            self.ref_model.to(device)
        return self

    def untrained(self, dtype: Any = None) -> SweetCritic:
        """This LoRA critic's base model as critic and as its own reference, reading ``c`` as this critic does:
        what ``c`` alone tells before any Bradley-Terry training (the control every trained critic is held to)."""
        transformers = require("transformers", "llm")
        if not self.is_peft:
            raise ValueError("the untrained critic is the base of a LoRA critic; this critic is fully fine-tuned")
        base_path = self.model.peft_config["default"].base_model_name_or_path
        base = transformers.AutoModelForCausalLM.from_pretrained(base_path, **({"dtype": dtype} if dtype else {}))
        return SweetCritic(base, self.tokenizer, ref_model=base, input_format=self.input_format,
                           score_normalization=self.score_normalization, batch_size=self.batch_size)

    # ----------------------------------------------------------------------------------------------- scoring
    def _turn_logps(self, conversations: Sequence[TokenizedConversation], prefix_length: int = 0
                    ) -> list[tuple[Any, Any, Any]]:
        """``(critic sums, reference sums, token counts)`` per conversation, each a ``[T]`` tensor.

        With ``prefix_length``, the conversations share their first ``prefix_length`` tokens (none of them
        scored): those go through each model once, and every batch attends to a copy of their KV cache.
        """
        critic = self._model_turn_logps("critic", conversations, prefix_length)
        reference = self._model_turn_logps("reference", conversations, prefix_length)
        return [(c, r, counts) for (c, counts), (r, _) in zip(critic, reference)]

    def _model_turn_logps(self, which: str, conversations: Sequence[TokenizedConversation], prefix_length: int = 0
                          ) -> list[tuple[Any, Any]]:
        """``(sums, token counts)`` per conversation under the critic or the reference (``which``)."""
        import copy

        import torch
        from trl.trainer.utils import pad

        from sweet_trl.losses import count_by_turn

        device = next(self.model.parameters()).device
        model, context = ((self.model, nullcontext) if which == "critic"
                          else (self.ref_model or self.model, self._reference_context))
        prefix_cache = None
        if prefix_length:
            prefix = torch.tensor([conversations[0].input_ids[:prefix_length]], device=device)
            with torch.no_grad(), context():
                prefix_cache = returned_cache(model, model(input_ids=prefix, use_cache=True))
        results = []
        for start in range(0, len(conversations), self.batch_size):
            batch = conversations[start: start + self.batch_size]
            input_ids = pad([torch.tensor(c.input_ids[prefix_length:]) for c in batch],
                            padding_value=self.tokenizer.pad_token_id).to(device)
            turn_ids = pad([torch.tensor(c.turn_ids[prefix_length:]) for c in batch], padding_value=0).to(device)
            # Over the whole sequence, shared prefix included (right padding keeps the prefix in front).
            attention_mask = pad([torch.ones(len(c), dtype=torch.long) for c in batch], padding_value=0).to(device)
            num_turns = max(c.num_turns for c in batch)
            model_kwargs = {}
            if prefix_cache is not None:
                cache = copy.deepcopy(prefix_cache)
                cache.batch_repeat_interleave(len(batch))
                positions = torch.arange(prefix_length, prefix_length + input_ids.size(1), device=device)
                model_kwargs = {**with_cache(model, cache), "position_ids": positions.expand(len(batch), -1)}
            with torch.no_grad(), context():
                sums, _ = forward_turn_logps(model, input_ids, attention_mask, turn_ids, num_turns, **model_kwargs)
            counts = count_by_turn(turn_ids[:, 1:], num_turns)
            for row, c in enumerate(batch):
                results.append((sums[row, : c.num_turns].float().cpu(), counts[row, : c.num_turns].cpu()))
        return results

    def _shared_prefix_length(self, conversations: Sequence[TokenizedConversation]) -> int:
        """How many leading tokens candidates for one turn can share through a KV cache (0: not worth it).

        The token before the first scored one stays out of the prefix: its output predicts that token.
        """
        from trl.data_utils import common_prefix_length

        if not self.share_prefix or len(conversations) < 2 or _prepends_virtual_tokens(self.model):
            return 0
        first = conversations[0].input_ids
        shared = min(common_prefix_length(first, c.input_ids) for c in conversations[1:])
        first_scored = min(c.turn_spans[0][0] if c.turn_spans else len(c) for c in conversations)
        cut = min(shared, first_scored) - 1
        return cut if cut >= _MIN_SHARED_PREFIX else 0

    def _reference_context(self):
        """Under PEFT the reference is the base model (adapters disabled), or a frozen ``"ref"`` adapter if present."""
        if self.ref_model is not None:
            return nullcontext()
        from trl.trainer.utils import use_adapter

        return use_adapter(self.model, adapter_name="ref" if "ref" in self.model.peft_config else None)

    def _inputs(self, trajectories: Sequence[Any], privileged: Sequence[str | None] | str | None,
                score_turns: Iterable[int] | None = None, input_format: CriticInputFormat | None = None):
        if privileged is None or isinstance(privileged, str):
            privileged = [privileged] * len(trajectories)
        if len(privileged) != len(trajectories):
            raise ValueError(f"{len(trajectories)} trajectories but {len(privileged)} privileged texts")
        dialogues, results = [], []
        for index, (trajectory, c) in enumerate(zip(trajectories, privileged)):
            dialogue, c = _dialogue_and_privileged(trajectory, c)
            result = tokenize_critic_input(self.tokenizer, dialogue, c, input_format or self.input_format,
                                           score_turns)
            if result.conversation is None:
                logger.warning("critic: trajectory %d cannot be scored (%s, %d tokens)", index, result.drop_reason,
                               result.length)
            dialogues.append(dialogue)
            results.append(result)
        return dialogues, results

    def turn_advantages(self, trajectories: Sequence[Any], privileged: Sequence[str | None] | str | None = None
                        ) -> list[list[float]]:
        """Advantage of every agent turn of each trajectory (``nan`` for a turn that cannot be scored).

        A trajectory is a record (``dialogue_history`` and ``task``) or a list of messages; ``privileged`` defaults
        to each record's ``task["ground_truth"]``.
        """
        from sweet_trl.losses import turn_advantages

        dialogues, inputs = self._inputs(trajectories, privileged)
        scorable = [r.conversation for r in inputs if r.conversation is not None]
        scored = iter(self._turn_logps(scorable))
        output = []
        for dialogue, result in zip(dialogues, inputs):
            num_agent_turns = sum(m["role"] == self.input_format.agent_role for m in dialogue)
            if result.conversation is None:
                output.append([math.nan] * num_agent_turns)
                continue
            critic, ref, counts = next(scored)
            values = turn_advantages(critic, ref, counts).tolist()
            output.append([v if n > 0 else math.nan for v, n in zip(values, counts.tolist())])
        return output

    def advantages(self, trajectory: Any, privileged: str | None = None) -> list[float]:
        """Advantage of each agent turn of one trajectory."""
        return self.turn_advantages([trajectory], privileged)[0]

    def trajectory_scores(self, trajectories: Sequence[Any], privileged: Sequence[str | None] | str | None = None
                          ) -> list[float]:
        """The score the critic's training loss compares (``score_normalization``); ``nan`` when unscorable."""
        from sweet_trl.losses import trajectory_scores

        _, inputs = self._inputs(trajectories, privileged)
        scored = iter(self._turn_logps([r.conversation for r in inputs if r.conversation is not None]))
        output = []
        for result in inputs:
            if result.conversation is None:
                output.append(math.nan)
                continue
            critic, ref, counts = next(scored)
            output.append(trajectory_scores(critic[None], ref[None], counts[None], self.score_normalization).item())
        return output

    def score_candidates(self, history: Sequence[Mapping[str, Any]], candidates: Sequence[str],
                         privileged: str | None, *, return_details: bool = False,
                         reference_without_privileged: bool = False) -> list[float] | CandidateScores:
        """Advantage of each candidate agent message after ``history`` (the dialogue so far, ending on the human).

        The history they share is encoded once per model (``share_prefix``), then the candidates go through the
        critic in batches of ``batch_size`` (one forward pass, plus one for the reference, per batch).
        ``return_details=True`` also gives the critic's and reference's mean log-probs, for
        ``losses.candidate_ranking_scores``. ``reference_without_privileged=True`` gives the reference the
        dialogue alone (no ``c``; the same candidate tokens): the score is then the critic's mean log-prob given
        ``c`` minus the initial model's without it, which before any training is the candidate's pointwise mutual
        information with ``c`` (the ``"critic_minus_reference_without_c"`` ranking). A candidate text that occurs
        more than once is scored once (a sharpened policy repeats itself: 3 distinct answers of 8 are common).
        """
        unique = list(dict.fromkeys(candidates))
        if len(unique) < len(candidates):
            scored = self.score_candidates(history, unique, privileged, return_details=True,
                                           reference_without_privileged=reference_without_privileged)
            position = {text: i for i, text in enumerate(unique)}
            details = CandidateScores(*([values[position[c]] for c in candidates] for values in (
                scored.advantages, scored.critic_mean_logps, scored.ref_mean_logps, scored.num_tokens)))
            return details if return_details else details.advantages
        history = conversation_messages(history)
        trajectories = [history + [{"role": self.input_format.agent_role, "content": c}] for c in candidates]
        _, inputs = self._inputs(trajectories, privileged, score_turns=[-1])
        if reference_without_privileged:
            _, ref_inputs = self._inputs(trajectories, None, score_turns=[-1],
                                         input_format=replace(self.input_format, use_privileged=False))
        else:
            ref_inputs = inputs
        critic = self._score_last_turns("critic", inputs)
        reference = self._score_last_turns("reference", ref_inputs)
        details = CandidateScores([], [], [], [])
        for (critic_mean, n), (ref_mean, _) in zip(critic, reference):
            details.advantages.append(critic_mean - ref_mean)
            details.critic_mean_logps.append(critic_mean)
            details.ref_mean_logps.append(ref_mean)
            details.num_tokens.append(n)
        return details if return_details else details.advantages

    def _score_last_turns(self, which: str, inputs: Sequence[Any]) -> list[tuple[float, int]]:
        """``(mean log-prob, tokens)`` of the last agent turn of each input under ``which`` model; nan if unscorable."""
        conversations = [r.conversation for r in inputs if r.conversation is not None]
        prefix_length = self._shared_prefix_length(conversations)
        try:
            scored = self._model_turn_logps(which, conversations, prefix_length)
        except (TypeError, ValueError, AttributeError, NotImplementedError) as err:
            if not prefix_length:
                raise
            # An architecture whose cache cannot be copied, repeated or continued: score whole dialogues.
            logger.warning("critic: shared-prefix scoring failed (%s: %s); encoding whole dialogues from now on",
                           type(err).__name__, err)
            self.share_prefix = False
            scored = self._model_turn_logps(which, conversations)
        scored = iter(scored)
        out = []
        for result in inputs:
            if result.conversation is None:
                out.append((math.nan, 0))
                continue
            sums, counts = next(scored)
            n = int(counts[0])
            out.append((sums[0].item() / n, n) if n else (math.nan, 0))
        return out


# Below this many shared tokens a separate prefix pass costs more than it saves.
_MIN_SHARED_PREFIX = 16


def _prepends_virtual_tokens(model: Any) -> bool:
    """Prompt-learning PEFT (prefix/prompt tuning) builds its own cache: no prefix of ours can be continued."""
    config = getattr(model, "active_peft_config", None)
    return bool(getattr(config, "is_prompt_learning", False))


def _is_peft(model: Any) -> bool:
    from accelerate.utils import is_peft_model

    return is_peft_model(model)


def _dialogue_and_privileged(trajectory: Any, privileged: str | None) -> tuple[list[dict[str, str]], str | None]:
    """A trajectory record or a message list -> (messages, c), c defaulting to the record's ground truth."""
    if isinstance(trajectory, Mapping):
        if "dialogue_history" not in trajectory:
            raise ValueError("a trajectory record needs 'dialogue_history'")
        record = Trajectory(trajectory)
        return record.messages, record.privileged() if privileged is None else privileged
    return conversation_messages(trajectory), privileged
