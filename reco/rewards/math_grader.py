r"""reco/rewards/math_grader.py: grading of math answers: is a response's boxed answer equivalent to the gold answer?

`grade_answer(response, gold) -> bool` is the single entry point; `grade_many(responses, golds)` grades a batch in
parallel. The core is math-verify's LaTeX `parse` and `verify` (the library TRL's and open-r1's math rewards use),
inside this envelope of rules:

1. The answer is the last ``\boxed{}`` (or ``\fbox{}``) of a response; when a response has several boxes, their
   list is tried too (``\boxed{1},\boxed{2}`` answers ``\{1,2\}``) when only separators or a short conjunction
   ("and", a comma; no "but", "not", "wait") part them. No box, no answer. A gold with several boxes is their list.
2. Exact integers and rationals compare exactly, and a decimal is the exact number it writes: ``0.5`` is 1/2,
   ``12000023`` is not ``12000000`` and ``1e-7`` is not ``2e-7`` (math-verify's rounding to 6 decimals would pay
   that). A percent answer also matches its value over 100.
3. A decimal that approximates a number it cannot write exactly, a fraction without a finite decimal expansion or
   an irrational (``0.0833333333333333`` for 1/12, ``1.7320508`` for ``\sqrt{3}``), matches within relative
   tolerance 1e-6, and only if math-verify's rounding to 6 decimals matches too: ``0.333`` is not 1/3. Any other
   pair of numbers math-verify accepts must agree within 1e-6 relatively.
4. Digits separated only by spaces are one number when they form thousands groups (``1 000 000``, ``1\,000``),
   and an integer before a proper fraction is a mixed number (``7 3/4`` is 31/4); otherwise the answer is refused:
   numbers side by side are not a product (``1 2`` is not 2, nor 12).
5. Primes count: ``E`` is not ``E'``. Lists compare as sets, as in math-verify, but an interval does not answer a
   list of solutions: ``(1,2)`` is not ``1, 2``.
6. Model output is never executed: only math-verify's LaTeX extraction runs (its plain-expression extraction calls
   sympy's ``parse_expr``, which evaluates Python), and inside a worker the few ``sympify`` calls of
   latex2sympy2_extended's sets and logic are replaced by one that takes only sympy objects and Python numbers.
7. A hard wall-clock bound: each comparison runs in a worker process that is killed and replaced when it exceeds
   its limit (`TIMEOUT_S`, 2 s); the answer is then False. Workers are forked, in milliseconds, by one clean
   interpreter started for this (never a fork of the caller, which may hold torch threads) that has the parser
   imported. They start at the first call that needs one (which also waits about a second for that interpreter),
   all at once, are reused, are replaced in the background, die with their parent (an alarm ends one that outlives
   its limit, and the end of its input an idle one) and are stopped at exit. Any thread may call; `WORKERS`
   comparisons run at once. A worker may use `WORKER_MEMORY_BYTES` of address space. Anything that fails is False.
"""
from __future__ import annotations

import atexit
import collections
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

TIMEOUT_S = 2.0
WORKERS = max(1, min(8, os.cpu_count() or 1))
WORKER_MEMORY_BYTES = 4 << 30
_MAX_LEN = 2000  # characters of one answer or gold; longer ones are wrong
_START_TIMEOUT_S = 120.0  # a worker's first import of sympy and math-verify, on a loaded machine
_RTOL = 1e-6

