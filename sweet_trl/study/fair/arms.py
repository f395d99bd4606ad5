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
``best_true``). A variant (:func:`arm_variant`, ``--fair.variants "sweet@nll1=--train_policy.nll_coef 1.0"``) is an
arm run with other stage options, beside it and at the same compute.

Candidate arms sample ``num_candidates`` messages at the same turn states (every agent turn, up to
``max_states``) from their current policy; in round 1 every candidate arm ranks the very same candidates.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace


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
    base: str | None = None  # a variant's arm (``sweet`` for ``sweet@nll1``)
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a variant's options, per stage of its rounds

    @property
    def samples_candidates(self) -> bool:
        return self.update in ("turn_dpo", "best_of_n")

    @property
    def training_stage(self) -> str:
        return UPDATE_STAGES[self.update]

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages of one of its rounds (the critic is trained once, for every arm, before round 1)."""
        candidates = ("sample_candidates", "rank") if self.samples_candidates else ()
        return ("collect", *candidates, *(("policy_pairs",) if self.update == "turn_dpo" else ()), self.training_stage)

    def options_for(self, stage: str) -> list[str]:
        """A variant's own options for ``stage`` (``[]`` for any other arm or stage)."""
        return [option for name, options in self.options if name == stage for option in options]


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
# options a variant may not set: the study's own, which keep the arms at equal compute and on their own policy
STUDY_OPTIONS = ("max_steps", "policy_model", "run_dir", "collect_seed", "candidates_seed", "selector",
                 "selector_seed", "state_fraction", "max_states", "episodes_per_task")


def arm_variant(spec: str) -> Arm:
    """An arm run with other stage options, beside the arm itself and at the same compute:
    ``"sweet@nll1=--train_policy.nll_coef 1.0"`` is ``sweet`` whose ``train_policy`` stage takes ``--nll_coef 1.0``
    (its stages in ``fair/sweet@nll1/``; compared with ``sweet`` and the start). Each option is written
    ``--<stage>.<key>`` for a stage of the arm's rounds; a variant's round 1 collects or samples candidates of its own
    when it sets options of that stage (else it shares round 1's, as every arm does). ``ValueError`` on a malformed
    spec, an unknown arm, another stage, or one of :data:`STUDY_OPTIONS`."""
    name, equals, written = spec.partition("=")
    base, at, label = name.partition("@")
    if not equals or not at or not re.fullmatch(r"[A-Za-z0-9_]+", label):
        raise ValueError(f"a variant is <arm>@<label>=<--stage.key value ...> (label: letters, digits, _), got {spec!r}")
    if base not in ARMS:
        raise ValueError(f"variant {name}: unknown arm {base!r}; known: {list(ARMS)}")
    arm = ARMS[base]
    by_stage: dict[str, list[str]] = {}
    stage = None
    for token in shlex.split(written):
        if token.startswith("--"):
            stage, dot, key = token[2:].partition(".")
            if not dot or stage not in arm.stages:
                raise ValueError(f"variant {name}: options are --<stage>.<key> for a stage of {base}'s rounds "
                                 f"({', '.join(arm.stages)}), got {token!r}")
            if key in STUDY_OPTIONS:
                raise ValueError(f"variant {name}: --{stage}.{key} is the study's own (it keeps every arm at equal "
                                 "compute, on its own policy)")
            by_stage.setdefault(stage, []).append(f"--{key}")
        elif stage is None:
            raise ValueError(f"variant {name}: {token!r} before any --<stage>.<key>")
        else:
            by_stage[stage].append(token)
    if not by_stage:
        raise ValueError(f"variant {name}: no option (it would be {base} again)")
    return replace(arm, name=name, base=base, options=tuple((k, tuple(v)) for k, v in by_stage.items()))
# what each SWEET-RL variant is compared with on test (the list), when both arms ran
COMPARED_WITH = ("rft", "mtdpo", "best_random", "best_untrained", "best_no_c", "best_true", "sweet_true", START)
SWEET_VARIANTS = ("sweet", "sweet_best")
