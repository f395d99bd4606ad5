"""The wire format shared with ``_sandbox_server.py``: the server's source, its control messages,
and answers and test calls compiled here for it."""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path
from typing import Any

_SERVER_SOURCE_PATH = Path(__file__).parents[1] / "_sandbox_server.py"  # in colbench_gym/execution/
# Read once, with this module: a process keeps starting servers that speak its own protocol, even if
# the file changes on disk while it runs (an upgrade under a long training job).
_SERVER_SOURCE = _SERVER_SOURCE_PATH.read_text(encoding="utf-8")
# Control messages, as in _sandbox_server.py: op + job id to the server; exit records back.
_MESSAGE = struct.Struct("<cQ")
_EXIT = struct.Struct("<cQidqqddi")


def _decode_control(data: bytes) -> dict[str, Any]:
    if data[:1] == b"{":
        try:
            return json.loads(data)
        except ValueError:
            return {"ev": "garbled"}
    if len(data) == _EXIT.size and data[:1] == b"x":
        _, job, status, cpu, rss, faults, fork_s, clean_s, cleaned = _EXIT.unpack(data)
        return {
            "ev": "exit",
            "job": job,
            "status": None if status == -1 else status,
            "cpu_s": cpu,
            "max_rss_kb": rss,
            "minor_faults": faults,
            "fork_s": fork_s,
            "clean_s": clean_s,
            "cleaned": cleaned,
        }
    return {"ev": "garbled"}


# Compiling answers and test calls here, for children whose interpreter has our bytecode: the
# compiler's work -- and the fresh memory it writes, each page a copy-on-write fault in a forked
# child -- is then done in a warm process, and a task's calls once for all its answers. Parsing
# model-written code in this process is nothing new (extract_code does), and nothing compiled here
# runs here. Compiled exactly as the child would (no inherited flags, no -O), with the child's file
# names; anything the compiler rejects or warns about goes to the child as source, which then
# reports it as before.
# Only short code is compiled here: compiling takes time and memory that grow with the source (1 MiB of
# statements: seconds and hundreds of MB, holding the GIL), which a child spends under its own limits
# and deadline instead. ColBench answers are a few KiB.
warnings.filterwarnings("error", module="<answer>")
warnings.filterwarnings("error", module="<test>")
_COMPILE_HERE_MAX = 16 << 10  # characters
_CALL_CACHE: dict[str, Any] = {}
_CALL_CACHE_SIZE = 1 << 16


def _compiled(code: str) -> Any:
    if len(code) > _COMPILE_HERE_MAX:
        return code
    try:
        return compile(code, "<answer>", "exec", dont_inherit=True, optimize=0)
    except BaseException:  # noqa: BLE001 (SyntaxError, a warning made an error, MemoryError, RecursionError)
        return code


def _compiled_call(call: str) -> Any:
    if len(call) > _COMPILE_HERE_MAX:
        return call
    found = _CALL_CACHE.get(call)
    if found is None:
        try:
            found = compile(call, "<test>", "eval", dont_inherit=True, optimize=0)
        except BaseException:  # noqa: BLE001
            found = call
        if len(_CALL_CACHE) >= _CALL_CACHE_SIZE:
            _CALL_CACHE.clear()
        _CALL_CACHE[call] = found
    return found
