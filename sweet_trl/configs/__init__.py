"""The example run configurations, shipped with the package and found by name::

    sweet-rl study    --config demo_cpu       # SWEET-RL against zero-shot on a laptop CPU (make demo)
    sweet-rl study    --config study_cpu      # the small-scale study: every method, intervals (make study-cpu)
    sweet-rl fair-study --config fair_cpu     # every arm at equal compute, validation, test read once (make study)
    sweet-rl fair-study --config fair_multi_cpu   # the same where turns matter (the multi-fact family, 5 turns)
    sweet-rl warm-start --config warm_start_multi_cpu   # that family's starting policy
    sweet-rl pipeline --config backend_8b     # the paper's backend setting, on GPUs
    sweet-rl pipeline --config frontend_8b    # the paper's frontend setting, on GPUs
    sweet-rl study    --config study_8b       # the study at the paper's scale (never run)
    sweet-rl configs                          # this list; `sweet-rl configs demo_cpu > my_run.yaml` copies one

``--config`` takes a path first: a file of that name wins over a shipped configuration. From Python,
:func:`config_path` gives a shipped file's path (``run_pipeline(config_path("demo_cpu"))``). Each file's comments
say what it runs, what it measured and why each setting is what it is.
"""

from __future__ import annotations

import os
from pathlib import Path

_FOLDER = Path(__file__).resolve().parent
_SUFFIX = ".yaml"


def names() -> list[str]:
    """The shipped configurations' names, sorted."""
    return sorted(path.stem for path in _FOLDER.glob(f"*{_SUFFIX}"))


def display_name(config: str | os.PathLike) -> str:
    """How to write ``config`` on a command line: a shipped configuration's file as its name (``study_cpu``), any
    other as given."""
    path = Path(config)
    if path.suffix == _SUFFIX and path.stem in names() and path.resolve() == config_path(path.stem).resolve():
        return path.stem
    return os.fspath(config)


def config_path(name: str) -> Path:
    """The file of the shipped configuration ``name`` (``"demo_cpu"`` or ``"demo_cpu.yaml"``).

    Raises ``KeyError`` naming the shipped configurations when there is none of that name.
    """
    stem = name.removesuffix(_SUFFIX)
    if stem not in names():
        raise KeyError(f"no shipped configuration named {name!r}; the shipped ones are {', '.join(names())}")
    return _FOLDER / f"{stem}{_SUFFIX}"


def resolve_config(config: str | os.PathLike) -> str:
    """What ``--config`` names: an existing file as given, else a shipped configuration of that name.

    Raises ``FileNotFoundError`` naming the shipped configurations (and the one a missing path's file name
    matches: ``examples/configs/demo_cpu.yaml``, where the configurations used to be, points to ``demo_cpu``).
    """
    text = os.fspath(config)
    if os.path.isfile(text):
        return text
    stem = Path(text).name
    stem = stem.removesuffix(_SUFFIX)
    is_a_name = Path(text).name == text
    if is_a_name and stem in names():
        return str(config_path(stem))
    if stem in names():
        raise FileNotFoundError(f"no configuration file {text}; the shipped one of that name is `--config {stem}`")
    raise FileNotFoundError(
        f"no configuration file {text} and no shipped configuration of that name; the shipped ones are "
        f"{', '.join(names())}"
    )
