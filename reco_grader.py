r"""Grading of math answers: is the last \boxed{} of a response equivalent to the gold answer?

grade_answer takes the last \boxed{} of a response, normalises it and the gold, and parses both with a whitelist
Pratt parser that builds sympy objects itself (never eval/exec/sympify/parse_expr). Numbers match within relative
tolerance 1e-4 and expressions at three fixed points; "50\%" matches 50 and 0.5; degrees, "\$" and units text are
dropped; "x=5" matches 5 unless both sides are equations; "1,000" is 1000; tuples and intervals compare in order
with their brackets, bare lists, \{sets\} and unions as multisets; \text{} answers as text, ignoring case. Bounds:
1000 characters, depth 100, 50 items, 3000-bit rationals; 9^9^9^9 and roots of huge numbers are refused before
sympy computes them (big-int work holds the GIL), and the rest runs in a daemon thread given 1 s, which works in
worker threads and process pools alike (no signals). An unparseable answer is simply wrong.
"""
import math
import operator
import re
import threading
from fractions import Fraction

import sympy

_MAX_LEN, _MAX_DEPTH, _MAX_ITEMS, _MAX_BITS, _TIMEOUT_S, _RTOL = 1000, 100, 50, 3000, 1.0, 1e-4
_POINTS = (0.5377, 1.8339, -2.2588, 0.8622, 0.3188, -1.3077, 1.4172, 0.7254, 2.6714)  # where symbols are compared
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
_NAMES = {n: getattr(sympy, n) for n in "sin cos tan cot sec csc sinh cosh tanh exp log sqrt".split()} | {
    "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan, "ln": sympy.log,
    "pi": sympy.pi, "infty": sympy.oo, "inf": sympy.oo, "e": sympy.E, "i": sympy.I}
_TOKEN = re.compile(r"\d+\.?\d*(?:[eE][-+]?\d{1,4}(?![\d.]))?|\.\d+|\\[a-zA-Z]+|\\[{}]|\*\*|<=|>=|[-+*/^()\[\]{},=<>_]"
                    r"|[a-zA-Z]_(?:\{\w+\}|\w)|(?:" + "|".join(_NAMES) + r")(?![a-zA-Z])|[a-zA-Z]")  # x_1, a_{n}
_RELS = {"=": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "\\le": "<=", "\\leq": "<=", "\\ge": ">=", "\\geq": ">="}
_OPEN = {"(": ")]", "[": ")]", "{": "}", "\\{": "\\}"}
_BINARY = {"+": (2, operator.add), "-": (2, operator.sub), "*": (3, operator.mul), "/": (3, operator.truediv)}