_TEXT = r"\\(?:text|textbf|textrm|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}"
_REWRITES = [  # (pattern, replacement), in order; (?![a-zA-Z]) ends a command name
    (r"\\[dt]frac", r"\\frac"), (r"\\?\$|\\!", ""), (r"\{,\}", ","), ("−", "-"), ("π", r"\\pi "), ("∞", r"\\infty "),
    (r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])\.?|\\displaystyle|\\[,;: ]|\\q?quad(?![a-zA-Z])|~", " "),
    (r"(?:\^\s*)?(?:\{\s*\\circ\s*\}|\\circ(?![a-zA-Z])|°)|\\degree(?![a-zA-Z])", ""),
    (r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}"), (r"\\frac\s*(\d)", r"\\frac{\1}"),  # \frac12
    (r"\\(?:cdot|times|ast)(?![a-zA-Z])|×|·", "*"), (r"\\div(?![a-zA-Z])|÷", "/"),
]
_UNITS = (r"(?<=[\d\s}])\s*(?:(?:square|sq\.?|cubic)\s+)?(?:units?|cm|mm|km|meters?|metres?|inch(?:es)?|feet|foot|ft"
          r"|miles?|degrees?|dollars?|cents?|hours?|minutes?|seconds?|days?)\s*(?:\^\s*\{?\d\}?)?\s*$")
_BOX = re.compile(r"\\(?:boxed|fbox)(?: +([^\s{$]+)|\s*\{)")
_SPACE = r"(?:\s|\\[,;: ]|~)+"  # what may sit between two digits of one number
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:" + _SPACE + r"\d{3})+(?![\d])")
_SIDE_BY_SIDE = re.compile(r"\d" + _SPACE + r"\.?\d")
_SEPARATORS = re.compile(r"(?:\s|[,;&$.]|\\[()\[\]]|\\q?quad|\\text\s*\{\s*(?:and|or|,)?\s*\}|and|or)*")
_CONJUNCTION = re.compile(r",|;|\band\b")
_RETRACTION = re.compile(r"\b(?:no|not|but|instead|wrong|actually|reflection|wait|correct(?:ion|ed)?)\b", re.I)
_MIXED = re.compile(r"(?<![\d.])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.])")  # 7 3/4
_PLAIN_NUMBER = re.compile(r"[-+]?[0-9]{1,300}(?:\.[0-9]{1,300})?")
_PRIME = re.compile(r"'|\\prime(?![a-zA-Z])")


def _boxes(s: str) -> list[str]:
    """The contents of the \\boxed{...} or \\fbox{...} of s (nested braces; also "\\boxed 5"), in order: the last
    box and the boxes before it that only separators (commas, "and", "or", spaces, math delimiters) part from it."""
    out, pos = [], 0
    while (m := _BOX.search(s, pos)) is not None:
        between = s[pos:m.start()]
        if out and not (_SEPARATORS.fullmatch(between) or len(between) <= 40 and _CONJUNCTION.search(between)
                        and not _RETRACTION.search(between)):
            out = []  # other text between two boxes: only the later one counts
        pos = m.end()
        if m.group(1):
            out.append(m.group(1))
            continue
        depth = 1
        for k in range(m.end(), min(len(s), m.end() + _MAX_LEN + 1)):  # longer answers are refused anyway
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            if depth == 0:
                out.append(s[m.end():k])
                pos = k + 1
                break
        else:
            break
    return out


def _last_boxed(s: str) -> str | None:
    """Content of the last \\boxed{...} of s, or None."""
    found = _boxes(s[max(s.rfind("\\boxed"), s.rfind("\\fbox"), 0):])
    return found[-1] if found else None


def _normalize(s: str) -> tuple[str, bool, bool]:
    """LaTeX answer -> (canonical text, whether it is a \\text{} answer, whether it had a percent sign): the key
    under which reco.tasks.countdown.response_key groups equal answers (\\frac12 and \\dfrac{1}{2} share one)."""
    for pattern, rep in _REWRITES:
        s = re.sub(pattern, rep, s)
    pct, s = "%" in s, re.sub(r"\\?%", "", s)
    is_text = re.fullmatch(r"\s*" + _TEXT + r"\s*", s)
    s = is_text.group(1) if is_text else s
    s = re.sub(_TEXT, lambda m: "," if m.group(1).strip() in ("and", "or") else m.group(0), s)
    s = re.sub(r"(?<=[\d}).])\s*" + _TEXT.replace("[^{}]*", r"\s*[A-Za-z][A-Za-z .]*") + r"(?:\^\{?\d\}?)?", "", s)
    s = re.sub(_UNITS, "", re.sub(_TEXT, r" \1 ", s)).strip().rstrip(".").strip()  # units; other \text{}: content
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    return s, bool(is_text), pct


