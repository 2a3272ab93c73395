"""reco/tasks/code_tiny.py: reco_mini's code task for a CPU: write a function from two numbers and one example.

A problem shows two numbers and one example of a function f, e.g. ``3,7,2>013:`` (numbers 3 and 7; f(2) = 13).
The response is the expression f returns; the program is ``def f(x):\\n    return <response>\\n``, and it is paid
when it passes hidden tests, f at HIDDEN_XS (never shown), run in the code sandbox. So a program that only fits
the example, or returns 13, is not paid. f is one of five forms of x and the two numbers (FORMS, Countdown's forms
with x for a number), with the numbers in either role; a problem whose example fits two different functions is
never drawn, so the prompt determines f. Each problem has many distinct correct programs: its form's commuted
writings (WRITINGS, two to six), and any other expression equal to f at the hidden points (``2*x+x+7``).

As in countdown.py, the SFT demonstrations draw forms with Countdown's skewed prior (SFT_FORM_PRIOR) and one of
the form's writings uniformly, while RL and held-out problems draw forms uniformly: held-out problems of a rare
form are the ones a concentrating policy loses at large k. The tiny model, its character tokenizer (plus ``x``) and
its SFT are countdown.py's. Canonical keys are code.program_key's (equal programs up to formatting share one); a
correct program's form is its expression's shape up to commutation (countdown.expression_shape).
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from reco.tasks import code
from reco.tasks import countdown as rc

FORMS = ["{a}*x+{b}", "{a}*x-{b}", "(x+{a})*{b}", "(x-{a})*{b}", "x+{a}+{b}"]
WRITINGS = [  # per form, the programs a demonstration writes: the form's writings up to commutation of + and *
    ["{a}*x+{b}", "x*{a}+{b}", "{b}+{a}*x", "{b}+x*{a}"],
    ["{a}*x-{b}", "x*{a}-{b}"],
    ["(x+{a})*{b}", "({a}+x)*{b}", "{b}*(x+{a})", "{b}*({a}+x)"],
    ["(x-{a})*{b}", "{b}*(x-{a})"],
    ["x+{a}+{b}", "x+{b}+{a}", "{a}+x+{b}", "{b}+x+{a}", "{a}+{b}+x", "{b}+{a}+x"],
]
FUNCTIONS = [  # the value of each form: trusted code, for drawing problems (a response is never evaluated here)
    lambda a, b, x: a * x + b, lambda a, b, x: a * x - b, lambda a, b, x: (x + a) * b, lambda a, b, x: (x - a) * b,
    lambda a, b, x: x + a + b,
]
SFT_FORM_PRIOR = rc.SFT_FORM_PRIOR
MAX_NUMBER = 9  # the two numbers and the example's x are drawn from 1..9
HIDDEN_XS = (-2, 0, 10, 17)  # the tests: f at these points
PROGRAM = "def f(x):\n    return {}\n"
MAX_POSITIONS, MAX_NEW_TOKENS = 64, 10
FORM_SHAPES = [rc.expression_shape(f.format(a=1, b=2), names=("x",)) for f in FORMS]


@dataclass(frozen=True)
class Problem:
    numbers: tuple[int, int]  # as shown, in a random order
    x: int  # the example: f(x) = y
    y: int
    hidden: tuple[int, ...]  # f at HIDDEN_XS: the tests, not in the prompt

    @property
    def prompt(self) -> str:  # fixed width, so prompts batch without padding
        return f"{self.numbers[0]},{self.numbers[1]},{self.x}>{self.y:03d}:"

    @property
    def tests(self) -> str:
        return "".join(f"assert f({x}) == {y}\n" for x, y in zip(HIDDEN_XS, self.hidden))


def candidates(numbers: tuple[int, int], x: int, y: int) -> set[tuple[int, ...]]:
    """The distinct functions (their values at HIDDEN_XS) of every form, with the numbers in either role, that give
    f(x) = y."""
    found = set()
    for a, b in (numbers, numbers[::-1]):
        for value in FUNCTIONS:
            if value(a, b, x) == y:
                found.add(tuple(value(a, b, t) for t in HIDDEN_XS))
    return found


def make_problem(rng: random.Random, form_prior: list[float]) -> tuple[Problem, str]:
    """A random problem whose example determines f, and a demonstration: one of its form's writings."""
    while True:
        form = rng.choices(range(len(FORMS)), weights=form_prior)[0]
        a, b = rng.sample(range(1, MAX_NUMBER + 1), 2)
        x = rng.randint(1, MAX_NUMBER)
        y = FUNCTIONS[form](a, b, x)
        shown = (a, b) if rng.random() < 0.5 else (b, a)
        if 0 <= y <= 999 and len(candidates(shown, x, y)) == 1:
            hidden = tuple(FUNCTIONS[form](a, b, t) for t in HIDDEN_XS)
            return Problem(shown, x, y, hidden), rng.choice(WRITINGS[form]).format(a=a, b=b)