def _last_boxed(s: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...} (nested braces; also "\\boxed 5"), or None."""
    m = re.compile(r"\\(?:boxed|fbox)(?: +([^\s{$]+)|\s*\{)").match(s, max(s.rfind("\\boxed"), s.rfind("\\fbox"), 0))
    if m is None or m.group(1):
        return m.group(1) if m else None
    depth = 1
    for k in range(m.end(), min(len(s), m.end() + _MAX_LEN + 1)):  # longer answers are refused anyway
        depth += {"{": 1, "}": -1}.get(s[k], 0)
        if depth == 0:
            return s[m.end():k]
    return None


def _normalize(s: str) -> tuple[str, bool, bool]:
    """LaTeX answer -> (canonical text, whether it is a \\text{} answer, whether it had a percent sign)."""
    for pattern, rep in _REWRITES:
        s = re.sub(pattern, rep, s)
    pct, s = "%" in s, re.sub(r"\\?%", "", s)
    is_text = re.fullmatch(r"\s*" + _TEXT + r"\s*", s)
    s = is_text.group(1) if is_text else s
    s = re.sub(_TEXT, lambda m: "," if m.group(1).strip() in ("and", "or") else m.group(0), s)
    s = re.sub(r"(?<=[\d}).])\s*" + _TEXT.replace("[^{}]*", r"\s*[A-Za-z][A-Za-z .]*") + r"(?:\^\{?\d\}?)?", "", s)
    s = re.sub(_UNITS, "", re.sub(_TEXT, r" \1 ", s)).strip().rstrip(".").strip()  # units; other \text{}: content
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")  # thousands separators; "(1,2)", "1,2" and "1, 234" stay lists
    if (m := re.fullmatch(r"(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}", s)) and int(m[3]) < int(m[4]):
        s = f"{m[1]}({m[2]}+{m[3]}/{m[4]})"  # mixed number 2\frac{1}{2}
    return s, bool(is_text), pct


def _num(v: object) -> sympy.Expr:
    """v as an operand: refused if it is a tuple, set or relation, or holds a rational over _MAX_BITS."""
    if not isinstance(v, sympy.Expr) or any(max(abs(r.p), r.q).bit_length() > _MAX_BITS for r in v.atoms(sympy.Rational)):
        raise ValueError("not a number, or too large")
    return v


def _pow(base: sympy.Expr, exp: sympy.Expr) -> sympy.Expr:
    """base**exp, refused before sympy computes it when the result would be huge (9^9^9^9, 10^10^10)."""
    if exp.is_number:
        e, c = abs(complex(exp)), base if base.is_number else base.as_coeff_Mul()[0]  # (2x)^n computes 2^n
        bits = abs(math.log2(abs(c.p)) - math.log2(c.q)) if c.is_Rational and c.p else abs(math.log2(abs(complex(c)) or 1))
        if e * bits > _MAX_BITS or e > 10_000 and not base.is_number:
            raise ValueError("power too large")
        if c.is_Rational and not exp.is_Integer and max(abs(c.p), c.q).bit_length() > 1000:
            raise ValueError("root of a huge number")  # sympy would try to factor it
    return _num(sympy.Pow(base, exp))


class _Parser:
    """Pratt parser over whitelisted tokens. A value is a sympy.Expr or a (kind, tag, items) tuple: ("seq",
    brackets, ...) for tuples and intervals, ("set", "" or "cup", ...) for lists, sets and unions, ("rel", ops, ...)."""

    def __init__(self, s: str) -> None:
        self.toks, self.i, self.depth = _TOKEN.findall(s), 0, 0
        if "".join(self.toks) != re.sub(r"\s", "", s):
            raise ValueError("unexpected character")

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def take(self, want: str | None = None) -> str:
        if not self.peek() or want is not None and self.peek() != want:
            raise ValueError(f"expected {want or 'more input'}")
        self.i += 1
        return self.toks[self.i - 1]

    def skip(self, tok: str) -> bool:
        found = self.peek() == tok
        self.i += found
        return found

    def items(self) -> object:
        """rel ((, | \\cup) rel)*; several items make a list, or a union if any \\cup joins them."""
        out = [self.rel()]
        while self.peek() in (",", "\\cup") and len(out) < 2 * _MAX_ITEMS:
            out += [self.take(), self.rel()]
        return out[0] if len(out) == 1 else ("set", "cup" if "\\cup" in out[1::2] else "", out[::2])

    def rel(self) -> object:
        out = [self.expr()]
        while self.peek() in _RELS:
            out += [_RELS[self.take()], self.expr()]
        return out[0] if len(out) == 1 else ("rel", tuple(out[1::2]), out[::2])

    def expr(self, min_binding: int = 0) -> object:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise ValueError("nested too deeply")
        if self.peek() in ("+", "-"):
            left = (-1 if self.take() == "-" else 1) * _num(self.expr(3))  # -x^2 is -(x^2)
        else:
            left = self.atom()
        while True:
            op = self.peek()
            implicit = op[:1].isalnum() or op in ("(", "{", ".") or op[1:].isalpha() and op not in _RELS and op not in (
                "\\cup", "\\pm", "\\mp")  # 2x, 2\pi, x(x+1)
            binding, fn = (5, _pow) if op in ("^", "**") else _BINARY.get(op, (3, operator.mul) if implicit else (0, None))
            if binding <= min_binding:
                self.depth -= 1
                return left
            if not implicit:
                self.take()
            left = _num(fn(_num(left), _num(self.expr(binding - 1 if binding == 5 else binding))))  # ^ right-assoc

    def atom(self) -> object:
        t = self.take()
        name = t.lstrip("\\")
        if t[0].isdigit() or t[0] == ".":
            q = Fraction(t)  # exact decimal; the token regex caps exponents at 4 digits
            return _num(sympy.Rational(q.numerator, q.denominator))
        if t in _OPEN:
            value, close = self.items(), self.take()
            if close not in _OPEN[t]:
                raise ValueError("unbalanced brackets")
            if t + close in ("()", "[]", "{}") and not (isinstance(value, tuple) and value[0] == "set"):
                return value
            items = value[2] if isinstance(value, tuple) and value[:2] == ("set", "") else [value]
            return ("set", "", items) if "{" in t else ("seq", t + close, items)
        if t == "\\frac":
            return _num(self.expr(9)) / _num(self.expr(9))
        if name == "sqrt":
            root = sympy.Integer(2)
            if self.skip("["):  # \sqrt[3]{x}
                root = _num(self.expr())
                self.take("]")
            return _pow(_num(self.expr(9)), 1 / root)
        if name in _NAMES and isinstance(_NAMES[name], sympy.Basic):
            return _NAMES[name]
        if name in _NAMES:
            base = _num(self.expr(9)) if self.skip("_") else None  # \log_2 8
            power = _num(self.expr(9)) if self.skip("^") else None  # \sin^2 x
            x = _num(self.expr(3))
            if name not in ("log", "ln") and x.is_number and not abs(complex(x)) < 1e6:
                raise ValueError("function argument too large")  # exp(10^900) would take minutes
            value = _NAMES[name](x) if base is None else sympy.log(x, base)
            return value if power is None else _pow(value, power)
        if t[0].isalpha() or name.isalpha() and t not in _RELS:  # x, x_1, a_{n}, \alpha
            return sympy.Symbol(re.sub(r"[{}]", "", name))
        raise ValueError(f"unexpected {t!r}")


def _parse(s: str) -> object:
    if s.count("\\pm") + s.count("\\mp") == 1:  # 1 \pm \sqrt{2} is the list of both values
        return ("set", "", [_parse(re.sub(r"\\pm|\\mp", op, s)) for op in "+-"])
    parser = _Parser(s)
    value = parser.items()
    if parser.peek():
        raise ValueError(f"unexpected {parser.peek()!r}")
    return value


def _close(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Equal within relative tolerance, at three fixed points when there are free symbols."""
    if a == b or a.is_Rational and b.is_Rational and abs(a - b) <= _RTOL * max(abs(a), abs(b)):
        return True
    if a.is_Rational and b.is_Rational or any(v.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan) for v in (a, b)):
        return False
    syms = sorted(a.free_symbols | b.free_symbols, key=str)
    for k in range(3 if syms else 1):
        at = {s: sympy.Float(_POINTS[(k + 3 * j) % len(_POINTS)]) for j, s in enumerate(syms)}
        x, y = sympy.N(a.xreplace(at), 30), sympy.N(b.xreplace(at), 30)
        if not abs(x - y) <= _RTOL * max(abs(x), abs(y)):
            return False
    return True


