"""Fork server and test harness that run *inside* the sandbox.

This file is never imported by the grader: :mod:`colbench_gym.execution.sandbox` reads it as text and
starts it as ``python -s -P -c <source> <config-json>`` in a fresh interpreter (under bubblewrap when
available). It uses the standard library only.

The server warms up once (common modules imported, ``gc.freeze()``), then loops over commands from the
grader on a ``SOCK_SEQPACKET`` control socket:

A run command (op ``r`` and a job id, see ``_MESSAGE``) comes with three descriptors attached
(``SCM_RIGHTS``): the read end of a payload pipe, the write ends of a result pipe and of an output
pipe. The server forks a child and closes its copies at once; the child (never the server) reads
the payload -- the code and the test calls -- so no code, reference or candidate, ever enters the
server's memory, where a later child could find it. The child applies its resource limits, runs
the code and every test call, and writes one frame per event to the result pipe, which leads
straight back to the grader. Meanwhile the server waits in ``wait4`` and nothing else. When the
child is gone the server kills every process left in the sandbox, empties the work directory (and,
inside bubblewrap, /tmp where children can write it, /dev/shm and /dev/mqueue) and removes every
System V IPC object when its IPC namespace is private (always inside bubblewrap; without it only if
it could make one, i.e. as root) -- after a cheap check of whether there is anything to remove at
all (see ``_Server.clean_up``) -- and reports an exit record (``_EXIT``: job id, wait status, CPU
time, memory, page faults, and its own CPU time in ``fork()`` and in the clean-up). Nothing a child
leaves behind reaches the next one. Run commands that arrive meanwhile wait in the socket: the
grader sends the next job while a child runs, so the server forks it at once.

Kill requests come apart from the control socket: the grader writes a job id on a kill pipe and
sends SIGURG, which interrupts ``wait4``; the handler kills the running child (and everything it
started) if its job is one of those asked for, or kills that job's child as soon as it is forked.
``s`` on the control socket stops the server.

The server makes itself non-dumpable (``PR_SET_DUMPABLE`` 0) before anything else: its children
often share its user id, and without that they could open ``/proc/<server>/mem`` (or ptrace it) and
rewrite the server -- hence every later child, references included. Children inherit the flag.

The payload is an 8-byte length, then ``marshal.dumps((nonce, [(code, [call, ...]), ...], cpu_budget))``
(made by the grader, read by the child only; ``marshal`` costs the child far fewer allocations than JSON): an answer
is one unit; a batch of references is several, run one after the other in fresh namespaces. ``cpu_budget`` is what
is left of an answer's grading budget in whole seconds (0: none); the child's ``RLIMIT_CPU`` is then at most that. The code and
the calls are source text, or code objects the grader compiled from it when its interpreter's
bytecode is the sandbox's (the hello says which): compiling, and above all the memory the compiler
touches, then costs the child nothing.

Result frames: ``MAGIC + nonce(16 bytes) + length(4 bytes, little-endian) + JSON body``. First
``["start"]``, once the child is set up and before any code runs: an exit before it is the
sandbox's failure (status 71: the child could not set itself up), after it the code's. For each
unit: ``["ready"]`` once its code is defined, or ``["setup", kind, detail]`` if that failed;
``["ok", i, value]``, ``["err", i, exception_type, message]``, ``["mem", i, message]``,
``["unser", i, reason]``, ``["big", i, size]``, ``["fsz", i, exception_type, message]`` (a file
write over the size limit) for its test ``i``. ``["done"]`` after the last unit.
Values are encoded into plain JSON with type tags (see :func:`_make_encoder`); the grader decodes
them into plain objects of its own (built-ins, a few standard-library types) and compares there,
so nothing a candidate returns is ever compared by the candidate's own ``__eq__``.
"""

# The modules marked F401 are not used here: they are the ones ColBench answers import most,
# imported once by the server so that every forked child shares them.
import bisect  # noqa: F401
import builtins
import collections
import copy  # noqa: F401
import datetime
import decimal
import errno
import fractions
import functools  # noqa: F401
import gc
import heapq  # noqa: F401
import importlib.machinery
import itertools  # noqa: F401
import json
import marshal
import math  # noqa: F401
import operator  # noqa: F401
import os
import re
import resource
import signal
import socket
import stat
import string  # noqa: F401
import struct
import sys
import time
import typing  # noqa: F401

MAGIC = b"CBF1"
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set on every class defined in Python code


class _Unencodable(Exception):
    pass


# One encoder for every frame: ASCII only, NaN/Infinity allowed, no cycle check (encoded values
# are trees of bounded depth by construction).
_JSON_ENCODE = json.JSONEncoder(ensure_ascii=True, allow_nan=True, check_circular=False, separators=(",", ":")).encode


class _TooLarge(Exception):
    pass


