"""reco/tasks: the problems reco_mini trains on, behind one small interface (Task).

A task gives reco_mini's loop everything that depends on the kind of problem: the splits, the prompt and the
tokens that end a response, the reward, each response's canonical key (OCCURRENCES["canonical"]), the class of each
response token where the task defines classes, and, for evaluation, its correct responses per solution form. The loop
asks the task and never the problem's type. TASKS holds the six built in: countdown, countdown-long, math, code,
code-chat and code-tiny, each a thin class over its module: countdown.py (Countdown and its tiny model), code.py (the
code tasks' prompts and programs), code_tiny.py, and for math reco/data/math.py and reco/rewards/math_grader.py.
TaskSettings holds reco_mini.Config's flags of the problems and the base model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from reco import hf
from reco.cli import fail, opt
from reco.data.math import DataError, build_prompt, math_splits
from reco.rewards import math_grader
from reco.tasks import code as ct
from reco.tasks import code_tiny as tiny
from reco.tasks import countdown as rc


@dataclass
class TaskSettings:
    """reco_mini.Config's flags of what it trains on: the math task's model and data, and Countdown's problems and its
    tiny SFT base (reco/tasks/countdown.py)."""
    model: str = opt("", "Hugging Face model name or directory (default: a tiny model built here)")
    data: str = opt("", "math, code problems: .jsonl/.parquet, dataset dir, hub NAME[:CONFIG][:SPLIT]; code: humaneval")
    eval_data: str = opt("", "held-out math, code problems, as --data (default: a fifth of --data)")
    n_train: int = opt(1024, "countdown RL training problems")
    n_test: int = opt(64, "held-out countdown problems, in each of the test and validation splits")
    hidden: int = opt(96, "width of the tiny model")
    layers: int = opt(3, "decoder layers of the tiny model")
    sft_steps: int = opt(400, "SFT steps of the tiny base model")
    sft_batch: int = opt(128, "SFT demonstrations per step")
    sft_lr: float = opt(3e-3, "peak SFT learning rate (one cycle)")


class Task:
    """The interface; the defaults are those of a task without token classes or solution forms."""
    name = ""
    max_new_tokens = 1024  # the response length limit (--max-new-tokens 0)
    eval_batch = 64  # responses sampled at once when evaluating (--eval-batch 0)
    head_chunk = 256  # row-tokens per slice of the lm head (--head-chunk -1)
    config_defaults: dict = {}  # other reco_mini.Config fields whose default this task replaces (reco.cli.resolve_defaults)

    def splits(self, cfg) -> dict[str, list]:
        """{"train": [...], "test": [...]} and optionally "val": the problems, from the run's Config."""
        raise NotImplementedError

    def prompt(self, problem, tokenizer) -> str:
        raise NotImplementedError

    def reward(self, problem, text: str) -> float:
        raise NotImplementedError

    def rewards(self, problems: list, texts: list[str]) -> list[float]:
        """reward of each (problem, text) pair: a rollout batch at once."""
        return [self.reward(p, t) for p, t in zip(problems, texts)]

    def stop_ids(self, tokenizer, model) -> list[int]:
        """The tokens that end a response (reco_mini.sample stops a row at the first of them)."""
        return [tokenizer.eos_token_id]

    def response_length(self, problem, ids: list[int], tokenizer) -> int:
        """How many of a sampled response's tokens `ids` are the response: all of them, unless the task ends a
        response earlier than its stop ids do (a code completion, at its stop sequence)."""
        return len(ids)

    def trim(self, problems: list, resp, mask, tokenizer):
        """(resp, mask) [B, T] of sampled rows with each cut to its response_length (tokens after it: pad, mask 0).
        Unchanged for a task that never cuts."""
        return resp, mask

    def canonical_keys(self, problems: list, group_size: int, texts: list[str]) -> list[str]:
        """Per response (problem-major, group_size each), a key that equal answers share."""
        return [f"text:{t}" for t in texts]

    def token_labels(self, problems: list, group_size: int, texts: list[str], resp, mask,
                     tokenizer) -> list[list[str]] | None:
        """Per response, the class of each response token; None for a task without classes."""
        return None

    def forms(self, problem, correct: list[str]) -> list[int] | None:
        """The correct responses of `problem` per solution form; None for a task without forms."""
        return None

    def tiny_base(self, cfg, splits: dict[str, list]):
        """(tokenizer, model): the base policy built here when no --model is given."""
        raise ValueError(f"--task {self.name} needs --model")

    def base(self, cfg, splits: dict[str, list]):
        """(tokenizer, model): the base policy, --model's (in hf.base_dtype; --lora-targets checked on it) or the task's
        tiny one, frozen."""
        if not cfg.model:
            tokenizer, model = self.tiny_base(cfg, splits)
        else:
            tokenizer, model = hf.load_hf(cfg.model, cfg.device, hf.base_dtype(cfg))
            hf.check_lora_targets(cfg, model)
        return tokenizer, model.requires_grad_(False)


