"""reco/tasks/countdown.py: reco_mini's default task, Countdown with 3 numbers, and its tiny policy's architecture.

Reach the target with each of the three numbers used once and + - * ( ). Solutions come in five forms (FORMS);
the SFT demonstrations (sft) draw forms with a skewed prior, SFT_FORM_PRIOR, while RL and held-out
problems draw them uniformly, so some held-out problems are solvable only by rare forms: the base model has a low
Pass@1 but real coverage at large k, the regime where GRPO concentrates (docs/design.md section 4).
Answers are parsed by a whitelist over Python's ast and valued with sympy's exact arithmetic; nothing is run.
"""
from __future__ import annotations

import ast
import functools
import itertools
import math
import random
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from reco.hf import save_atomic
from reco.log import tqdm  # tqdm.auto's bar; in a log file, a line a minute at most

FORMS = ["{a}*{b}+{c}", "{a}*{b}-{c}", "({a}+{b})*{c}", "({a}-{b})*{c}", "{a}+{b}+{c}"]
SFT_FORM_PRIOR = [0.55, 0.25, 0.12, 0.055, 0.025]
MAX_NUMBER = 20
# countdown-long (see "The long-response task" below): the same problems, verifier and forms, a longer response
LONG_SFT_FORM_PRIOR = [0.45, 0.25, 0.15, 0.1, 0.05]  # chosen on validation: results/long_base_tuning.json
LONG_CHARS = "abcdefghijklmnopqrstuvwxyz.;"  # appended to the countdown vocabulary
LONG_MAX_POSITIONS, LONG_MAX_NEW_TOKENS = 128, 96


@dataclass(frozen=True)
class Problem:
    numbers: tuple[int, int, int]
    target: int

    @property
    def prompt(self) -> str:  # fixed width, so prompts batch without padding
        return ",".join(f"{x:02d}" for x in self.numbers) + f">{self.target:03d}:"


@dataclass(frozen=True)
class LongProblem(Problem):
    """The same problem for countdown-long: the response is a derivation, and only its final expression is scored."""


def make_problem(rng: random.Random, form_prior: list[float], long: bool = False) -> tuple[Problem, str]:
    """A random problem (a LongProblem with `long`) and the expression that generated it."""
    while True:
        form = rng.choices(FORMS, weights=form_prior)[0]
        nums = rng.sample(range(1, MAX_NUMBER + 1), 3)
        expr = form.format(a=nums[0], b=nums[1], c=nums[2])
        target = countdown_value(expr)
        if target is not None and 1 <= target <= 999:
            shown = tuple(sorted(nums, key=lambda _: rng.random()))
            return (LongProblem if long else Problem)(shown, target), expr


def make_splits(cfg) -> dict[str, list[Problem]]:
    """Disjoint RL train / validation / test problems (forms drawn uniformly); cfg.n_train, cfg.n_test sizes."""
    rng, seen, splits = random.Random(1234), set(), {}
    for name, size in (("test", cfg.n_test), ("val", cfg.n_test), ("train", cfg.n_train)):
        splits[name] = []
        while len(splits[name]) < size:
            problem, _ = make_problem(rng, [1.0] * len(FORMS), cfg.task == "countdown-long")
            if problem not in seen:
                seen.add(problem)
                splits[name].append(problem)
    return splits


def parse_arithmetic(expr: str, names: tuple[str, ...] = ()) -> ast.AST | None:
    """The syntax tree of an expression of integers, + - * and parentheses (and the variables in `names`: code-tiny's
    x); None for anything else. A whitelist over Python's ast: the text is parsed, never run."""
    try:
        with warnings.catch_warnings():  # text like "3or 4" warns "invalid decimal literal"; it is still refused below
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expr, mode="eval").body if len(expr) <= 64 else None
    except (SyntaxError, ValueError):
        return None
    ok = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult) + ((ast.Load,) if names else ())
    nodes = list(ast.walk(tree)) if tree is not None else [None]
    return tree if all(isinstance(n, ok) or isinstance(n, ast.Constant) and type(n.value) is int
                       or isinstance(n, ast.Name) and n.id in names for n in nodes) else None


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


def expression_shape(expr: str, keep_numbers: bool = False, names: tuple[str, ...] = ()) -> str | None:
    """The structure of an arithmetic expression with every number blanked out (kept with keep_numbers) and
    chains of + or * flattened and sorted, so that commuted writings and redundant parentheses give one shape.
    The variables in `names` are allowed and kept (code-tiny's x)."""
    def operands(node: ast.AST, op: type) -> list[ast.AST]:  # a+(b+c) -> [a, b, c]
        if isinstance(node, ast.BinOp) and type(node.op) is op:
            return operands(node.left, op) + operands(node.right, op)
        return [node]

    def shape(node: ast.AST) -> str:
        if isinstance(node, ast.Constant):
            return str(node.value) if keep_numbers else "n"
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node.op, ast.Sub):
            return f"-({shape(node.left)},{shape(node.right)})"
        children = sorted(shape(n) for n in operands(node, type(node.op)))
        return ("+" if isinstance(node.op, ast.Add) else "*") + f"({','.join(children)})"

    tree = parse_arithmetic(expr, names)
    return None if tree is None else shape(tree)


