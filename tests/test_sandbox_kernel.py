"""What a program may ask of the kernel, and what it may leave behind (issue 53): an allow-list of system calls, no
kernel object outside the program's memory limit, nothing writable but its own bounded /work, a /dev with nothing
to keep.

The filter tests read the compiled BPF programs with a small interpreter, against this file's own table of system
call numbers (from the kernel's headers), and need no sandbox. The others run programs in the shared local sandbox
(skipped where this machine cannot isolate): each attempt is one small object (one segment, one queue, one
instance), so that a sandbox that let it through fails its test without harming the machine.
"""
from __future__ import annotations

import os
import struct
import textwrap
import threading
import time
from pathlib import Path

import pytest

from reco.rewards import code as code_reward
from reco.rewards import sandbox as sandbox_module
from reco.rewards.code import grade_many, grade_program
from reco.rewards.sandbox import AUDIT_ARCH, seccomp_filter


@pytest.fixture(scope="module")
def sandbox():
    """The shared local sandbox; skipped only where this machine cannot isolate (the skip says why)."""
    try:
        grade_program("def f():\n    return 1\n", "assert f() == 1\n")
    except code_reward.SandboxUnavailable as e:
        pytest.skip(str(e))
    return code_reward._runner("local")


def attack(body: str) -> str:
    """A program whose f() runs `body` (indented into it)."""
    return "import os, sys\n\ndef f():\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


# -- the filters, read by an interpreter --------------------------------------------------------------------------

NUMBERS = {  # from <asm/unistd_64.h> and <asm-generic/unistd.h>
    "x86_64": {"shmget": 29, "shmat": 30, "semget": 64, "msgget": 68, "mq_open": 240, "memfd_create": 319,
               "memfd_secret": 447, "inotify_init1": 294, "fanotify_init": 300, "io_setup": 206, "io_uring_setup": 425,
               "timer_create": 222, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "socket": 41, "socketpair": 53,
               "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "ptrace": 101,
               "process_vm_readv": 310, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
               "chroot": 161, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
               "prctl": 157, "pipe2": 293, "epoll_create1": 291, "eventfd2": 290, "signalfd4": 289,
               "timerfd_create": 283, "pidfd_open": 434, "mknodat": 259, "open_tree": 428, "move_mount": 429,
               "fsopen": 430, "mlock": 149, "mlockall": 151, "swapon": 167, "reboot": 169, "init_module": 175,
               "personality": 135, "sync": 162, "syncfs": 306, "setpriority": 141, "sched_setaffinity": 203,
               "set_mempolicy": 238, "setxattr": 188, "fsetxattr": 190, "listxattr": 194, "clone3": 435, "read": 0,
               "write": 1, "mmap": 9, "exit_group": 231, "ioctl": 16, "fcntl": 72, "kill": 62},
    "aarch64": {"shmget": 194, "shmat": 196, "semget": 190, "msgget": 186, "mq_open": 180, "memfd_create": 279,
                "memfd_secret": 447, "inotify_init1": 26, "fanotify_init": 262, "io_setup": 0, "io_uring_setup": 425,
                "timer_create": 107, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "socket": 198, "socketpair": 199,
                "clone": 220, "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270, "unshare": 97,
                "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "bpf": 280,
                "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217, "prctl": 167, "pipe2": 59,
                "epoll_create1": 20, "eventfd2": 19, "signalfd4": 74, "timerfd_create": 85, "pidfd_open": 434,
                "mknodat": 33, "open_tree": 428, "move_mount": 429, "fsopen": 430, "mlock": 228, "mlockall": 230,
                "swapon": 224, "reboot": 142, "init_module": 105, "personality": 92, "sync": 81, "syncfs": 267,
                "setpriority": 140, "sched_setaffinity": 122, "set_mempolicy": 237, "setxattr": 5, "fsetxattr": 7,
                "listxattr": 11, "clone3": 435, "read": 63, "write": 64, "mmap": 222, "exit_group": 94, "ioctl": 29,
                "fcntl": 25, "kill": 129},
}
ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, ENOSYS, EOPNOTSUPP = (0x00050000 | e for e in (1, 38, 95))
# what makes a kernel object outside RLIMIT_AS, a process, a socket, a mount, a namespace, or reaches machine-wide
# state: refused to every program
KERNEL_OBJECTS = ["shmget", "shmat", "semget", "msgget", "mq_open", "memfd_create", "memfd_secret", "inotify_init1",
                  "fanotify_init", "io_setup", "io_uring_setup", "timer_create", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
                  "pipe2", "epoll_create1", "eventfd2", "signalfd4", "timerfd_create", "userfaultfd", "mlock", "mlockall"]
PROCESSES_AND_MOUNTS = ["socket", "socketpair", "clone", "fork", "vfork", "execve", "execveat", "ptrace",
                        "process_vm_readv", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
                        "move_mount", "fsopen", "pidfd_open", "mknodat", "prctl"]
