"""The references' outputs on disk, content-addressed, so that no process runs a reference twice.

One file per reference run: ``<folder>/<key[:2]>/<key>.json``, where ``key`` is the SHA-256 of
everything an output depends on -- the reference's source, its test calls in order (they share one
namespace, so an output depends on the calls before it), the interpreter that ran it (the sandbox
server's ``sys.version`` and bytecode magic), the grader's version (the package version, the
sandboxed harness's source and this file's format) and the sandbox (its mode and every limit but
the per-test timeout, and how many references share a child). Change any of these and the key
changes: the old entry is simply never read again. Not in the key: the versions of third-party
packages a reference imports (numpy, say); clear the folder after changing the sandbox's packages.
Without a sandbox (mode ``none``) the disk is not used: answers could forge entries there.

Outputs are still computed only inside the sandbox: an entry holds what a sandboxed reference run
sent back, each value in the tagged form the child encoded (``Outcome.encoded``), and is decoded
on reading by the same strict decoder that reads the sandbox's frames, so a damaged or forged file
can at most fail to load. An entry is written to a temporary file in its folder and renamed into
place (readers see a whole entry or none); one that cannot be read, parsed or decoded, or whose
recorded key or length is not the expected one, counts as a miss and is recomputed and rewritten.
Only deterministic outcomes are stored (values, errors, unserializable values), as in memory.

Where: ``$COLBENCH_REFERENCE_CACHE`` if set (``0``, ``off``, ``false`` or ``no`` turns the cache
off), else ``$COLBENCH_CACHE/references``, else ``~/.cache/colbench/references``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any

from colbench_gym.execution.codec import decode_value
from colbench_gym.execution.sandbox.settings import Outcome

CACHE_ENV_VAR = "COLBENCH_REFERENCE_CACHE"
_OFF = {"0", "off", "false", "no"}
FORMAT = 1  # of an entry, and of what the grader makes of a run's frames: bump when either changes
_STORED_KINDS = ("value", "error", "unserializable")


def default_folder() -> Path | None:
    """The cache folder the environment asks for (None: turned off); not created here."""
    setting = os.environ.get(CACHE_ENV_VAR)
    if setting is not None:
        if setting.strip().lower() in _OFF or not setting.strip():
            return None
        return Path(setting).expanduser()
    root = os.environ.get("COLBENCH_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "colbench"
    return base / "references"


class ReferenceDiskCache:
    """Reference runs' outcomes in ``folder`` (see the module's docstring). Thread-safe; never raises
    for a bad entry or an unwritable folder (a warning says so once, and grading goes on)."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.hits = 0
        self.writes = 0
        self.corrupt = 0
        self._lock = threading.Lock()
        self._warned = False
        self._folders: set[Path] = set()  # made (or found) already: no mkdir per entry
        self._serial = itertools.count()

    @staticmethod
    def key(environment: str, reference: str, calls: tuple[str, ...] | list[str]) -> str:
        """The entry's address: ``environment`` (interpreter, grader and sandbox, see the grader),
        the reference's source and its calls in order."""
        text = json.dumps([FORMAT, environment, reference, list(calls)], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def load(self, key: str, count: int) -> list[Outcome] | None:
        """The ``count`` outcomes stored under ``key``; None if there is no entry or it is damaged."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            self._count("corrupt")
            return None
        try:
            outcomes = _parse(json.loads(data), key, count)
        except Exception:  # noqa: BLE001 (anything a damaged file makes the parser or the decoder do)
            outcomes = None
        self._count("corrupt" if outcomes is None else "hits")
        return outcomes

    def store(self, key: str, outcomes: list[Outcome]) -> bool:
        """Write the entry atomically; False if it was not (not storable, or the disk refused)."""
        rows: list[list[Any]] = []
        for outcome in outcomes:
            # A value's encoded form is None only when the value is (JSON null).
            if outcome.kind not in _STORED_KINDS or (outcome.kind == "value" and outcome.encoded is None
                                                     and outcome.value is not None):
                return False
            rows.append([outcome.kind, outcome.encoded if outcome.kind == "value" else outcome.detail])
        path = self.path(key)
        temporary = None
        try:
            data = json.dumps({"format": FORMAT, "key": key, "outcomes": rows}, ensure_ascii=True,
                              separators=(",", ":")).encode("ascii")
            if path.parent not in self._folders:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._folders.add(path.parent)
            # A name no other writer uses (process, thread, serial), in the entry's folder: the rename is atomic.
            temporary = path.parent / f".{os.getpid()}-{threading.get_ident()}-{next(self._serial)}.tmp"
            try:
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:  # the folder was removed while this process ran (a cleared cache)
                path.parent.mkdir(parents=True, exist_ok=True)
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view):]
            finally:
                os.close(descriptor)
            os.replace(temporary, path)
            temporary = None
        except (OSError, ValueError, RecursionError) as err:
            self._warn(f"cannot write the reference cache at {self.folder} ({err}); references are cached in "
                       f"memory only. Set {CACHE_ENV_VAR}=0 to turn the disk cache off, or point it elsewhere.")
            return False
        finally:
            if temporary is not None:
                try:
                    os.unlink(temporary)
                except OSError:
                    pass
        self._count("writes")
        return True

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _warn(self, message: str) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _parse(entry: Any, key: str, count: int) -> list[Outcome] | None:
    if type(entry) is not dict or entry.get("format") != FORMAT or entry.get("key") != key:
        return None
    rows = entry.get("outcomes")
    if type(rows) is not list or len(rows) != count:
        return None
    outcomes = []
    for row in rows:
        if type(row) is not list or len(row) != 2 or row[0] not in _STORED_KINDS:
            return None
        kind, payload = row
        if kind == "value":
            outcomes.append(Outcome("value", decode_value(payload)))
        elif type(payload) is str:
            outcomes.append(Outcome(kind, detail=payload))
        else:
            return None
    return outcomes
