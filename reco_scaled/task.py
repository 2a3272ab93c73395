"""Training problems, their prompts, the reward, and the data position.

task: countdown uses reco.tasks.countdown's problems (make_splits) and reco.tasks' prompt and reward.
task: math reads problems with reco_scaled.data.load_problems, formats them with
reco_scaled.data.build_prompt and grades a step's responses at once through reco.tasks' math task
(reco.rewards.math_grader.grade_many). task: code reads problems with reco.data.code.load_code_problems and prompts
and grades them through reco.tasks' code task (data.template plain) or code-chat task (chat): a step's programs run
at once in the code reward's sandbox (reco.rewards.code.grade_many).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from reco.hf import has_bos
from reco.tasks import TASKS
from reco.tasks.countdown import make_splits
from reco_scaled.config import ConfigError, RunConfig
from reco_scaled.rollout.base import Rollout


@dataclass
class Task:
    problems: list  # reco_mini.Problem (countdown), {"problem", "answer"} dicts (math) or reco.data.code's (code)
    prompt_ids: list[list[int]]  # tokenised prompt of each problem
    task: object = TASKS["math"]  # the reco.tasks task that scores a response

    def rewards(self, indices: list[int], responses: list[str]) -> list[float]:
        """The reward of each (problem index, response) pair; a math or code batch is graded in parallel (grade_many)."""
        return self.task.rewards([self.problems[i] for i in indices], responses)

    def trim(self, indices: list[int], rollout: Rollout, tokenizer) -> Rollout:
        """Each response (of problem indices[j]) cut to the task's response_length: a code completion ends after its
        stop sequence, as under a sampler that stops at stop strings; its sampler log-probs are cut with it."""
        lengths = [self.task.response_length(self.problems[i], ids, tokenizer) for i, ids in zip(indices, rollout.response_ids)]
        if all(n == len(ids) for n, ids in zip(lengths, rollout.response_ids)):
            return rollout
        return Rollout(rollout.prompt_ids, [ids[:n] for ids, n in zip(rollout.response_ids, lengths)],
                       [lp[:n] for lp, n in zip(rollout.sampler_logprobs, lengths)])


def load_task(cfg: RunConfig, tokenizer, problems: list[dict] | None = None) -> Task:
    """The training problems and their tokenised prompts; task math's or code's `problems`, when given (reco_scaled.train
    reads them before the model loads), are not read again."""
    scorer = TASKS["code-chat" if cfg.data.template == "chat" else "code"] if cfg.task == "code" else TASKS[cfg.task]
    if cfg.task == "countdown":
        from reco_scaled.model import mini_config

        problems = make_splits(mini_config(cfg))["train"]
        texts = [TASKS["countdown"].prompt(p, tokenizer) for p in problems]
    elif cfg.task == "code":
        from reco.data.code import load_code_problems

        problems = problems or load_code_problems(cfg.data.train)
        texts = [scorer.prompt(p, tokenizer) for p in problems]
    else:
        from reco_scaled.data import build_prompt, load_problems

        problems = problems or load_problems(cfg.data.train, problem_key=cfg.data.problem_key,
                                             answer_key=cfg.data.answer_key)
        texts = [build_prompt(tokenizer, p["problem"], template=cfg.data.template) for p in problems]
    ids = [tokenizer(t, add_special_tokens=not has_bos(t, tokenizer)).input_ids for t in texts]
    keep = [i for i, x in enumerate(ids) if len(x) <= cfg.data.max_prompt_tokens]
    if not keep:
        raise ConfigError(f"config key 'data.max_prompt_tokens' ({cfg.data.max_prompt_tokens}) is shorter than every prompt")
    return Task([problems[i] for i in keep], [ids[i] for i in keep], scorer)


class PromptSampler:
    """Epoch-wise shuffled problem order; its state is the number of prompts drawn so far.

    Every rank draws the same global batch and keeps its own slice, so the data position is one
    integer and resuming at any world size continues the same sequence of prompts.
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.consumed = n, seed, 0

    def next(self, count: int) -> list[int]:
        out = []
        while len(out) < count:
            epoch, offset = divmod(self.consumed, self.n)
            seeded = torch.Generator(device="cpu").manual_seed(self.seed * 100_003 + epoch)
            order = torch.randperm(self.n, generator=seeded, device="cpu")  # host indices into the problem list
            take = order[offset: offset + count - len(out)].tolist()
            out += take
            self.consumed += len(take)
        return out

    def state_dict(self) -> dict:
        return {"consumed": self.consumed, "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        if state["n"] != self.n:
            raise ValueError(f"the checkpoint's data position is for {state['n']} problems, this run has {self.n}")
        self.consumed = state["consumed"]