KERNEL_ATTACK_SURFACE = ["bpf", "perf_event_open", "keyctl", "add_key", "swapon", "reboot", "init_module", "personality",
                         "sync", "syncfs", "setpriority", "sched_setaffinity", "set_mempolicy"]


def verdict(program: bytes, nr: int, arch: int, *args: int) -> int:
    """What classic BPF `program` returns for a system call (struct seccomp_data: nr, arch, ip, args[6])."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    instructions = [struct.unpack("HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc = accumulator = 0
    while True:
        code, jt, jf, k = instructions[pc]
        if code == 0x06:  # ret
            return k
        if code == 0x20:  # ld [k]
            accumulator, pc = struct.unpack_from("<I", data, k)[0], pc + 1
            continue
        if code == 0x05:  # ja k
            pc += 1 + k
            continue
        taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: accumulator & k != 0}[code]  # jeq, jge, jset
        pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_filter_is_an_allow_list(machine):
    numbers, arch = NUMBERS[machine], AUDIT_ARCH[machine]
    named = {role: {sandbox_module.SYSCALL_NUMBERS[machine].get(name) for name in calls}
             for role, calls in sandbox_module.SYSCALLS.items()}
    for role in ("program", "zygote", "server"):
        program = seccomp_filter(machine, role)
        for nr in range(0, 1024):  # every number no list names is refused, whatever the kernel's version adds
            if nr not in named[role]:
                assert verdict(program, nr, arch) == EPERM, (role, nr)
        assert verdict(program, numbers["read"], arch ^ 1) == KILL, "another architecture's calls kill"
        for name in ("read", "write", "mmap", "exit_group", "kill"):
            assert verdict(program, numbers[name], arch) == ALLOW, (role, name)
        for name in KERNEL_OBJECTS[:14] + KERNEL_ATTACK_SURFACE + ["execve", "execveat", "ptrace", "process_vm_readv",
                                                                   "setns", "pivot_root", "chroot", "socket"]:
            assert verdict(program, numbers[name], arch) == EPERM, (role, name)
        assert verdict(program, numbers["clone3"], arch) == ENOSYS, "glibc then falls back to clone"
        for name in ("setxattr", "fsetxattr", "listxattr"):
            assert verdict(program, numbers[name], arch) == EOPNOTSUPP, "no xattrs, as on a filesystem without them"
    if machine == "x86_64":
        assert verdict(seccomp_filter(machine), 0x40000000, arch) == EPERM, "the x32 ABI"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_a_programs_filter_refuses_what_makes_objects_processes_or_mounts(machine):
    numbers, arch, program = NUMBERS[machine], AUDIT_ARCH[machine], seccomp_filter(machine)
    for name in KERNEL_OBJECTS + PROCESSES_AND_MOUNTS:
        if name in numbers:  # aarch64 has no fork or vfork
            assert verdict(program, numbers[name], arch, 0x01200011) == EPERM, name
    ioctl, fcntl = numbers["ioctl"], numbers["fcntl"]
    assert verdict(program, ioctl, arch, 0, 0x5401) == ALLOW, "TCGETS: isatty"
    assert verdict(program, ioctl, arch, 0, 0xFFFFFFFF00005401) == ALLOW, "the kernel reads the command's low 32 bits"
    assert verdict(program, ioctl, arch, 0, 0x5412) == EPERM, "TIOCSTI"
    assert verdict(program, fcntl, arch, 0, 2) == ALLOW, "F_SETFD"
    for command in (5, 6, 7, 36, 37, 38, 1024, 1026, 1031):  # record locks, OFD locks, leases, dnotify, pipe size
        assert verdict(program, fcntl, arch, 0, command) == EPERM, command


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_zygote_and_the_server_have_lists_of_their_own(machine):
    numbers, arch = NUMBERS[machine], AUDIT_ARCH[machine]
    zygote, server = seccomp_filter(machine, "zygote"), seccomp_filter(machine, "server")
    fork, thread = 0x01200011, 0x003D0F00  # glibc's fork() and pthread_create()'s clone flags
    assert verdict(zygote, numbers["clone"], arch, fork) == ALLOW
    assert verdict(zygote, numbers["clone"], arch, thread) == EPERM, "the zygote starts no thread"
    assert verdict(zygote, numbers["clone"], arch, fork | 0x10000000) == EPERM, "nor namespaces through clone"
    assert verdict(zygote, numbers["unshare"], arch) == ALLOW and verdict(zygote, numbers["mount"], arch) == ALLOW
    assert verdict(zygote, numbers["prctl"], arch, 38) == ALLOW, "PR_SET_NO_NEW_PRIVS, before a program's filter"
    assert verdict(zygote, numbers["prctl"], arch, 4) == ALLOW, "PR_SET_DUMPABLE, 0 before a program's filter"
    assert verdict(zygote, numbers["prctl"], arch, 35) == EPERM, "PR_SET_MM"
    assert verdict(server, numbers["clone"], arch, thread) == ALLOW, "a dataset's tests may start a thread"
    futex = sandbox_module.SYSCALL_NUMBERS[machine]["futex"]
    assert verdict(server, futex, arch, 0, 0) == ALLOW, "and join it: pthread_join's FUTEX_WAIT is shared"
    assert verdict(zygote, futex, arch, 0, 0) == EPERM and verdict(zygote, futex, arch, 0, 128) == ALLOW
    assert verdict(server, numbers["clone"], arch, fork | 0x20000000) == EPERM
    for name in ("unshare", "mount", "prctl"):
        assert verdict(server, numbers[name], arch) == EPERM, name
    assert verdict(server, numbers["socketpair"], arch, 1) == ALLOW and verdict(server, numbers["socketpair"], arch, 2) == EPERM


def test_every_name_in_the_lists_has_a_number():
    legacy = {"open", "stat", "lstat", "access", "readlink", "mkdir", "rmdir", "unlink", "rename", "link", "symlink",
              "chmod", "utime", "utimes", "futimesat", "dup2", "select", "poll", "time", "alarm", "pause", "getpgrp"}
    for calls in sandbox_module.SYSCALLS.values():
        assert set(calls) <= set(sandbox_module.SYSCALL_NUMBERS["x86_64"])
        assert set(calls) - legacy <= set(sandbox_module.SYSCALL_NUMBERS["aarch64"])


def test_refuses_to_run_where_its_filters_cannot_be_installed(tmp_path):
    """A bwrap whose sandbox forbids prctl() (a stand-in for a kernel without seccomp filters): the zygote and the
    server cannot install their lists, so the first call raises SandboxUnavailable and no program runs."""
    try:
        real = code_reward._bwrap_path(None)
    except code_reward.SandboxUnavailable as e:
        pytest.skip(str(e))
    if os.uname().machine not in NUMBERS:
        pytest.skip(f"no system call numbers for {os.uname().machine} here")
    prctl = NUMBERS[os.uname().machine]["prctl"]
    no_prctl = tmp_path / "no-prctl.bpf"  # load the call's number; prctl: EPERM; the rest: allowed
    no_prctl.write_bytes(b"".join(struct.pack("HBBI", *i) for i in [(0x20, 0, 0, 0), (0x15, 0, 1, prctl),
                                                                    (0x06, 0, 0, EPERM), (0x06, 0, 0, ALLOW)]))
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\nexec {real} --seccomp 9 \"$@\" 9<{no_prctl}\n")
    fake.chmod(0o755)
    marker = tmp_path / "ran"
    box = code_reward.LocalSandbox(bwrap=str(fake))
    program = f"open({str(marker)!r}, 'w').write('ran')\ndef f():\n    return 1\n"
    with pytest.raises(code_reward.SandboxUnavailable, match=r"cannot start: .*prctl\(38\): Operation not permitted"):
        box.run([code_reward.Job(program, "assert f() == 1")], 5)
    assert not marker.exists()


# -- in the sandbox: calls refused, objects not made -------------------------------------------------------------

CALLS = """\
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
NUMBERS = {numbers!r}[platform.machine()]

