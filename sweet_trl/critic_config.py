"""Configuration of the SWEET-RL critic trainer."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DPOConfig

from sweet_trl.precision import apply_default_precision
from sweet_trl.tokenization import DEFAULT_PRIVILEGED_TEMPLATE, CriticInputFormat
from sweet_trl.transformers_compat import checkpointing_by_current_name


@dataclass
class SweetCriticConfig(DPOConfig):
    r"""
    Configuration class for [`SweetCriticTrainer`]: the asymmetric turn-level critic of SWEET-RL
    ([arXiv 2503.15478](https://huggingface.co/papers/2503.15478)).

    The critic is a causal LM initialised from the policy's base model. It reads the training-time information `c`
    (the task's reference solution: a Python function for ColBench backend, the target HTML for frontend) before the
    dialogue, and the advantage of agent turn `t` is the mean over the turn's tokens of
    `log pi_critic - log pi_ref`, with `pi_ref` the frozen initial model given the same input. It is trained on pairs
    of trajectories of one task with the loss `-log sigmoid(beta * (score(chosen) - score(rejected)))`.

    Only the parameters specific to SWEET-RL are listed here; see [`~trl.DPOConfig`] and
    [`~transformers.TrainingArguments`] for the others. Defaults follow the paper's released recipe: learning rate
    2e-7, 4 epochs, global batch 8 (`per_device_train_batch_size` x devices x `gradient_accumulation_steps`),
    sequences up to 8192 tokens, full fine-tuning in bf16.

    Parameters:
        > Parameters that control the loss

        beta (`float`, *optional*, defaults to `0.1`):
            Inverse temperature of the Bradley-Terry loss on the difference of trajectory scores.
        score_normalization (`str`, *optional*, defaults to `"per_turn_sum"`):
            How a trajectory's score aggregates its agent tokens' log-ratios. `"per_turn_sum"` (the paper): the sum
            over agent turns of each turn's mean log-ratio (the turn advantages). `"trajectory_mean"` (the released
            implementation): the log-ratio averaged over all agent tokens of the trajectory at once.
        turn_advantage_l2 (`float`, *optional*, defaults to `0.0`):
            Coefficient of the mean squared per-turn advantage added to the loss (`losses.turn_advantage_penalty`).
            0 is the paper's loss. The Bradley-Terry loss constrains only each trajectory's sum of turn advantages,
            so credit can settle on turns that merely follow the decisive one; 0.1 keeps it on the decisive turn in
            `tests/test_learning_critic.py`.
        share_prompt (`bool`, *optional*, defaults to `True`):
            Run what a pair's two inputs have in common (the system prompt, `c`, the request) through the model
            once and continue both from its key-value cache (:mod:`sweet_trl.shared_prompt`), instead of twice.
            Same loss and gradients to float rounding. With gradient checkpointing (which drops the cache) it runs
            the plain pass.

        > Parameters that control the critic's input

        use_privileged (`bool`, *optional*, defaults to `True`):
            Whether the critic reads `c` before the dialogue. `False` trains the same critic without it (the
            ablation that shows why asymmetric information matters).
        privileged_template (`str`, *optional*, defaults to `"Reference solution (hidden from the agent):\n{privileged}"`):
            Text that introduces `c`; `{privileged}` is replaced by the pair row's `privileged` field.
        privileged_placement (`str`, *optional*, defaults to `"system"`):
            `"system"`: that text is a system message before the dialogue. `"first_user"`: it is prepended to the
            first human message (for chat templates without a system role).
        include_end_of_turn (`bool`, *optional*, defaults to `False`):
            Whether the end-of-turn token after each agent message counts as one of the turn's tokens.
        max_length (`int` or `None`, *optional*, defaults to `8192`):
            Longest tokenised critic input (`c` and the whole dialogue).
        too_long (`str`, *optional*, defaults to `"drop"`):
            What to do with a pair whose chosen or rejected input is longer than `max_length`. `"drop"`: leave the
            pair out (counted in `trainer.data_report` and logged). `"truncate_privileged"`: shorten `c`, marking
            the cut, until the input fits. The dialogue and its turn masks are never truncated.

        > Parameters that control how pairs are built from rollouts (`critic_pair_dataset(records, config=config)`)

        pair_rule (`str`, *optional*, defaults to `"best_vs_rest"`):
            `"best_vs_rest"`: a task's best trajectory against each trajectory with a lower reward (released
            backend recipe). `"all_pairs"`: every two trajectories of a task whose rewards differ enough (frontend).
        require_success (`bool`, *optional*, defaults to `True`):
            With `"best_vs_rest"`, pair a task only when its best trajectory succeeded (passed every test).
        min_reward_gap (`float`, *optional*, defaults to `0.0`):
            Smallest reward difference of a pair (`0.1` in the released frontend recipe). Rewards always differ.
        max_pairs_per_task (`int` or `None`, *optional*, defaults to `None`):
            Keep at most this many pairs per task.

    Inherited DPO options with no meaning here (`loss_type` other than `"sigmoid"`, `ld_alpha`, `use_weighting`,
    a non-default `f_divergence_type`, `truncation_mode="keep_end"`, `sync_ref_model`) are rejected. An unset `bf16`
    means bf16 where a bf16 accelerator is present and float32 elsewhere (TRL would turn it on everywhere).
    """

    # Overridden defaults (the released SWEET-RL critic recipe)
    learning_rate: float = field(default=2e-7, metadata={"help": "Initial learning rate for AdamW."})
    num_train_epochs: float = field(default=4.0, metadata={"help": "Total number of training epochs."})
    max_length: int | None = field(
        default=8192, metadata={"help": "Longest tokenised critic input (privileged information and dialogue)."}
    )
    beta: float = field(default=0.1, metadata={"help": "Inverse temperature of the Bradley-Terry loss."})

    # Loss
    score_normalization: str = field(
        default="per_turn_sum",
        metadata={"help": "Trajectory score: 'per_turn_sum' (paper) or 'trajectory_mean' (released code).",
                  "choices": ["per_turn_sum", "trajectory_mean"]},
    )
    turn_advantage_l2: float = field(
        default=0.0, metadata={"help": "Coefficient of the per-turn advantage penalty (0: the paper's loss)."})
    share_prompt: bool = field(
        default=True, metadata={"help": "Run a pair's common start once and continue both inputs from its cache."})

    # Critic input
    use_privileged: bool = field(default=True, metadata={"help": "Whether the critic reads c before the dialogue."})
    privileged_template: str = field(
        default=DEFAULT_PRIVILEGED_TEMPLATE, metadata={"help": "Text introducing c; '{privileged}' is replaced by it."}
    )
    privileged_placement: str = field(
        default="system",
        metadata={"help": "Where c goes: 'system' message or prepended to the 'first_user' message.",
                  "choices": ["system", "first_user"]},
    )
    include_end_of_turn: bool = field(
        default=False, metadata={"help": "Whether the end-of-turn token counts as one of an agent turn's tokens."}
    )
    too_long: str = field(
        default="drop",
        metadata={"help": "Inputs longer than max_length: 'drop' the pair, or 'truncate_privileged' (shorten c).",
                  "choices": ["drop", "truncate_privileged"]},
    )

    # Pairs
    pair_rule: str = field(
        default="best_vs_rest",
        metadata={"help": "How rollouts become pairs: 'best_vs_rest' (backend) or 'all_pairs' (frontend).",
                  "choices": ["best_vs_rest", "all_pairs"]},
    )
    require_success: bool = field(
        default=True, metadata={"help": "best_vs_rest: pair a task only when its best trajectory succeeded."}
    )
    min_reward_gap: float = field(default=0.0, metadata={"help": "Smallest reward difference of a pair."})
    max_pairs_per_task: int | None = field(default=None, metadata={"help": "Keep at most this many pairs per task."})

    def __post_init__(self):
        apply_default_precision(self)
        checkpointing_by_current_name(self)
        super().__post_init__()
        if self.score_normalization not in ("per_turn_sum", "trajectory_mean"):
            raise ValueError(f"score_normalization must be 'per_turn_sum' or 'trajectory_mean', "
                             f"not {self.score_normalization!r}")
        if not self.turn_advantage_l2 >= 0:
            raise ValueError(f"turn_advantage_l2 must be >= 0, got {self.turn_advantage_l2}")
        unsupported = {
            "loss_type": self.loss_type != ["sigmoid"],
            "ld_alpha": self.ld_alpha is not None,
            "use_weighting": self.use_weighting,
            "f_divergence_type": self.f_divergence_type != "reverse_kl",
            "truncation_mode": self.truncation_mode != "keep_start",
            "sync_ref_model": self.sync_ref_model,
        }
        bad = [name for name, is_set in unsupported.items() if is_set]
        if bad:
            raise ValueError(f"SweetCriticConfig does not support the DPO option(s) {bad}: the critic's loss is the "
                             "Bradley-Terry loss on turn-level scores against the frozen initial model")
        self.critic_input_format()  # validates the template, placement and too_long

    def critic_input_format(self) -> CriticInputFormat:
        """How the critic reads a trajectory (saved next to the model as ``sweet_critic.json``)."""
        return CriticInputFormat(
            privileged_template=self.privileged_template,
            privileged_placement=self.privileged_placement,
            use_privileged=self.use_privileged,
            include_end_of_turn=self.include_end_of_turn,
            max_length=self.max_length,
            too_long=self.too_long,
        )

    def pair_kwargs(self) -> dict:
        """Keyword arguments for :func:`sweet_trl.pairs.build_critic_pairs`."""
        return {"rule": self.pair_rule, "require_success": self.require_success,
                "min_reward_gap": self.min_reward_gap, "max_pairs_per_task": self.max_pairs_per_task}
