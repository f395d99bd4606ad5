"""The fair study's own options: the ``fair`` section of a config, ``--fair.<key>`` on the command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from colbench_gym.tasks import is_test_split
from sweet_trl.study.fair.arms import ARMS, Arm, arm_variant

TEST_ROUNDS = ("last", "best_on_validation")


@dataclass
class FairStudyArguments:
    r"""
    The fair study: every arm from the same start, the same rounds, episodes and gradient steps; settings read on
    validation, the test tasks once per arm.

    Parameters:
        arms (`list[str]`, *optional*, defaults to `["sweet_best", "rft", "best_random", "best_untrained"]`):
            The arms (:data:`sweet_trl.study.fair.arms.ARMS`); the default is the core comparison.
        variants (`list[str]`, *optional*, defaults to `[]`):
            Arms run again with other stage options, beside them at the same compute, each
            `"<arm>@<label>=--<stage>.<key> value ..."` (:func:`sweet_trl.study.fair.arms.arm_variant`):
            `"sweet@nll1=--train_policy.nll_coef 1.0"` is SWEET-RL with a stronger NLL anchor, compared with `sweet`
            and the start. One command tries several settings of a method on validation.
        rounds (`int`, *optional*, defaults to `2`):
            On-policy rounds of every arm: collect with the current policy, build the round's training data, train.
        gradient_steps (`int`, *optional*, defaults to `40`):
            Optimizer steps of every arm's training stage in every round (`max_steps`): the same update budget,
            whatever the amount of data (a small set is seen for more epochs).
        candidate_states (`int`, *optional*, defaults to `96`):
            Turn states per round at which the candidate arms sample `num_candidates` messages (every agent turn of
            the collection, up to this many).
        validation_tasks (`str`, *optional*, defaults to `"procedural:validation"`):
            Where every round of every arm is evaluated and settings are read; never the test tasks, and of the test
            tasks' family when both are generated (`procedural_multi:test` wants `procedural_multi:validation`).
        max_validation_tasks (`int` or `None`, *optional*, defaults to `None`):
            At most this many of them.
        test_round (`str`, *optional*, defaults to `"last"`):
            The round whose policy reads the test tasks: `"last"` (every arm at equal rounds) or
            `"best_on_validation"` (each arm's round of best validation success, earliest on ties; recorded).
        read_test (`bool`, *optional*, defaults to `True`):
            Read the test tasks at the end (once per arm, recorded in `<run_dir>/protocol/test_reads.json`);
            `False` stops after validation, to choose settings.
        force_test_read (`bool`, *optional*, defaults to `False`):
            Read the test tasks again for arms that have read them (recorded as forced).
        seed (`int`, *optional*, defaults to `0`):
            The study's seed: episodes, candidates and the random selector (each round offsets it).
        bootstrap_samples (`int`, *optional*, defaults to `10000`):
            Resamples of the tasks for every interval.
        results_path (`str` or `None`, *optional*, defaults to `None`):
            Also write the JSON here (for example `benchmarks/results/fair_study_seed0.json`). An existing file that
            holds another run's figures, test reads where this run reads none, or arms this run does not run is
            refused before any stage runs.
        overwrite_results (`bool`, *optional*, defaults to `False`):
            Overwrite the results file even then.
        plan (`bool`, *optional*, defaults to `False`):
            Say what the command would run, and run nothing: every complete stage is read back, each arm stops at
            the first stage that would run (not complete, or its settings or inputs changed) and says which, then
            how many of each arm's stages are done and about how long the rest takes; no stage is run or cleared,
            the test tasks are not read, no result is written.
    """

    arms: list[str] = field(default_factory=lambda: ["sweet_best", "rft", "best_random", "best_untrained"])
    variants: list[str] = field(default_factory=list)
    rounds: int = 2
    gradient_steps: int = 40
    candidate_states: int = 96
    validation_tasks: str = "procedural:validation"
    max_validation_tasks: int | None = None
    test_round: str = "last"
    read_test: bool = True
    force_test_read: bool = False
    seed: int = 0
    bootstrap_samples: int = 10_000
    results_path: str | None = None
    overwrite_results: bool = False
    plan: bool = False

    def arm_list(self) -> list[Arm]:
        """The arms, then the variants, as the study runs them."""
        return [*(ARMS[name] for name in self.arms), *(arm_variant(spec) for spec in self.variants)]

    def arm_names(self) -> list[str]:
        return [arm.name for arm in self.arm_list()]

    def __post_init__(self) -> None:
        unknown = [arm for arm in self.arms if arm not in ARMS]
        if unknown or not self.arms:
            raise ValueError(f"unknown arms {unknown}; known: {list(ARMS)}" if unknown else "no arm to run")
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"arms repeat: {self.arms}")
        names = [arm_variant(spec).name for spec in self.variants]  # each refused here when malformed
        if len(set(names)) != len(names):
            raise ValueError(f"variants repeat: {names}")
        for name in ("rounds", "gradient_steps", "candidate_states"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.test_round not in TEST_ROUNDS:
            raise ValueError(f"test_round must be one of {TEST_ROUNDS}, got {self.test_round!r}")
        if is_test_split(self.validation_tasks):
            raise ValueError(f"validation_tasks {self.validation_tasks!r} looks like a test split: settings are "
                             "read on validation tasks, the test tasks once at the end")