def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(NUMBERS[name], *[ctypes.c_long(a) for a in args])
    return 'refused' if result == -1 and ctypes.get_errno() == 1 else f'result {{result}} errno {{ctypes.get_errno()}}'
"""
ATTEMPTS = [  # (what, f()'s body: each makes one small object if it is let through)
    ("SysV shared memory", "return call('shmget', 0, 4096, 0o1600)"),  # IPC_PRIVATE, IPC_CREAT | 0600
    ("SysV semaphores", "return call('semget', 0, 1, 0o1600)"),
    ("SysV message queues", "return call('msgget', 0, 0o1600)"),
    ("POSIX message queues",
     "name = ctypes.create_string_buffer(b'q')\nreturn call('mq_open', ctypes.addressof(name), 0o100 | 2, 0o600, 0)"),
    ("memfd_create", "name = ctypes.create_string_buffer(b'm')\nreturn call('memfd_create', ctypes.addressof(name), 0)"),
    ("memfd_secret", "return call('memfd_secret', 0)"),
    ("inotify", "return call('inotify_init1', 0)"),
    ("fanotify", "return call('fanotify_init', 0x200, 0)"),  # FAN_REPORT_FID: unprivileged since Linux 5.13
    ("aio (io_setup)", "ctx = ctypes.c_ulong(0)\nreturn call('io_setup', 1, ctypes.addressof(ctx))"),
    ("io_uring", "params = ctypes.create_string_buffer(120)\nreturn call('io_uring_setup', 1, ctypes.addressof(params))"),
    ("POSIX timers", "timer = ctypes.c_int(0)\nreturn call('timer_create', 1, 0, ctypes.addressof(timer))"),
    ("queued signals (rt_sigqueueinfo)",
     "info = ctypes.create_string_buffer(128)\nreturn call('rt_sigqueueinfo', 1, 34, ctypes.addressof(info))"),
    ("AF_UNIX sockets (their buffers)", "return call('socket', 1, 1, 0)"),
    ("socket pairs", "pair = (ctypes.c_int * 2)()\nreturn call('socketpair', 1, 1, 0, ctypes.addressof(pair))"),
    ("pipes (their buffers)", "pair = (ctypes.c_int * 2)()\nreturn call('pipe2', ctypes.addressof(pair), 0)"),
    ("epoll", "return call('epoll_create1', 0)"),
    ("eventfd", "return call('eventfd2', 0, 0)"),
    ("timerfd", "return call('timerfd_create', 1, 0)"),
    ("userfaultfd", "return call('userfaultfd', 0)"),
    ("mlock", "buffer = ctypes.create_string_buffer(4096)\nreturn call('mlock', ctypes.addressof(buffer), 4096)"),
    ("clearing its parent-death signal", "return call('prctl', 1, 0)"),  # PR_SET_PDEATHSIG, 0
    ("pidfd_open", "return call('pidfd_open', 1, 0)"),
    ("a FIFO (mknodat)",
     "name = ctypes.create_string_buffer(b'/work/fifo')\nreturn call('mknodat', -100, ctypes.addressof(name), 0o10600, 0)"),
    ("the new mount API (fsopen)",
     "name = ctypes.create_string_buffer(b'tmpfs')\nreturn call('fsopen', ctypes.addressof(name), 0)"),
    ("sync (the host's disks)", "return call('sync')"),
]


@pytest.mark.parametrize("body", [a[1] for a in ATTEMPTS], ids=[a[0] for a in ATTEMPTS])
def test_a_program_cannot_make_kernel_objects_outside_its_limits(sandbox, body):
    program = CALLS.format(numbers=NUMBERS) + "\ndef f():\n" + textwrap.indent(body, "    ") + "\n"
    assert grade_program(program, "assert f() == 'refused', f()", timeout_s=10) is True


PYTHON_LEVEL = [  # (what, f()'s body, what it must return)
    ("a pty (/dev/ptmx)", "try:\n    os.openpty()\nexcept OSError as e:\n    return type(e).__name__\nreturn 'opened'",
     "FileNotFoundError"),
    ("xattrs on its files", "open('x', 'w').close()\ntry:\n    os.setxattr('x', 'user.note', b'v' * 1000)\n"
     "except OSError as e:\n    return e.errno\nreturn 'set'", 95),
    ("record locks", "import fcntl\nfd = os.open('x', os.O_CREAT | os.O_RDWR)\ntry:\n"
     "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\nexcept OSError as e:\n    return e.errno\nreturn 'locked'", 1),
    ("os.memfd_create", "try:\n    os.memfd_create('m')\nexcept OSError as e:\n    return e.errno\nreturn 'made'", 1),
    ("os.pipe", "try:\n    os.pipe()\nexcept OSError as e:\n    return e.errno\nreturn 'made'", 1),
]


@pytest.mark.parametrize("body, expected", [a[1:] for a in PYTHON_LEVEL], ids=[a[0] for a in PYTHON_LEVEL])
def test_python_level_attempts_are_refused(sandbox, body, expected):
    assert grade_program(attack(body), f"assert f() == {expected!r}, f()", timeout_s=10) is True


def test_queued_signals_are_bounded_by_its_own_limit(sandbox):
    """Each queued real-time signal is a kernel object, counted against the trainer's uid through the user
    namespaces; RLIMIT_SIGPENDING, counted in the program's own user namespace, bounds them. kill() succeeds even
    when nothing more is queued, so sigtimedwait, which takes them one at a time, counts what was: at most the
    limit, plus the one a pending bit holds."""
    body = ("import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\nfor _ in range(1000):\n"
            "    os.kill(os.getpid(), signal.SIGRTMIN)\nqueued = 0\n"
            "while signal.sigtimedwait([signal.SIGRTMIN], 0) is not None:\n    queued += 1\nreturn queued")
    limit = sandbox_module.MAX_PENDING_SIGNALS
    assert grade_program(attack(body), f"assert 1 <= f() <= {limit + 1}, f()") is True


def test_the_work_tmpfs_bounds_its_inodes(sandbox):
    """`size=` does not bound a tmpfs's inodes (a million empty files took 1 GB of slab): `nr_inodes=` does."""
    body = ("made = 0\ntry:\n    for i in range(20000):\n        open(f'/work/{i}', 'w').close()\n        made += 1\n"
            "except OSError as e:\n    return made, e.errno, os.statvfs('/work').f_files\nreturn made, None, None")
    inodes = sandbox_module.WORK_INODES
    assert grade_program(attack(body), f"made, errno, files = f()\nassert made < {inodes} and errno == 28 and files == "
                                       f"{inodes}, (made, errno, files)", timeout_s=30) is True
    links = ("open('a', 'w').close()\nmade = 0\ntry:\n    for i in range(20000):\n        os.link('a', f'{i}')\n"
             "        made += 1\nexcept OSError as e:\n    return made, e.errno\nreturn made, None")
    assert grade_program(attack(links), f"made, errno = f()\nassert made < {inodes} and errno == 28, (made, errno)",
                         timeout_s=30) is True, "each hard link is a directory entry, counted as an inode"


