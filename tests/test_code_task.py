"""reco_mini's code tasks: programs from responses (reco.tasks.code), the code and code-chat tasks on HumanEval,
code-tiny (reco.tasks.code_tiny), their settings, and `reco_mini.main` end to end on a tiny model, offline.

Every program that is run, runs in the code reward's sandbox; the spies below wrap reco.rewards.code.grade_many to see
what reached it.
"""
from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from tiny_code_model import ADD_ID, MBPP_ROW

import reco_mini
from reco import cli
from reco.data.code import load_code_problems
from reco.tasks import TASKS, countdown
from reco.tasks import code as ct
from reco.tasks import code_tiny as tiny

HUMANEVAL = {p["id"]: p for p in load_code_problems("humaneval")}
ADD = HUMANEVAL[ADD_ID]  # def add(x: int, y: int): ...
STDIN_ROW = {"problem_id": 7, "question": "Print the sum of two integers read from one line.",
             "input_output": '{"inputs": ["1 2\\n", "5 5\\n"], "outputs": ["3\\n", "10\\n"]}', "solutions": "[]"}


def local_problems(tmp_path: Path, rows: list[dict], name: str = "rows.jsonl") -> list[dict]:
    import json

    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_code_problems(path)


# ---------------------------------------------------------------- programs from responses

def test_a_completion_is_cut_at_the_first_stop_sequence_after_the_entry_point():
    prompt = ADD["prompt"]
    body = "    return x + y\n"
    for tail in ("\ndef sub(x, y):\n    return x - y\n", "\nprint(add(1, 2))\n", "\nif __name__ == '__main__':\n    pass\n",
                 "\nclass A:\n    pass\n", "\n# a comment\n"):
        assert ct.completion_program(prompt, body + tail, "add") == prompt + body
    # a nested def, an indented if and a local print are the function's own lines: never cut
    inner = "    def helper(a):\n        return a\n    if x:\n        print(x)\n    return helper(x) + y\n"
    assert ct.completion_program(prompt, inner, "add") == prompt + inner
    # MBPP-style: the response writes the def; the cut starts after its line, keeping an earlier helper
    written = "def helper(a):\n    return a\n\ndef add2(a, b):\n    return helper(a) + b\nprint(add2(1, 2))"
    assert ct.completion_program("# task\n", written, "add2") == "# task\n" + written[: written.index("\nprint")]
    assert ct.completion_program("", "def add2(a, b): return a + b", "add2") == "def add2(a, b): return a + b"
    # no entry point (stdin/stdout), or one never defined: the program is left whole
    script = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert ct.completion_program("# task\n", script, None) == "# task\n" + script
    assert ct.completion_program("", "x = 1\ndef other():\n    pass\n", "add2") == "x = 1\ndef other():\n    pass\n"


def test_a_completion_ends_after_its_stop_sequence_where_its_program_is_cut():
    prompt, body = ADD["prompt"], "    return x + y\n"
    for tail in ("\ndef sub(x, y):\n    return x - y\n", "\nprint(add(1, 2))\n", "\n# a comment\n\nclass A: pass"):
        begin, end = ct.completion_stop(prompt, body + tail, "add")
        assert prompt + (body + tail)[:begin] == ct.completion_program(prompt, body + tail, "add") == prompt + body
        assert (body + tail)[begin:end] in ct.STOP_SEQUENCES and end == len(body) + len((body + tail)[begin:end])
    assert ct.completion_stop(prompt, body, "add") is None and ct.completion_stop("# task\n", "print(1)\n", None) is None