FORM_SHAPES = [expression_shape(f.format(a=1, b=2, c=3)) for f in FORMS]


def countdown_form(expr: str) -> int | None:
    """The index in FORMS of the expression's structure, up to commutation of + and * and redundant
    parentheses (c+a*b is form 0, c*(b+a) is form 2); None for any other structure or invalid text."""
    shape = expression_shape(expr)
    return FORM_SHAPES.index(shape) if shape in FORM_SHAPES else None


def countdown_reward(problem: Problem, response: str) -> float:
    """1 if the response (for countdown-long, its final expression) uses exactly the given numbers once each
    and hits the target."""
    response = answer_text(problem, response)
    used = sorted(int(t) for t in re.findall(r"\d+", response))
    if used != sorted(problem.numbers) or re.search(r"[^0-9+\-*()]", response):
        return 0.0
    return float(countdown_value(response) == problem.target)


# The base policy: a tiny Qwen2 with a character-level tokenizer, SFT-ed on the skewed demonstrations.

def char_tokenizer(task: str = "countdown", extra_chars: str = ""):
    """A Hugging Face tokenizer with one token per character; prepends <bos>. countdown-long adds LONG_CHARS
    after the countdown vocabulary, and `extra_chars` come last (code-tiny's x), so that every countdown token
    keeps its id."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = "0123456789+-*/()=,:> " + (LONG_CHARS if task == "countdown-long" else "") + extra_chars
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *chars])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")


def tiny_model(tokenizer, hidden: int = 96, layers: int = 3, max_positions: int = 64):
    """A randomly initialised Qwen2 causal LM (~0.45M parameters at the defaults)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=max_positions, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return Qwen2ForCausalLM(config)


def countdown_demonstration(task: str) -> Callable[[random.Random, set], tuple[str, str] | None]:
    """sft's default `demonstration`: a Countdown problem drawn with SFT_FORM_PRIOR (LONG_SFT_FORM_PRIOR and a
    derivation for countdown-long) as (prompt, response), or None when the problem is in `exclude`."""
    long = task == "countdown-long"

    def draw(rng: random.Random, exclude: set) -> tuple[str, str] | None:
        problem, expr = make_problem(rng, LONG_SFT_FORM_PRIOR if long else SFT_FORM_PRIOR, long)
        if problem in exclude:
            return None
        return problem.prompt, long_response(rng, expr)[0] if long else expr

    return draw


def sft(cfg, model, tokenizer, exclude: set, demonstration=None):
    """Supervised fine-tuning (cfg: reco_mini.Config) on demonstrations drawn by `demonstration(rng, exclude)`:
    a (prompt, response) pair, or None for a problem in `exclude`; the prompts of one task have one width. The
    default draws Countdown's, whose forms follow SFT_FORM_PRIOR (countdown_demonstration)."""
    rng, draw = random.Random(cfg.seed), demonstration or countdown_demonstration(cfg.task)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.sft_lr, total_steps=cfg.sft_steps, pct_start=0.1)
    for _ in tqdm(range(cfg.sft_steps), desc="sft base", leave=False):
        demos = []
        while len(demos) < cfg.sft_batch:
            demo = draw(rng, exclude)
            if demo is not None:
                demos.append(demo)
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


def base_cache_path(cfg) -> Path:
    """Where load_base caches the SFT base: runs/cache/<the settings that shape it>/model.pt."""
    key = f"base-h{cfg.hidden}-l{cfg.layers}-s{cfg.sft_steps}-b{cfg.sft_batch}-lr{cfg.sft_lr}-seed{cfg.seed}-n{cfg.n_test}"
    if cfg.task == "countdown-long":
        key += f"-long-prior{'_'.join(f'{x:g}' for x in LONG_SFT_FORM_PRIOR)}"
    return Path("runs/cache") / key / "model.pt"


def load_base(cfg, tokenizer, exclude: set, demonstration=None, path: Path | None = None, max_positions: int = 0):
    """The SFT base policy, cached under runs/cache/ by the settings that shape it (base_cache_path). Another task
    (code-tiny) passes its own `demonstration` (sft's), cache `path` and context length `max_positions`."""
    path = path or base_cache_path(cfg)
    torch.manual_seed(cfg.seed)
    positions = max_positions or (64 if cfg.task == "countdown" else LONG_MAX_POSITIONS)
    model = tiny_model(tokenizer, cfg.hidden, cfg.layers, positions).to(cfg.device)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location=cfg.device, weights_only=True))
        return model
    save_atomic(sft(cfg, model, tokenizer, exclude, demonstration).state_dict(), path)
    return model