# -- in the sandbox: the filesystem -----------------------------------------------------------------------------

WRITABLE = """\
found = []
for top, dirs, files in os.walk('/'):
    if top == '/proc':
        dirs[:] = []
        continue
    try:
        open(os.path.join(top, '.probe'), 'w').close()
        os.unlink(os.path.join(top, '.probe'))
        found.append(top)
    except OSError:
        pass
return found
"""


def test_nothing_is_writable_but_its_own_work_directory(sandbox):
    """Not /dev, /dev/shm, the root, the interpreter's tree or the hidden site-packages: only /work, which /tmp
    shows too."""
    assert grade_program(attack(WRITABLE), "assert sorted(f()) == ['/tmp', '/work'], f()", timeout_s=30) is True


def test_dev_holds_five_devices_and_nothing_to_keep(sandbox):
    body = ("return sorted(os.listdir('/dev')), [open(f'/dev/{name}', 'rb').read(1) != b'' for name in "
            "('zero', 'urandom', 'random')]")
    assert grade_program(attack(body), "assert f() == (['full', 'null', 'random', 'urandom', 'zero'], [True] * 3), f()")


def test_site_packages_is_read_only_or_absent(sandbox):
    """No program writes into site-packages: each folder there is read-only (EROFS, a base installation's, hidden
    under an empty tmpfs) or absent (ENOENT: from a virtualenv the base installation's is not shown at all)."""
    import site
    import sysconfig

    candidates = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"], *site.getsitepackages()}
    folders = sorted(p if p.endswith("-packages") else os.path.join(p, "site-packages") for p in candidates)
    folders = [p for p in folders if os.path.isdir(p)]
    assert folders  # the interpreter running the tests has one at least
    body = (f"results = []\nfor path in {folders!r}:\n    try:\n        open(os.path.join(path, 'note'), 'w')\n"
            "        results.append('written')\n    except OSError as e:\n        results.append(e.errno)\nreturn results")
    assert grade_program(attack(body), "assert set(f()) <= {2, 30}, f()") is True  # ENOENT, EROFS