def _bpe_tokenizer():
    """A byte-level BPE tokenizer trained here on code, so that tokens span several characters and a stop sequence
    may start, end or sit inside one (the char tokenizers of the other tests have one character per token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    corpus = [ADD["prompt"] + s for s in ADD_LIKE] * 20
    backend.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<eos>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")


ADD_LIKE = ["    return x + y\n\ndef sub(x, y):\n    return x - y\n", "    return x + y\nprint(add(1, 2))\n",
            "    return y + x\n\n\nif __name__ == '__main__':\n    pass\n", "    return x+y\n# done\n\nclass A: pass\n"]


def test_tokens_through_a_character_is_the_shortest_prefix_that_reaches_it():
    tokenizer = _bpe_tokenizer()
    for text in ADD_LIKE:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        assert len(ids) < len(text) and tokenizer.decode(ids) == text  # multi-character tokens, decoded back exactly
        for chars in range(len(text) + 1):  # against a scan over every prefix
            first = next(t for t in range(len(ids) + 1) if len(tokenizer.decode(ids[:t])) >= chars)
            assert ct.tokens_through(tokenizer, ids, chars) == first


def test_the_code_task_trains_a_completion_only_through_its_stop_sequence():
    """reco_mini's rollout cuts each row with Task.trim; reco_scaled cuts a Rollout with the same response_length."""
    import torch

    from reco_scaled.rollout.base import Rollout
    from reco_scaled.task import Task as ScaledTask

    task, tokenizer = TASKS["code"], _bpe_tokenizer()
    eos = tokenizer.convert_tokens_to_ids("<eos>")
    rows = [tokenizer(t, add_special_tokens=False).input_ids for t in ADD_LIKE] + [
        tokenizer("    return x + y\n", add_special_tokens=False).input_ids + [eos]]
    width = max(map(len, rows)) + 2
    resp = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
    cut, kept = task.trim([ADD] * len(rows), resp, mask, tokenizer)
    texts = tokenizer.batch_decode(cut, skip_special_tokens=True)
    for text, full, n in zip(texts, ADD_LIKE, kept.sum(-1).long().tolist()):
        begin, end = ct.completion_stop(ADD["prompt"], full, "add")
        assert text.startswith(full[:end]) and full[begin:end] in ct.STOP_SEQUENCES  # through the stop sequence,
        assert len(tokenizer.decode(tokenizer(full, add_special_tokens=False).input_ids[: n - 1])) < end  # no token more
        assert ct.completion_program(ADD["prompt"], text, "add") == ct.completion_program(ADD["prompt"], full, "add")
    assert torch.equal(cut[-1], resp[-1]) and torch.equal(kept[-1], mask[-1])  # no stop sequence: the row is whole
    assert torch.all(cut[kept == 0] == tokenizer.pad_token_id) and torch.all(kept <= mask)
    chat = TASKS["code-chat"].trim([ADD], resp, mask, tokenizer)  # a chat answer ends at its EOS or turn end
    assert chat[0] is resp and chat[1] is mask
    # reco_scaled: the same lengths, the sampler's log-probs cut with the tokens
    logps = [[-0.5 - j for j in range(len(r))] for r in rows]
    ro = ScaledTask([ADD], [[0]], task).trim([0] * len(rows), Rollout([[0]] * len(rows), rows, logps), tokenizer)
    assert [len(r) for r in ro.response_ids] == kept.sum(-1).long().tolist()
    assert all(lp == full[: len(lp)] for lp, full in zip(ro.sampler_logprobs, logps))
    assert all(r == full[: len(r)] for r, full in zip(ro.response_ids, rows))


def test_the_last_fenced_python_block_is_the_program():
    two = "First:\n```python\ndef f():\n    return 1\n```\nBetter:\n```py\ndef f():\n    return 2\n```\nDone."
    assert ct.fenced_program(two) == "def f():\n    return 2\n"
    assert ct.fenced_program("```\nprint(1)\n```") == "print(1)\n"
    assert ct.fenced_program("```bash\nls\n```") == ""  # not a python block
    assert ct.fenced_program("def f():\n    return 1\n") == ""  # no block at all
    assert ct.fenced_program("```python\ndef f():\n    return 1\n") == ""  # never closed (cut at the length limit)


def test_program_keys_are_equal_up_to_formatting():
    same = ["def f(x):\n    return 3*x+7\n", "def f(x):\n    return (3 * x) + 7  # comment\n",
            "def f( x ):\n\n    return ((3*x)+7)\n"]
    assert len({ct.program_key(p) for p in same}) == 1
    assert ct.program_key("def f(x):\n    return x*3+7\n") != ct.program_key(same[0])  # commuted: another program
    assert ct.program_key("def f(:") == "text:def f(:"


def test_programs_that_do_not_parse_never_reach_the_sandbox(graded):
    good, bad = "def f():\n    return 1\n", "def f(:\n    return 1\n"
    assert ct.grade([good, bad, "", "def f():\n    return 2\n"], ["assert f() == 1\n"] * 4) == [True, False, False, False]
    assert bad not in graded and "" not in graded and good in graded
    assert ct.grade([bad], ["assert f() == 1\n"]) == [False]


# ---------------------------------------------------------------- the code and code-chat tasks on real data

def test_code_task_pays_humaneval_canonical_solutions_and_not_wrong_ones(graded):
    task, problems = TASKS["code"], [HUMANEVAL[f"HumanEval/{i}"] for i in (0, 2, 53, 101)]
    solutions = [p["solution"].removeprefix(p["prompt"]) for p in problems]
    assert [task.prompt(p, None) for p in problems] == [p["prompt"] for p in problems]
    trailing = [s + "\n\ndef check(candidate):\n    pass\nprint('ok')\n" for s in solutions]  # cut before running
    assert task.rewards(problems, trailing) == [1.0] * 4
    assert all("print('ok')" not in p for p in graded)
    assert task.rewards(problems, ["    return None\n"] * 4) == [0.0] * 4