def _make_encoder(max_depth, max_items, max_bytes):
    """Return ``encode(value)`` -> JSON-able tagged structure.

    Exact built-in scalars are JSON scalars; containers are lists whose first item is a tag
    (``l`` list, ``t`` tuple, ``s`` set, ``f`` frozenset, ``d`` dict as flat key/value pairs,
    ``I`` big int in hex, ``c`` complex, ``b`` bytes, ``B`` bytearray). Standard-library values
    whose equality is not that of their ``repr`` have tags of their own, so that the grader rebuilds
    them and compares them as Python does: ``D`` Decimal (``Decimal('1.50') == 1.5``), ``Q``
    Fraction, ``C`` Counter (zero counts), ``O`` OrderedDict (order matters between two of them),
    ``r`` range (``range(0) == range(5, 5)``), ``DT`` datetime, ``DA`` date, ``TM`` time, ``TD``
    timedelta and ``TZ`` fixed-offset timezone (aware values compare as instants; any other tzinfo
    is carried as the offset and name it gives for the value). Anything else is ``o``: ``[type
    name, repr]``, or ``i`` when the type compares by identity and the repr shows an address (a
    bare ``object()``, a function, a generator): such a value never equals another, as in-process,
    however alike two children's addresses are.

    Subclasses of built-in types are read through the base type's own slots, so a subclass that
    overrides ``__eq__``/``__iter__``/``__repr__`` is encoded by what it really holds; the same goes
    for the fields of the standard-library types above. NumPy arrays and scalars (genuine C types
    only) are read with ``tolist()``. The built-ins used are bound here, before any candidate code runs.
    """
    _type, _int, _float, _str, _bool = type, int, float, str, bool
    _list, _tuple, _dict, _set, _frozenset = list, tuple, dict, set, frozenset
    _bytes, _bytearray, _complex, _memoryview = bytes, bytearray, complex, memoryview
    _isinstance, _repr, _format, _none_type, _len = isinstance, repr, format, type(None), len
    _int_index, _float_float, _str_str = int.__index__, float.__float__, str.__str__
    _int_bit_length = int.bit_length
    _list_iter, _tuple_iter = list.__iter__, tuple.__iter__
    _set_iter, _frozenset_iter = set.__iter__, frozenset.__iter__
    _dict_items = dict.items
    _complex_real, _complex_imag = complex.real.__get__, complex.imag.__get__
    _type_module = type.__dict__["__module__"].__get__
    _type_qualname = type.__dict__["__qualname__"].__get__
    _type_flags = type.__dict__["__flags__"].__get__
    _type_mro = type.__dict__["__mro__"].__get__
    _type_dict = type.__dict__["__dict__"].__get__
    _object = object
    _range = range
    _range_fields = (range.start.__get__, range.stop.__get__, range.step.__get__)
    _Decimal, _decimal_str, _decimal_adjusted = decimal.Decimal, decimal.Decimal.__str__, decimal.Decimal.adjusted
    _Fraction = fractions.Fraction
    _fraction_fields = (fractions.Fraction.numerator.fget, fractions.Fraction.denominator.fget)
    _Counter, _OrderedDict, _ordered_items = collections.Counter, collections.OrderedDict, collections.OrderedDict.items
    _date, _datetime, _time = datetime.date, datetime.datetime, datetime.time
    _timedelta, _timezone = datetime.timedelta, datetime.timezone
    _date_fields = tuple(getattr(_date, name).__get__ for name in ("year", "month", "day"))
    _clock = ("hour", "minute", "second", "microsecond", "fold")
    _datetime_fields = tuple(getattr(_datetime, name).__get__ for name in _clock)
    _time_fields = tuple(getattr(_time, name).__get__ for name in _clock)
    _datetime_zone = (_datetime.utcoffset, _datetime.tzname)
    _time_zone = (_time.utcoffset, _time.tzname)
    _timedelta_fields = tuple(getattr(_timedelta, name).__get__ for name in ("days", "seconds", "microseconds"))
    _timezone_zone = (_timezone.utcoffset, _timezone.tzname)
    # Larger values go as opaque ones: the grader rebuilds and compares these in bounded time (the
    # same bounds are in codec.py: MAX_DECIMAL_DIGITS, MAX_DECIMAL_EXPONENT, MAX_EXACT_BITS).
    max_decimal_digits, max_decimal_exponent, max_exact_bits = 10_000, 10_000, 1 << 16
    big = 1 << 62
    budget = [0, 0]  # items, approximate bytes of text

    def type_name(t):
        try:
            return f"{_type_module(t)}.{_type_qualname(t)}"
        except Exception:  # noqa: BLE001
            return "?"

    def compares_by_identity(t):
        for klass in _type_mro(t):
            if "__eq__" in _type_dict(klass):
                return klass is _object
        return True

    def zone(offset, name):
        """``["TZ", timedelta, name]`` for a utcoffset() result; None (naive) for None."""
        if offset is None:
            return None
        if _type(offset) is not _timedelta:
            raise TypeError("utcoffset() did not return a timedelta")
        if _type(name) is not _str or _len(name) > 100:
            name = None
        return ["TZ", ["TD", *[field(offset) for field in _timedelta_fields]], name]

    def standard(x, t, d):
        """The tagged form of a standard-library value, or None for anything else (or a value
        whose fields are not what its type promises: it is then carried as an opaque value)."""
        if t is _range:
            fields = [field(x) for field in _range_fields]
            if sum(_int_bit_length(field) for field in fields) > max_exact_bits:
                return None
            return ["r", *[enc(field, d) for field in fields]]
        if _isinstance(x, _Decimal):
            text = _decimal_str(x)
            if _len(text) > max_decimal_digits or not -max_decimal_exponent <= _decimal_adjusted(x) <= max_decimal_exponent:
                return None
            budget[1] += _len(text)
            return ["D", text]
        if _Fraction in _type_mro(t):  # not isinstance: Fraction is an ABC, open to register()
            numerator, denominator = (field(x) for field in _fraction_fields)
            if (
                _type(numerator) is _int
                and _type(denominator) is _int
                and denominator > 0
                and _int_bit_length(numerator) + _int_bit_length(denominator) <= max_exact_bits
            ):
                return ["Q", enc(numerator, d), enc(denominator, d)]
            return None
        try:
            if _isinstance(x, _datetime):
                offset, name = (method(x) for method in _datetime_zone)
                fields = [field(x) for field in _date_fields + _datetime_fields]
                return ["DT", *fields, zone(offset, name)]
            if _isinstance(x, _date):
                return ["DA", *[field(x) for field in _date_fields]]
            if _isinstance(x, _time):
                offset, name = (method(x) for method in _time_zone)
                return ["TM", *[field(x) for field in _time_fields], zone(offset, name)]
            if _isinstance(x, _timedelta):
                return ["TD", *[field(x) for field in _timedelta_fields]]
            if t is _timezone:
                return zone(*(method(x, None) for method in _timezone_zone))
        except Exception:  # noqa: BLE001 (a tzinfo that fails or lies: carried as an opaque value)
            return None
        for tag, mapping, items in (("C", _Counter, _dict_items), ("O", _OrderedDict, _ordered_items)):
            if _isinstance(x, mapping):
                out = [tag]
                for k, v in items(x):
                    out += (enc(k, d), enc(v, d))
                return out
        return None

    def enc(x, depth):
        budget[0] += 1
        if budget[0] > max_items:
            raise _Unencodable(f"return value has more than {max_items} items")
        if depth > max_depth:
            raise _Unencodable(f"return value is nested deeper than {max_depth} levels")
        t = _type(x)
        if t is _str:
            budget[1] += _len(x)
            if budget[1] > max_bytes:
                raise _TooLarge(budget[1])
            return x
        if t is _bool or t is _none_type or t is _float:
            return x
        if t is _int:
            return x if -big < x < big else ["I", _format(x, "x")]
        d = depth + 1
        if t is _list:
            return ["l", *[enc(v, d) for v in x]]
        if t is _tuple:
            return ["t", *[enc(v, d) for v in x]]
        if t is _dict:
            out = ["d"]
            for k, v in x.items():
                out.append(enc(k, d))
                out.append(enc(v, d))
            return out
        if t is _set:
            return ["s", *[enc(v, d) for v in x]]
        if t is _frozenset:
            return ["f", *[enc(v, d) for v in x]]
        if t is _complex:
            return ["c", x.real, x.imag]
        if t is _bytes or t is _bytearray:
            budget[1] += 2 * _len(x)
            if budget[1] > max_bytes:
                raise _TooLarge(budget[1])
            return ["b" if t is _bytes else "B", x.hex()]
        tagged = standard(x, t, d)
        if tagged is not None:
            return tagged
        # Subclasses of built-ins (namedtuple, OrderedDict, IntEnum, numpy.float64, ...): read the
        # stored data through the base type, never through methods the subclass may override.
        if _isinstance(x, _bool):
            return _bool(_int_index(x))
        if _isinstance(x, _int):
            return enc(_int_index(x), depth)
        if _isinstance(x, _float):
            return _float_float(x)
        if _isinstance(x, _str):
            return enc(_str_str(x), depth)
        if _isinstance(x, _complex):
            return ["c", _complex_real(x), _complex_imag(x)]
        if _isinstance(x, _bytes):
            return enc(_bytes(_memoryview(x)), depth)
        if _isinstance(x, _bytearray):
            return enc(_bytearray(_memoryview(x)), depth)
        if _isinstance(x, _list):
            return ["l", *[enc(v, d) for v in _list_iter(x)]]
        if _isinstance(x, _tuple):
            return ["t", *[enc(v, d) for v in _tuple_iter(x)]]
        if _isinstance(x, _dict):
            out = ["d"]
            for k, v in _dict_items(x):
                out.append(enc(k, d))
                out.append(enc(v, d))
            return out
        if _isinstance(x, _set):
            return ["s", *[enc(v, d) for v in _set_iter(x)]]
        if _isinstance(x, _frozenset):
            return ["f", *[enc(v, d) for v in _frozenset_iter(x)]]
        flags = _type_flags(t)
        module = _type_module(t)
        if module == "numpy" and not flags & _HEAPTYPE:
            tolist = getattr(t, "tolist", None)
            if tolist is not None:
                return enc(tolist(x), depth)
        try:
            text = _repr(x)
        except Exception as exc:  # noqa: BLE001
            raise _Unencodable(f"repr() of {type_name(t)} failed: {_type(exc).__name__}") from None
        if _type(text) is not _str:
            raise _Unencodable(f"repr() of {type_name(t)} did not return a str")
        budget[1] += _len(text)
        if budget[1] > max_bytes:
            raise _TooLarge(budget[1])
        if " at 0x" in text and compares_by_identity(t):
            return ["i", type_name(t), text]
        return ["o", type_name(t), text]

    def encode(x):
        budget[0] = budget[1] = 0
        return enc(x, 0)

    return encode