class Countdown(Task):
    """Countdown (countdown.py): reach the target with three numbers and + - * ( ); a tiny model is built for it."""
    name, max_new_tokens, eval_batch, head_chunk = "countdown", 12, 4096, 0

    def splits(self, cfg) -> dict[str, list]:
        return rc.make_splits(cfg)

    def prompt(self, problem, tokenizer) -> str:
        return problem.prompt

    def reward(self, problem, text: str) -> float:
        return rc.countdown_reward(problem, text)

    def canonical_keys(self, problems: list, group_size: int, texts: list[str]) -> list[str]:
        flat = [p for p in problems for _ in range(group_size)]
        return [rc.response_key(p, t) for p, t in zip(flat, texts)]

    def forms(self, problem, correct: list[str]) -> list[int]:
        return rc.form_counts(problem, correct)

    def tiny_base(self, cfg, splits: dict[str, list]):
        """A character tokenizer and the tiny model SFT-ed on skewed demonstrations (cached under runs/cache)."""
        tokenizer = rc.char_tokenizer(cfg.task)
        return tokenizer, rc.load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"]))


class CountdownLong(Countdown):
    """The same problems answered by a derivation whose tokens are fork, style or determined (countdown.token_labels)."""
    name, max_new_tokens = "countdown-long", rc.LONG_MAX_NEW_TOKENS

    def token_labels(self, problems: list, group_size: int, texts: list[str], resp, mask,
                     tokenizer) -> list[list[str]]:
        return rc.token_labels(resp, mask, tokenizer)


class Math(Task):
    """Math word problems from a JSONL file ('problem', 'answer'), graded by math_grader; needs --model."""
    name = "math"

    def splits(self, cfg) -> dict[str, list]:
        try:
            return math_splits(cfg.data, cfg.eval_data)
        except DataError as e:  # bad rows: one line naming the file, line and field, and exit code 2
            fail(str(e))

    def prompt(self, problem, tokenizer) -> str:
        return build_prompt(tokenizer, problem["problem"], self.template(tokenizer))

    @staticmethod
    def template(tokenizer) -> str:
        return "chat" if getattr(tokenizer, "chat_template", None) else "plain"

    def reward(self, problem, text: str) -> float:
        return float(math_grader.grade_answer(text, problem["answer"]))  # math-verify in killable workers

    def rewards(self, problems: list, texts: list[str]) -> list[float]:
        """A rollout batch graded in parallel in the grader's worker processes (math_grader.grade_many)."""
        return [float(ok) for ok in math_grader.grade_many(texts, [p["answer"] for p in problems])]

    def stop_ids(self, tokenizer, model) -> list[int]:
        """The EOS, the model's generation config's EOS ids and a chat turn's end (hf.stop_token_ids)."""
        return hf.stop_token_ids(tokenizer, self.template(tokenizer), getattr(model, "generation_config", None))

    def canonical_keys(self, problems: list, group_size: int, texts: list[str]) -> list[str]:
        """The normalised last \\boxed answer; a response without one keys on its own text."""
        boxes = [math_grader._last_boxed(t) for t in texts]
        return [f"answer:{math_grader._normalize(b)[0]}" if b is not None else f"text:{t}" for b, t in zip(boxes, texts)]


