"""reco/tasks/code.py: code problems as prompts, responses as programs, programs as rewards (the code tasks of
reco.tasks).

Beside the code reward (reco/rewards/code.py, the sandbox) and the code datasets (reco/data/code.py); it imports nothing
of reco_mini or reco_scaled, and never runs a program: every program runs in the code reward's sandbox.

- Prompts. `completion_prompt(problem)` is for a base model, which continues it: the dataset's own prompt where it
  is code (HumanEval's signature and docstring, MBPP+'s docstring), otherwise the statement as comment lines and a
  line saying what to write (the function the tests call, or a program that reads stdin and writes stdout).
  `instruct_prompt(problem, tokenizer)` is for an instruct model: one user turn (`instruct_text`) through the
  tokenizer's chat template, asking for the complete program in one fenced ```python block.
- Programs. `completion_program(prompt, response, entry_point)`: the prompt and the response, cut at the first stop
  sequence (STOP_SEQUENCES, Codex's and HumanEval's: a line at column 0 starting ``class``, ``def``, ``#``, ``if``
  or ``print``) after the line that defines the entry point, the way HumanEval's completions are cut; a program
  for stdin/stdout (no entry point) is not cut. `fenced_program(response)`: the last fenced python block (```python,
  ```py or a bare ```), or "" when there is none. reco_mini's sampler and reco_scaled's engines stop at token ids;
  `completion_stop` and `tokens_through` say where a completion ends (after its stop sequence), and reco.tasks'
  code task cuts its response there, so no token after the stop sequence is trained.
- Rewards. `grade(programs, tests)`: reco.rewards.code.grade_many over a batch (parallel, identical jobs once); a
  program that does not parse (Python's ast, which never runs it) fails without a sandbox run, since it cannot pass.
- Keys. `program_key(program)`: equal programs up to formatting (spacing, comments, redundant parentheses) share a
  key, the dump of their syntax tree.
- Splits. `code_splits(data, eval_data)`: training and held-out problems, as reco.data.math.held_out_splits makes them.
"""
from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence

from reco.data.code import load_code_problems
from reco.data.math import held_out_splits
from reco.rewards import code as code_reward

STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
CODE_PROMPT_LAYOUTS = ("humaneval", "mbpp+")  # reco/data/code.py's layouts whose prompt is code a model continues
FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL)
REPLY = "Reply with the complete program in one ```python code block."


def task_line(problem: dict) -> str:
    """What to write, for a problem whose prompt is a statement: the function its tests call, or a program."""
    if problem["entry_point"]:
        return f"Write a Python function named `{problem['entry_point']}`."
    return "Write a Python program that reads standard input and writes standard output."


def completion_prompt(problem: dict) -> str:
    """A base model's prompt: the problem's code, or its statement as comment lines and the task line."""
    if problem["layout"] in CODE_PROMPT_LAYOUTS:
        return problem["prompt"]
    lines = [*problem["prompt"].strip().splitlines(), task_line(problem)]
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


def instruct_text(problem: dict) -> str:
    """The user turn of an instruct model's prompt: the problem, and a request for the program in a fenced block."""
    if problem["layout"] in CODE_PROMPT_LAYOUTS:
        code = problem["prompt"].lstrip("\n").rstrip()
        return f"Complete this Python code:\n```python\n{code}\n```\n{REPLY}"
    return f"{problem['prompt'].strip()}\n\n{task_line(problem)} {REPLY}"


def instruct_prompt(problem: dict, tokenizer) -> str:
    """An instruct model's prompt: instruct_text as one user turn, through the tokenizer's chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the code-chat task needs a tokenizer with a chat template; use the code task (completion "
                         "prompts) for a base model")
    messages = [{"role": "user", "content": instruct_text(problem)}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def completion_program(prompt: str, response: str, entry_point: str | None) -> str:
    """The program of a completion: `prompt` + `response`, cut at the first stop sequence after the line that
    defines `entry_point` (in the prompt, for HumanEval; else where the response writes it). Not cut without an
    entry point (a stdin/stdout program) or when the entry point is never defined."""
    stop = completion_stop(prompt, response, entry_point)
    return prompt + (response if stop is None else response[: stop[0]])


def completion_stop(prompt: str, response: str, entry_point: str | None) -> tuple[int, int] | None:
    """Where completion_program cuts `response`: (the start, the end) of its first stop sequence in it, or None where
    it is not cut. The response ends at the end of its stop sequence, as a sampler that stops at stop strings ends it
    (vLLM's `stop`, transformers' `stop_strings`); the tokens after it are not part of it."""
    program = prompt + response
    if not entry_point:
        return None
    found = re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", program, re.MULTILINE)
    if found is None:
        return None
    start = max(program.find("\n", found.end()), len(prompt))  # the def line itself is never cut
    cuts = [(i, i + len(stop)) for stop in STOP_SEQUENCES if (i := program.find(stop, start)) >= 0]
    if not cuts:
        return None
    begin, end = min(cuts)
    return begin - len(prompt), end - len(prompt)


def tokens_through(tokenizer, ids: Sequence[int], chars: int) -> int:
    """The fewest leading tokens of `ids` whose text (special tokens skipped) has at least `chars` characters: the
    tokens of a response that end at character `chars` of its text. Binary search: a prefix's text grows with it."""
    low, high = 0, len(ids)
    while low < high:
        mid = (low + high) // 2
        if len(tokenizer.decode(list(ids[:mid]), skip_special_tokens=True)) >= chars:
            high = mid
        else:
            low = mid + 1
    return low


def fenced_program(response: str) -> str:
    """The last fenced python block of an instruct model's response ("" when it has none)."""
    blocks = FENCED.findall(response)
    return blocks[-1] if blocks else ""


def parse(program: str) -> ast.Module | None:
    """The syntax tree of `program`, or None if it does not parse. Parsing never runs the program; syntax warnings
    (an invalid escape sequence) are not printed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte; RecursionError: deep nesting
        return None


def program_key(program: str) -> str:
    """The canonical key of a program: its syntax tree's dump (equal up to formatting), or its text if it does not
    parse."""
    tree = parse(program)
    return f"code:{ast.dump(tree)}" if tree is not None else f"text:{program}"


def grade(programs: Sequence[str], tests: Sequence, timeout_s: float | None = None) -> list[bool]:
    """Whether each program passes its tests (one per program: Python test source or (input, output) cases), all
    at once through code_reward.grade_many; a program that does not parse fails without running."""
    runnable = [i for i, p in enumerate(programs) if p.strip() and parse(p) is not None]
    verdicts = [False] * len(programs)
    if runnable:
        options = {} if timeout_s is None else {"timeout_s": timeout_s}
        passed = code_reward.grade_many([programs[i] for i in runnable], [tests[i] for i in runnable], **options)
        for i, ok in zip(runnable, passed):
            verdicts[i] = ok
    return verdicts


def code_splits(data: str, eval_data: str = "") -> dict[str, list[dict]]:
    """Training and held-out code problems (load_code_problems): `eval_data` if given, else a fixed fifth of `data`;
    bad input raises DataError (held_out_splits)."""
    return held_out_splits(data, eval_data, load_code_problems)