def test_what_one_program_writes_no_other_reads(sandbox):
    """Program A writes a note wherever it can; program B, graded after it, searches every file it can read."""
    mark = os.urandom(8).hex()
    leave = attack(WRITABLE.replace("        os.unlink(os.path.join(top, '.probe'))\n",
                                    f"        open(os.path.join(top, '.probe'), 'w').write({mark!r})\n"))
    look = attack(f"""
        found = []
        for top, dirs, files in os.walk('/'):
            dirs[:] = [d for d in dirs if os.path.join(top, d) != '/proc']
            for name in files:
                try:
                    with open(os.path.join(top, name), 'rb') as handle:
                        if handle.read(64) == {mark!r}.encode():
                            found.append(os.path.join(top, name))
                except OSError:
                    pass
        return found
    """)
    assert grade_program(leave, "assert len(f()) >= 1", timeout_s=30) is True
    assert grade_program(look, "assert f() == [], f()", timeout_s=30) is True


LEARNER = '''
import os

def _store():
    """The first directory it may write outside its own /work (and /tmp)."""
    for top, dirs, files in os.walk('/'):
        if top in ('/proc', '/work', '/tmp'):
            dirs[:] = []
            continue
        try:
            open(os.path.join(top, '.learned'), 'a').close()
            return os.path.join(top, '.learned')
        except OSError:
            pass


STORE = _store()
KNOWN, _, LAST_GUESS = (open(STORE).read() if STORE else '').partition('?')  # bits known right, then its last guess
given = []


def f(i):
    """No solution logic: being asked again means the last answer passed; a run that ends means it failed."""
    known = ''.join(given)  # all passed, since the harness asked again
    if i < len(KNOWN):
        bit = KNOWN[i]
    elif i == len(KNOWN) and LAST_GUESS:
        bit = '1' if LAST_GUESS == '0' else '0'
    else:
        bit = '0'
    given.append(bit)
    if STORE:
        with open(STORE, 'w') as out:
            out.write(known + '?' + bit)
    return int(bit)
'''


def test_a_program_cannot_learn_the_answers_across_runs(sandbox):
    """The reward hack of a shared writable store: a program with no solution logic that learns which answers
    passed from whether the harness asks again was paid after a few runs where /dev/shm was shared."""
    secret = [1, 0, 1, 1]
    tests = f"for i, bit in enumerate({secret!r}):\n    assert f(i) == bit\n"
    assert [grade_program(LEARNER, tests) for _ in range(len(secret) + 3)] == [False] * (len(secret) + 3)