def _join_thousands(s: str) -> str | None:
    """s with thousands groups joined ("1 000" -> "1000"), or None when other digits sit side by side (rule 4)."""
    s = _MIXED.sub(lambda m: f"{m[1]}\\frac{{{m[2]}}}{{{m[3]}}}" if int(m[2]) < int(m[3]) else m[0], s)
    s = _THOUSANDS.sub(lambda m: re.sub(_SPACE, "", m.group(0)), s)
    return None if _SIDE_BY_SIDE.search(s) else s


def _trim(s: str) -> str:
    """s without outer space, a closing period or a dangling backslash ("185\\" is 185), with ° as ^\\circ and a
    number in scientific notation as a power of ten (1.5e-3)."""
    s = s.strip().removesuffix(".").rstrip()
    s = s[:-1].rstrip() if s.endswith("\\") and not s.endswith("\\\\") else s
    s = s.replace("°", "^{\\circ}")
    return re.sub(r"^([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d{1,4})$", r"\1\\times 10^{\2}", s)


def _candidates(response: str, gold: str) -> tuple[list[str], str] | None:
    """(the answers to try, the gold), both pre-checked by rules 1, 4 and 5, or None when the response is wrong."""
    if not isinstance(response, str) or not isinstance(gold, str):
        return None
    boxes = _boxes(response)
    gold_boxes = _boxes(gold) if "\\boxed" in gold or "\\fbox" in gold else [gold]
    if not boxes or not gold_boxes:
        return None
    answers = [boxes[-1]] + ([", ".join(boxes)] if len(boxes) > 1 else [])
    gold = _join_thousands(_trim(", ".join(gold_boxes)))
    answers = [a for a in (_join_thousands(_trim(a)) for a in answers) if a and len(a) <= _MAX_LEN]
    if gold is None or not gold or len(gold) > _MAX_LEN:
        return None
    primes = len(_PRIME.findall(gold))
    answers = [a for a in answers if len(_PRIME.findall(a)) == primes]
    return (answers, gold) if answers else None


# -- inside a worker process: math-verify and the checks after it -----------------------------------------------------

def _strict_sympify(a, *args, **kwargs):
    """Stands in for sympy.sympify and never parses anything. latex2sympy2_extended's logic and sets modules (patched
    by _install_guards) call it on parts that are already values: a sympy object is returned as it is, a Python
    number is built by sympy's constructor for its type, and anything else (a string from a model or a file, bytes,
    a container) raises SympifyError."""
    import numbers

    import sympy

    if isinstance(a, sympy.Basic):
        return a
    if isinstance(a, bool):
        return sympy.true if a else sympy.false
    if isinstance(a, numbers.Integral):
        return sympy.Integer(int(a))
    if isinstance(a, numbers.Rational):
        return sympy.Rational(int(a.numerator), int(a.denominator))
    if isinstance(a, numbers.Real):
        return sympy.Float(float(a))
    if isinstance(a, numbers.Complex):
        return sympy.Float(float(a.real)) + sympy.I * sympy.Float(float(a.imag))
    raise sympy.SympifyError(a)


def _install_guards() -> None:
    """No parser that evaluates Python runs in a worker (rule 6)."""
    import latex2sympy2_extended.latex2sympy2 as l2s
    import latex2sympy2_extended.logic as logic
    import latex2sympy2_extended.sets as sets
    import math_verify.parser as parser

    def refuse(*_args, **_kwargs):
        raise ValueError("parse_expr is not allowed on model output")

    parser.parse_expr_cached = parser.parse_expr = l2s.parse_expr = refuse
    logic.sympify = sets.sympify = _strict_sympify


