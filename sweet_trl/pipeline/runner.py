"""The stage runner: what a stage is, its completion marker and fingerprint, and running it once (skip, resume,
re-run when what it computes from changed), pushing its artefacts when asked.

It knows nothing of the stages themselves; ``commands.STAGES`` lists them.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import hashlib
import io
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline.export import MODEL_EXPORTS  # check_push_target: a model may name its own repository
from sweet_trl.pipeline_config import AS_WRITTEN, ConfigError, RunArguments, asdict_public

# Plan mode (`plan_only()`): a stage that would run raises WouldRun instead, before it clears or writes anything.
_PLAN_ONLY = contextvars.ContextVar("sweet_rl_plan_only", default=False)


class WouldRun(StageError):
    """In plan mode: this stage would run (it is not complete, or its settings or inputs changed)."""


@contextlib.contextmanager
def plan_only():
    """Within it every complete stage is read back as usual and any other stage raises :class:`WouldRun`: what a
    command would run, learnt without running, clearing or writing any stage."""
    token = _PLAN_ONLY.set(True)
    try:
        yield
    finally:
        _PLAN_ONLY.reset(token)


MARKER = "_COMPLETE.json"
RUNNING = "_RUNNING.json"
# A stage that raised (not an interrupt): the error's first line and when, so that `sweet-rl status` says
# "failed: ..." rather than "interrupted" (the same command would fail the same way). Its next run clears it.
FAILED = "_FAILED.json"
# What a running stage has to do: so many rows (episodes, turn states) of a file it appends one line to per row,
# or, for a trainer, the step it started from and when; `sweet-rl status` counts the rows or steps so far against it.
EXPECTED = "_EXPECTED.json"
# The stages that train: the only ones that may run under ``accelerate launch``.
TRAINING_STAGES = ("warm_start", "train_critic", "train_policy", "train_policy_best", "baseline_rft", "baseline_mtdpo")
# Options that change where, how fast or how loudly a stage runs, not what it computes.
NOT_FINGERPRINTED = {
    "run_dir", "force", "push_to_hub", "hub_prefix", "hub_model_id", "hub_token", "hub_strategy", "hub_private_repo",
    "hub_always_push", "hub_revision", "output_dir", "logging_dir", "report_to", "disable_tqdm", "logging_steps",
    "logging_first_step", "log_level", "log_level_replica", "local_rank", "num_workers", "generation_batch_size",
    "prefix_cache_mb", "share_prompt",
    "scoring_batch_size", "report_examples", "report_path", "dataloader_num_workers", "save_steps", "save_strategy",
    "save_total_limit", "run_name", "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
}
# Options added after runs were made, by the options class that holds them, at the value that computes what the
# runs computed before them: left out of the fingerprint there, so that finished runs stay valid.
NEUTRAL_WHEN_ADDED = {"PolicyPairsArguments": {"turns": None}, "CandidateArguments": {"state_turns": None},
                     "MultiTurnDPOConfig": {"nll_coef": 0.0},
                     "WarmStartArguments": {"adapter": None, "warm_start_family": "procedural", "expert_forms": "one"},
                     "BestOfNFinetuneConfig": {"top_fraction": 1.0, "min_score": None}, "EvaluateArguments": {"policy_base": None},
                     "RankArguments": {"selector": "critic", "selector_seed": 0},
                     "CriticPairsArguments": {"told_differs_only": False}}


@dataclass
class StageResult:
    """What a stage reports: counts of what it made, metrics, and its output files (relative to its folder)."""

    counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


class RunView:
    """The run's shared arguments as one stage sees them: only the fields it declared (``Stage.run_fields``), which
    are the ones its fingerprint covers; reading another one is a bug in the stage's declaration, so it raises."""

    # Where and how loudly a stage runs, not what it computes: readable by every stage, never fingerprinted.
    ALWAYS = frozenset({"run_dir", "hub_prefix", "force"})
    DERIVED = {"kind": ("env_id",), "critic_base": ("critic_model", "policy_model")}

    def __init__(self, run: RunArguments, fields: Sequence[str]):
        self._run, self._fields = run, frozenset(fields)

    def __getattr__(self, name: str) -> Any:
        needed = set(self.DERIVED.get(name, (name,))) - self.ALWAYS
        if not needed <= self._fields:
            raise AttributeError(f"run field(s) {sorted(needed - self._fields)} not in this stage's run_fields "
                                 "(add them there, so that its fingerprint covers them)")
        return getattr(self._run, name)


