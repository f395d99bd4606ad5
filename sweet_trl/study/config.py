"""The `study:` section of a run configuration: which methods to compare, how often, and where the results go."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

METHODS = ("sweet", "sweet_best", "sweet_no_privileged", "rft", "mtdpo")


def last_best_of_n_round(policies: Iterable[str]) -> str | None:
    """The evaluated policy of sweet_best's last round after the first (``sweet_best_round<r>``), if any."""
    rounds = [name for name in policies if name.startswith("sweet_best_round")]
    return max(rounds, key=lambda name: int(name.removeprefix("sweet_best_round")), default=None)


@dataclass
class StudyArguments:
    r"""
    The `study` command: one collection, several training methods, the same held-out evaluation, intervals.

    Parameters:
        methods (`list[str]`, *optional*, defaults to all five):
            Trained policies to compare with zero-shot: `"sweet"` (SWEET-RL: critic with the privileged
            information, turn-level DPO), `"sweet_best"` (the same critic and ranked candidates, the policy
            fine-tuned on the critic's top candidate per turn state: `sweet_trl.best_of_n`),
            `"sweet_no_privileged"` (SWEET-RL with a critic trained without the privileged information, the
            paper's ablation), `"rft"` (rejection fine-tuning), `"mtdpo"` (multi-turn DPO).
        rounds (`int`, *optional*, defaults to `1`):
            SWEET-RL rounds: round r+1 collects with the round-r policy (merged into its base) and trains from it.
            Later rounds live under `<run_dir>/round<r>/` and are reported against round 1.
        best_of_n_states (`int` or `None`, *optional*, defaults to `None`):
            Turn states that `"sweet_best"` samples and ranks for itself, in `<run_dir>/best_of_n/` (with SWEET-RL's
            collection and critic): every state of the collection at the agent turns of `train_policy_best.turns`,
            at most this many. `None`: it learns from SWEET-RL's own ranked candidates (`rank/`). Fine-tuning on
            one candidate per state needs more states than DPO's four pairs per state.
        best_of_n_rounds (`int`, *optional*, defaults to `1`):
            Rounds of `"sweet_best"` (needs `best_of_n_states`): round r+1 samples candidates at the same turn states
            with the round-r policy (merged into its base), ranks them with the same critic and fine-tunes the
            round-r policy on the critic's new picks. Rounds live under `<run_dir>/best_of_n_round<r>/` and are
            evaluated as `sweet_best_round<r>`, reported against zero-shot and round 1.
        critic_eval_states (`int`, *optional*, defaults to `48`):
            Held-out answer turns (from the zero-shot evaluation episodes) on which the critics are judged by
            best-of-N selection; `0` skips it.
        critic_eval_candidates (`int`, *optional*, defaults to `8`):
            Candidate answers sampled per held-out turn and graded by the environment's scorer.
        answer_turn_states (`int`, *optional*, defaults to `0`):
            Held-out answer turns (the same kind as above) on which every evaluated policy samples
            `answer_turn_candidates` answers, graded by the scorer and compared paired by turn: the answer turn
            measured apart from the whole episode (`sweet_trl.study.answer_turns`); `0` skips it.
        answer_turn_candidates (`int`, *optional*, defaults to `16`):
            Answers per turn and policy (pass@k is reported for k = 1, 2, 4, ... up to it).
        bootstrap_samples (`int`, *optional*, defaults to `10000`):
            Resamples of the tasks for every interval.
        confidence (`float`, *optional*, defaults to `0.95`):
            Level of the intervals.
        results_path (`str` or `None`, *optional*, defaults to `None`):
            Also write the study JSON here (for example `benchmarks/results/study_cpu.json`); it is always
            written to `<run_dir>/study.json`.
        seed (`int`, *optional*, defaults to `0`):
            Seed of the bootstrap, of the held-out answer turns' selection and of their sampling (the stages have
            their own).
    """

    methods: list[str] = field(default_factory=lambda: list(METHODS))
    rounds: int = 1
    best_of_n_states: int | None = None
    best_of_n_rounds: int = 1
    critic_eval_states: int = 48
    critic_eval_candidates: int = 8
    answer_turn_states: int = 0
    answer_turn_candidates: int = 16
    bootstrap_samples: int = 10_000
    confidence: float = 0.95
    results_path: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown study methods {unknown}; choose from {list(METHODS)}")
        if not self.methods:
            raise ValueError("a study needs at least one method")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"rounds must be an int >= 1, got {self.rounds!r}")
        if self.rounds > 1 and "sweet" not in self.methods:
            raise ValueError("rounds > 1 iterates SWEET-RL: add 'sweet' to methods")
        if self.best_of_n_states is not None and self.best_of_n_states < 1:
            raise ValueError(f"best_of_n_states must be >= 1 or None, got {self.best_of_n_states}")
        if isinstance(self.best_of_n_rounds, bool) or not isinstance(self.best_of_n_rounds, int) \
                or self.best_of_n_rounds < 1:
            raise ValueError(f"best_of_n_rounds must be an int >= 1, got {self.best_of_n_rounds!r}")
        if self.best_of_n_rounds > 1 and ("sweet_best" not in self.methods or not self.best_of_n_states):
            raise ValueError("best_of_n_rounds > 1 iterates sweet_best on candidates of its own: add 'sweet_best' to "
                             "methods and set best_of_n_states")
        if self.critic_eval_states < 0:
            raise ValueError(f"critic_eval_states must be >= 0, got {self.critic_eval_states}")
        if self.critic_eval_candidates < 2:
            raise ValueError(f"critic_eval_candidates must be >= 2, got {self.critic_eval_candidates}")
        if self.answer_turn_states < 0:
            raise ValueError(f"answer_turn_states must be >= 0, got {self.answer_turn_states}")
        if self.answer_turn_candidates < 1:
            raise ValueError(f"answer_turn_candidates must be >= 1, got {self.answer_turn_candidates}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.bootstrap_samples < 100:
            raise ValueError(f"bootstrap_samples must be >= 100, got {self.bootstrap_samples}")