def test_statement_prompts_name_what_to_write(tmp_path):
    mbpp, stdin = local_problems(tmp_path, [MBPP_ROW]) + local_problems(tmp_path, [STDIN_ROW], "stdin.jsonl")
    prompt = ct.completion_prompt(mbpp)
    assert prompt == "# Write a function to add two numbers.\n# Write a Python function named `add2`.\n"
    assert ast.parse(prompt).body == []  # comment lines only: any statement text is valid code
    assert "reads standard input" in ct.completion_prompt(stdin)
    task = TASKS["code"]
    assert task.rewards([mbpp, mbpp], ["def add2(a, b):\n    return a + b\nprint(add2(1, 2))", "def add2(a, b):\n    return a"]) \
        == [1.0, 0.0]
    assert task.rewards([stdin], ["a, b = map(int, input().split())\nprint(a + b)\n"]) == [1.0]


def test_code_chat_asks_for_a_fenced_block_and_grades_the_last_one():
    from tiny_code_model import char_tokenizer

    task, tokenizer = TASKS["code-chat"], char_tokenizer()
    prompt = task.prompt(ADD, tokenizer)
    assert prompt.startswith("<|user|>Complete this Python code:\n```python\ndef add(") and prompt.endswith("<|assistant|>")
    right = "Here:\n```python\ndef add(x: int, y: int):\n    return x + y\n```"
    assert task.rewards([ADD] * 3, [right, right.replace("x + y", "x - y"), "def add(x, y):\n    return x + y\n"]) \
        == [1.0, 0.0, 0.0]  # the last: no fenced block
    assert tokenizer.convert_tokens_to_ids("<eos>") in task.stop_ids(tokenizer, None)
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        task.prompt(ADD, countdown.char_tokenizer())


def test_canonical_keys_of_the_code_task_are_the_programs():
    keys = TASKS["code"].canonical_keys([ADD], 3, ["    return x + y\n", "    return (x + y)  # sum\n", "    return y + x\n"])
    assert keys[0] == keys[1] != keys[2]


# ---------------------------------------------------------------- code-tiny

def test_every_writing_of_a_form_has_its_shape_and_its_value():
    for form, writings in enumerate(tiny.WRITINGS):
        for writing in writings:
            for a, b in ((3, 7), (9, 2)):
                text = writing.format(a=a, b=b)
                assert tiny.response_form(text) == form, text
                for x in (0, 4, 13):  # the value by sympy's exact arithmetic (reco.tasks.countdown), x written in
                    assert countdown.countdown_value(text.replace("x", str(x))) == tiny.FUNCTIONS[form](a, b, x)


def test_code_tiny_problems_are_determined_by_their_prompt_and_checked_on_hidden_points():
    rng = random.Random(0)
    for _ in range(300):
        problem, demo = tiny.make_problem(rng, [1.0] * len(tiny.FORMS))
        assert tiny.candidates(problem.numbers, problem.x, problem.y) == {problem.hidden}
        assert problem.x not in tiny.HIDDEN_XS and f"f({problem.x})" not in problem.tests
        assert len(problem.prompt) == 10 and tiny.response_form(demo) in tiny.solving_forms(problem)
    splits = tiny.make_splits(reco_mini.Config(task="code-tiny", n_train=300, n_test=40))
    assert len(set(splits["train"]) | set(splits["val"]) | set(splits["test"])) == 380
    held_out = set(splits["test"]) | set(splits["val"])
    rng = random.Random(1)
    demos = [tiny.demonstration(rng, held_out) for _ in range(3000)]
    assert None in demos  # held-out problems were drawn, and left out
    assert not {d[0] for d in demos if d} & {p.prompt for p in held_out}