def _describe(exc):
    """``"Type: message"`` for an exception, never raising (``str()`` may run candidate code)."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001
        text = "<str() failed>"
    return name, text[:500]


def _child(cfg, fds, null_fd):
    """Body of one forked child: limits, then the harness. Never returns."""
    _exit = os._exit
    payload_fd, result_fd, output_fd = fds
    try:
        os.setsid()
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.dup2(null_fd, 0)
        if result_fd != _RESULT_FD:
            if payload_fd == _RESULT_FD:
                payload_fd = os.dup(payload_fd)
            os.dup2(result_fd, _RESULT_FD)
        # The payload (8-byte length, then the grader's marshal data), read before anything else is
        # closed; no code has run yet.
        chunks = [os.read(payload_fd, 1 << 16)]
        got, size = len(chunks[0]), None
        while True:
            if size is None and got >= 8:
                first = chunks[0] if len(chunks[0]) >= 8 else b"".join(chunks)
                size = 8 + int.from_bytes(first[:8], "little")
            if size is not None and got >= size:
                break
            chunk = os.read(payload_fd, 1 << 16)
            if not chunk:
                _exit(71)
            chunks.append(chunk)
            got += len(chunk)
        # Close every other descriptor (the control socket above all) before any code runs.
        os.closerange(_RESULT_FD + 1, 1 << 20)
        if cfg["drop_uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["drop_gid"])
            os.setuid(cfg["drop_uid"])
        if _LIBC is not None:
            # setuid() reset the flag to fs.suid_dumpable: keep other sandboxes' children out of this one.
            _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            if _SERVER_PID != 1:
                # Without a PID namespace of our own, nothing else kills this child if the server
                # dies (set after setuid, which clears it).
                _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != _SERVER_PID:
                    _exit(73)
        os.chdir(cfg["workdir"])
        nonce, units, cpu_budget = marshal.loads(memoryview(chunks[0] if len(chunks) == 1 else b"".join(chunks))[8:size])
        for which, value in _LIMITS:  # the child's own; the rest are the server's, inherited
            resource.setrlimit(which, (value, value))
        cpu = int(_CPU_PER_TEST_S * sum(len(tests) + 1 for _, tests in units)) + 1
        if cpu_budget:  # what is left of the answer's CPU budget (whole seconds, at least 1)
            cpu = min(cpu, cpu_budget)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if _RANDOM is not None:  # imported in the server: it re-seeds itself from urandom after fork
            _RANDOM.seed(0)
    except BaseException:  # noqa: BLE001
        _exit(71)
    _harness(units, _RESULT_FD, nonce, cfg, _ENCODE)
    _exit(0)


def _harness(units, result_fd, nonce, cfg, encode, exit_when_done=True):
    """For each unit ``(code, calls)``: define the code in a fresh namespace, evaluate every call
    in it (one namespace per unit, as ColBench does), report each result. Between units the
    builtins are restored, so one unit's monkeypatching does not leak into the next."""
    _write, _pack, _dumps, _len = os.write, struct.pack, _JSON_ENCODE, len
    _exit, _stdout_flush, _stderr_flush = os._exit, sys.stdout.flush, sys.stderr.flush
    _MemoryError, _BaseException, _compile, _eval = MemoryError, BaseException, compile, eval
    _code_type = type(_harness.__code__)
    _OSError, _EFBIG = OSError, errno.EFBIG
    max_bytes = cfg["max_result_bytes"]
    head = MAGIC + nonce
    builtins_dict = builtins.__dict__
    pristine_builtins = dict(builtins_dict) if _len(units) > 1 else None

    def send_data(data):
        frame = head + _pack("<I", _len(data)) + data
        view = memoryview(frame)
        while view:
            try:
                view = view[_write(result_fd, view):]
            except _BaseException:
                _exit(72)

    def send(body):
        send_data(_dumps(body).encode("ascii"))

    def flush_output():
        try:
            _stdout_flush()
            _stderr_flush()
        except _BaseException:
            pass

    # Before any code runs: from here on, whatever ends this process is the code's doing.
    send_data(b'["start"]')
    for unit_index, (code, tests) in enumerate(units):
        if unit_index and pristine_builtins is not None:
            builtins_dict.clear()
            builtins_dict.update(pristine_builtins)
        namespace = {"__name__": "__colbench__", "__builtins__": builtins}
        try:
            exec(code if type(code) is _code_type else _compile(code, "<answer>", "exec"), namespace)
        except _MemoryError as exc:
            flush_output()
            send(["setup", "mem", "%s: %s" % _describe(exc)])
            continue
        except _BaseException as exc:
            flush_output()
            send(["setup", "err", "%s: %s" % _describe(exc)])
            continue
        flush_output()
        send_data(b'["ready"]')
        for index, call in enumerate(tests):
            try:
                value = _eval(call if type(call) is _code_type else _compile(call, "<test>", "eval"), namespace)
            except _MemoryError as exc:
                flush_output()
                send(["mem", index, "%s: %s" % _describe(exc)])
                continue
            except _OSError as exc:
                flush_output()
                name, text = _describe(exc)
                # EFBIG: a write went past RLIMIT_FSIZE (Python ignores SIGXFSZ, so it surfaces here).
                send(["fsz" if exc.errno == _EFBIG else "err", index, name, text])
                continue
            except _BaseException as exc:
                flush_output()
                name, text = _describe(exc)
                send(["err", index, name, text])
                continue
            flush_output()
            try:
                body = _dumps(["ok", index, encode(value)])
            except _Unencodable as exc:
                send(["unser", index, str(exc.args[0])[:300]])
                continue
            except _TooLarge as exc:
                send(["big", index, exc.args[0]])
                continue
            except _MemoryError:
                send(["big", index, -1])
                continue
            except _BaseException as exc:
                send(["unser", index, "%s: %s" % _describe(exc)])
                continue
            if _len(body) > max_bytes:
                send(["big", index, _len(body)])
                continue
            send_data(body.encode("ascii"))
    send_data(b'["done"]')
    if exit_when_done:
        _exit(0)