def solving_forms(problem: Problem) -> set[int]:
    """The indices of the FORMS that solve `problem` with some order of its numbers."""
    orders = itertools.permutations(problem.numbers)
    return {f for a, b, c in orders for f, form in enumerate(FORMS)
            if countdown_value(form.format(a=a, b=b, c=c)) == problem.target}


# =============================================================================
# The long-response task (countdown-long): a derivation with reward-irrelevant surface choices
# =============================================================================
# "<opener> a op1 b = v1<sep> <connector> m1 op2 m2 = v2<sep> <tag>: <final expression>", e.g.
# "pick 7 * 3=21; then 21 +12 = 33. answer: 7*3+12". Only the final expression is scored. Style choices, each
# uniform: the three words (8 each, distinct first letters), the two separators (3 each), nine optional spaces and the
# operand order of every commutative step: 3 log2(8) + 2 log2(3) + 9 + (0 to 2) >= 20.2 bits per response.
# Every token is labelled by its role: fork (decides the operands or the solution form: the digits of a and b, op1,
# op2, and m1's first character when op2 is "-"), style (a free choice: a word's first letter, a separator, an optional
# space, m1's first character when op2 commutes) or determined (follows from earlier tokens: the rest).

OPENERS = ("take", "using", "pick", "with", "from", "join", "start", "begin")
CONNECTORS = ("then", "since", "next", "hence", "after", "giving", "once", "making")
TAGS = ("answer", "result", "final", "expression", "value", "check", "done", "proof")
SEPARATORS = ",;."
TOKEN_CLASSES = ("fork", "style", "determined", "other")  # other: a token of a response outside the grammar
STYLE_BITS_MIN = 3 * math.log2(8) + 2 * math.log2(3) + 9
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_WORDS = {name: "|".join(words) for name, words in (("open", OPENERS), ("conn", CONNECTORS), ("tag", TAGS))}
LONG_GRAMMAR = re.compile(
    rf"(?P<open>{_WORDS['open']}) (?P<a>\d+)(?P<s1> ?)(?P<op1>[-+*])(?P<s2> ?)(?P<b>\d+)(?P<s3> ?)=(?P<s4> ?)(?P<v1>-?\d+)"
    rf"(?P<sep1>[,;.]) (?P<conn>{_WORDS['conn']}) (?P<m1>-?\d+)(?P<s5> ?)(?P<op2>[-+*])(?P<s6> ?)(?P<m2>-?\d+)(?P<s7> ?)="
    rf"(?P<s8> ?)(?P<v2>-?\d+)(?P<sep2>[,;.]) (?P<tag>{_WORDS['tag']}):(?P<s9> ?)(?P<final>[0-9+*()-]+)")


def long_response(rng: random.Random, expr: str) -> tuple[str, list[str]]:
    """A countdown-long demonstration of a FORMS expression, and the label of each of its characters (tokens),
    assigned as the text is built."""
    tree = parse_arithmetic(expr)  # FORMS parse as (a op1 b) op2 c
    op1, op2, c = _SYMBOL[type(tree.left.op)], _SYMBOL[type(tree.op)], tree.right.value
    a, b = tree.left.left.value, tree.left.right.value
    if op1 != "-" and rng.random() < 0.5:
        a, b = b, a
    v1 = countdown_value(f"{a}{op1}{b}")
    inner_first = op2 == "-" or rng.random() < 0.5
    m1, m2 = (v1, c) if inner_first else (c, v1)
    inner = f"({a}{op1}{b})" if op1 in "+-" and op2 == "*" else f"{a}{op1}{b}"
    final = f"{inner}{op2}{c}" if inner_first else f"{c}{op2}{inner}"
    parts: list[tuple[str, str]] = []

    def word(w: str) -> None:
        parts.extend([(w[0], "style"), (w[1:], "determined")])

    def space() -> None:
        if rng.random() < 0.5:
            parts.append((" ", "style"))

    def step(x: str, op: str, y: str, value: int, x_first: str, x_rest: str, y_label: str) -> None:
        parts.extend([(x[0], x_first), (x[1:], x_rest)])
        space()
        parts.append((op, "fork"))
        space()
        parts.append((y, y_label))
        space()
        parts.append(("=", "determined"))
        space()
        parts.append((str(value), "determined"))

    word(rng.choice(OPENERS))
    parts.append((" ", "determined"))
    step(str(a), op1, str(b), v1, "fork", "fork", "fork")
    parts.extend([(rng.choice(SEPARATORS), "style"), (" ", "determined")])
    word(rng.choice(CONNECTORS))
    parts.append((" ", "determined"))
    step(str(m1), op2, str(m2), countdown_value(final), "fork" if op2 == "-" else "style", "determined", "determined")
    parts.extend([(rng.choice(SEPARATORS), "style"), (" ", "determined")])
    word(rng.choice(TAGS))
    parts.append((":", "determined"))
    space()
    parts.append((final, "determined"))
    return "".join(t for t, _ in parts), [label for t, label in parts for _ in t]


