"""The options of ``sweet-rl credit`` (``--credit.<option>``) and the check that keeps a results file's rows."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from colbench_gym.tasks import is_test_split


@dataclass
class CreditArguments:
    r"""
    The `credit` command: the critics' per-turn credit against Monte Carlo returns on held-out turn states.

    Parameters:
        states_per_kind (`int`, *optional*, defaults to `48`):
            Held-out question turns and answer turns (each at most this many, one of each kind per episode) from
            the zero-shot evaluation's episodes.
        num_candidates (`int`, *optional*, defaults to `8`):
            Candidate messages the policy samples per state (N).
        continuations (`int`, *optional*, defaults to `4`):
            Episodes the policy plays from every candidate that does not end the episode (M); a candidate that
            answers is graded, its value exact.
        question_turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Draw question states at these agent turns only (0 the first): `1 2 3` in a family whose every episode
            opens with the same question. Every turn when unset.
        value_function (`bool`, *optional*, defaults to `True`):
            Fit and score the value-function baseline (a scalar head on returns, without c).
        value_function_learning_rate (`float`, *optional*, defaults to `2e-4`):
            Its learning rate (LoRA).
        value_function_epochs (`float`, *optional*, defaults to `2.0`):
            Its epochs over every agent turn of the collection.
        scaling (`list[str]`, *optional*, defaults to `[]`):
            `label=run_dir` of other runs whose `train_critic/` is complete (the same states and candidates are
            scored by each): the `scaling` table, with this run's own critic as `1x`.
        variants (`list[str]`, *optional*, defaults to `[]`):
            `label=run_dir` of runs whose critic was trained on this run's critic pairs with other settings (a
            folder linking `collect`, `critic_pairs` and `warm_start`, then `sweet-rl train-critic --beta 1.0`, say):
            the `variants` table.
        train_variants (`list[str]`, *optional*, defaults to `[]`):
            `label=options`: a critic trained on this run's critic pairs with these `train-critic` options
            (`r64=--lora_r 64 --lora_alpha 128`), in `<run_dir>/variant_<label>/` (which links the run's
            `collect` and `critic_pairs`), trained by `prepare`, then scored as a row of the `variants` table.
        without_c (`bool`, *optional*, defaults to `True`):
            Score the critic trained without c (`no_privileged/train_critic/`, the paper's ablation) where the run
            has it; `prepare` trains it. `false`: neither.
        prepare (`bool`, *optional*, defaults to `False`):
            First run the stages the measurement reads where they are missing, each skipped when complete (a
            stopped command goes on where it stopped): the warm start, the collection, the critic pairs, the
            critic, the critic without c, each `train_variants` critic and the zero-shot evaluation the states come
            from. Without it a missing stage is an error that names it.
        held_out_tasks (`str` or `None`, *optional*, defaults to `None`):
            The states come from the zero-shot policy's episodes on these tasks (`procedural:validation`), an
            evaluation in `<run_dir>/<output_name>/held_out/` that `prepare` makes. Not with `held_out`.
        held_out (`str` or `None`, *optional*, defaults to `None`):
            The held-out episodes the states come from (a trajectories file: an evaluation on
            `procedural:validation`, say, to choose critic settings without reading the test tasks). Default: the
            run's zero-shot evaluation on its `eval_tasks`.
        output_name (`str`, *optional*, defaults to `"credit"`):
            The folder under the run that holds the ground truth, the scores and the JSON (one per source of states).
        results_path (`str` or `None`, *optional*, defaults to `None`):
            Also write the JSON here (for example `benchmarks/results/critic_credit.json`). A file there that holds
            `scaling` or `variants` rows this command does not score is not rewritten (the command stops before any
            work and names them): a read-back with an older command line would drop the critics scored since.
        overwrite_results (`bool`, *optional*, defaults to `False`):
            Rewrite `results_path` even so.
        bootstrap_samples (`int`, *optional*, defaults to `10000`):
            Resamples of the tasks for every interval.
        seed (`int`, *optional*, defaults to `0`):
            The states' selection, the candidates, the continuations and the bootstrap.
    """

    states_per_kind: int = 48
    num_candidates: int = 8
    continuations: int = 4
    question_turns: list[int] | None = None
    value_function: bool = True
    value_function_learning_rate: float = 2e-4
    value_function_epochs: float = 2.0
    scaling: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    train_variants: list[str] = field(default_factory=list)
    without_c: bool = True
    prepare: bool = False
    held_out_tasks: str | None = None
    held_out: str | None = None
    output_name: str = "credit"
    results_path: str | None = None
    overwrite_results: bool = False
    bootstrap_samples: int = 10_000
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("states_per_kind", "num_candidates", "continuations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_candidates < 2:
            raise ValueError("num_candidates must be >= 2: one candidate has no order to agree with")
        if self.held_out and self.held_out_tasks:
            raise ValueError("held_out (episodes) and held_out_tasks (tasks to play them on) name the states twice: "
                             "give one")
        if self.held_out_tasks and is_test_split(self.held_out_tasks):
            raise ValueError(f"held_out_tasks {self.held_out_tasks!r} is a test split: settings are chosen on a "
                             "validation split's states (procedural:validation); the test tasks' states are the "
                             "run's own zero-shot evaluation (no held_out option)")
        for option, value in (("scaling", "run_dir"), ("variants", "run_dir"), ("train_variants", "options")):
            for entry in getattr(self, option):
                if "=" not in entry or not entry.split("=", 1)[0] or not entry.split("=", 1)[1]:
                    raise ValueError(f"{option} entries are label={value}, got {entry!r}")
        for entry in self.train_variants:
            label, options = entry.split("=", 1)
            if not label.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"train_variants labels name folders (letters, digits, _ and -), got {label!r}")
            shlex.split(options)  # unbalanced quotes fail here, before any work
        for table, entries in (("scaling", self.scaling), ("variants", [*self.variants, *self.train_variants])):
            labels = [entry.split("=", 1)[0] for entry in entries]
            if len(set(labels)) != len(labels):
                raise ValueError(f"{table} labels must differ, got {labels}")

    def trained_variants(self) -> list[tuple[str, list[str]]]:
        """``(label, train-critic options)`` of each ``train_variants`` entry."""
        return [(entry.split("=", 1)[0], shlex.split(entry.split("=", 1)[1])) for entry in self.train_variants]

    def variants_named(self) -> list[tuple[str, Path]]:
        """``(label, run folder)`` of each critic ``variants`` names (trained elsewhere, before this command)."""
        return [(entry.split("=", 1)[0], Path(entry.split("=", 1)[1])) for entry in self.variants]

    def variant_folders(self, run_dir: Path) -> list[tuple[str, Path]]:
        """``(label, run folder)`` of every variant critic: those named by ``variants`` and those ``train_variants``
        trains in ``<run_dir>/variant_<label>``."""
        return [*self.variants_named(), *((label, run_dir / f"variant_{label}") for label, _ in self.trained_variants())]


def check_results_path(args: CreditArguments) -> None:
    """Refuse, before any work, to rewrite a results file that holds rows this command would not write again."""
    from sweet_trl.pipeline_config import ConfigError

    path = Path(args.results_path) if args.results_path else None
    if path is None or args.overwrite_results or not path.exists():
        return
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
        tables = {table: [row["label"] for row in earlier.get(table, [])] for table in ("scaling", "variants")}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f"credit: {path} is not a credit results file ({err}); write elsewhere "
                          "(--credit.results_path) or --credit.overwrite_results true") from err
    scored = {"scaling": {"1x", *(e.split("=", 1)[0] for e in args.scaling)},
              "variants": {e.split("=", 1)[0] for e in [*args.variants, *args.train_variants]}}
    lost = {table: [label for label in labels if label not in scored[table]] for table, labels in tables.items()}
    lost = {table: labels for table, labels in lost.items() if labels}
    if lost:
        rows = "; ".join(f"{table}: {', '.join(labels)}" for table, labels in lost.items())
        raise ConfigError(f"credit: {path} holds rows this command does not score ({rows}); rewriting it would lose "
                          "them. Name them again (--credit.scaling / --credit.variants label=run_dir), write "
                          "elsewhere (--credit.results_path), or --credit.overwrite_results true")