def test_code_tiny_pays_only_programs_that_pass_the_hidden_tests(graded):
    problem = tiny.Problem((3, 7), 2, 13, tuple(3 * x + 7 for x in tiny.HIDDEN_XS))  # f(x) = 3x + 7
    responses = ["3*x+7", "7+x*3", "(3*x)+7", "2*x+x+7", "13", "x+11", "3*x+7+(x-2)*(x-10)", "3*x+", "3*x+6"]
    known: dict = {}
    assert tiny.grade([problem] * len(responses), responses, known) == [1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert len(graded) == len(responses) - 1  # "3*x+" does not parse: never run
    assert tiny.grade([problem] * 2, ["3*x+7", "13"], known) == [1.0, 0.0] and len(graded) == len(responses) - 1
    assert tiny.form_counts(["3*x+7", "7+x*3", "(3*x)+7", "2*x+x+7", "(x+1)*7"]) == [3, 0, 1, 0, 0, 1]
    keys = TASKS["code-tiny"].canonical_keys([problem], 4, ["3*x+7", "(3*x)+7", "3 * x + 7", "x*3+7"])
    assert keys[0] == keys[1] == keys[2] != keys[3]


def test_code_tiny_defaults_replace_configs_defaults_unless_a_flag_is_given(capsys):
    cfg = reco_mini.parse_config(["--task", "code-tiny"])
    assert {k: getattr(cfg, k) for k in TASKS["code-tiny"].config_defaults} == TASKS["code-tiny"].config_defaults
    assert cfg.max_new_tokens == tiny.MAX_NEW_TOKENS and cfg.head_chunk == 0
    assert reco_mini.parse_config(["--task", "code-tiny", "--n-eval", "32", "--steps", "5"]).n_eval == 32
    assert reco_mini.parse_config(["--task", "code-tiny", "--quick"]).steps == cli.QUICK["steps"]
    assert reco_mini.parse_config([]).n_eval == 256  # countdown keeps Config's defaults
    with pytest.raises(SystemExit):  # the checks run again on the task's values: --ks against its n_eval
        reco_mini.parse_config(["--task", "code-tiny", "--ks", "1,128"])
    assert "--ks must be integers in [1, --n-eval]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        reco_mini.parse_config(["--task", "code", "--model", "m"])
    assert "code needs --model and --data" in capsys.readouterr().err


def test_the_code_tiny_table_in_the_docs_is_the_committed_run():
    """docs/code_tasks.md's table and form counts are results/code_tiny.json's, a run at code-tiny's defaults."""
    import json

    from reco.report import format_table

    root = Path(__file__).resolve().parents[1]
    results = json.loads((root / "results" / "code_tiny.json").read_text())
    config = results["config"]
    assert config["task"] == "code-tiny" and config["seed"] == 0 and config["methods"] == "grpo,reco"
    assert {k: config[k] for k in TASKS["code-tiny"].config_defaults} == TASKS["code-tiny"].config_defaults
    text = (root / "docs" / "code_tasks.md").read_text()
    block = text.split("<!-- code-tiny:begin -->")[1].split("<!-- code-tiny:end -->")[0]
    assert block.strip() == f"```text\n{format_table(results['methods'])}\n```"
    for method, result in results["methods"].items():
        assert f"{method} {[sum(f[i] for f in result['forms']) for i in range(len(tiny.FORMS) + 1)]}" in text


# ---------------------------------------------------------------- reco_mini end to end, offline

def test_reco_mini_runs_code_tiny_from_its_sft_base(tmp_path, monkeypatch, one_thread):
    """`python reco_mini.py --task code-tiny` at a toy size: the base is SFT-ed on code-tiny's demonstrations (and
    cached under runs/cache/ of the working directory), trained and evaluated, with forms per problem."""
    monkeypatch.chdir(tmp_path)
    args = ["--task", "code-tiny", "--sft-steps", "4", "--sft-batch", "16", "--n-train", "8", "--n-test", "4",
            "--n-eval", "4", "--steps", "1", "--prompts-per-step", "4", "--group-size", "2", "--minibatches", "1",
            "--methods", "reco", "--device", "cpu", "--out", "run"]
    results = reco_mini.main(args)
    assert (tmp_path / tiny.base_cache_path(reco_mini.parse_config(args))).is_file()
    for result in results["methods"].values():
        assert len(result["counts"]) == 4 and all(sum(f) <= 4 for f in result["forms"])
        assert all(sum(f) == c for f, c in zip(result["forms"], result["counts"]))  # every correct sample has a column


@pytest.mark.parametrize("task", ["code", "code-chat"])
def test_reco_mini_trains_and_evaluates_a_code_task_from_a_dataset_name(code_model, tmp_path, task, graded, one_thread):
    import json

    held_out = tmp_path / "add.jsonl"
    row = {"task_id": ADD["id"], "prompt": ADD["prompt"], "entry_point": "add", "test": ADD["tests"],
           "canonical_solution": ADD["solution"].removeprefix(ADD["prompt"])}
    held_out.write_text(json.dumps(row) + "\n")
    results = reco_mini.main(["--task", task, "--model", str(code_model), "--data", "humaneval", "--eval-data",
                              str(held_out), "--methods", "grpo", "--steps", "1", "--prompts-per-step", "2",
                              "--group-size", "2", "--minibatches", "1", "--n-eval", "8", "--max-new-tokens", "48",
                              "--device", "cpu", "--out", str(tmp_path / "run")])
    base = results["methods"]["base"]
    assert base["counts"][0] >= 4 and base["pass_at_k"]["8"] == 1.0  # the learned program, paid by the sandbox
    assert 0 <= results["methods"]["grpo"]["counts"][0] <= 8
    rows = [json.loads(line) for line in (tmp_path / "run" / "grpo" / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and 0.0 <= rows[0]["reward_mean"] <= 1.0
    assert any("return x + y" in p for p in graded)