def make_splits(cfg) -> dict[str, list[Problem]]:
    """Disjoint RL train / validation / test problems (forms drawn uniformly); cfg.n_train, cfg.n_test sizes."""
    rng, seen, splits = random.Random(1234), set(), {}
    for name, size in (("test", cfg.n_test), ("val", cfg.n_test), ("train", cfg.n_train)):
        splits[name] = []
        while len(splits[name]) < size:
            problem, _ = make_problem(rng, [1.0] * len(FORMS))
            if problem not in seen:
                seen.add(problem)
                splits[name].append(problem)
    return splits


def program(response: str) -> str:
    return PROGRAM.format(response)


def grade(problems: list[Problem], responses: list[str], known: dict[tuple[str, str], bool]) -> list[float]:
    """1.0 for each response whose program passes its problem's hidden tests, in the code sandbox. `known` holds
    the verdict of every (program, tests) already graded, so each is run once per process: code-tiny's programs are
    arithmetic on one integer, with one verdict."""
    jobs = [(program(t), p.tests) for p, t in zip(problems, responses)]
    new = list(dict.fromkeys(job for job in jobs if job not in known))
    if new:
        known.update(zip(new, code.grade([j[0] for j in new], [j[1] for j in new])))
    return [float(known[job]) for job in jobs]


def response_form(response: str) -> int | None:
    """The index in FORMS of a response's expression, up to commutation of + and * and redundant parentheses
    (7+3*x is form 0, 7*(3+x) is form 2); None for any other program."""
    shape = rc.expression_shape(response, names=("x",))
    return FORM_SHAPES.index(shape) if shape in FORM_SHAPES else None


def form_counts(correct: list[str]) -> list[int]:
    """Correct responses per FORMS index, and one last column for any other program."""
    found = [response_form(t) for t in correct]
    return [found.count(f) for f in range(len(FORMS))] + [found.count(None)]


def solving_forms(problem: Problem) -> set[int]:
    """The indices of the FORMS that compute the problem's f, with the numbers in some role."""
    return {f for a, b in (problem.numbers, problem.numbers[::-1]) for f, value in enumerate(FUNCTIONS)
            if tuple(value(a, b, t) for t in HIDDEN_XS) == problem.hidden}


def demonstration(rng: random.Random, exclude: set) -> tuple[str, str] | None:
    """countdown.sft's demonstration: a problem drawn with SFT_FORM_PRIOR and one of its form's writings."""
    problem, response = make_problem(rng, SFT_FORM_PRIOR)
    return None if problem in exclude else (problem.prompt, response)


def char_tokenizer():
    """Countdown's character tokenizer with x."""
    return rc.char_tokenizer("code-tiny", extra_chars="x")


def base_cache_path(cfg) -> Path:
    """Where the SFT base is cached: runs/cache/<the settings that shape it>/model.pt."""
    prior = "_".join(f"{p:g}" for p in SFT_FORM_PRIOR)
    return Path("runs/cache") / (f"code-tiny-base-h{cfg.hidden}-l{cfg.layers}-s{cfg.sft_steps}-b{cfg.sft_batch}"
                                 f"-lr{cfg.sft_lr}-seed{cfg.seed}-n{cfg.n_test}-prior{prior}") / "model.pt"


def one_thread(device: str) -> None:
    """One torch thread on a CPU unless OMP_NUM_THREADS says otherwise, as reco_scaled and the TRL example run on
    CPU: the tiny model gains nothing from a second thread, and the sandbox's graders need the cores. On this
    project's 2-core machine under load, 150 SFT steps took 185 s on two threads and 19 s on one."""
    if torch.device(device).type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def load_base(cfg, tokenizer, exclude: set[Problem]):
    """The tiny model SFT-ed on code-tiny's skewed demonstrations (countdown.load_base), cached."""
    return rc.load_base(cfg, tokenizer, exclude, demonstration, base_cache_path(cfg), MAX_POSITIONS)