def _empty_directory(root, keep=None):
    """Delete everything under ``root`` (except the entry named ``keep``), never crossing into
    another file system (bind mounts under /tmp), never following a symbolic link.

    Iterative, with two descriptors open at most: a directory's subdirectories are moved up to
    ``root`` before it is removed, so a tree of any depth or path length -- an answer may build
    one on purpose -- is removed without recursion. A directory the answer made unreadable is
    made readable again first (the wiping user owns everything the children made).
    """
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        device = os.fstat(root_fd).st_dev
        with os.scandir(root_fd) as entries:
            queue = [entry.name for entry in entries if entry.name != keep]
        taken = set(queue)
        taken.add(keep)
        serial = 0
        while queue:
            name = queue.pop()
            try:
                info = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != device:
                continue
            if not stat.S_ISDIR(info.st_mode):
                try:
                    os.unlink(name, dir_fd=root_fd)
                except OSError:
                    pass
                continue
            folder = _open_directory(name, root_fd, info.st_mode)
            if folder is None:
                continue
            try:
                with os.scandir(folder) as entries:
                    inside = [entry.name for entry in entries]
                for child in inside:
                    try:
                        info = os.stat(child, dir_fd=folder, follow_symlinks=False)
                        if info.st_dev != device:
                            continue
                        if stat.S_ISDIR(info.st_mode):
                            if info.st_mode & 0o200 == 0:  # moving a directory rewrites its ".."
                                os.chmod(child, 0o700, dir_fd=folder)
                            while f".wipe{serial}" in taken:
                                serial += 1
                            moved = f".wipe{serial}"
                            os.rename(child, moved, src_dir_fd=folder, dst_dir_fd=root_fd)
                            taken.add(moved)
                            queue.append(moved)
                        else:
                            os.unlink(child, dir_fd=folder)
                    except OSError:
                        pass
            finally:
                os.close(folder)
            try:
                os.rmdir(name, dir_fd=root_fd)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(root_fd)


