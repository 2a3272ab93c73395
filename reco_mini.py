"""reco_mini.py: GRPO and ReCo (arXiv 2607.26862) end to end in one file.

The baseline is GRPO with verl's defaults: G samples per prompt, group-relative
advantages, a PPO-clipped token surrogate, several mini-batch updates per
rollout, `token-mean` loss aggregation and no KL. ReCo changes two terms:

  1. Response level: each response's loss is multiplied by w_i, the inverse of
     its expected number of copies in the group, m_i = 1 + (G-1) pi_old(y_i|x),
     normalised to mean 1 over the group (`occurrence_weights`).
  2. Token level: the importance ratio r_t = pi_theta/pi_old is replaced by the
     variance ratio rho_t = sg(min(V_theta(s_t) / mean V_old, c_max)), where
     V(s) = 1 - sum_v pi(v|s)^2, inside GRPO's trust region (`policy_loss`).

Deviations from the paper's text, each a flag here:
  1. `--occurrence {sequence,token-mean,count,none}` and `--occurrence-apply
     {all,positive}`: alternatives to the exact expected-occurrence weight.
  2. `--token-ratio variance-old`: the clipped surrogate scaled by
     sg(min(V_old/mean V_old, c_max)); equal to `variance` on policy.
  3. `--variance-cap 10` caps rho, and `--variance-norm none` drops the batch
     normalisation (both from DESIGN.md section 3.3).
  4. The default task is a small Countdown with a tiny transformer trained by
     SFT in this file, instead of math with a 1.5B-8B model (`--task math`
     runs a real Hugging Face model on a JSONL file of problems).

Run `python reco_mini.py` for base vs GRPO vs ReCo on CPU in a few minutes.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import math
import random
import re
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from reco_grader import grade_answer  # math answers: safe parser + sympy, time-bounded

METHODS = {  # method -> (occurrence mode, token ratio)
    "grpo": ("none", "is"),
    "reco": ("sequence", "variance"),
    "reco-response": ("sequence", "is"),
    "reco-token": ("none", "variance"),
}


@dataclass
class Config:
    methods: str = "grpo,reco"  # comma-separated subset of METHODS
    seed: int = 0
    device: str = "auto"
    out: str = "runs/default"
    quick: bool = False  # tiny budget for smoke tests
    # task and model
    task: str = "countdown"  # countdown | math
    model: str = ""  # HF name or path (task=math); empty = tiny model built here
    data: str = ""  # JSONL with problem,answer (task=math)
    n_train: int = 1024  # countdown RL training problems
    n_test: int = 64  # held-out countdown problems (and as many for validation)
    hidden: int = 96  # tiny model width
    layers: int = 3
    sft_steps: int = 400
    sft_batch: int = 128
    sft_lr: float = 3e-3
    # RL
    steps: int = 60
    prompts_per_step: int = 32
    group_size: int = 8  # G
    epochs: int = 2  # passes over each rollout batch
    minibatches: int = 2  # updates per pass
    lr: float = 2e-4
    temperature: float = 1.0
    max_new_tokens: int = 0  # 0 = the task's default (12 countdown, 1024 math)
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 0.0  # 0 = off; verl uses 3
    kl_coef: float = 0.0  # beta for the k3 KL to the base policy
    no_std: bool = False  # Dr.GRPO advantages (no division by std)
    aggregation: str = "token-mean"  # token-mean | seq-mean-token-mean
    occurrence: str = ""  # override the method's: sequence|token-mean|count|none
    occurrence_apply: str = "all"  # all | positive
    token_ratio: str = ""  # override the method's: is|variance|variance-old
    variance_cap: float = 10.0
    variance_norm: str = "batch"  # batch | none
    grad_clip: float = 1.0
    # evaluation
    n_eval: int = 256  # samples per held-out problem
    eval_batch: int = 4096
    ks: str = ""  # comma-separated k for Pass@k; empty = 1, 2, 4, ..., n_eval

    def __post_init__(self):
        self.max_new_tokens = self.max_new_tokens or (12 if self.task == "countdown" else 1024)
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def method_list(self) -> list[str]:
        return [m for m in self.methods.split(",") if m]


# =============================================================================
# The math: every function below is pure and tested against an independent
# reference in tests/.
# =============================================================================

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from n samples with c correct (Chen et al. 2021).

    pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def group_advantages(rewards: Tensor, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO advantage A_i = (R_i - mean_j R_j) / (std_j R_j + eps), unbiased std.

    rewards: [P, G] -> advantages [P, G]. Equal rewards give A = 0 exactly.
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [P, G]
    if not scale_by_std:
        return centred  # Dr.GRPO
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=True) + eps)


def occurrence_weights(
    seq_logprobs: Tensor,
    mode: str = "sequence",
    responses: list | None = None,
    lengths: Tensor | None = None,
    advantages: Tensor | None = None,
    apply: str = "all",
) -> Tensor:
    """ReCo response weights w_i (no gradient), mean 1 within each group.

    p_i = pi_old(y_i|x) = exp(sum_t log pi_old(y_it))       seq_logprobs: [P, G]
    m_i = 1 + (G - 1) p_i    expected copies of y_i in the group given y_i drawn
    w_i = G (1/m_i) / sum_j (1/m_j)

    mode "token-mean" uses p_i = exp(seq_logprob_i / len_i) (needs `lengths`
    [P, G] or `responses`); "count" uses 1/c_i with c_i the exact duplicates of
    response i in its group (`responses`: P*G token-id lists, row-major, or P
    lists of G); "none" gives ones. apply="positive" keeps weight 1 wherever
    advantages <= 0 (the others are still divided by the whole group's mean).
    """
    P, G = seq_logprobs.shape
    lp = seq_logprobs.detach().double()
    if mode == "none":
        return torch.ones_like(seq_logprobs)
    if apply == "positive" and advantages is None:
        raise ValueError("apply='positive' needs advantages")
    if (mode == "count" or (mode == "token-mean" and lengths is None)) and responses is None:
        raise ValueError(f"occurrence mode {mode!r} needs responses (or lengths for token-mean)")
    if responses is not None:
        flat = [tuple(r) for group in responses for r in group] if len(responses) == P != P * G else [tuple(r) for r in responses]
        if len(flat) != P * G:
            raise ValueError(f"responses has {len(flat)} entries, expected P*G = {P * G}")
    if mode == "sequence":
        inv_m = 1.0 / (1.0 + (G - 1) * lp.exp())
    elif mode == "token-mean":
        if lengths is None:
            lengths = torch.tensor([len(r) for r in flat], dtype=torch.float64).view(P, G)
        inv_m = 1.0 / (1.0 + (G - 1) * (lp / lengths.double().clamp(min=1)).exp())
    elif mode == "count":
        counts = [[sum(flat[p * G + i] == flat[p * G + j] for j in range(G)) for i in range(G)] for p in range(P)]
        inv_m = 1.0 / torch.tensor(counts, dtype=torch.float64)
    else:
        raise ValueError(f"unknown occurrence mode {mode!r}")
    w = inv_m / inv_m.mean(dim=1, keepdim=True)  # [P, G]
    if apply == "positive":
        w = torch.where(advantages > 0, w, torch.ones_like(w))
    elif apply != "all":
        raise ValueError(f"unknown occurrence apply {apply!r}")
    return w.to(seq_logprobs.dtype)


def variance_stat(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """V(s) = sum_v pi(v|s)(1 - pi(v|s)) = 1 - sum_v pi(v|s)^2, pi = softmax(z/tau).

    logits: [..., V] -> [...] in float32 (float64 stays float64).
    """
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    return 1.0 - F.softmax(z / temperature, dim=-1).square().sum(-1)


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log pi(y_t|s_t) of the temperature-scaled distribution. [B,T,V],[B,T] -> [B,T]"""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    token_ratio: str = "is",
    weights: Tensor | None = None,
    v: Tensor | None = None,
    v_old: Tensor | None = None,
    v_old_mean: float | Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 0.0,
    variance_cap: float = 10.0,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: str = "token-mean",
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO / ReCo surrogate, aggregated over the batch.

    Shapes: logp, old_logp, mask, v, v_old, ref_logp: [B, T]; advantages,
    weights: [B]. `v` is V_theta of the current policy (needed for "variance"),
    `v_old` is V_old (for "variance-old"), `v_old_mean` is mean V_old over all
    response tokens of the rollout batch (all ranks). `num_tokens`/`num_seqs`
    override the normaliser so micro-batches and ranks sum to the full batch.

      r_t      = exp(clamp(logp - old_logp, -20, 20))
      "is":           l_t = -min(r A, clip(r, 1-eps_low, 1+eps_high) A)
      "variance":     l_t = -rho_t A exp(logp - sg(logp)) keep_t,
                      rho_t = sg(min(V_theta / V_old_mean, c_max))
      "variance-old": l_t = sg(min(V_old / V_old_mean, c_max)) * l_t^is
      keep_t = 0 where the clipped surrogate has zero gradient:
               (r > 1+eps_high and A > 0) or (r < 1-eps_low and A < 0)
      dual clip C (A < 0): l_t = min(l_t, -C A)
      l_t     *= w_i;   l_t += beta * k3,  k3 = exp(q) - q - 1, q = ref - logp
    """
    mask = mask.to(logp.dtype)
    A = advantages.detach().unsqueeze(-1).to(logp.dtype)  # [B, 1]
    ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))  # [B, T]
    clipped_high = (ratio > 1 + clip_high) & (A > 0)
    clipped_low = (ratio < 1 - clip_low) & (A < 0)
    stats: dict[str, float] = {}
    if token_ratio in ("is", "variance-old"):
        loss = -torch.min(ratio * A, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * A)
        if token_ratio == "variance-old":
            rho = torch.clamp(v_old / v_old_mean, max=variance_cap).detach()
            loss = rho * loss
    elif token_ratio == "variance":
        rho = torch.clamp(v / v_old_mean, max=variance_cap).detach()  # [B, T]
        keep = (~(clipped_high | clipped_low)).to(logp.dtype)
        loss = -rho * A * torch.exp(logp - logp.detach()) * keep
    else:
        raise ValueError(f"unknown token_ratio {token_ratio!r}")
    if dual_clip > 0:  # cap the loss of negative advantages at -C A (zero gradient where it binds)
        loss = torch.where(A < 0, torch.min(loss, -dual_clip * A), loss)
    if weights is not None:
        loss = loss * weights.detach().unsqueeze(-1).to(logp.dtype)
    if kl_coef > 0:
        q = ref_logp.detach() - logp
        loss = loss + kl_coef * (torch.exp(q) - q - 1)
    if aggregation == "token-mean":
        loss_total = (loss * mask).sum() / (mask.sum() if num_tokens is None else num_tokens)
    elif aggregation == "seq-mean-token-mean":
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        loss_total = per_seq.sum() / (logp.shape[0] if num_seqs is None else num_seqs)
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        stats["ratio_mean"] = ((ratio * mask).sum() / n).item()
        stats["ratio_max"] = (ratio * mask).max().item()
        stats["clip_frac_high"] = ((clipped_high * mask).sum() / n).item()
        stats["clip_frac_low"] = ((clipped_low * mask).sum() / n).item()
        stats["approx_kl_old"] = (((old_logp - logp) * mask).sum() / n).item()
        if token_ratio != "is":
            stats["rho_mean"] = ((rho * mask).sum() / n).item()
            stats["rho_max"] = (rho * mask).max().item()
    return loss_total, stats


# =============================================================================
# Task: Countdown with 3 numbers. Reach the target with each number used once
# and + - * ( ). Solutions come in "forms"; the SFT demonstrations use a form
# prior skewed toward a*b+c, so problems solvable only by rare forms have a low
# base Pass@1 but real coverage at large k (DESIGN.md section 4).
# =============================================================================

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


def make_splits(cfg: Config) -> dict[str, list[Problem]]:
    """Disjoint RL train / validation / test problems (forms drawn uniformly)."""
    rng, seen, splits = random.Random(1234), set(), {}
    for name, size in (("test", cfg.n_test), ("val", cfg.n_test), ("train", cfg.n_train)):
        splits[name] = []
        while len(splits[name]) < size:
            problem, _ = make_problem(rng, [1.0] * len(FORMS))
            if problem not in seen:
                seen.add(problem)
                splits[name].append(problem)
    return splits


def countdown_value(expr: str) -> int | None:
    """Exact value of an expression of integers, + - * and parentheses; None if
    anything else appears. Whitelist parser over Python's ast: nothing is run."""
    import sympy

    if len(expr) > 64:
        return None
    try:
        tree = ast.parse(expr, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    ops = {ast.Add: sympy.Add, ast.Sub: lambda x, y: x - y, ast.Mult: sympy.Mul}

    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return sympy.Integer(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ValueError("disallowed syntax")

    try:
        return int(value(tree))
    except (ValueError, RecursionError):
        return None


def countdown_reward(problem: Problem, response: str) -> float:
    """1 if the response uses exactly the given numbers once each and hits the target."""
    used = sorted(int(t) for t in re.findall(r"\d+", response))
    if used != sorted(problem.numbers) or re.search(r"[^0-9+\-*()]", response):
        return 0.0
    return float(countdown_value(response) == problem.target)




# =============================================================================
# Model and sampling: a tiny Qwen2 with a character-level tokenizer (or any HF
# causal LM), and an ancestral sampler with a KV cache.
# =============================================================================

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


@torch.no_grad()
def sample(model, prompt_ids: Tensor, prompt_mask: Tensor, max_new_tokens: int, temperature: float,
           eos_id: int, pad_id: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Sample from softmax(logits/tau) token by token, reusing the KV cache.

    prompt_ids, prompt_mask: [B, L] left-padded -> responses [B, T], mask [B, T]
    (mask is 1 up to and including <eos>; later positions hold pad_id).
    """
    from transformers import DynamicCache

    cache, attn = DynamicCache(), prompt_mask
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L]
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=pos, past_key_values=cache).logits[:, -1]
    done = torch.zeros(prompt_ids.shape[0], dtype=torch.bool, device=prompt_ids.device)
    tokens, alive = [], []
    for _ in range(max_new_tokens):
        probs = F.softmax(logits.float() / temperature, dim=-1)  # [B, V]
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [B]
        alive.append(~done)
        tokens.append(torch.where(done, pad_id, nxt))
        done = done | (nxt == eos_id)
        if done.all():
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        pos = pos[:, -1:] + 1
        logits = model(input_ids=tokens[-1][:, None], attention_mask=attn, position_ids=pos,
                       past_key_values=cache).logits[:, -1]
    return torch.stack(tokens, 1), torch.stack(alive, 1).long()


def response_logits(model, prompt_ids: Tensor, prompt_mask: Tensor, resp: Tensor, resp_mask: Tensor) -> Tensor:
    """Logits at the positions that predict each response token: [B, T, V]."""
    ids, attn = torch.cat([prompt_ids, resp], 1), torch.cat([prompt_mask, resp_mask], 1)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits
    return logits[:, prompt_ids.shape[1] - 1: -1]


def prompt_text(problem, tokenizer) -> str:
    if isinstance(problem, Problem):
        return problem.prompt
    system = "Please reason step by step, and put your final answer within \\boxed{}."
    if tokenizer.chat_template:  # the Qwen2.5-Math template when the model ships it
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": problem["problem"]}]
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return f"Question: {problem['problem']}\n{system}\nAnswer:"


def reward(problem, response: str) -> float:
    if isinstance(problem, Problem):
        return countdown_reward(problem, response)
    return float(grade_answer(response, problem["answer"]))


def rollout(cfg: Config, model, tokenizer, problems: list, n: int, gen: torch.Generator) -> dict:
    """n samples per problem (problem-major), decoded and scored."""
    enc = tokenizer([prompt_text(p, tokenizer) for p in problems for _ in range(n)], padding=True,
                    return_tensors="pt").to(cfg.device)
    resp, mask = sample(model, enc.input_ids, enc.attention_mask, cfg.max_new_tokens, cfg.temperature,
                        tokenizer.eos_token_id, tokenizer.pad_token_id, gen)
    texts = tokenizer.batch_decode(resp, skip_special_tokens=True)
    rewards = torch.tensor([reward(p, t) for p, t in zip([p for p in problems for _ in range(n)], texts)])
    return dict(prompt_ids=enc.input_ids, prompt_mask=enc.attention_mask, resp=resp, mask=mask, texts=texts,
                rewards=rewards.view(len(problems), n))


def sft(cfg: Config, model, tokenizer, exclude: set[Problem]):
    """Supervised fine-tuning on demonstrations whose forms follow SFT_FORM_PRIOR."""
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
        logits = response_logits(model, prompts, torch.ones_like(prompts), resp.input_ids, resp.attention_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), resp.input_ids.flatten(), reduction="none")
        loss = (loss * resp.attention_mask.flatten()).sum() / resp.attention_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model


# =============================================================================
# RL training: rollout -> reward -> advantage -> old statistics -> response
# weights -> several mini-batch updates (DESIGN.md section 2).
# =============================================================================

def method_terms(cfg: Config, method: str) -> tuple[str, str]:
    occurrence, token_ratio = METHODS[method]
    return cfg.occurrence or occurrence, cfg.token_ratio or token_ratio


def train_rl(cfg: Config, method: str, model, base, tokenizer, problems: list, run_dir: Path):
    occurrence, token_ratio = method_terms(cfg, method)
    rng, gen = random.Random(cfg.seed), torch.Generator(cfg.device).manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    P, G, tau = cfg.prompts_per_step, cfg.group_size, cfg.temperature
    ckpt, log = run_dir / "model.pt", open(run_dir / "log.jsonl", "w", buffering=1)  # line-buffered: a stop keeps every row
    for step in tqdm(range(cfg.steps), desc=f"rl {method}", leave=False):
        t0 = time.time()
        r = rollout(cfg, model, tokenizer, rng.sample(problems, P), G, gen)
        A = group_advantages(r["rewards"], scale_by_std=not cfg.no_std).flatten().to(cfg.device)  # [P*G]
        t1 = time.time()
        mask = r["mask"].float()
        batch = (r["prompt_ids"], r["prompt_mask"], r["resp"], r["mask"])
        with torch.no_grad():
            logits = response_logits(model, *batch)
            old_logp, v_old = token_logprobs(logits, r["resp"], tau), variance_stat(logits, tau)
            ref_logp = token_logprobs(response_logits(base, *batch), r["resp"], tau)
            entropy = -(F.softmax(logits / tau, -1) * F.log_softmax(logits / tau, -1)).sum(-1)
        v_old_mean = (v_old * mask).sum() / mask.sum() if cfg.variance_norm == "batch" else 1.0
        responses = [row[m.bool()].tolist() for row, m in zip(r["resp"], r["mask"])]
        w = occurrence_weights((old_logp * mask).sum(-1).view(P, G), occurrence, responses, mask.sum(-1).view(P, G),
                               A.view(P, G), cfg.occurrence_apply).flatten()
        stats: dict[str, list[float]] = {}
        t2 = time.time()
        for _ in range(cfg.epochs):
            for idx in torch.randperm(P * G, generator=gen, device=cfg.device).chunk(cfg.minibatches):
                logits = response_logits(model, *(x[idx] for x in batch))
                logp = token_logprobs(logits, r["resp"][idx], tau)
                loss, s = policy_loss(
                    logp, old_logp[idx], A[idx], mask[idx], token_ratio=token_ratio, weights=w[idx],
                    v=variance_stat(logits.detach(), tau), v_old=v_old[idx], v_old_mean=v_old_mean,
                    clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip=cfg.dual_clip,
                    variance_cap=cfg.variance_cap, ref_logp=ref_logp[idx], kl_coef=cfg.kl_coef,
                    aggregation=cfg.aggregation)
                opt.zero_grad()
                loss.backward()
                s["grad_norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()
                if not (math.isfinite(loss.item()) and math.isfinite(s["grad_norm"])):  # stop before the weights go bad
                    kept = f"last good checkpoint kept at {ckpt}" if ckpt.exists() else "no checkpoint yet"
                    sys.exit(f"error: non-finite loss or gradient in {method} at step {step}; {kept}")
                opt.step()
                for k, v in {**s, "loss": loss.item()}.items():
                    stats.setdefault(k, []).append(v)
        if (step + 1) % 10 == 0 or step + 1 == cfg.steps:
            torch.save(model.state_dict(), ckpt.with_suffix(".tmp"))
            ckpt.with_suffix(".tmp").replace(ckpt)  # atomic: a crash never leaves half a checkpoint
        q = ref_logp - old_logp
        row = {"step": step, "reward_mean": r["rewards"].mean().item(),
               "pass_rate": (r["rewards"].max(1).values > 0).float().mean().item(),
               "adv_abs_mean": A.abs().mean().item(), "w_min": w.min().item(), "w_mean": w.mean().item(),
               "w_max": w.max().item(), "v_old_mean": float(v_old_mean),
               "entropy": ((entropy * mask).sum() / mask.sum()).item(),
               "kl_base": (((q.exp() - q - 1) * mask).sum() / mask.sum()).item(),
               "response_length": mask.sum(-1).mean().item(),
               **{k: sum(v) / len(v) for k, v in stats.items()},
               **{k: max(v) for k, v in stats.items() if k.endswith("_max")},
               "time_rollout": t1 - t0, "time_old_stats": t2 - t1,
               "time_update": time.time() - t2}
        log.write(json.dumps(row) + "\n")
    log.close()
    return model


# =============================================================================
# Evaluation: n samples per held-out problem -> unbiased Pass@k (DESIGN 3.5).
# =============================================================================

@torch.no_grad()
def evaluate(cfg: Config, model, tokenizer, problems: list, desc: str) -> dict:
    gen = torch.Generator(cfg.device).manual_seed(cfg.seed + 1)  # the same stream for every model
    per_call = max(1, cfg.eval_batch // cfg.n_eval)
    counts, distinct = [], []
    for i in tqdm(range(0, len(problems), per_call), desc=f"eval {desc}", leave=False):
        r = rollout(cfg, model, tokenizer, problems[i: i + per_call], cfg.n_eval, gen)
        for j in range(r["rewards"].shape[0]):
            texts = r["texts"][j * cfg.n_eval: (j + 1) * cfg.n_eval]
            counts.append(int(r["rewards"][j].sum()))
            distinct.append(len({t for t, ok in zip(texts, r["rewards"][j]) if ok}))
    n, ks = cfg.n_eval, pass_ks(cfg)
    return {"pass_at_k": {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks},
            "mean_accuracy": sum(counts) / (n * len(counts)), "distinct_correct": sum(distinct) / len(distinct),
            "solved_any": sum(c > 0 for c in counts) / len(counts), "counts": counts}


def pass_ks(cfg: Config) -> list[int]:
    if cfg.ks:
        return [int(k) for k in cfg.ks.split(",")]
    return [2 ** i for i in range(cfg.n_eval.bit_length()) if 2 ** i <= cfg.n_eval]


def print_table(results: dict) -> str:
    methods = results["methods"]
    ks = list(next(iter(methods.values()))["pass_at_k"])
    lines = ["pass@k   " + "".join(f"{m:>15}" for m in methods)]
    lines += [f"{k:>6}   " + "".join(f"{methods[m]['pass_at_k'][k]:>15.3f}" for m in methods) for k in ks]
    for key in ("mean_accuracy", "distinct_correct", "solved_any"):
        lines.append(f"{key:<9}" + "".join(f"{methods[m][key]:>15.3f}" for m in methods))
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, res in results["methods"].items():
        ks = [int(k) for k in res["pass_at_k"]]
        ax.plot(ks, list(res["pass_at_k"].values()), marker="o", ms=3, label=name)
    ax.set(xscale="log", xlabel="k (samples)", ylabel="Pass@k (held-out problems)", title="Pass@k: base vs GRPO vs ReCo")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# =============================================================================
# Plumbing: CLI, data files, the cached base policy, main.
# =============================================================================

QUICK = dict(n_train=64, n_test=16, hidden=48, layers=2, sft_steps=100, sft_batch=64, steps=4, prompts_per_step=8, n_eval=32)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_config(argv: list[str] | None = None) -> Config:
    parser = OneLineParser(prog="reco_mini.py", description=__doc__.split("\n")[0])
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    parser.add_argument("--method", help="a single method (same as --methods M)")
    args = vars(parser.parse_args(argv))
    method = args.pop("method")
    args["methods"] = method or args["methods"]
    cfg = Config(**args)
    if cfg.quick:
        cfg = Config(**{**args, **{k: v for k, v in QUICK.items() if args[k] == getattr(Config, k)}})
    checks = [
        (all(m in METHODS for m in cfg.method_list), f"--methods must be a subset of {sorted(METHODS)}"),
        (cfg.group_size >= 2, "--group-size must be >= 2"),
        (cfg.clip_low > 0 and cfg.clip_high > 0, "--clip-low and --clip-high must be > 0"),
        (cfg.n_eval >= 1 and all(1 <= k <= cfg.n_eval for k in pass_ks(cfg)), "every k in --ks must be in [1, --n-eval]"),
        (cfg.occurrence in ("", "sequence", "token-mean", "count", "none"), "bad --occurrence"),
        (cfg.token_ratio in ("", "is", "variance", "variance-old"), "bad --token-ratio"),
        (cfg.occurrence_apply in ("all", "positive"), "bad --occurrence-apply"),
        (cfg.aggregation in ("token-mean", "seq-mean-token-mean"), "bad --aggregation"),
        (cfg.variance_norm in ("batch", "none"), "bad --variance-norm"),
        (cfg.task == "countdown" or (cfg.model and cfg.data), "--task math needs --model and --data"),
        (cfg.prompts_per_step * cfg.group_size % cfg.minibatches == 0, "prompts*G must divide into --minibatches"),
    ]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    return cfg


def load_jsonl(path: str) -> list[dict]:
    """Problems with "problem" and "answer"; errors name the file, line and field."""
    rows = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"error: {path}:{lineno}: not valid JSON ({e.msg})")
        for field in ("problem", "answer"):
            if not isinstance(row, dict) or not isinstance(row.get(field), str | int | float):
                sys.exit(f"error: {path}:{lineno}: missing or non-scalar field '{field}'")
        rows.append({"problem": str(row["problem"]), "answer": str(row["answer"])})
    if not rows:
        sys.exit(f"error: {path}: no problems")
    return rows


def load_base(cfg: Config, tokenizer, exclude: set[Problem]):
    """The SFT base policy, cached under runs/cache/ by the settings that shape it."""
    key = f"base-h{cfg.hidden}-l{cfg.layers}-s{cfg.sft_steps}-b{cfg.sft_batch}-lr{cfg.sft_lr}-seed{cfg.seed}-n{cfg.n_test}"
    path = Path("runs/cache") / key / "model.pt"
    torch.manual_seed(cfg.seed)
    model = tiny_model(tokenizer, cfg.hidden, cfg.layers).to(cfg.device)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location=cfg.device, weights_only=True))
        return model
    sft(cfg, model, tokenizer, exclude)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    return model


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(argv)
    print(json.dumps(asdict(cfg), indent=None))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    out, start = Path(cfg.out), time.time()
    out.mkdir(parents=True, exist_ok=True)
    if cfg.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.model, padding_side="left")
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        base = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32).to(cfg.device)
    if cfg.task == "math":
        problems = load_jsonl(cfg.data)
        splits = {"train": problems, "test": problems}
    else:
        splits = make_splits(cfg)
    if not cfg.model:
        tokenizer = char_tokenizer()
        base = load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"]))
    base.requires_grad_(False)
    results = {"config": asdict(cfg), "methods": {"base": evaluate(cfg, base, tokenizer, splits["test"], "base")}}
    for method in cfg.method_list:
        (out / method).mkdir(exist_ok=True)
        torch.manual_seed(cfg.seed)
        model = copy.deepcopy(base).requires_grad_(True)
        train_rl(cfg, method, model, base, tokenizer, splits["train"], out / method)
        results["methods"][method] = evaluate(cfg, model, tokenizer, splits["test"], method)
    results["wall_time_s"] = round(time.time() - start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(print_table(results))
    plot(results, out / "pass_at_k.png")
    print(f"wrote {out / 'results.json'} and {out / 'pass_at_k.png'} in {results['wall_time_s']} s")
    return results


if __name__ == "__main__":
    main()
