"""reco_countdown.py: reco_mini's default task, Countdown with 3 numbers, and its tiny policy's architecture.

Reach the target with each of the three numbers used once and + - * ( ). Solutions come in five forms (FORMS);
the SFT demonstrations (reco_mini.sft) draw forms with a skewed prior, SFT_FORM_PRIOR, while RL and held-out
problems draw them uniformly, so some held-out problems are solvable only by rare forms: the base model has a low
Pass@1 but real coverage at large k, the regime where GRPO concentrates (docs/design.md section 4).
Answers are parsed by a whitelist over Python's ast and valued with sympy's exact arithmetic; nothing is run.
"""
from __future__ import annotations

import ast
import functools
import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import reco_io

FORMS = ["{a}*{b}+{c}", "{a}*{b}-{c}", "({a}+{b})*{c}", "({a}-{b})*{c}", "{a}+{b}+{c}"]
SFT_FORM_PRIOR = [0.55, 0.25, 0.12, 0.055, 0.025]
MAX_NUMBER = 20


@dataclass(frozen=True)
class Problem:
    numbers: tuple[int, int, int]
    target: int

    @property
    def prompt(self) -> str:  # fixed width, so prompts batch without padding
        return ",".join(f"{x:02d}" for x in self.numbers) + f">{self.target:03d}:"


def make_problem(rng: random.Random, form_prior: list[float]) -> tuple[Problem, str]:
    """A random problem and the expression that generated it."""
    while True:
        form = rng.choices(FORMS, weights=form_prior)[0]
        nums = rng.sample(range(1, MAX_NUMBER + 1), 3)
        expr = form.format(a=nums[0], b=nums[1], c=nums[2])
        target = countdown_value(expr)
        if target is not None and 1 <= target <= 999:
            shown = tuple(sorted(nums, key=lambda _: rng.random()))
            return Problem(shown, target), expr


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


def parse_arithmetic(expr: str) -> ast.AST | None:
    """The syntax tree of an expression of integers, + - * and parentheses; None for anything else.
    A whitelist over Python's ast: the text is parsed, never run."""
    try:
        tree = ast.parse(expr, mode="eval").body if len(expr) <= 64 else None
    except (SyntaxError, ValueError):
        return None
    ok = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult)
    nodes = list(ast.walk(tree)) if tree is not None else [None]
    return tree if all(isinstance(n, ok) or isinstance(n, ast.Constant) and type(n.value) is int for n in nodes) else None


@functools.lru_cache(maxsize=1 << 16)
def countdown_value(expr: str) -> int | None:
    """Exact value of an expression of integers, + - * and parentheses (sympy arithmetic); None otherwise."""
    import sympy

    ops = {ast.Add: sympy.Add, ast.Sub: lambda x, y: x - y, ast.Mult: sympy.Mul}

    def value(node: ast.AST):
        if isinstance(node, ast.Constant):
            return sympy.Integer(node.value)
        return ops[type(node.op)](value(node.left), value(node.right))

    tree = parse_arithmetic(expr)
    try:
        return None if tree is None else int(value(tree))
    except RecursionError:
        return None


def expression_shape(expr: str) -> str | None:
    """The structure of an arithmetic expression with every number blanked out and chains of + or *
    flattened and sorted, so that commuted writings and redundant parentheses give one shape."""
    def operands(node: ast.AST, op: type) -> list[ast.AST]:  # a+(b+c) -> [a, b, c]
        if isinstance(node, ast.BinOp) and type(node.op) is op:
            return operands(node.left, op) + operands(node.right, op)
        return [node]

    def shape(node: ast.AST) -> str:
        if isinstance(node, ast.Constant):
            return "n"
        if isinstance(node.op, ast.Sub):
            return f"-({shape(node.left)},{shape(node.right)})"
        children = sorted(shape(n) for n in operands(node, type(node.op)))
        return ("+" if isinstance(node.op, ast.Add) else "*") + f"({','.join(children)})"

    tree = parse_arithmetic(expr)
    return None if tree is None else shape(tree)


FORM_SHAPES = [expression_shape(f.format(a=1, b=2, c=3)) for f in FORMS]


def countdown_form(expr: str) -> int | None:
    """The index in FORMS of the expression's structure, up to commutation of + and * and redundant
    parentheses (c+a*b is form 0, c*(b+a) is form 2); None for any other structure or invalid text."""
    shape = expression_shape(expr)
    return FORM_SHAPES.index(shape) if shape in FORM_SHAPES else None


def countdown_reward(problem: Problem, response: str) -> float:
    """1 if the response uses exactly the given numbers once each and hits the target."""
    used = sorted(int(t) for t in re.findall(r"\d+", response))
    if used != sorted(problem.numbers) or re.search(r"[^0-9+\-*()]", response):
        return 0.0
    return float(countdown_value(response) == problem.target)


# The base policy: a tiny Qwen2 with a character-level tokenizer, SFT-ed on the skewed demonstrations.

def char_tokenizer():
    """A Hugging Face tokenizer with one token per character; prepends <bos>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *"0123456789+-*/()=,:> "])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")


def tiny_model(tokenizer, hidden: int = 96, layers: int = 3):
    """A randomly initialised Qwen2 causal LM (~0.45M parameters at the defaults)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return Qwen2ForCausalLM(config)


def sft(cfg, model, tokenizer, exclude: set[Problem]):
    """Supervised fine-tuning on demonstrations whose forms follow SFT_FORM_PRIOR (cfg: reco_mini.Config)."""
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.sft_lr, total_steps=cfg.sft_steps, pct_start=0.1)
    for _ in tqdm(range(cfg.sft_steps), desc="sft base", leave=False):
        demos = []
        while len(demos) < cfg.sft_batch:
            problem, expr = make_problem(rng, SFT_FORM_PRIOR)
            if problem not in exclude:
                demos.append((problem.prompt, expr))
        prompts = tokenizer([p for p, _ in demos], return_tensors="pt").input_ids.to(cfg.device)
        resp = tokenizer([e + tokenizer.eos_token for _, e in demos], add_special_tokens=False,
                         padding=True, padding_side="right", return_tensors="pt").to(cfg.device)
        attn = torch.cat([torch.ones_like(prompts), resp.attention_mask], 1)
        logits = model(input_ids=torch.cat([prompts, resp.input_ids], 1), attention_mask=attn,
                       position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits[:, prompts.shape[1] - 1: -1]
        loss = F.cross_entropy(logits.flatten(0, 1), resp.input_ids.flatten(), reduction="none")
        loss = (loss * resp.attention_mask.flatten()).sum() / resp.attention_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model


def load_base(cfg, tokenizer, exclude: set[Problem]):
    """The SFT base policy, cached under runs/cache/ by the settings that shape it."""
    key = f"base-h{cfg.hidden}-l{cfg.layers}-s{cfg.sft_steps}-b{cfg.sft_batch}-lr{cfg.sft_lr}-seed{cfg.seed}-n{cfg.n_test}"
    path = Path("runs/cache") / key / "model.pt"
    torch.manual_seed(cfg.seed)
    model = tiny_model(tokenizer, cfg.hidden, cfg.layers).to(cfg.device)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location=cfg.device, weights_only=True))
        return model
    reco_io.save_atomic(sft(cfg, model, tokenizer, exclude).state_dict(), path)
    return model


def solving_forms(problem: Problem) -> set[int]:
    """The indices of the FORMS that solve `problem` with some order of its numbers."""
    orders = itertools.permutations(problem.numbers)
    return {f for a, b, c in orders for f, form in enumerate(FORMS)
            if countdown_value(form.format(a=a, b=b, c=c)) == problem.target}