def _open_directory(name, parent_fd, mode):
    """A descriptor of the directory ``name`` (a directory, not a link: checked by the caller),
    first made readable and writable by its owner if the answer took that away; None on failure."""
    try:
        if mode & 0o700 != 0o700:
            os.chmod(name, 0o700, dir_fd=parent_fd)
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError:
        return None


def _entry_counting(roots):
    """For each root: whether it lies on a file system that counts entries in a directory's size
    (from ``/proc/self/mountinfo``: the last mount on the longest mount point above it)."""
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return [False] * len(roots)
    mounts = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) >= 5 and kind:
            point = re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), fields[4])
            mounts.append((point, kind[0]))
    found = []
    for root in roots:
        path = os.path.realpath(root)
        best = None
        for point, kind in mounts:
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(best[0])):
                best = (point, kind)
        found.append(best is not None and best[1] in _ENTRY_COUNTING)
    return found


def _is_empty(root, keep=None):
    """Whether ``root`` holds nothing but ``keep`` (False if it cannot be read)."""
    try:
        with os.scandir(root) as entries:
            return all(entry.name == keep for entry in entries)
    except OSError:
        return False


_IPC_RMID = 0


def _remove_sysv_ipc():
    """Remove every System V shared memory segment, semaphore set and message queue in sight.

    Only called where the IPC namespace is the sandbox's own (bubblewrap's ``--unshare-ipc``, or
    one the server made for itself), so everything in it was made by a child. A segment still
    attached somewhere is freed once detached; every child is dead by now anyway.
    """
    if _LIBC is None:
        return
    for kind, remove in (("shm", _LIBC.shmctl), ("sem", _LIBC.semctl), ("msg", _LIBC.msgctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines[1:]:
            fields = line.split()
            if len(fields) < 2 or not fields[1].isdigit():
                continue
            if kind == "sem":
                remove(int(fields[1]), 0, _IPC_RMID)
            else:
                remove(int(fields[1]), _IPC_RMID, None)


# The *_INFO commands of shmctl/semctl/msgctl count the objects of the caller's IPC namespace:
# (command, index of the count among the C ints of the struct it fills). shm_info.used_ids,
# seminfo.semusz, msginfo.msgpool.
_IPC_COUNTS = ((14, 0), (19, 7), (12, 0))
_IPC_BUFFER = None  # ctypes buffer for them, made by _main


def _sysv_ipc_in_use():
    """Whether any System V IPC object exists in this IPC namespace: three system calls, where
    reading ``/proc/sysvipc`` costs thirty times more. True when it cannot tell (no ctypes, a
    call that fails and leaves the count as it was set: -1)."""
    if _LIBC is None or _IPC_BUFFER is None:
        return True
    counts = _IPC_BUFFER[1]
    for (command, index), call in zip(_IPC_COUNTS, (_LIBC.shmctl, _LIBC.semctl, _LIBC.msgctl)):
        counts[index] = -1
        try:
            if command == 19:
                call(0, 0, command, _IPC_BUFFER[0])
            else:
                call(0, command, _IPC_BUFFER[0])
        except Exception:  # noqa: BLE001
            return True
        if counts[index] != 0:
            return True
    return False


# Control messages. Grader -> server: op (b"r" run, b"s" stop) + job id; a run carries three
# descriptors. (Kill requests come on their own pipe, with SIGURG: see _Server.on_kill.) Server -> grader: a JSON hello once, then one exit record per job:
# b"x", job id, wait status (-1: none), child CPU seconds, max RSS (KiB), minor page faults, and the
# server's own CPU seconds for this job: in fork(), and in the clean-up after the child (reaping
# included); the last field says what the clean-up had to do (bit 1: files, bit 2: IPC objects).
_MESSAGE = struct.Struct("<cQ")
_EXIT = struct.Struct("<cQidqqddi")
_FDS_SPACE = socket.CMSG_SPACE(4 * 4)  # room for the descriptors of one message (three, and one more to notice)
# File systems whose directories count their entries in their size (tmpfs: 20 bytes per entry,
# mqueue likewise), so that an unchanged size proves an unchanged number of entries.
_ENTRY_COUNTING = frozenset({"tmpfs", "mqueue"})


class _Server:
    """The fork server's loop. Kept lean: after every fork each page it writes is a page fault."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.ctl = socket.socket(fileno=cfg["ctl_fd"])
        self.ctl_fd = self.ctl.fileno()
        # Kill requests: job ids on a pipe from the grader, which then sends SIGURG (see on_kill).
        self.kill_fd = cfg["kill_fd"]
        os.set_blocking(self.kill_fd, False)
        self.job = 0  # the job being run (or last run)
        self.child = 0  # its child's pid while it lives
        self.kill_upto = 0  # every job up to this one is to be killed
        self.pid1 = os.getpid() == 1
        self.workdir = cfg["workdir"]
        # Directories emptied after every child: the work directory, the private /tmp when
        # children can write it, and (inside bubblewrap) the sandbox's own /dev/shm and /dev/mqueue.
        self.wipe_roots = [self.workdir]
        if cfg["wipe_tmp"]:
            self.wipe_roots.append("/tmp")
        self.wipe_roots += cfg.get("wipe_dirs", [])
        self.keep = {os.path.dirname(self.workdir): os.path.basename(self.workdir)}
        # What the wiped directories looked like after the last clean-up, when it left them empty
        # (None: wipe after every child); only for those on an entry-counting file system.
        self.checkable = _entry_counting(self.wipe_roots)
        self.clean_states = [None] * len(self.wipe_roots)
        self.drop_uid = cfg["drop_uid"]
        self.private_ipc = _PRIVATE_IPC
        self.null_fd = os.open(os.devnull, os.O_RDONLY)

    # -- control channel -------------------------------------------------
    def recv(self):
        """``(op, job, fds)``; op is None when the grader is gone."""
        try:
            data, ancillary, _flags, _addr = self.ctl.recvmsg(64, _FDS_SPACE)
        except OSError:
            return None, 0, []
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += [int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True) for i in range(0, len(payload) - 3, 4)]
        if not data:
            return None, 0, fds
        if len(data) != _MESSAGE.size:
            return b"?", 0, fds
        op, job = _MESSAGE.unpack(data)
        return op, job, fds

    def on_kill(self, signum, frame):
        """SIGURG from the grader: read its kill requests, kill the child if it is one of them.

        The server waits for its child in ``wait4`` alone (no poll, no pidfd: less work, and
        fewer pages written while the child shares them); the grader interrupts it this way. A
        request for a job the server has not forked yet kills that job's child as soon as it is
        forked; one for a job gone by is void."""
        while True:
            try:
                data = os.read(self.kill_fd, 4096)
            except OSError:  # nothing more (or the grader is gone)
                break
            if not data:
                break
            for start in range(0, len(data) - 7, 8):
                self.kill_upto = max(self.kill_upto, int.from_bytes(data[start : start + 8], "little"))
        if self.child and self.kill_upto >= self.job:
            self.kill_all(self.child)

    def send(self, data):
        try:
            self.ctl.send(data)
        except OSError:
            self.shutdown()

    # -- processes ---------------------------------------------------------
    def kill_all(self, child):
        """SIGKILL the child and every process it left behind; False if there was none."""
        if self.pid1:
            # As PID 1 of the sandbox's own PID namespace, kill(-1) reaches every other process in
            # the sandbox and nothing outside it. (Through the C library when there is one: no
            # exception object for the usual answer, that nobody is left.)
            if _LIBC is not None:
                return _LIBC.kill(-1, signal.SIGKILL) == 0
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                return False
            return True
        found = False
        if child:
            try:
                os.killpg(child, signal.SIGKILL)
                found = True
            except OSError:
                pass
        for pid in self.children():
            found = True
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        return found

    def children(self):
        """Direct children (orphans are re-parented here: we are a child subreaper)."""
        found = []
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/children") as handle:
                    found.extend(int(p) for p in handle.read().split())
        except OSError:
            pass
        return found

    def reap_everything(self, child):
        """Kill and reap every process the child left, until a kill finds nobody."""
        for _ in range(10000):
            found = self.kill_all(child)
            if _LIBC is not None:
                while _LIBC.waitpid(-1, None, 0) > 0:
                    pass
            else:
                try:
                    while True:
                        os.waitpid(-1, 0)
                except ChildProcessError:
                    pass
            if not found:
                return

    def root_states(self):
        """``stat`` of each wiped directory: any entry made or removed changes its size (on the
        entry-counting file systems the check is used on) and its ctime, a change of its mode or
        owner is there, and so is its identity."""
        states = []
        for root in self.wipe_roots:
            try:
                info = os.stat(root, follow_symlinks=False)
            except OSError:
                states.append(None)
                continue
            states.append((info.st_dev, info.st_ino, info.st_mode, info.st_uid, info.st_gid, info.st_nlink,
                           info.st_size, info.st_mtime_ns, info.st_ctime_ns))
        return states

    def clean_up(self):
        """Leave nothing of the last child for the next: files in the wiped directories, System V
        IPC objects. Done under the children's user id when they have their own (inside bubblewrap
        the server keeps no capability that would let it delete another user's files).

        Most children touch none of it, so first a cheap check. A wiped directory is emptied unless
        it was left empty by the last clean-up, lies on a file system that counts a directory's
        entries in its size (tmpfs, mqueue: inside bubblewrap, all of them), and its ``stat`` is
        unchanged since: the same number of entries as when it was empty (only the work directory
        in ``/tmp``, itself checked on its own identity), the same mode and owner, and no change
        since that its ctime can show. IPC objects are removed when any exist (their counts, from
        three system calls). Returns what it had to do: bit 1 files, bit 2 IPC objects."""
        states = self.root_states()
        dirty = [
            root for root, now, then in zip(self.wipe_roots, states, self.clean_states)
            if now is None or now != then
        ]
        ipc = self.private_ipc and _sysv_ipc_in_use()
        if not dirty and not ipc:
            return 0
        as_child = self.drop_uid is not None and os.geteuid() == 0
        if as_child:
            try:
                os.seteuid(self.drop_uid)
            except OSError:
                as_child = False
        try:
            for root in dirty:
                _empty_directory(root, self.keep.get(root))
            if ipc:
                _remove_sysv_ipc()
        finally:
            if as_child:
                os.seteuid(0)
                # A change of effective user id resets the dumpable flag: set it again.
                _make_undumpable(_LIBC)
        if dirty:
            states = self.root_states()
            # Only a directory left empty (but for the work directory) is trusted by the check.
            self.clean_states = [
                state if checkable and _is_empty(root, self.keep.get(root)) else None
                for root, state, checkable in zip(self.wipe_roots, states, self.checkable)
            ]
        return (1 if dirty else 0) | (2 if ipc else 0)

    def wait_child(self, pid):
        """Wait for the child to end (a kill request interrupts the wait, see on_kill)."""
        while True:
            try:
                done, status, usage = os.wait4(pid, 0)
            except ChildProcessError:  # cannot happen: it is our child, reaped here only
                return None, None
            if done == pid:
                return status, usage

    def run(self, job, fds):
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            self.send(_EXIT.pack(b"x", job, -1, 0.0, 0, 0, 0.0, 0.0, 0))
            return
        clock = time.thread_time
        self.job = job
        before = clock()
        pid = os.fork()
        if pid == 0:
            try:
                _child(self.cfg, fds, self.null_fd)
            finally:
                os._exit(70)
        self.child = pid
        fork_s = clock() - before
        if self.kill_upto >= job:  # asked for while it was being forked
            self.kill_all(pid)
        for fd in fds:
            os.close(fd)
        status, usage = self.wait_child(pid)
        self.child = 0
        before = clock()
        self.reap_everything(pid)
        cleaned = self.clean_up()
        clean_s = clock() - before
        if usage is None:
            self.send(_EXIT.pack(b"x", job, -1, 0.0, 0, 0, fork_s, clean_s, cleaned))
            return
        cpu = usage.ru_utime + usage.ru_stime
        self.send(_EXIT.pack(b"x", job, status, cpu, usage.ru_maxrss, usage.ru_minflt, fork_s, clean_s, cleaned))

    def shutdown(self):
        self.reap_everything(None)
        os._exit(0)

    def serve(self):
        hello = {
            "ev": "hello",
            "pid": os.getpid(),
            "pid1": self.pid1,
            "uid": os.getuid(),
            "hash_randomization": sys.flags.hash_randomization,
            "dumpable": _DUMPABLE,
            "private_ipc": _PRIVATE_IPC,
            "python": sys.version.split()[0],
            "version": sys.version,  # the build too: part of the reference cache's key
            # The grader compiles code for us when its bytecode is ours (see SandboxProcess._send).
            "magic": importlib._bootstrap_external.MAGIC_NUMBER.hex(),
        }
        self.send(json.dumps(hello).encode())
        while True:
            op, job, fds = self.recv()
            if op is None or op == b"s":
                self.shutdown()
            if op == b"r":
                self.run(job, fds)
            else:
                for fd in fds:
                    os.close(fd)


def _warm_up(cfg):
    """Run the harness once on a dummy answer, so that lazily initialised interpreter state
    (parser, compiler, JSON encoder, codecs) is built here once instead of in every child, where
    each page it writes would be a copy-on-write fault."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    code = (
        "import math, re\nfrom typing import List\n\n"
        "def warm(values: List[int], text: str = 'a b') -> dict:\n"
        "    total = sum(v * 2.5 for v in values if v % 2 == 0)\n"
        "    words = re.findall(r'\\w+', text.lower())\n"
        "    return {'total': round(math.sqrt(total), 3), 'words': sorted(set(words)), 'pair': (1, None)}\n"
    )
    tests = ["warm([1, 2, 3, 4], 'Hello hello world')", "warm([])", "warm(None)"]
    try:
        _harness([(code, tests), (code, tests[:1])], write_fd, b"\0" * 16, cfg, _ENCODE, exit_when_done=False)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()


class _SeededRandomFinder:
    """Import hook: ``random`` seeds itself from ``os.urandom`` when imported; seed it with 0.

    ``random`` is deliberately not imported by the server: it registers an after-fork handler that
    re-seeds it in every child, which would cost each child a few dozen page faults. Imported in a
    child instead, it is seeded with 0 at once, so answers that use it stay reproducible.
    """

    class _SeedAfterExec:
        def __init__(self, loader):
            self.loader = loader

        def create_module(self, spec):
            return self.loader.create_module(spec)

        def exec_module(self, module):
            self.loader.exec_module(module)
            module.seed(0)

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "random":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = cls._SeedAfterExec(spec.loader)
        return spec


# Set once by _main, before any fork: children use them without building anything.
_LIMITS = ()  # set in each child: RLIMIT_NPROC (RLIMIT_CPU too, per job)
_RESULT_FD = 3  # the result pipe's descriptor in a child
_CPU_PER_TEST_S = 1.0
_ENCODE = None
_SERVER_PID = 0
_RANDOM = None  # the random module, only if the server imported it (a preload)
_DUMPABLE = None  # PR_GET_DUMPABLE of the server after _make_undumpable: 0 is what we want
_LIBC = None  # the C library through ctypes, or None
_PRIVATE_IPC = False  # whether the server's IPC namespace holds nothing but the sandbox's objects

_PR_SET_PDEATHSIG = 1
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWIPC = 0x08000000


def _load_libc():
    """The C library through ctypes, or None where that is not possible."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except Exception:  # noqa: BLE001
        return None


def _unshare_ipc(libc):
    """Move the server into an IPC namespace of its own (needs CAP_SYS_ADMIN: root without
    bubblewrap); True if it did. Its children's System V objects can then be removed after each
    one without touching anybody else's."""
    if libc is None:
        return False
    try:
        return libc.unshare(_CLONE_NEWIPC) == 0
    except Exception:  # noqa: BLE001
        return False


def _make_undumpable(libc):
    """Make this process non-dumpable; return ``PR_GET_DUMPABLE`` afterwards (None: unknown).

    Children run under the server's user id unless they drop to ``nobody``, and same-user processes
    may open each other's ``/proc/<pid>/mem`` (and ptrace each other): a hostile answer could then
    rewrite the server's memory -- swap two builtins, say -- and every later child, references
    included, would inherit the damage. The kernel refuses all of that for a non-dumpable target to
    anyone without ``CAP_SYS_PTRACE``. Children inherit the flag across ``fork``, so they cannot
    reach each other either. A change of effective user id resets it (to ``fs.suid_dumpable``): call
    this again after one. The price: a child whose user id is not root in its user namespace cannot
    open its own ``/proc/self/mem`` or ``/proc/self/environ`` either (its ``/proc`` files are then
    owned by root), as after any ``setuid``.
    """
    if libc is None:
        return None
    try:
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        return int(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))
    except Exception:  # noqa: BLE001
        return None