@dataclass
class StageContext:
    """Handed to a stage: its folder, the run's shared arguments it declared, its inputs, and a progress logger."""

    stage: str
    dir: Path
    run: RunView
    inputs: dict[str, dict[str, Any]]
    started: float = field(default_factory=time.perf_counter)
    stream: Any = None

    @property
    def run_dir(self) -> Path:
        return Path(self.run.run_dir)

    def log(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"[{self.stage}] {message} ({elapsed:.0f}s)", file=self.stream or sys.stdout, flush=True)

    def expect(self, total: int, unit: str, file: str, header_lines: int = 0) -> None:
        """Say how much there is to do: ``total`` rows of ``unit`` (``"episodes"``), each a line of ``file`` in the
        stage's folder (after ``header_lines``); ``sweet-rl status`` shows how many are written."""
        write_json_atomic(self.dir / EXPECTED, {"total": total, "unit": unit, "file": file,
                                                "header_lines": header_lines})

    def training_from(self, step: int) -> None:
        """Say that training starts now from ``step`` (0, or the checkpoint it goes on from): ``sweet-rl status``
        reads the rate of the steps since from the checkpoints it writes, and how long the rest will take."""
        write_json_atomic(self.dir / EXPECTED, {"unit": "steps", "from_step": step,
                                                "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

    def input_path(self, stage: str, output: str) -> Path:
        """A file written by an upstream stage (as named in its marker's ``outputs``)."""
        marker = self.inputs.get(stage)
        if marker is None:
            raise StageError(f"stage {self.stage} did not declare {stage} as an input")
        if output not in marker["outputs"]:
            raise StageError(f"stage {stage} has no output {output!r} (it has {sorted(marker['outputs'])})")
        return self.run_dir / marker["dir"] / marker["outputs"][output]


@dataclass(frozen=True)
class EarlierForm:
    """How a stage's fingerprint was made before a change that left what it computes alone: a finished stage that
    carries such a fingerprint is read back, not redone (nor cleared)."""

    run_fields: tuple[str, ...] | None = None  # the run fields it covered then (None: the stage's own)
    neutral_left_out: bool = True  # whether options at their NEUTRAL_WHEN_ADDED value were left out then


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its name, the dataclasses it parses, its inputs and what it does."""

    name: str
    help: str
    arg_types: Callable[[], tuple[type, ...]]  # besides RunArguments; a function so that trl loads lazily
    run: Callable[..., StageResult]
    run_fields: tuple[str, ...] = ()  # the RunArguments it reads (env_id for all): what its fingerprint covers
    inputs: Callable[..., list[str]] = lambda *args: []
    folder: Callable[..., str] | None = None
    push: Callable[..., dict[str, str]] | None = None
    # what of its options determines its outputs, when not all of them do (None: all of them)
    options_identity: Callable[..., Any] | None = None
    earlier_forms: tuple[EarlierForm, ...] = ()  # fingerprints its finished runs may carry from before a change

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    def dataclass_types(self) -> tuple[type, ...]:
        return (RunArguments, *self.arg_types())

    def dir_name(self, args: Sequence[Any]) -> str:
        return self.folder(*args) if self.folder else self.name


# --------------------------------------------------------------------------------------------------------------
# Markers and fingerprints
# --------------------------------------------------------------------------------------------------------------

def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, default=str)  # key order kept: a stage lists its main product first
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_marker(stage_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((stage_dir / MARKER).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


MAX_FINGERPRINTED_FILES = 10_000


def _path_identity(value: str) -> Any:
    """An option naming a local file or folder (trajectories, tasks, a model) stands for its contents: the name
    with each file's size and modification time, so that a rewritten file makes the stage run again."""
    if value in ("", ".", os.sep):
        return value
    path = Path(value).expanduser()
    try:
        if path.is_file():
            stat = path.stat()
            return [value, stat.st_size, stat.st_mtime_ns]
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())[:MAX_FINGERPRINTED_FILES]
            return [value, [(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]]
    except OSError:
        pass
    return value


def _fingerprint_view(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _fingerprint_view(v) for k, v in sorted(value.items()) if k not in NOT_FINGERPRINTED}
    if isinstance(value, (list, tuple)):
        return [_fingerprint_view(v) for v in value]
    if isinstance(value, str):
        return _path_identity(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return str(value)


def _without_neutral_additions(options: Any) -> dict[str, Any]:
    neutral = NEUTRAL_WHEN_ADDED.get(type(options).__name__, {})
    return {k: v for k, v in asdict_public(options).items() if k not in neutral or v != neutral[k]}


def fingerprint(stage: Stage, args: Sequence[Any], inputs: dict[str, dict[str, Any]],
                form: EarlierForm | None = None) -> str:
    """A hash of what determines a stage's outputs: the run fields it reads, its own options (files named there
    by their contents' sizes and times), and which run of each upstream stage it reads (re-running one, even
    with ``--force`` and the same options, makes the stages after it run again). ``form``: as it was hashed
    before a change (:class:`EarlierForm`)."""
    run = asdict_public(args[0])
    run_fields = form.run_fields if form is not None and form.run_fields is not None else stage.run_fields
    options = (_without_neutral_additions if form is None or form.neutral_left_out else asdict_public)
    identity = stage.options_identity(*args[1:]) if stage.options_identity else None
    view = {
        "stage": stage.name,
        "run": _fingerprint_view({k: run[k] for k in ("env_id", *run_fields)}),
        "args": identity if identity is not None else [_fingerprint_view(options(a)) for a in args[1:]],
        "inputs": {name: [marker["fingerprint"], marker.get("run_id")] for name, marker in sorted(inputs.items())},
    }
    return hashlib.sha256(json.dumps(view, sort_keys=True, default=str).encode()).hexdigest()[:16]


def accepted_fingerprints(stage: Stage, args: Sequence[Any], inputs: dict[str, dict[str, Any]]) -> list[str]:
    """The fingerprint of these options, then the one a marker made before integers given to float options were
    converted has for them (``num_train_epochs: 3`` hashed apart from 3.0): such a finished stage is not redone."""
    digests = [fingerprint(stage, args, inputs)]
    if any(getattr(options, AS_WRITTEN, None) for options in args):
        digests.append(fingerprint(stage, [_as_written(options) for options in args], inputs))
    digests += [fingerprint(stage, args, inputs, form) for form in stage.earlier_forms]
    return digests


def _as_written(options: Any) -> Any:
    written = getattr(options, AS_WRITTEN, None)
    if not written:
        return options
    legacy = copy.copy(options)
    for name, value in written.items():
        object.__setattr__(legacy, name, value)
    return legacy


# What changed since a stage was made, told when it runs again: the settings that differ (old -> new), the input
# stages made again, else a file named in its options rewritten since. The marker's ``config`` holds the options.
MAX_CHANGES_TOLD = 4


def what_changed(stage: Stage, args: Sequence[Any], inputs: dict[str, dict[str, Any]], marker: dict[str, Any]) -> str:
    """Why ``marker`` (a finished run of ``stage``) no longer stands for ``args`` and ``inputs``, in a few words."""
    changes = _changed_inputs(inputs, marker) + _changed_options(stage, args, marker.get("config"))
    if not changes:
        changes = [f"{path} was rewritten since it ran" for path in _rewritten_since(stage, args, marker)]
    if not changes:  # markers made before ``input_runs`` was recorded; a file rewritten within its start's second
        return "no recorded setting or input differs: an input stage ran again, or a file its options name changed"
    told = ", ".join(changes[:MAX_CHANGES_TOLD])
    return told + (f" (+{len(changes) - MAX_CHANGES_TOLD} more)" if len(changes) > MAX_CHANGES_TOLD else "")


def _changed_inputs(inputs: dict[str, dict[str, Any]], marker: dict[str, Any]) -> list[str]:
    made_from, runs = marker.get("inputs") or {}, marker.get("input_runs") or {}
    out = []
    for name, upstream in sorted(inputs.items()):
        if name not in made_from:
            out.append(f"now reads {name}")
        elif made_from[name] != upstream.get("fingerprint"):
            out.append(f"input {name} changed ({made_from[name]} -> {upstream.get('fingerprint')})")
        elif name in runs and runs[name] != upstream.get("run_id"):  # --force upstream: same settings, new run
            out.append(f"input {name} ran again")
    return out + [f"no longer reads {name}" for name in sorted(set(made_from) - set(inputs))]


def _changed_options(stage: Stage, args: Sequence[Any], recorded: Any) -> list[str]:
    """``key: old -> new`` for each fingerprinted option that differs from the marker's ``config``."""
    if not isinstance(recorded, list) or not all(isinstance(r, dict) for r in recorded):
        return []  # a marker without its options: nothing to compare with
    if len(recorded) != len(args):
        return ["its options' classes changed"]
    now = json.loads(json.dumps(_fingerprinted_options(stage, args), default=str))  # as the marker reads back
    out = []
    for options, old, new in zip(args, _fingerprinted_options(stage, recorded), now):
        neutral = NEUTRAL_WHEN_ADDED.get(type(options).__name__, {})
        for key in sorted(set(old) | set(new)):
            if key not in old and key in neutral and new.get(key) == neutral[key]:
                continue  # added since, at the value that computes what the run computed
            if old.get(key, _ABSENT) != new.get(key, _ABSENT):
                out.append(f"{key}: {_shown(old.get(key, _ABSENT))} -> {_shown(new.get(key, _ABSENT))}")
    return out


def _fingerprinted_options(stage: Stage, args: Sequence[Any]) -> list[dict[str, Any]]:
    """Each options class as a dict (the marker's ``config`` already is) of what its fingerprint covers: of the
    run's shared arguments only the fields the stage reads."""
    views = [a if isinstance(a, dict) else asdict_public(a) for a in args]
    run_fields = {"env_id", *stage.run_fields}
    return [{k: v for k, v in view.items() if k not in NOT_FINGERPRINTED and (position or k in run_fields)}
            for position, view in enumerate(views)]


_ABSENT = "<absent>"


def _shown(value: Any, limit: int = 40) -> str:
    text = value if value is _ABSENT else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _rewritten_since(stage: Stage, args: Sequence[Any], marker: dict[str, Any]) -> list[str]:
    """The files or folders named by the options (as strings) modified after the stage started."""
    try:
        since = datetime.fromisoformat(str(marker.get("started_at"))).timestamp() + 1  # kept to the second
    except ValueError:
        return []
    named = {v for options in _fingerprinted_options(stage, args) for v in options.values() if isinstance(v, str)}
    return sorted(value for value in named if value not in ("", ".", os.sep) and _modified_after(Path(value), since))


def _modified_after(path: Path, since: float) -> bool:
    try:
        if path.is_file():
            return path.stat().st_mtime > since
        if path.is_dir():
            return any(p.stat().st_mtime > since for p in list(path.rglob("*"))[:MAX_FINGERPRINTED_FILES])
    except OSError:
        pass
    return False


def clear_folder(path: Path) -> None:
    if path.is_symlink():
        # A linked stage folder belongs to another run (a variant reusing a study's stages): clearing it here
        # would destroy that run's results, so the user decides.
        raise StageError(f"{path} links to {path.resolve()}, which must run again here: remove the link (the "
                         f"other run keeps its stage) or copy that folder in its place")
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("colbench-gym", "torch", "transformers", "trl", "peft", "datasets"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


# --------------------------------------------------------------------------------------------------------------
# Running one stage
# --------------------------------------------------------------------------------------------------------------

def world_size() -> int:
    """Processes of an ``accelerate launch`` / ``torchrun`` run (1 otherwise)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _barrier() -> None:
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def complete_marker(stage: Stage, args: Sequence[Any]) -> dict[str, Any] | None:
    """The marker :func:`run_stage` would return without running ``stage`` with ``args`` (complete, with these
    options and inputs), else ``None``; nothing runs."""
    run_dir = Path(args[0].run_dir)
    inputs: dict[str, dict[str, Any]] = {}
    for name in stage.inputs(*args[1:]):
        marker = read_marker(run_dir / name)
        if marker is None:
            return None
        inputs[name] = marker
    marker = read_marker(run_dir / stage.dir_name(args[1:]))
    if marker is None or args[0].force or marker.get("fingerprint") not in accepted_fingerprints(stage, args, inputs):
        return None
    return marker


def _refuse_to_run_a_linked_stage(run_dir: Path, folder: str, stage_dir: Path, label: str, why: str) -> None:
    """A stage folder reached through a link inside the run (a study's shared stage, another run's stage linked in
    by hand) belongs to the run it links to: it is read back when complete with the same settings, never run (and
    cleared) from here."""
    target = Path(os.path.realpath(stage_dir))
    if target == Path(os.path.realpath(run_dir)) / folder or not stage_dir.exists():
        return
    raise StageError(f"stage {label} would run ({why}), but {stage_dir} links to {target}, another run's stage: it "
                     "is not touched. Run it there, or with that stage's settings, or remove the link to run it here")


def run_stage(stage: Stage, args: Sequence[Any], stream: Any = None) -> dict[str, Any]:
    """Run ``stage`` with its parsed dataclasses (``RunArguments`` first) unless it is complete; return its marker.

    Under ``accelerate launch`` (training stages only) every process decides alike from the same files and
    trains; the main process alone clears, marks and pushes.
    """
    run = args[0]
    out = stream or sys.stdout
    run_dir = Path(run.run_dir)
    folder = stage.dir_name(args[1:])
    stage_dir = run_dir / folder
    label = folder.replace(os.sep, "/")
    main = is_main_process()
    if world_size() > 1 and stage.name not in TRAINING_STAGES:
        raise ConfigError(f"stage {stage.name} runs in one process; launch only the training stages "
                          f"{list(TRAINING_STAGES)} with accelerate")

    check_push_target(stage, args)
    inputs: dict[str, dict[str, Any]] = {}
    for name in stage.inputs(*args[1:]):
        marker = read_marker(run_dir / name)
        if marker is None:
            command = name.split("/")[0].replace("_", "-")
            raise StageError(
                f"stage {label} needs the output of {name}, which is not complete in {run_dir}: "
                f"run `sweet-rl {command}` with the same --config first"
            )
        inputs[name] = marker

    def print_(message: str) -> None:
        if main:
            print(f"[{label}] {message}", file=out, flush=True)

    digest, *earlier_forms = accepted_fingerprints(stage, args, inputs)
    marker = read_marker(stage_dir)
    if marker is not None and marker.get("fingerprint") in (digest, *earlier_forms) and not run.force:
        print_(f"skipped: complete since {marker['finished_at']} ({marker['seconds']:.1f}s), "
               f"{_summary(marker)}")
        if main:
            _push_if_asked(stage, args, stage_dir, marker, print_)
        return marker
    changed = what_changed(stage, args, inputs, marker) if marker is not None and not run.force else ""
    why = ("--force" if run.force else "it is not complete" if marker is None
           else f"its settings or inputs differ from the ones it was made with: {changed}")
    if _PLAN_ONLY.get():
        raise WouldRun(f"{label} in {run_dir} would run: {why}")
    _refuse_to_run_a_linked_stage(run_dir, folder, stage_dir, label, why)
    if main:
        if marker is not None:
            print_("running again: " + ("--force" if run.force else changed))
            clear_folder(stage_dir)
        else:
            running, failed = _read_json(stage_dir / RUNNING), _read_json(stage_dir / FAILED)
            earlier = ("an interrupted run" if failed is None
                       else f"a run that failed ({failed.get('error')}, at {failed.get('failed_at')})")
            if running is not None and running.get("fingerprint") in (digest, *earlier_forms):
                print_(f"resuming {earlier}")
            elif stage_dir.exists() and any(stage_dir.iterdir()):
                print_(f"clearing {earlier} with another configuration")
                clear_folder(stage_dir)
        stage_dir.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if main:
        # the process and machine, so that `sweet-rl status` tells a running stage from an interrupted one
        write_json_atomic(stage_dir / RUNNING, {"fingerprint": digest, "started_at": started_at,
                                                "pid": os.getpid(), "host": socket.gethostname()})
        (stage_dir / FAILED).unlink(missing_ok=True)  # an earlier attempt's failure: this attempt tells its own
        (stage_dir / EXPECTED).unlink(missing_ok=True)  # and its progress: this attempt says what it has to do
    _barrier()

    context = StageContext(stage=label, dir=stage_dir, run=RunView(run, ("env_id", *stage.run_fields)),
                           inputs=inputs, stream=out if main else io.StringIO())
    print_("running")
    began = time.perf_counter()
    try:
        # A copy: trainers fill in their configuration as they train (TRL's and transformers' do), and the caller's
        # options must still fingerprint as they did, or calling again with them would train again.
        result = stage.run(context, *copy.deepcopy(tuple(args[1:])))
        seconds = time.perf_counter() - began
        _barrier()
        missing = [name for name, rel in result.outputs.items() if not (stage_dir / rel).exists()]
        if missing:
            raise StageError(f"stage {label} reported outputs it did not write: {missing}")
    except Exception as error:  # not KeyboardInterrupt: an interrupted stage is resumed, a failed one told
        if main:
            with contextlib.suppress(OSError):  # the stage's own error is the one to raise
                _record_failure(stage_dir, digest, error)
        raise

    marker = {
        "stage": stage.name,
        "dir": folder,
        "fingerprint": digest,
        "run_id": uuid.uuid4().hex,  # which run of the stage this is: the stages after it read it
        "started_at": started_at,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": seconds,
        "counts": result.counts,
        "metrics": result.metrics,
        "outputs": result.outputs,
        "info": {**result.info, "peak_rss_mb": _peak_rss_mb()},
        "inputs": {name: m["fingerprint"] for name, m in inputs.items()},
        # which run of each input: one re-run with --force (same fingerprint) leaves this stage stale too
        "input_runs": {name: m.get("run_id") for name, m in inputs.items()},
        "config": [asdict_public(a) for a in args],
        "versions": _versions(),
    }
    if main:
        write_json_atomic(stage_dir / MARKER, marker)
        (stage_dir / RUNNING).unlink(missing_ok=True)
        print_(f"done in {seconds:.1f}s: {_summary(marker)}")
        _push_if_asked(stage, args, stage_dir, marker, print_)
    _barrier()
    return marker


@contextlib.contextmanager
def seen_by_status(folder: Path) -> Iterator[None]:
    """Markers for work that is not a stage but runs as long as one (``sweet-rl credit``'s measurement): within
    it ``sweet-rl status`` sees ``folder`` running, then interrupted or failed (with its error) if it ends so; an
    earlier ``_COMPLETE.json`` is removed on entry, since the work it stood for is being redone. The caller
    writes ``_COMPLETE.json`` (:data:`MARKER`, with ``"holds_stages": true`` when stages run in its folder) when
    done, inside the block."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    (folder / FAILED).unlink(missing_ok=True)
    (folder / EXPECTED).unlink(missing_ok=True)
    write_json_atomic(folder / RUNNING, {"started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                         "pid": os.getpid(), "host": socket.gethostname(), "holds_stages": True})
    try:
        yield
    except Exception as error:
        with contextlib.suppress(OSError):
            _record_failure(folder, "", error)
        raise
    if (folder / MARKER).exists():
        (folder / RUNNING).unlink(missing_ok=True)


def _record_failure(stage_dir: Path, digest: str, error: Exception) -> None:
    """Write the error's first line and the time beside the stage's ``_RUNNING.json`` (kept: what the stage wrote
    before failing is resumed from once the cause is fixed)."""
    lines = str(error).strip().splitlines()
    message = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    write_json_atomic(stage_dir / FAILED, {"fingerprint": digest, "error": message[:500], "pid": os.getpid(),
                                           "failed_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})


def _peak_rss_mb() -> float | None:
    """Peak resident memory of this process so far (the stages of one pipeline share a process)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _summary(marker: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in marker.get("counts", {}).items()]
    parts += [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in marker.get("metrics", {}).items()]
    return ", ".join(parts) or "no counts"


def check_push_target(stage: Stage, args: Sequence[Any]) -> None:
    """Before any work: a push that is asked for needs somewhere to go. Datasets go to ``<hub_prefix>-<kind>``; a
    trained model to its trainer configuration's ``hub_model_id`` if set, else ``<hub_prefix>-<role>``."""
    if stage.push is None or not any(getattr(a, "push_to_hub", False) for a in args[1:]):
        return
    if stage.name in MODEL_EXPORTS and any(getattr(a, "hub_model_id", None) for a in args[1:]):
        return
    prefix = args[0].hub_prefix
    if not prefix or "/" not in prefix:
        raise ConfigError(f"{stage.name}: --push_to_hub needs --hub_prefix as '<user or org>/<name>' (got {prefix!r}):"
                          " the repositories are named '<hub_prefix>-<kind>'"
                          + (", or set --hub_model_id" if stage.name in MODEL_EXPORTS else ""))


def _push_if_asked(stage: Stage, args: Sequence[Any], stage_dir: Path, marker: dict[str, Any], print_) -> None:
    """Push a complete stage's artefacts when asked and not yet pushed (a failed push keeps the stage complete)."""
    if stage.push is None or not any(getattr(a, "push_to_hub", False) for a in args[1:]):
        return
    pushed = _read_json(stage_dir / "_PUSHED.json") or {}
    if pushed.get("fingerprint") == marker["fingerprint"]:
        print_(f"already pushed: {', '.join(pushed['repos'].values())}")
        return
    repos = stage.push(stage_dir, marker, *args)
    write_json_atomic(stage_dir / "_PUSHED.json", {"fingerprint": marker["fingerprint"], "repos": repos})
    print_(f"pushed to the Hub: {', '.join(repos.values())}")

