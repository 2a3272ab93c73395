"""A code reward for verl's reward manager: `compute_score` runs the response's program against the row's tests in
reco.rewards.code's sandbox. It imports nothing of verl, so it is tested (and usable) without verl installed.

verl 0.9.1 loads a custom reward function by path and name and calls it once per response, with keywords, in its
reward workers' thread pools (so several programs run in the sandbox at once):

    reward.custom_reward_function.path=pkg://reco_scaled.integrations.verl_code
    reward.custom_reward_function.name=compute_score

A row of verl's parquet (`verl_row` writes one from a reco.data.code problem) holds the tests as
``reward_model.ground_truth``, JSON text (one string column whatever the problem): a string of Python test source,
or a list of [input, output] pairs (stdin/stdout cases). The program is the response's last fenced python block
(verl's prompts are chat turns), unless ``extra_info.completion_prompt`` is set: then it is that prompt and the
response, cut at the stop sequences after ``extra_info.entry_point`` (reco.tasks.code).
"""
from __future__ import annotations

import json

from reco.tasks import code as code_task


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **kwargs) -> float:
    """1.0 if the response's program passes the tests in `ground_truth` (JSON), else 0.0 (verl's reward-function
    signature; `data_source` and verl's extra keywords are not used)."""
    info = extra_info or {}
    if info.get("completion_prompt") is not None:
        program = code_task.completion_program(info["completion_prompt"], solution_str, info.get("entry_point"))
    else:
        program = code_task.fenced_program(solution_str)
    return float(code_task.grade([program], [json.loads(ground_truth)])[0])


def verl_row(problem: dict, data_source: str, index: int) -> dict:
    """A row of verl's RL parquet for a reco.data.code problem: a chat prompt asking for a fenced python block
    (code_task.instruct_text), its tests (JSON) as the ground truth for compute_score."""
    return {"data_source": data_source, "prompt": [{"role": "user", "content": code_task.instruct_text(problem)}],
            "ability": "code", "reward_model": {"style": "rule", "ground_truth": json.dumps(problem["tests"])},
            "extra_info": {"index": index, "id": problem["id"]}}