def _value(v):
    """A sympy number with every Float read as the exact decimal it prints (0.1 -> 1/10)."""
    import sympy

    v = v.doit()
    return v.xreplace({f: sympy.Rational(str(f)) for f in v.atoms(sympy.Float)})


def _terminates(r) -> bool:
    """Whether the rational r has a finite decimal expansion (1/4 does, 1/3 does not)."""
    q = int(r.q)
    for p in (2, 5):
        while q % p == 0:
            q //= p
    return q == 1


def _numbers_match(x, y) -> bool:
    """Rules 2 and 3 for two sympy numbers."""
    import sympy

    if x.is_Rational and y.is_Rational:
        if x == y or _terminates(x) == _terminates(y):
            return x == y
    nx, ny = sympy.N(x, 30), sympy.N(y, 30)
    return bool(abs(nx - ny) <= _RTOL * max(abs(nx), abs(ny)))


def _numbers_disagree(a, b, percent: bool) -> bool:
    """Whether two values math-verify found equal hold numbers that rules 2 and 3 find different (scalars, and the
    entries of tuples, intervals and matrices of the same shape, element by element), or are a gold list answered
    by an interval."""
    import sympy
    from latex2sympy2_extended.sets import FiniteSet

    a, b = (v.rhs if isinstance(v, sympy.Eq) and isinstance(v.lhs, sympy.Symbol) else v for v in (a, b))
    if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr) and a.is_number and b.is_number:
        x, y = _value(a), _value(b)
        scaled = [(x * 100, y), (x, y * 100)] if percent else []
        return not any(_numbers_match(u, v) for u, v in [(x, y)] + scaled)
    if isinstance(a, (sympy.FiniteSet, FiniteSet)) and isinstance(b, sympy.Interval):
        return True  # the interval (1,2) does not answer the list of solutions 1, 2
    parts = {sympy.Tuple: lambda v: v.args, sympy.Interval: lambda v: v.args[:2], sympy.MatrixBase: lambda v: v.flat()}
    for kind, items in parts.items():
        if isinstance(a, kind) and isinstance(b, kind) and len(items(a)) == len(items(b)):
            return any(_numbers_disagree(u, v, percent) for u, v in zip(items(a), items(b)))
    return False


def _verdict(answers: list[str], gold: str) -> bool:
    """Whether any answer is equivalent to the gold (math-verify, then rules 2 and 3)."""
    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(boxed_match_priority=0)]
    gold_parsed = parse(f"${gold}$", config, parsing_timeout=None)
    if not gold_parsed:
        return False
    percent = "%" in gold or any("%" in a or "percent" in a for a in answers)
    for answer in answers:
        parsed = parse(f"\\boxed{{{answer}}}", config, parsing_timeout=None)
        if parsed and verify(gold_parsed, parsed, timeout_seconds=None) \
                and not _numbers_disagree(gold_parsed[0], parsed[0], percent):
            return True
    return False


def _serve(inbox, outbox) -> None:
    """A worker's loop: one JSON line [answers, gold, limit_s] in, "1" or "0" out. An alarm ends the process if one
    call outlives its limit by far (the parent has then killed it already, or died); the end of its input ends it
    when idle."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    outbox.write("ready\n")
    for line in inbox:
        try:
            answers, gold, limit_s = json.loads(line)
            signal.setitimer(signal.ITIMER_REAL, 2 * limit_s + 5)  # SIGALRM's default action ends the process
            result = _verdict(answers, gold)
        except BaseException:  # noqa: BLE001 - a parser failure, a recursion limit, MemoryError: wrong
            result = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        outbox.write(f"{int(bool(result))}\n")


def _zygote(control_fd: int) -> None:
    """A fresh interpreter (no torch, no threads) that imports and warms the parser once, then forks one worker per
    request: two pipe ends come in over the control socket, the worker's pid goes back. Ends with its parent."""
    import logging
    import socket
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # math-verify warns that its own (signal) timeout is off: ours is the process
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped as they end
    _install_guards()
    _verdict(["1"], "1")  # imports and caches, inherited by every worker
    control = socket.socket(fileno=control_fd)
    control.sendall(b"ready\n")
    while True:
        _, fds, _, _ = socket.recv_fds(control, 16, 2)
        if len(fds) != 2:
            return  # the parent has gone
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _serve(os.fdopen(fds[0], "r", encoding="utf-8"), os.fdopen(fds[1], "w", encoding="utf-8", buffering=1))
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        control.sendall(f"{pid}\n".encode())