def _main():
    global _LIMITS, _CPU_PER_TEST_S, _ENCODE, _SERVER_PID, _RANDOM, _DUMPABLE, _LIBC, _PRIVATE_IPC, _IPC_BUFFER
    cfg = json.loads(sys.argv[1])
    sys.meta_path.insert(0, _SeededRandomFinder)
    sys.path[:] = [p for p in sys.path if p]  # never import from the working directory
    limits = cfg["limits"]
    # The limits every child has are set once in the server, once it is warm, and inherited (a
    # server within them needs nothing more); RLIMIT_NPROC is set in each child, as it limits the
    # server's own forks when it shares the children's user.
    server_limits = tuple(
        (getattr(resource, name), value)
        for name, value in (
            ("RLIMIT_CORE", 0),
            ("RLIMIT_AS", limits["address_space_bytes"]),
            ("RLIMIT_FSIZE", limits["file_size_bytes"]),
            ("RLIMIT_NOFILE", limits["open_files"]),
        )
        if value is not None and hasattr(resource, name)
    )
    _LIMITS = tuple(
        (getattr(resource, name), value)
        for name, value in (("RLIMIT_NPROC", limits["processes"]),)
        if value is not None and hasattr(resource, name)
    )
    _CPU_PER_TEST_S = float(limits["cpu_per_test_s"])
    for module in cfg.get("preload", ()):
        try:
            __import__(module)
        except Exception:  # noqa: BLE001 (not installed, or broken: the answers that need it will say so)
            pass
    _ENCODE = _make_encoder(cfg["max_depth"], cfg["max_items"], cfg["max_result_bytes"])
    _RANDOM = sys.modules.get("random")
    os.environ.pop("PWD", None)  # set by bubblewrap's --chdir; the environment stays exactly ours
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _SERVER_PID = os.getpid()
    libc = _LIBC = _load_libc()
    _DUMPABLE = _make_undumpable(libc)
    _PRIVATE_IPC = bool(cfg.get("private_ipc")) or _unshare_ipc(libc)
    if libc is not None:
        import ctypes

        buffer = ctypes.create_string_buffer(256)  # larger than shm_info, seminfo, msginfo
        _IPC_BUFFER = (buffer, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_int)))
    if os.getpid() != 1 and libc is not None:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come back to us
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the grader
    os.makedirs(cfg["workdir"], exist_ok=True)
    if cfg["drop_uid"] is not None and os.getpid() == 1:
        # Inside bubblewrap the server has no CAP_CHOWN: a world-writable (sticky) directory instead,
        # which nothing outside the sandbox can reach.
        os.chmod(cfg["workdir"], 0o1777)
    else:
        if cfg["drop_uid"] is not None:
            os.chown(cfg["workdir"], cfg["drop_uid"], cfg["drop_gid"])
        os.chmod(cfg["workdir"], 0o700)
    os.chdir(cfg["workdir"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Line-buffered, so a child's prints reach the grader (which bounds them) as they happen. Made
    # here once: children inherit them with fds 1 and 2 pointing at their own output pipe.
    sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    server = _Server(cfg)
    # SIGURG, whose default action is to be ignored: a child inherits the handler (resetting it would
    # cost every child) and behaves as by default, since the handler does nothing there.
    signal.signal(signal.SIGURG, server.on_kill)
    _warm_up(cfg)
    if _RANDOM is not None:
        _RANDOM.seed(0)
    gc.collect()
    gc.freeze()  # children never touch these pages for GC bookkeeping: cheaper copy-on-write
    for which, value in server_limits:
        resource.setrlimit(which, (value, value))
    server.serve()


if __name__ == "__main__":
    _main()
