"""``sweet-rl fair-study``: SWEET-RL against its baselines and controls at equal compute, read as a skeptic would.

    sweet-rl fair-study --config fair_cpu $(python -m sweet_trl.precision)          # make study (= make fair-study)
    sweet-rl fair-study --config fair_cpu --fair.read_test false \\
        --fair.results_path runs/fair_validation.json                                # validation only
    sweet-rl fair-study --config fair_cpu --run_dir runs/fair_cpu_seed1 --seed 1 --fair.seed 1 \\
        --evaluate.eval_seed 2000 --fair.results_path benchmarks/results/fair_study_seed1.json   # seed 1

Every arm (:mod:`~sweet_trl.study.fair.arms`) starts from the same policy and runs ``rounds`` on-policy rounds:
collect the same number of episodes with its current policy, build that round's training data its own way, train
for ``gradient_steps`` optimizer steps. The critics (with and without c) are trained once, on round 1's collection,
which every arm shares, as round 1's candidates are shared by every candidate arm. Each round's policy is evaluated
on the validation tasks; then each arm's test policy (its last round, or its best on validation) reads the test
tasks once, through the protocol's ledger (:mod:`sweet_trl.study.protocol`): a second read is refused unless forced.

Folders under ``<run_dir>/fair/``::

    start/{collect,critic_pairs,train_critic,sample_candidates}  start/no_c/train_critic
    <arm>/round<r>/{collect,sample_candidates,rank,policy_pairs,<training stage>}   (round 1 links start/'s)
    <arm>/validation/evaluate/...   <arm>/test/evaluate/...   start/validation/...   start/test/...
    fair_study.json

Every step is a pipeline stage: a stopped study resumes stage by stage.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sweet_trl.pipeline_config import ConfigError
from sweet_trl.study.fair.arms import START, Arm
from sweet_trl.study.fair.config import FairStudyArguments
from sweet_trl.study.fair.results import check_results_path, fair_results, write_fair_results
from sweet_trl.study.protocol import running_code_state
from sweet_trl.study.runner import WARM_START, Study, merged_policy, parse_section


def parse_fair_arguments(section: Any, cli_args: Sequence[str] = ()) -> FairStudyArguments:
    return parse_section(FairStudyArguments, "fair", section, cli_args, prog="sweet-rl fair-study")


def link(folder: Path, name: str, target: Path) -> None:
    """``folder/name`` -> ``target`` (a completed stage another arm or round made), relative, made once."""
    folder.mkdir(parents=True, exist_ok=True)
    path, relative = folder / name, os.path.relpath(target, folder)
    if path.is_symlink() and os.readlink(path) == relative:
        return
    if path.exists() or path.is_symlink():
        raise ConfigError(f"{path} exists and is not a link to {target}; remove it")
    path.symlink_to(relative, target_is_directory=True)


def check_same_family(validation_tasks: str, test_tasks: str, kind: str) -> None:
    """Refuse validation tasks of another generated family than the test tasks' (settings chosen on
    ``procedural:validation`` say nothing of ``procedural_multi:test``). The families are told by their tasks' ids
    (``procedural_wide:test`` is ``procedural``'s test); a file or Hub source is taken as given."""
    from colbench_gym.tasks import resolve_tasks
    from colbench_gym.tasks.procedural import task_families

    def prefixes(source: str) -> set[str] | None:
        family, _, split = source.partition(":")
        if not split or family not in task_families():
            return None
        return {task.task_id.split("-", 1)[0] for task in resolve_tasks(source, kind)}

    validation, test = prefixes(validation_tasks), prefixes(test_tasks)
    if validation is not None and test is not None and validation != test:
        family = test_tasks.partition(":")[0]
        raise ConfigError(f"fair.validation_tasks {validation_tasks!r} are of another task family than the test tasks "
                          f"{test_tasks!r} (task ids {sorted(validation)} against {sorted(test)}): settings chosen on "
                          f"them say nothing of the test. Pass --fair.validation_tasks {family}:validation")


class FairStudy(Study):
    section = "fair"
    command = "fair-study"
    parse_arguments = staticmethod(parse_fair_arguments)

    def __init__(self, config_path: Any, cli_args: Sequence[str] = (), stream: Any = None):
        super().__init__(config_path, cli_args, stream)
        run = self.stage_options("evaluate", [])[0]
        if self.args.validation_tasks == run.eval_tasks:
            raise ConfigError(f"fair.validation_tasks is the test tasks ({run.eval_tasks}): settings are read on "
                              "validation tasks, the test tasks once per arm at the end")
        check_same_family(self.args.validation_tasks, run.eval_tasks, run.kind)
        check_results_path(self.args, self.run_dir)
        for arm in self.args.arm_list():  # a variant's misspelt option is refused now, not when its stage runs
            for stage, options in arm.options:
                self.stage_options(stage, list(options))
        self.folder = self.run_dir / "fair"
        self.start = self.folder / START
        self.validation: dict[str, list[dict[str, Any]]] = {}  # arm -> per round (0: the start) validation figures
        self.used: dict[str, dict[str, str]] = {}  # arm -> {stage key: marker key}: the stages each arm spent

    # -- the stages ------------------------------------------------------------------------------------------

    def spend(self, arm: str, name: str, run_dir: Path, *extra: str, key: str) -> dict[str, Any]:
        """A stage run (or read back) for ``arm`` and counted in its compute; shared stages count for every arm."""
        marker = self.markers.get(key) or self.stage(name, run_dir, *extra, key=key)
        self.used.setdefault(arm, {})[key] = name
        return marker

    def seeded(self, name: str, round_index: int) -> list[str]:
        """The study seed, offset by round, for the stages that draw (a new round draws new episodes)."""
        option = {"collect": "--collect_seed", "sample_candidates": "--candidates_seed"}[name]
        return [option, str(self.args.seed * 1000 + round_index - 1)]

    def candidate_options(self) -> list[str]:
        return ["--state_fraction", "1.0", "--max_states", str(self.args.candidate_states)]

    def shared_round_one(self, arms: Sequence[Arm]) -> None:
        """Round 1's collection, critics and candidates: every arm starts from the same policy, so they are shared."""
        self.spend(START, "collect", self.start, *self.seeded("collect", 1), key="start/collect")
        if any(arm.critic == "with_c" for arm in arms):
            self.stage("critic_pairs", self.start, key="start/critic_pairs")
            self.stage("train_critic", self.start, key="start/train_critic")
        if any(arm.critic == "without_c" for arm in arms):
            self.stage("critic_pairs", self.start, key="start/critic_pairs")
            without = self.start / "no_c"
            for name in ("collect", "critic_pairs"):
                link(without, name, self.start / name)
            self.stage("train_critic", without, "--use_privileged", "false", key="start/no_c/train_critic")
        if any(arm.samples_candidates for arm in arms):
            self.stage("sample_candidates", self.start, *self.candidate_options(), *self.seeded("sample_candidates", 1),
                       key="start/sample_candidates")

    def round(self, arm: Arm, round_index: int, policy: str) -> str:
        """One round of ``arm`` from ``policy``; returns the policy it trained (merged, a model folder)."""
        folder, label = self.folder / arm.name / f"round{round_index}", f"{arm.name}/round{round_index}"
        own_policy = ["--policy_model", policy]
        options = arm.options_for  # a variant's own options per stage (none for the arms themselves)
        if round_index == 1 and not options("collect"):
            link(folder, "collect", self.start / "collect")
            self.used.setdefault(arm.name, {})["start/collect"] = "collect"
        else:
            self.spend(arm.name, "collect", folder, *own_policy, *self.seeded("collect", round_index),
                       *options("collect"), key=f"{label}/collect")
        if arm.critic:
            critic = self.start / "train_critic" if arm.critic == "with_c" else self.start / "no_c" / "train_critic"
            link(folder, "train_critic", critic)
            key = "start/train_critic" if arm.critic == "with_c" else "start/no_c/train_critic"
            self.used[arm.name][key] = "train_critic"
        if arm.samples_candidates:
            if round_index == 1 and not options("sample_candidates"):
                link(folder, "sample_candidates", self.start / "sample_candidates")
                self.used[arm.name]["start/sample_candidates"] = "sample_candidates"
            else:
                self.spend(arm.name, "sample_candidates", folder, *own_policy, *self.candidate_options(),
                           *self.seeded("sample_candidates", round_index), *options("sample_candidates"),
                           key=f"{label}/sample_candidates")
            self.spend(arm.name, "rank", folder, "--selector", arm.selector, "--selector_seed",
                       str(self.args.seed * 1000 + round_index), *options("rank"), key=f"{label}/rank")
            if arm.update == "turn_dpo":
                self.spend(arm.name, "policy_pairs", folder, *options("policy_pairs"), key=f"{label}/policy_pairs")
        stage = arm.training_stage
        self.spend(arm.name, stage, folder, *own_policy, "--max_steps", str(self.args.gradient_steps),
                   *options(stage), key=f"{label}/{stage}")
        trained = str(merged_policy(folder / stage).resolve())
        self.validate(arm.name, round_index, trained)
        return trained

    def validate(self, arm: str, round_index: int, policy: str) -> None:
        """``policy`` on the validation tasks (its figures are what settings are read on)."""
        from sweet_trl.study.results import per_task_rows, policy_entry

        extra = ["--eval_tasks", self.args.validation_tasks]
        if self.args.max_validation_tasks:
            extra += ["--max_eval_tasks", str(self.args.max_validation_tasks)]
        key = f"{arm}/round{round_index}/validation"
        marker = self.stage("evaluate", self.folder / arm / "validation", "--policy", policy, *extra, key=key)
        figures = policy_entry(per_task_rows(marker, self.run_dir), self.args.bootstrap_samples, 0.95, self.args.seed)
        entry = {"round": round_index, "policy": policy, "evaluation": marker["run_id"], **figures}
        rounds = self.validation.setdefault(arm, [])
        rounds[:] = [r for r in rounds if r["round"] != round_index] + [entry]

    # -- the study -------------------------------------------------------------------------------------------

    def warm_start_policy(self) -> str:
        """The warm start (when the config has one); returns the start policy."""
        if WARM_START in self.config:
            from sweet_trl.pipeline.commands import warm_start_override

            self.shared = [*self.shared, *warm_start_override(
                self.run_dir, self.stage(WARM_START, self.run_dir, key=WARM_START))]
        return self.stage_options("collect", [])[0].policy_model

    def start_stages(self, arms: Sequence[Arm]) -> str:
        """The warm start, round 1's shared stages and the start's validation; returns the start policy."""
        start_policy = self.warm_start_policy()
        self.shared_round_one(arms)
        self.validate(START, 0, start_policy)
        return start_policy

    def rounds(self, arm: Arm, start_policy: str) -> dict[int, str]:
        """Every round of ``arm`` from the start; returns its policy after each round."""
        policies, policy = {}, start_policy
        for round_index in range(1, self.args.rounds + 1):
            policy = policies[round_index] = self.round(arm, round_index, policy)
        return policies

    def run(self) -> dict[str, Any]:
        if self.args.plan:
            return self.plan()
        running_code_state()  # the commit the JSON and the test reads record: this one, even if the checkout moves
        arms = self.args.arm_list()
        self.refuse_second_reads(arms)
        start_policy = self.start_stages(arms)
        trained: dict[str, dict[int, str]] = {START: {0: start_policy}}
        for arm in arms:
            def train(arm: Arm = arm) -> None:
                trained[arm.name] = self.rounds(arm, start_policy)

            self.method(arm.name, train)
        if self.args.read_test:
            for arm in [START, *(a.name for a in arms if a.name not in self.failed)]:
                self.method(arm, lambda arm=arm: self.read_test(arm, trained[arm]))
        results = fair_results(self)
        write_fair_results(self, results)
        return results

    def walk(self, arms: Sequence[Arm]) -> dict[str, str]:
        """Each arm (the start first) as far as its stages and test read are complete: ``"complete"``, or why it
        stops (the first stage that would run, a read the ledger refuses). Nothing is run, cleared or written; an
        arm is not walked when the start would run."""
        from sweet_trl.pipeline import StageError
        from sweet_trl.pipeline.runner import plan_only
        from sweet_trl.study.protocol import ProtocolError

        plan: dict[str, str] = {}
        with plan_only(), self.links_undone(set(self.entries())), self.state_kept():
            try:  # the start's own stages: what its test read rests on (round 1's shared stages do not change it)
                start_policy = self.warm_start_policy()
                self.validate(START, 0, start_policy)
                if self.args.read_test:
                    self.read_test(START, {0: start_policy})
                plan[START] = "complete"
            except (StageError, ProtocolError) as err:
                plan[START] = str(err)
            shared = None
            if plan[START] == "complete":
                try:
                    self.shared_round_one(arms)
                except (StageError, ProtocolError) as err:
                    shared = str(err)
            for arm in arms if plan[START] == "complete" else []:
                if shared is not None:  # every arm stops at round 1's shared stages
                    plan[arm.name] = shared
                    continue
                try:
                    policies = self.rounds(arm, start_policy)
                    if self.args.read_test:
                        self.read_test(arm.name, policies)
                    plan[arm.name] = "complete"
                except (StageError, ProtocolError) as err:
                    plan[arm.name] = str(err)
        return plan

    @contextmanager
    def state_kept(self) -> Iterator[None]:
        """Leave the study as a walk found it: the warm start's policy joins the shared options as the start is
        walked, and a run after the walk that found it there would read the warm start with its own output as its
        base (and make it again)."""
        import copy

        kept = copy.deepcopy((self.shared, self.markers, self.used, self.validation, self.failed))
        try:
            yield
        finally:
            self.shared, self.markers, self.used, self.validation, self.failed = kept

    def refuse_second_reads(self, arms: Sequence[Arm]) -> None:
        """Refuse, before any stage runs, a run that would read the test tasks of an arm the ledger says has read
        them (its stages or its test evaluation would run again), rather than train for hours and be refused at
        the read. Nothing to check when the ledger has no read of these arms, or the read is forced."""
        from sweet_trl.study.protocol import ProtocolError, ledger_path, recorded_reads

        if not self.args.read_test or self.args.force_test_read:
            return
        read = {str(entry.get("arm")) for entry in recorded_reads(self.run_dir)}
        names = [name for name in (START, *(arm.name for arm in arms)) if name in read]
        if not names:
            return
        plan = self.walk(arms)
        again = {name: plan.get(name, f"the start would run again ({plan[START]})") for name in names
                 if plan.get(name) != "complete"}
        if again:
            reasons = "; ".join(f"{name}: {why}" for name, why in again.items())
            raise ProtocolError(
                f"{', '.join(again)} already read the test tasks ({ledger_path(self.run_dir)}) and this run would "
                f"train or evaluate them again ({reasons}): a second read, refused before any stage runs (a change "
                "that reaches only validation is counted too). Go on with --fair.read_test false (validation only), "
                "in another --run_dir, or --fair.force_test_read true (a read that happens is recorded as forced)")

    def plan(self) -> dict[str, Any]:
        """``--fair.plan true``: each arm as far as its stages are complete, and the first stage that would run;
        then, per arm, how many of its stages are done and about how long the rest takes. Nothing is run, cleared
        or written (the links a new round's walk makes to the stages it shares are removed again)."""
        arms = self.args.arm_list()
        plan = self.walk(arms)
        print("\n[plan] nothing was run; " + ("every stage is complete" if set(plan.values()) == {"complete"} else
                                              "each arm stops where it would run:"), file=self.out)
        for arm, state in plan.items():
            print(f"[plan] {arm}: {state}", file=self.out, flush=True)
        for arm in arms:
            print(f"[plan] {arm.name}: {self.work_left(arm)}", file=self.out, flush=True)
        reads = (f"the test tasks read once per arm at the end, recorded in {self.run_dir / 'protocol'}"
                 if self.args.read_test else "validation only (--fair.read_test false): no test read")
        written = f"{self.folder / 'fair_study.json'}" + (f" and {self.args.results_path}" if self.args.results_path
                                                          else "")
        print(f"[plan] {reads}; results written to {written}", file=self.out, flush=True)
        return {"plan": plan}

    def entries(self) -> Iterator[Path]:
        """Every file, folder and link under the study's folder, links not followed (another stage's files are not
        this folder's)."""
        for folder, subfolders, files in os.walk(self.folder):
            yield from (Path(folder) / name for name in (*subfolders, *files))

    @contextmanager
    def links_undone(self, before: set[Path]) -> Iterator[None]:
        """A plan walks a new round through links to the stages it shares (its markers are read there): those links,
        and the folders made for them, are removed again, so that a plan leaves the run as it found it."""
        try:
            yield
        finally:
            made = [path for path in self.entries() if path not in before]
            for path in sorted(made, key=lambda p: len(p.parts), reverse=True):  # the links, then their folders
                if path.is_symlink():
                    path.unlink()
                elif path.is_dir() and not any(path.iterdir()):
                    path.rmdir()

    def work_left(self, arm: Arm) -> str:
        """How much of ``arm`` is done (its rounds' stages, validation and test reads) and about how long the rest
        takes, each stage at the median time of this run's finished stages of its kind (a kind never finished here
        is counted, not timed, and the time left is then a lower bound)."""
        from statistics import median

        from sweet_trl.pipeline.runner import MARKER

        def done(folder: Path) -> bool:
            return (folder / MARKER).is_file()

        finished: dict[str, list[float]] = {}
        for path in self.entries():  # every arm's, links not followed: each stage counted once
            if path.name == MARKER:
                marker = json.loads(path.read_text(encoding="utf-8"))
                finished.setdefault(str(marker.get("stage")), []).append(float(marker.get("seconds", 0.0)))
        left: list[str] = []
        total = 0
        for round_index in range(1, self.args.rounds + 1):
            folder = self.folder / arm.name / f"round{round_index}"
            total += len(arm.stages)
            for stage in arm.stages:
                shared = round_index == 1 and stage in ("collect", "sample_candidates") and not arm.options_for(stage)
                if not done(self.start / stage if shared else folder / stage):  # round 1's shared ones: the start's
                    left.append(stage)
        for part, count in (("validation", self.args.rounds), ("test", 1 if self.args.read_test else 0)):
            evaluations = [f for f in (self.folder / arm.name / part / "evaluate").glob("*") if done(f)]
            total += count
            left += ["evaluate"] * max(count - len(evaluations), 0)
        if not left:
            return f"{total} of {total} stages done"
        timed = [median(finished[stage]) for stage in left if stage in finished]
        untimed = sorted({stage for stage in left if stage not in finished})
        # with a kind never finished here, the timed stages only bound the time left from below
        bound = "at least" if untimed else "about"
        estimate = f"{bound} {sum(timed) / 60:.0f} min left (each stage at this run's median of its kind)" if timed else ""
        unknown = f"{', '.join(untimed)} never finished here: not timed" if untimed else ""
        return f"{total - len(left)} of {total} stages done; " + "; ".join(filter(None, (estimate, unknown)))

    def write(self, final: bool = False) -> dict[str, Any]:
        """The study's JSON so far (a stopped study keeps what it measured)."""
        results = fair_results(self)
        write_fair_results(self, results)
        return results

    def test_round(self, arm: str) -> int:
        rounds = self.validation[arm]
        if arm == START:
            return 0
        if self.args.test_round == "last":
            return max(r["round"] for r in rounds)
        best = max(r["success_rate"] for r in rounds)
        return min(r["round"] for r in rounds if r["success_rate"] == best)

    def validation_record(self, arm: str) -> dict[str, Any]:
        """What the protocol's ledger keeps of the validation an arm's test read rests on."""
        chosen = self.test_round(arm)
        return {"tasks": self.args.validation_tasks,
                "settings": {"round": chosen, "rounds": self.args.rounds, "test_round": self.args.test_round,
                             "gradient_steps": self.args.gradient_steps,
                             "candidate_states": self.args.candidate_states},
                "figures": {f"round{r['round']}": {"success_rate": r["success_rate"], "success_ci": r["success_ci"],
                                                   "tests_passed": r["tests_passed"]}
                            for r in sorted(self.validation[arm], key=lambda r: r["round"])}}

    def read_test(self, arm: str, policies: dict[int, str]) -> None:
        """``arm``'s one read of the test tasks: refused before any evaluation where the ledger would refuse it."""
        from sweet_trl.study.protocol import check_can_read_test, record_test_read

        validation = self.validation_record(arm)
        policy = policies[validation["settings"]["round"]]
        test_tasks = self.stage_options("evaluate", [])[0].eval_tasks
        run_dir, key = self.folder / arm / "test", f"{arm}/test"
        options = self.stage_options("evaluate", ["--run_dir", str(run_dir), "--policy", policy])
        from sweet_trl.pipeline import STAGES
        from sweet_trl.pipeline.runner import complete_marker

        done = complete_marker(STAGES["evaluate"], options)
        check_can_read_test(self.run_dir, arm, validation, force=self.args.force_test_read,
                            evaluation=done["run_id"] if done else None, test_tasks=test_tasks)
        marker = self.stage("evaluate", run_dir, "--policy", policy, key=key)
        record_test_read(self.run_dir, arm, config={"arm": arm, "settings": validation["settings"],
                                                    "config": str(self.config_path)},
                         validation=validation, force=self.args.force_test_read, evaluation=marker["run_id"],
                         test_tasks=test_tasks)


def run_fair_study(config_path: Any, cli_args: Sequence[str] = (), stream: Any = None) -> dict[str, Any]:
    """``sweet-rl fair-study --config fair_cpu [--key value] [--<stage>.key value] [--fair.key value]``."""
    from sweet_trl.pipeline import setup_logging

    setup_logging()
    return FairStudy(config_path, cli_args, stream or sys.stdout).run()