class Code(Task):
    """Code problems from a dataset (reco/data/code.py: HumanEval, MBPP, EvalPlus, APPS, CodeContests, LiveCodeBench)
    for
    a base model, which continues a completion prompt; a response's program is the prompt and the response cut at the
    stop sequences (code.py), graded by its tests in the code sandbox (reco/rewards/code.py). Needs --model and --data."""
    name, chat = "code", False

    def splits(self, cfg) -> dict[str, list]:
        try:
            return ct.code_splits(cfg.data, cfg.eval_data)
        except DataError as e:
            fail(str(e))

    def prompt(self, problem, tokenizer) -> str:
        return ct.instruct_prompt(problem, tokenizer) if self.chat else ct.completion_prompt(problem)

    def program(self, problem, text: str) -> str:
        """The program a response stands for (code.completion_program or fenced_program)."""
        if self.chat:
            return ct.fenced_program(text)
        return ct.completion_program(ct.completion_prompt(problem), text, problem["entry_point"])

    def reward(self, problem, text: str) -> float:
        return self.rewards([problem], [text])[0]

    def rewards(self, problems: list, texts: list[str]) -> list[float]:
        """A rollout batch's programs graded at once, in parallel (reco.rewards.code.grade_many)."""
        programs = [self.program(p, t) for p, t in zip(problems, texts)]
        return [float(ok) for ok in ct.grade(programs, [p["tests"] for p in problems])]

    def stop_ids(self, tokenizer, model) -> list[int]:
        """The EOS, the model's generation config's EOS ids and, with a chat template, a chat turn's end."""
        return hf.stop_token_ids(tokenizer, "chat" if self.chat else "plain", getattr(model, "generation_config", None))

    def response_length(self, problem, ids: list[int], tokenizer) -> int:
        """A completion ends with its stop sequence (code.completion_stop): the tokens through it."""
        if self.chat:
            return len(ids)
        stop = ct.completion_stop(ct.completion_prompt(problem), tokenizer.decode(ids, skip_special_tokens=True),
                                  problem["entry_point"])
        return len(ids) if stop is None else ct.tokens_through(tokenizer, ids, stop[1])

    def trim(self, problems: list, resp, mask, tokenizer):
        if self.chat:
            return resp, mask
        sampled = mask.sum(-1).long().tolist()  # a row's tokens are left-aligned: mask 1 up to and including its stop token
        lengths = [self.response_length(p, row[:n].tolist(), tokenizer) for p, row, n in zip(problems, resp, sampled)]
        keep = torch.arange(resp.shape[1], device=resp.device)[None, :] < torch.tensor(lengths, device=resp.device)[:, None]
        return resp.masked_fill(~keep, tokenizer.pad_token_id), mask * keep.to(mask.dtype)

    def canonical_keys(self, problems: list, group_size: int, texts: list[str]) -> list[str]:
        """The program's key: programs equal up to formatting share it (code.program_key)."""
        flat = [p for p in problems for _ in range(group_size)]
        return [ct.program_key(self.program(p, t)) for p, t in zip(flat, texts)]


class CodeChat(Code):
    """The same problems for an instruct model: a chat-template prompt asking for one fenced ```python block, whose
    last such block is the program."""
    name, chat = "code-chat", True


class CodeTiny(Task):
    """code-tiny (code_tiny.py): write f(x) from two numbers and one example, paid on hidden tests run in the code
    sandbox; a tiny model is built for it. Sized (config_defaults: a smaller model, fewer samples and RL steps than
    Countdown's) so that `python reco_mini.py --task code-tiny` prints its table within 5 minutes on 2 busy CPU
    cores, much of it spent running programs in the sandbox."""
    name, max_new_tokens, eval_batch, head_chunk = "code-tiny", tiny.MAX_NEW_TOKENS, 4096, 0
    config_defaults = {"hidden": 64, "layers": 2, "n_eval": 64, "steps": 20, "prompts_per_step": 16}

    def __init__(self) -> None:
        self.known: dict[tuple[str, str], bool] = {}  # verdicts of the programs graded so far (code_tiny.grade)

    def splits(self, cfg) -> dict[str, list]:
        return tiny.make_splits(cfg)

    def prompt(self, problem, tokenizer) -> str:
        return problem.prompt

    def reward(self, problem, text: str) -> float:
        return self.rewards([problem], [text])[0]

    def rewards(self, problems: list, texts: list[str]) -> list[float]:
        return tiny.grade(problems, texts, self.known)

    def canonical_keys(self, problems: list, group_size: int, texts: list[str]) -> list[str]:
        return [ct.program_key(tiny.program(t)) for t in texts]

    def forms(self, problem, correct: list[str]) -> list[int]:
        return tiny.form_counts(correct)

    def tiny_base(self, cfg, splits: dict[str, list]):
        """Countdown's character tokenizer (with x) and tiny model, SFT-ed on skewed demonstrations (cached).
        On a CPU with OMP_NUM_THREADS unset, torch runs on one thread from here on (code_tiny.one_thread)."""
        tiny.one_thread(cfg.device)
        tokenizer = tiny.char_tokenizer()
        return tokenizer, tiny.load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"]))


TASKS: dict[str, Task] = {task.name: task for task in (Countdown(), CountdownLong(), Math(), Code(), CodeChat(), CodeTiny())}