def long_labels(text: str) -> list[str] | None:
    """The label of each character of a countdown-long response, by parsing it with the grammar LONG_GRAMMAR;
    None if the text is outside the grammar."""
    m = LONG_GRAMMAR.fullmatch(text)
    if m is None:
        return None
    labels = ["determined"] * len(text)
    style = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "sep1", "sep2"]
    for name in style:
        labels[m.start(name): m.end(name)] = ["style"] * (m.end(name) - m.start(name))
    for name in ("open", "conn", "tag"):
        labels[m.start(name)] = "style"
    for name in ("a", "op1", "b", "op2"):
        labels[m.start(name): m.end(name)] = ["fork"] * (m.end(name) - m.start(name))
    labels[m.start("m1")] = "fork" if m["op2"] == "-" else "style"
    return labels


def answer_text(problem, text: str) -> str:
    """The text the verifier scores: for countdown-long the final expression (after the last ':' and one optional
    space), otherwise the whole response."""
    if not isinstance(problem, LongProblem):
        return text
    return text.rsplit(":", 1)[1].removeprefix(" ") if ":" in text else ""


def form_counts(problem, correct: list[str]) -> list[int]:
    """The correct responses of a problem per FORMS index, and one last column for any other shape."""
    found = [countdown_form(answer_text(problem, t)) for t in correct]
    return [found.count(f) for f in range(len(FORMS))] + [found.count(None)]


def response_key(problem: Problem, text: str) -> str:
    """The canonical key of a response for OCCURRENCES["canonical"]: the scored expression up to commutation of + and *
    and redundant parentheses. A response without one keys on its own text, so it only matches exact copies."""
    canonical = expression_shape(answer_text(problem, text), keep_numbers=True)
    return f"expr:{canonical}" if canonical is not None else f"text:{text}"


def token_labels(resp: torch.Tensor, mask: torch.Tensor, tokenizer) -> list[list[str]]:
    """Per countdown-long response (resp, mask: [B, T]), the class of each response token (TOKEN_CLASSES): the
    closing <eos> is determined; every token of a response outside the grammar, or with a special token inside, is
    other."""
    labels = []
    for row, n in zip(resp.tolist(), mask.sum(-1).tolist()):
        tokens = tokenizer.convert_ids_to_tokens(row[: int(n)])
        eos = tokens[-1:] == [tokenizer.eos_token]
        body = tokens[:-1] if eos else tokens
        own = long_labels("".join(body)) if all(len(t) == 1 for t in body) else None
        labels.append(own + ["determined"] * eos if own is not None else ["other"] * len(tokens))
    return labels


def duplicate_rate(groups: list[list]) -> float:
    """The share of responses that repeat an earlier response of their group: mean over groups of (G - distinct) / G."""
    return sum((len(g) - len(set(g))) / len(g) for g in groups) / len(groups)


def sft_duplicate_rate(seed: int, problems: int = 2000, group_size: int = 8) -> dict:
    """Exact duplicates among group_size countdown-long demonstrations of one problem, the way the SFT data draws them
    (form from LONG_SFT_FORM_PRIOR, then the surface choices); also the mean length in tokens (characters + <eos>)."""
    rng, groups, lengths = random.Random(seed), [], []
    for _ in range(problems):
        problem, _ = make_problem(rng, LONG_SFT_FORM_PRIOR, long=True)
        exprs = [e for f, e in _form_exprs(problem).items()]
        weights = [LONG_SFT_FORM_PRIOR[f] for f in _form_exprs(problem)]
        group = [long_response(rng, rng.choices(exprs, weights)[0])[0] for _ in range(group_size)]
        groups.append(group)
        lengths += [len(t) + 1 for t in group]
    return {"duplicate_rate": duplicate_rate(groups), "mean_tokens": sum(lengths) / len(lengths),
            "problems": problems, "group_size": group_size}


def _form_exprs(problem: Problem) -> dict[int, str]:
    """One solving expression per FORMS index that solves `problem` (the first order of its numbers that does)."""
    out: dict[int, str] = {}
    for a, b, c in itertools.permutations(problem.numbers):
        for f, form in enumerate(FORMS):
            expr = form.format(a=a, b=b, c=c)
            if f not in out and countdown_value(expr) == problem.target:
                out[f] = expr
    return out
