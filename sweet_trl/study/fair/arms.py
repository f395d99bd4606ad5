"""The arms of the fair study: what each method does with one round's on-policy data.

Every arm starts a round from its own current policy, collects the same number of episodes with it, and trains for
the same number of gradient steps (``max_steps``); they differ only in what they learn from:

============== ================================================ ============================================
arm            training data of a round                         what it controls for
============== ================================================ ============================================
sweet          critic-ranked candidate pairs, turn-level DPO    SWEET-RL as in the paper
sweet_true     pairs ranked by the hidden tests, turn-level DPO the DPO update against the labels
sweet_best     the critic's best candidate per turn, SFT        SWEET-RL's critic with best-of-N fine-tuning
best_random    a random candidate per turn, SFT                 the update without any critic
best_untrained the untrained critic's best (base model + c)     what c tells before the critic's training
best_no_c      the critic without c's best                      the asymmetry (the paper's ablation)
best_true      the hidden tests' best where they grade          the ceiling of any critic at answer turns
rft            the collection's successful episodes, SFT        iterated rejection fine-tuning
mtdpo          trajectory pairs of the collection, DPO          iterated multi-turn DPO
============== ================================================ ============================================

The true-reward selector grades the states whose candidates are answers and orders the others at random (as for
``best_true``).

Candidate arms sample ``num_candidates`` messages at the same turn states (every agent turn, up to
``max_states``) from their current policy; in round 1 every candidate arm ranks the very same candidates.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arm:
    """One method of the fair study.

    ``update``: ``"turn_dpo"`` (``policy_pairs`` + ``train_policy``), ``"best_of_n"`` (``train_policy_best``),
    ``"rft"`` (``baseline_rft``) or ``"mtdpo"`` (``baseline_mtdpo``). ``selector``: the ``rank`` stage's
    (:mod:`sweet_trl.selectors`), for the candidate arms. ``critic``: ``"with_c"`` or ``"without_c"``, the critic
    the selector reads (trained once, on round 1's collection).
    """

    name: str
    update: str
    selector: str | None = None
    critic: str | None = None

    @property
    def samples_candidates(self) -> bool:
        return self.update in ("turn_dpo", "best_of_n")

    @property
    def training_stage(self) -> str:
        return UPDATE_STAGES[self.update]


# each kind of update and the pipeline stage that makes it: an arm's rounds and gradient steps are counted from these
UPDATE_STAGES = {"turn_dpo": "train_policy", "best_of_n": "train_policy_best", "rft": "baseline_rft",
                   "mtdpo": "baseline_mtdpo"}


ARMS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("sweet", "turn_dpo", "critic", "with_c"),
    Arm("sweet_true", "turn_dpo", "true_reward"),
    Arm("sweet_best", "best_of_n", "critic", "with_c"),
    Arm("best_random", "best_of_n", "random"),
    Arm("best_untrained", "best_of_n", "untrained_critic", "with_c"),
    Arm("best_no_c", "best_of_n", "critic", "without_c"),
    Arm("best_true", "best_of_n", "true_reward"),
    Arm("rft", "rft"),
    Arm("mtdpo", "mtdpo"),
)}
START = "start"  # the policy every arm starts from, read on validation and test like an arm
# what each SWEET-RL variant is compared with on test (the list), when both arms ran
COMPARED_WITH = ("rft", "mtdpo", "best_random", "best_untrained", "best_no_c", "best_true", "sweet_true", START)
SWEET_VARIANTS = ("sweet", "sweet_best")