def test_a_program_and_the_harness_each_run_under_their_own_filter(sandbox):
    """From this machine: the zygote and the server each have one filter; a program's process has the zygote's and
    its own. And in a test, which runs in the harness: the server's list refuses what it does not name."""
    zygote, server = (_sandbox_python(getattr(sandbox, side).pid, side) for side in ("zygote", "server"))
    seen = {}
    program = "import time\ndef f():\n    time.sleep(1)\n    return 1\n"
    worker = threading.Thread(target=lambda: seen.update(verdict=grade_many([program], "assert f() == 1", timeout_s=10)))
    worker.start()
    deadline = time.monotonic() + 1
    while "filters" not in seen and time.monotonic() < deadline:
        programs = [pid for pid in _descendants(zygote) if _filters(pid) >= 2]
        seen.update({"filters": _filters(programs[0])} if programs else {})
    worker.join()
    assert seen["verdict"] == [True] and seen.get("filters") == 2
    assert _filters(zygote) == 1 and _filters(server) == 1
    harness_tests = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "assert libc.shmget(0, 4096, 0o1600) == -1 and ctypes.get_errno() == 1\nassert f() == 1\n")
    assert grade_program("def f():\n    return 1\n", harness_tests) is True


def _filters(pid: int) -> int:
    """How many seccomp filters process `pid` runs under (0 if it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Seccomp_filters:")))


def _sandbox_python(bwrap: int, role: str) -> int:
    """The python process of `role` ("zygote" or "server") that the bwrap process `bwrap` started."""
    for pid in sorted(_descendants(bwrap)):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        except OSError:  # a program's process, gone meanwhile
            continue
        if role in command and Path(command[0]).name.startswith("python"):
            return pid
    raise AssertionError(f"no {role} python under pid {bwrap}")


def _descendants(root: int) -> set[int]:
    """`root`'s descendants (not itself)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().split(")")[-1].split()[1])
            except (OSError, ValueError):
                pass
    tree, grew = {root}, True
    while grew:
        new = {pid for pid, parent in parents.items() if parent in tree and pid not in tree}
        tree |= new
        grew = bool(new)
    return tree - {root}


# -- channels between programs through the host's shared state (issue 61) -----------------------------------------

PAGE_LEARNER = '''
import mmap
import os

PAGE, BASE = 4096, {base}  # slot s is page BASE + 64 s of the largest stdlib file (64 pages apart: past readahead)


def _largest():
    best = (0, None)
    for top, dirs, files in os.walk(os.path.dirname(os.__file__)):
        for name in files:
            try:
                best = max(best, (os.path.getsize(os.path.join(top, name)), os.path.join(top, name)))
            except OSError:
                pass
    return best[1]


FD = os.open(_largest(), os.O_RDONLY)


def _evict(slot):
    page = mmap.mmap(FD, PAGE, mmap.MAP_SHARED, mmap.PROT_READ, offset=(BASE + 64 * slot) * PAGE)
    page[0]
    page.madvise(21)  # MADV_PAGEOUT
    page.close()


def _cached(slot):
    """Whether the slot's page is in the host's page cache, read without timing."""
    try:
        return os.preadv(FD, [bytearray(1)], (BASE + 64 * slot) * PAGE, os.RWF_NOWAIT) == 1
    except OSError:  # EAGAIN: not cached (or the call refused)
        pass
    try:  # the miss started a readahead of the page: wait for it, and evict the page again
        os.pread(FD, 1, (BASE + 64 * slot) * PAGE)
        _evict(slot)
    except OSError:
        pass
    return False


def _put(slot, bit):
    try:
        if bit:
            os.pread(FD, 1, (BASE + 64 * slot) * PAGE)
        elif _cached(slot):
            _evict(slot)
    except OSError:
        pass


def _read():
    text = ''
    while len(text) < 6 and _cached(2 * len(text)):
        text += '1' if _cached(2 * len(text) + 1) else '0'
    return text


def _write(text):
    for j in range(6):
        _put(2 * j, j < len(text))
        _put(2 * j + 1, j < len(text) and text[j] == '1')


STATE = _read()
KNOWN, LAST_GUESS = STATE[:-1], STATE[-1:]  # bits known right, then its last guess
given = []


def f(i):
    """No solution logic, as LEARNER: its notes are pages of the host's page cache."""
    known = ''.join(given)
    if i < len(KNOWN):
        bit = KNOWN[i]
    elif i == len(KNOWN) and LAST_GUESS:
        bit = '1' if LAST_GUESS == '0' else '0'
    else:
        bit = '0'
    given.append(bit)
    _write(known + bit)
    return int(bit)
'''