# -- in the caller: the pool of workers --------------------------------------------------------------------------------

class _Zygote:
    """The caller's handle on _zygote: a subprocess (never a fork of the caller, which may hold torch threads, and no
    re-import of its __main__), started once, asked for workers one at a time."""

    def __init__(self) -> None:
        import socket

        self.control, theirs = socket.socketpair()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above the package reco
        code = (f"import sys; sys.path.insert(0, {root!r}); import reco.rewards.math_grader as grader; "
                f"grader._zygote({theirs.fileno()})")
        self.process = subprocess.Popen([sys.executable, "-c", code], pass_fds=[theirs.fileno()])
        theirs.close()
        self.lock = threading.Lock()
        if self._line(_START_TIMEOUT_S) != "ready":
            self.close()
            raise RuntimeError(f"reco.rewards.math_grader: the grading process did not start within {_START_TIMEOUT_S:.0f} s")

    def _line(self, wait_s: float) -> str | None:
        ready, _, _ = select.select([self.control], [], [], wait_s)
        data = b""
        while ready and not data.endswith(b"\n"):
            chunk = self.control.recv(64)
            if not chunk:
                return None
            data += chunk
        return data.decode().strip() if ready else None

    def fork(self, inbox_fd: int, outbox_fd: int) -> int:
        import socket

        with self.lock:
            try:
                socket.send_fds(self.control, [b"w"], [inbox_fd, outbox_fd])
                pid = self._line(_START_TIMEOUT_S)
            except OSError:  # the zygote has died: the pool starts another
                pid = None
        if pid is None:
            raise RuntimeError("reco.rewards.math_grader: the grading process did not start a worker")
        return int(pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.control.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class _Worker:
    """A process forked by the zygote, talking over two pipes."""

    def __init__(self, zygote: _Zygote) -> None:
        their_in, self._to = os.pipe()
        self._from, their_out = os.pipe()
        try:
            self.pid = zygote.fork(their_in, their_out)
        finally:
            os.close(their_in)
            os.close(their_out)
        self.inbox = os.fdopen(self._to, "w", encoding="utf-8", buffering=1)
        self.outbox = os.fdopen(self._from, "r", encoding="utf-8")
        if self._read(_START_TIMEOUT_S) != "ready":
            self.stop()
            raise RuntimeError(f"reco.rewards.math_grader: a grading worker did not start within {_START_TIMEOUT_S:.0f} s")

    def _read(self, wait_s: float) -> str | None:
        ready, _, _ = select.select([self.outbox], [], [], wait_s)
        return self.outbox.readline().strip() if ready else None

    def grade(self, answers: list[str], gold: str, limit_s: float) -> bool | None:
        """The verdict, or None when the worker overran limit_s or died grading (it is then stopped). Raises
        BrokenPipeError when the worker was already dead (killed from outside): nothing was graded."""
        self.inbox.write(json.dumps([answers, gold, limit_s]) + "\n")
        try:
            line = self._read(limit_s)
        except (OSError, ValueError):
            line = None
        if line in ("0", "1"):
            return line == "1"
        self.stop()
        return None

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for stream in (self.inbox, self.outbox):
            try:
                stream.close()
            except OSError:
                pass


class _Pool:
    """WORKERS slots, all started in the background when the pool is made (at the first grading call). A worker
    killed for overrunning is replaced in the background too, so that a call waits for a worker only while every
    one of them is busy or starting; a slot whose start failed holds None and starts its worker on use."""

    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self.slots: collections.deque = collections.deque()
        self.ready = threading.Condition()
        self.workers: set[_Worker] = set()
        self.zygote: _Zygote | None = None
        self.zygote_lock = threading.Lock()
        for _ in range(size):
            threading.Thread(target=self._refill, daemon=True).start()

    def _take(self) -> _Worker | None:
        with self.ready:
            self.ready.wait_for(lambda: self.slots)
            return self.slots.pop()

    def _give(self, worker: _Worker | None) -> None:
        with self.ready:
            if worker is None:
                self.slots.appendleft(None)
            else:
                self.slots.append(worker)
            self.ready.notify()

    def _start(self) -> _Worker:
        with self.zygote_lock:
            if self.zygote is None or not self.zygote.alive():
                self.zygote = _Zygote()
        worker = _Worker(self.zygote)
        self.workers.add(worker)
        return worker

    def _refill(self) -> None:
        try:
            self._give(self._start())
        except Exception:  # noqa: BLE001 - the slot stays, empty: its next user starts a worker and sees the error
            self._give(None)

    def grade(self, answers: list[str], gold: str, limit_s: float) -> bool:
        worker = self._take()
        try:
            if worker is None:
                worker = self._start()
            try:
                verdict = worker.grade(answers, gold, limit_s)
            except BrokenPipeError:  # found dead before grading: once more on a new worker
                self._drop(worker)
                worker = None
                worker = self._start()
                verdict = worker.grade(answers, gold, limit_s)
        except BaseException:
            self._give(worker)
            raise
        if verdict is None:
            self._drop(worker)
            threading.Thread(target=self._refill, daemon=True).start()
        else:
            self._give(worker)
        return bool(verdict)

    def _drop(self, worker: _Worker) -> None:
        worker.stop()
        self.workers.discard(worker)

    def close(self) -> None:
        for worker in list(self.workers):
            self._drop(worker)
        if self.zygote is not None:
            self.zygote.close()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _the_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():  # a forked child never uses its parent's workers
            _pool = _Pool(WORKERS)
        return _pool


@atexit.register
def _close_pool() -> None:
    if _pool is not None and _pool.pid == os.getpid():
        _pool.close()


def grade_answer(response: str, gold: str, timeout_s: float = TIMEOUT_S) -> bool:
    """True iff the boxed answer of `response` is equivalent to `gold` (bare or boxed LaTeX), by the module's rules.

    Never raises on any input and never evaluates text; answers within `timeout_s` plus a worker's restart."""
    found = _candidates(response, gold)
    if found is None:
        return False
    answers, gold = found
    if any(re.sub(r"\s", "", a) == re.sub(r"\s", "", gold) for a in answers):
        return True
    if all(_PLAIN_NUMBER.fullmatch(x) for x in answers + [gold]):  # the common case: exact, without a worker
        return any(Fraction(a) == Fraction(gold) for a in answers)
    return _the_pool().grade(answers, gold, timeout_s)


def grade_many(responses: list[str], golds: list[str]) -> list[bool]:
    """grade_answer for each (response, gold) pair, in parallel on the worker pool; each distinct pair is graded
    once (a step's groups repeat answers)."""
    if len(responses) != len(golds):
        raise ValueError(f"grade_many: {len(responses)} responses but {len(golds)} golds")
    keys = [(r, g) if isinstance(r, str) and isinstance(g, str) else (None, None) for r, g in zip(responses, golds)]
    distinct = list(dict.fromkeys(keys))
    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(distinct)))) as threads:
        verdict = dict(zip(distinct, threads.map(lambda pair: grade_answer(*pair), distinct)))
    return [verdict[k] for k in keys]


def grade_group(responses: list[str], gold: str) -> tuple[int, int]:
    """(correct responses, distinct correct responses) for one problem; each distinct text is graded once."""
    texts = list(dict.fromkeys(responses))
    verdict = dict(zip(texts, grade_many(texts, [gold] * len(texts))))
    return sum(verdict[t] for t in responses), len({t.strip() for t, ok in verdict.items() if ok})