def _same(a: object, b: object) -> bool:
    """Expressions by _close; tuples, intervals and relations in order; lists, sets and unions as multisets."""
    for _ in range(2):  # a one-element set is its element; "x = 5" is 5 unless the other side is a relation too
        if isinstance(a, tuple) and a[0] == "set" and len(a[2]) == 1:
            a = a[2][0]
        if isinstance(a, tuple) and a[:2] == ("rel", ("=",)) and isinstance(a[2][0], sympy.Symbol):
            a = a if isinstance(b, tuple) and b[0] == "rel" else a[2][1]
        a, b = b, a
    if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr):
        return _close(a, b)
    if not (isinstance(a, tuple) and isinstance(b, tuple)) or a[:2] != b[:2] or len(a[2]) != len(b[2]):
        return False
    if a[:2] == ("rel", ("=",)) and all(isinstance(v, sympy.Expr) for v in a[2] + b[2]):
        d, e = a[2][0] - a[2][1], b[2][0] - b[2][1]  # x + y = 5 matches 5 - y = x
        return _close(d, e) or _close(d, -e)
    if a[0] != "set":
        return all(_same(x, y) for x, y in zip(a[2], b[2], strict=True))
    rest = list(b[2])
    for x in a[2]:
        if (j := next((j for j, y in enumerate(rest) if _same(x, y)), None)) is None:
            return False
        del rest[j]
    return True


def _equivalent(response: str, gold: str, out: list[bool]) -> None:
    """Appends whether the two answers are equivalent; appends nothing (wrong) on any failure."""
    try:
        (a, a_text, a_pct), (b, b_text, b_pct) = _normalize(response), _normalize(gold)
        text = a_text or b_text  # text answers compare up to case and outer parentheses
        key = lambda s: re.sub(r"\s+", "", s).lower().strip("()") if text else re.sub(r"\s+", "", s)
        if not a.strip() or key(a) == key(b):
            out.append(bool(a.strip()))
            return
        x, y = _parse(a), _parse(b)
        golds = [y, y * 100 if a_pct else y / 100] if isinstance(y, sympy.Expr) and a_pct != b_pct else [y]
        out.append(any(_same(x, g) for g in golds))
    except Exception:  # unparseable, or refused by a bound
        pass


def grade_answer(response: str, gold: str) -> bool:
    """True iff the last \\boxed{...} of `response` is equivalent to `gold` (bare or boxed LaTeX).

    Never raises and never evaluates text: unparseable, over-long or slow (> 1 s) comparisons are simply False.
    """
    try:
        a, b = _last_boxed(response), _last_boxed(gold) if "\\boxed" in gold or "\\fbox" in gold else gold
    except (TypeError, AttributeError):
        return False
    if not a or not b or len(a) > _MAX_LEN or len(b) > _MAX_LEN:
        return False
    result: list[bool] = []
    worker = threading.Thread(target=_equivalent, args=(a, b, result), daemon=True)
    worker.start()
    worker.join(_TIMEOUT_S)
    return result == [True]


def grade_group(responses: list[str], gold: str) -> tuple[int, int]:
    """(correct responses, distinct correct responses) for one problem; each distinct text is graded once."""
    verdict = {text: grade_answer(text, gold) for text in set(responses)}
    return sum(verdict[t] for t in responses), len({t.strip() for t, ok in verdict.items() if ok})