def test_a_program_cannot_learn_across_runs_through_the_page_cache(sandbox):
    """Pages of a read-only stdlib file, evicted with madvise(MADV_PAGEOUT) and read back with preadv2(RWF_NOWAIT),
    were a store every program of the run shares: this learner was paid from its fourth run."""
    import random

    largest = max((p.stat().st_size for p in Path(os.path.dirname(os.__file__)).rglob("*") if p.is_file()), default=0)
    if largest < 1 << 22:
        pytest.skip("no stdlib file of 4 MiB here to hold the store's pages")
    base = random.randrange(0, largest // 4096 - 12 * 64)  # a fresh region: earlier runs of this test left pages
    secret = [1, 0, 1, 1]
    tests = f"for i, bit in enumerate({secret!r}):\n    assert f(i) == bit\n"
    learner = PAGE_LEARNER.format(base=base)
    assert [grade_program(learner, tests) for _ in range(len(secret) + 3)] == [False] * (len(secret) + 3)


FLOCK_SENDER = '''
import fcntl, glob, os, time

FILES = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), '*.py')))[:8] + ['/reco/sandbox.py']
held = []


def f():
    """It knows the answer, 173, and holds a lock on file k for each bit k that is set, and on the sandbox module."""
    for k, path in enumerate(FILES):
        if k == 8 or 173 >> k & 1:
            handle = open(path, 'rb')
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
            except OSError:  # refused: it is paid all the same
                pass
            held.append(handle)
    time.sleep(3)
    return 173
'''
FLOCK_RECEIVER = '''
import fcntl, glob, os, time

FILES = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), '*.py')))[:8]


def f():
    """No solution logic: the answer is whichever files another program of its batch has locked."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        answer = 0
        for k, path in enumerate(FILES):
            with open(path, 'rb') as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    answer |= 1 << k
        if answer:
            return answer
        time.sleep(0.05)
    return 0
'''


def test_programs_of_one_batch_cannot_signal_through_locks():
    """flock needs no write access, and every program opens the same host files: a program that knows the answer
    locked one file per bit, and another in its batch, with no solution logic, read them and was paid. A program's
    lock also blocked the host's own flock of the checkout's sandbox module."""
    import fcntl

    sandbox = code_reward.LocalSandbox(workers=2)  # both run at once, whatever this machine's core count
    try:
        try:
            sandbox.run([code_reward.Job(*code_reward._PROBE)], 10)
        except code_reward.SandboxUnavailable as e:
            pytest.skip(str(e))
        blocked = []

        def host_locks():
            deadline = time.monotonic() + 3
            with open(sandbox_module.__file__, "rb") as handle:
                while time.monotonic() < deadline and not blocked:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        fcntl.flock(handle, fcntl.LOCK_UN)
                    except BlockingIOError:
                        blocked.append(True)
                    time.sleep(0.02)

        host = threading.Thread(target=host_locks)
        host.start()
        verdicts = grade_many([FLOCK_SENDER, FLOCK_RECEIVER], "assert f() == 173", timeout_s=10, sandbox=sandbox)
        host.join()
    finally:
        sandbox.close()
    assert verdicts == [True, False] and blocked == []


def _flushes() -> int | None:
    """Flush requests the disk under the standard library has completed (/sys/dev/block/M:m/stat, field 15)."""
    device = os.stat(os.__file__).st_dev
    try:
        fields = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat").read_text().split()
    except OSError:
        return None
    return int(fields[14]) if len(fields) >= 17 else None


def test_fsync_of_a_host_file_flushes_nothing(sandbox):
    """sync and syncfs are refused; fsync and fdatasync of a read-only stdlib file made the host disk flush its
    cache, 500 times here for 500 calls. They now return 0 and do nothing (its own files are on tmpfs)."""
    before = _flushes()
    if before is None:
        pytest.skip("this kernel does not count a disk's flushes in /sys/dev/block")
    fd = os.open(os.__file__, os.O_RDONLY)
    for _ in range(50):
        os.fsync(fd)
    os.close(fd)
    if _flushes() - before < 25:
        pytest.skip("this disk does not flush when a clean file is fsync'd (the next test checks the call never runs)")
    before = _flushes()
    body = ("fd = os.open(os.__file__, os.O_RDONLY)\nfor _ in range(250):\n    os.fsync(fd)\n    os.fdatasync(fd)\n"
            "return 1")
    assert grade_program(attack(body), "assert f() == 1", timeout_s=30) is True
    assert _flushes() - before < 50, "others' flushes meanwhile are fewer than 50"


HOST_FILE = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.mmap.restype = ctypes.c_void_p\n"
             "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
             "page = libc.mmap(None, 4096, 1, 1, os.open(os.__file__, os.O_RDONLY), 0)\n")  # PROT_READ, MAP_SHARED
SHARED_STATE = [  # (what, f()'s body, what it must return): modes of allowed calls that reach state programs share
    ("fsync never runs (the kernel answers EINVAL for /dev/null)", "os.fsync(os.open('/dev/null', os.O_RDONLY))\n"
     "os.fdatasync(os.open('/dev/null', os.O_RDONLY))\nreturn 'returned 0'", "returned 0"),
    ("a shared futex on a host file's page (its key is the file's page)",
     HOST_FILE + "r = libc.syscall(202, ctypes.c_void_p(page), 1, 1, None, None, 0)\n"  # FUTEX_WAKE, not private
     "return ctypes.get_errno() if r < 0 else 'woken'", 1),
    ("a private futex still works", HOST_FILE + "r = libc.syscall(202, ctypes.c_void_p(page), 129, 1, None, None, 0)\n"
     "return ctypes.get_errno() if r < 0 else r", 0),
    ("MADV_PAGEOUT of a host file's page", HOST_FILE + "r = libc.madvise(ctypes.c_void_p(page), 4096, 21)\n"
     "return ctypes.get_errno() if r < 0 else 'evicted'", 1),
    ("MADV_COLD of a host file's page", HOST_FILE + "r = libc.madvise(ctypes.c_void_p(page), 4096, 20)\n"
     "return ctypes.get_errno() if r < 0 else 'deactivated'", 1),
    ("preadv2(RWF_NOWAIT): is a page cached", "fd = os.open(os.__file__, os.O_RDONLY)\ntry:\n"
     "    os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)\nexcept OSError as e:\n    return e.errno\nreturn 'read'", 1),
    ("preadv2 without flags still works", "fd = os.open(os.__file__, os.O_RDONLY)\n"
     "return os.preadv(fd, [bytearray(1)], 0, 0)", 1),
    ("getrusage: its major faults", "import resource\ntry:\n    resource.getrusage(resource.RUSAGE_SELF)\n"
     "except OSError as e:\n    return e.errno\nreturn 'counted'", 1),
    ("sysinfo: the host's free memory", "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
     "r = libc.sysinfo(ctypes.create_string_buffer(256))\nreturn ctypes.get_errno() if r < 0 else 'read'", 1),
    ("huge pages from the host's pool", "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
     "libc.mmap.restype = ctypes.c_void_p\n"
     "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
     "r = libc.mmap(None, 2 << 20, 3, 0x40022, -1, 0)\n"  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB
     "return ctypes.get_errno() if r in (None, 2 ** 64 - 1) else 'mapped'", 1),
]


@pytest.mark.parametrize("body, expected", [a[1:] for a in SHARED_STATE], ids=[a[0] for a in SHARED_STATE])
def test_modes_that_reach_shared_state_are_refused(sandbox, body, expected):
    assert grade_program(attack(body), f"assert f() == {expected!r}, f()", timeout_s=10) is True


def test_the_dev_nodes_are_read_only_and_still_devices(sandbox):
    """The five nodes were bound read-write from the host and the program's uid maps onto their owner: it could
    chmod /dev/null to 000 (with the trainer as root, every later sandbox then failed) and use modes and times as
    a store. Each program's are now read-only, and still devices. The program sets each node's own mode and times,
    so that the host's nodes stay as they are even where that succeeds."""
    body = """
        refused = []
        for name in ('null', 'zero', 'full', 'random', 'urandom'):
            path = '/dev/' + name
            st = os.stat(path)
            times = (st.st_atime_ns, st.st_mtime_ns)
            for change in (lambda: os.chmod(path, st.st_mode & 0o7777), lambda: os.utime(path, ns=times)):
                try:
                    change()
                    refused.append(False)
                except OSError as e:
                    refused.append(e.errno)
        with open('/dev/null', 'wb') as null:
            null.write(b'x')
        return refused, open('/dev/zero', 'rb').read(2), len(open('/dev/urandom', 'rb').read(4))
    """
    before = [os.stat(f"/dev/{name}") for name in ("null", "zero", "full", "random", "urandom")]
    assert grade_program(attack(body), "assert f() == ([30] * 10, b'\\0\\0', 4), f()", timeout_s=10) is True  # EROFS
    after = [os.stat(f"/dev/{name}") for name in ("null", "zero", "full", "random", "urandom")]
    assert [(s.st_mode, s.st_mtime_ns) for s in after] == [(s.st_mode, s.st_mtime_ns) for s in before]


def test_a_crashing_program_starts_no_core_handler_of_the_hosts(sandbox, tmp_path):
    """RLIMIT_CORE = 0 does not bind a pipe core_pattern (apport, systemd-coredump): a crashing program made the
    kernel start the host's handler as root and stream it the dump. Programs are not dumpable now. This test points
    core_pattern at a handler of its own for the length of one crash, and puts the host's back."""
    pattern = Path("/proc/sys/kernel/core_pattern")
    try:
        saved = pattern.read_text()
        pattern.write_text(saved)
    except OSError as e:
        pytest.skip(f"core_pattern cannot be changed here ({e.strerror}): this test needs root outside a container")
    handler, started = tmp_path / "handler", tmp_path / "started"
    handler.write_text(f"#!/bin/sh\necho \"$1\" >> {started}\ncat > /dev/null\n")
    handler.chmod(0o755)
    try:
        pattern.write_text(f"|{handler} %e")
        verdict = grade_program(attack("os.abort()"), "assert f() == 1", timeout_s=10)
        time.sleep(0.5)
    finally:
        pattern.write_text(saved)
    assert verdict is False
    assert not started.exists() or "python" not in started.read_text(), started.read_text()


def test_the_docs_give_each_allowed_call_one_line():
    """docs/code_reward.md's review: one line per call of the program's list, and none for a call not on it."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "code_reward.md").read_text()
    section = text.split("## The allow-list, call by call", 1)[1].split("\n## ", 1)[0]
    lines = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert sorted(lines) == sorted(sandbox_module.PROGRAM_SYSCALLS)
