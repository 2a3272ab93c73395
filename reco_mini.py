"""reco_mini.py: GRPO and ReCo (arXiv 2607.26862) end to end, the method in one readable file.

GRPO with verl's defaults: G samples per prompt, group-relative advantages, a PPO-clipped token
surrogate, several mini-batch updates per rollout, token-mean aggregation, no KL. ReCo changes two
terms: (a) each response's loss is multiplied by w_i, the inverse of its expected copies in the
group, m_i = 1 + (G-1) pi_old(y_i|x), normalised to mean 1 in the group; (b) the importance ratio
r_t = pi_theta/pi_old becomes the variance ratio rho_t = sg(min(V_theta(s_t) / mean V_old, c_max)),
V(s) = 1 - sum_v pi(v|s)^2. Deviations from the paper, each a flag (docs/design.md section 5):
1 V over its batch mean, capped at c_max = 10; 2 the trust region is GRPO's zero-gradient set;
3 `--token-ratio variance-old`; 4 other weights (`--occurrence`, reco_variants.py); 5 positive-only
weights; 6 reco_scaled's `occurrence: count`; 7 one lr and clip for every method; 8 GRPO's settings
(verl's); 9 F-GRPO's gamma = 1 (`--method f-grpo`, arXiv 2602.06717); 10 the task: a small Countdown
and a tiny transformer (reco_task.py), or math with a 1.5B-8B model (`--task math --model M`).
A variant is one registered function and a flag (TOKEN_RATIOS, OCCURRENCES). `python reco_mini.py`:
base, GRPO, ReCo on a CPU.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

import reco_io  # plumbing: command line, files, models, sampler, forwards, precision, table, plot
import reco_log  # log.jsonl, and TensorBoard / W&B on request
import reco_variants as variants  # rarely used weights, and the peers' methods
from reco_io import ConfigError, Step, forward_stats, old_stats, opt, token_stats, tqdm  # noqa:F401
from reco_task import TASKS  # the problems: splits, prompt, reward, canonical keys, token labels

METHODS = {  # method -> (occurrence mode, token ratio, focal gamma)
    "grpo": ("none", "is", 0.0),
    "reco": ("sequence", "variance", 0.0),
    "reco-response": ("sequence", "is", 0.0),
    "reco-token": ("none", "variance", 0.0),
    "f-grpo": ("none", "is", 1.0),
}


@dataclass
class LossConfig:
    """The policy-loss settings, shared with reco_scaled (its `algo` section)."""
    occurrence: str = opt("", "response weight m_i (default: the method's)")
    occurrence_apply: str = opt("all", "weigh all responses, or those with A > 0")
    token_ratio: str = opt("", "token term (default: the method's)")
    focal_gamma: float | None = opt(None, "F-GRPO: A *= (1-success rate)^gamma (default: method's)")
    variance_cap: float = opt(10.0, "c_max, the cap on rho = V / mean V_old")
    variance_norm: str = opt("batch", "divide V by its rollout-batch mean, or by 1")
    clip_low: float = opt(0.2, "eps_low of the PPO clip")
    clip_high: float = opt(0.2, "eps_high of the PPO clip")
    dual_clip: float = opt(0.0, "cap the loss of A < 0 tokens at -C A (0 = off; verl uses 3)")
    kl_coef: float = opt(0.0, "beta of the k3 KL penalty to the base policy")
    no_std: bool = opt(False, "Dr.GRPO advantages: do not divide by the group's std")
    aggregation: str = opt("token-mean", "mean over a mini-batch's tokens, or of each response's")
    advantage: str = opt("grpo", "group advantage (pass-at-k: Pass@k training's)")
    pass_k: int = opt(4, "k of --advantage pass-at-k, at most the group size")
    prompt_gate: str = opt("none", "the prompts updated (zero-success: those never solved)")
    response_weight: str = opt("none", "a peer's response weight, times ReCo's")
    ucpo_tau: float = opt(0.2, "UCPO's tau: the uniform share of the correct responses' weight")
    ucpo_score: str = opt("mean", "UCPO's q from mean (authors' code) or sum (paper) log pi_old")
    simko_k: int = opt(3, "SimKO's K: the likeliest tokens a correct response's update spreads to")
    simko_alpha: float = opt(0.01, "SimKO's alpha: the share of the update spread over the top K")
    simko_lambda: float = opt(1.1, "SimKO's lambda: the penalty on an incorrect top-1 token")
    simko_quantile: float = opt(0.8, "SimKO acts above this quantile of a response's entropies")
    simko_scale: str = opt("advantage", "lambda scales advantage (authors' code) or ratio (Eq. 5)")

    def __post_init__(self):
        for name, ok, message in self.checks():
            if not ok:
                raise ConfigError(name, message)

    def checks(self) -> list[tuple[str, bool, str]]:  # (field, ok, message)
        return reco_io.loss_checks(self, list(OCCURRENCES), list(TOKEN_RATIOS), list(ADVANTAGES),
                                   list(PROMPT_GATES), list(RESPONSE_WEIGHTS))


def loss_config(cfg: LossConfig, method: str) -> LossConfig:
    """The loss settings of `method`, with every flag that was set on top."""
    occurrence, token_ratio, gamma = METHODS[method]
    own = {f.name: getattr(cfg, f.name) for f in fields(LossConfig)}
    gamma = gamma if cfg.focal_gamma is None else cfg.focal_gamma
    return LossConfig(**own | {"occurrence": cfg.occurrence or occurrence,
                               "token_ratio": cfg.token_ratio or token_ratio, "focal_gamma": gamma})


@dataclass
class Config(LossConfig):
    """Everything reco_mini.py does; every field is a flag (`python reco_mini.py --help`)."""
    methods: str = opt("grpo,reco", "comma-separated methods to train, from")
    seed: int = opt(0, "seed of the SFT base, the RL run and the evaluation samples")
    eval_seed: int = opt(-1, "seed of the evaluation samples' generator (-1 = seed + 1)")
    device: str = opt("auto", "where to train (auto: cuda when there is one)")
    out: str = opt("", "output directory (default runs/default, or runs/quick with --quick)")
    quick: bool = opt(False, "a tiny budget for a smoke test of about a minute")
    task: str = opt("countdown", "the problems (math needs --model and --data)")
    model: str = opt("", "Hugging Face model name or directory (default: a tiny model built here)")
    data: str = opt("", "math problems: .jsonl/.parquet, dataset dir, hub NAME[:CONFIG][:SPLIT]")
    eval_data: str = opt("", "held-out math problems, as --data (default: a fifth of --data)")
    n_train: int = opt(1024, "countdown RL training problems")
    n_test: int = opt(64, "held-out countdown problems, in each of the test and validation splits")
    hidden: int = opt(96, "width of the tiny model")
    layers: int = opt(3, "decoder layers of the tiny model")
    sft_steps: int = opt(400, "SFT steps of the tiny base model")
    sft_batch: int = opt(128, "SFT demonstrations per step")
    sft_lr: float = opt(3e-3, "peak SFT learning rate (one cycle)")
    steps: int = opt(60, "RL steps, one rollout batch each")
    prompts_per_step: int = opt(32, "prompts per RL step")
    group_size: int = opt(8, "G, responses per prompt")
    epochs: int = opt(2, "passes over each rollout batch")
    minibatches: int = opt(2, "optimizer steps per pass")
    lr: float = opt(2e-4, "RL learning rate (AdamW, constant)")
    grad_clip: float = opt(1.0, "clip the gradient norm at this value (0 = off)")
    temperature: float = opt(1.0, "tau: responses are sampled from softmax(logits / tau)")
    max_new_tokens: int = opt(0, "response length limit (0: 12 countdown, 96 -long, 1024 math)")
    n_eval: int = opt(256, "samples per held-out problem")
    eval_batch: int = opt(0, "most responses sampled at once to evaluate (0: 4096, math 64)")
    eval_every: int = opt(0, "evaluate on the validation split every N RL steps (0 = at the end)")
    ks: str = opt("", "comma-separated k for Pass@k (default 1, 2, 4, ..., n_eval)")
    micro_batch: int = opt(0, "rows per forward; gradients add up over the mini-batch (0 = all)")
    head_chunk: int = opt(-1, "row-tokens per lm-head slice (0 = full logits; -1: math 256)")
    dtype: str = opt("float32", "precision of the forwards (bfloat16: autocast over fp32 weights)")
    gradient_checkpointing: bool = opt(False, "recompute each decoder layer in the backward pass")
    log: str = opt("", "also log each RL step to (log.jsonl is always written)")
    overwrite: bool = opt(False, "replace the results of a different config in --out")

    def __post_init__(self):
        super().__post_init__()
        reco_io.resolve_defaults(self, TASKS[self.task])  # 0, -1, "" or "auto": the task's, or cuda

    def checks(self) -> list[tuple[str, bool, str]]:  # and the run's: task, files, sizes, flags
        return super().checks() + reco_io.run_checks(self, list(METHODS), list(TASKS))

    @property
    def method_list(self) -> list[str]:
        return [m for m in self.methods.split(",") if m]


# ==== The math: pure functions, each tested against an independent reference.

def group_advantages(rewards: Tensor, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO advantage A_i = (R_i - mean_j R_j) / (std_j R_j + eps), unbiased std. [P,G] -> [P,G]"""
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # equal rewards give A = 0 exactly
    if not scale_by_std:
        return centred  # Dr.GRPO
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=True) + eps)


def focal_scale(rewards: Tensor, gamma: float) -> Tensor:
    """F-GRPO: scale a group's advantages by (1 - mu)^gamma, mu = share of R > 0. [P,G] -> [P]"""
    mu = (rewards > 0).to(rewards.dtype).mean(dim=1)  # [P]
    return (1.0 - mu) ** gamma


def register(registry: dict, name: str):
    """Decorator: file a function in `registry` under `name`, the value its flag takes."""
    return lambda fn: registry.update({name: fn}) or fn


# Advantages, prompt gates and response weights beside ReCo's: the peers of reco_variants.py
# (--advantage, --prompt-gate, --response-weight); each default leaves GRPO as it is.
ADVANTAGES: dict[str, Callable] = {  # (rewards [P, G], LossConfig) -> A [P, G]
    "grpo": lambda rewards, cfg: group_advantages(rewards, scale_by_std=not cfg.no_std),
    "pass-at-k": lambda rewards, cfg: variants.pass_at_k_advantages(rewards, cfg.pass_k),
}
PROMPT_GATES: dict[str, Callable] = {  # (problems, rewards [P, G], the run's memory) -> 0/1 [P]
    "none": lambda problems, rewards, memory: torch.ones(len(problems), device=rewards.device),
    "zero-success": variants.zero_success_gate,
}
RESPONSE_WEIGHTS: dict[str, Callable] = {  # (R, seq_logprobs, lengths [P, G], cfg) -> w [P, G]
    "none": lambda rewards, lp, lengths, cfg: torch.ones_like(lp),
    "ucpo": lambda rewards, lp, lengths, cfg: variants.ucpo_weights(
        rewards, lp, lengths, cfg.ucpo_tau, cfg.ucpo_score == "mean"),
}


# Response level. Each mode gives m_i, the expected copies of y_i in its group;
# w_i = G (1/m_i) / sum_j (1/m_j). Signature: (seq_logprobs [P, G] float64, lengths [P, G] float64
# | None, responses: P*G tuples | None, keys: P*G canonical keys | None) -> m [P, G]
OCCURRENCES: dict[str, Callable[[Tensor, Tensor | None, list | None, list | None], Tensor]] = {}


@register(OCCURRENCES, "sequence")
def copies_sequence(lp: Tensor, lengths, responses, keys) -> Tensor:
    """m_i = 1 + (G - 1) p_i, p_i = pi_old(y_i|x) = exp(sum_t log pi_old(y_it)): the paper's."""
    return 1.0 + (lp.shape[1] - 1) * lp.exp()


OCCURRENCES |= {"token-mean": variants.copies_token_mean, "count": variants.copies_count,
                "canonical": variants.copies_canonical}


@register(OCCURRENCES, "none")
def copies_none(lp: Tensor, lengths, responses, keys) -> Tensor:
    """m_i = 1: every response counts once per draw, as in GRPO."""
    return torch.ones_like(lp)


def occurrence_weights(seq_logprobs: Tensor, mode: str = "sequence", responses: list | None = None,
                       lengths: Tensor | None = None, advantages: Tensor | None = None,
                       apply: str = "all", keys: list | None = None) -> Tensor:
    """ReCo response weights w_i (no gradient), mean 1 within each group: seq_logprobs [P, G],
    sum_t log pi_old(y_it) -> w_i = G (1/m_i) / sum_j (1/m_j), m_i from OCCURRENCES[mode].
    `responses` (P*G token-id lists, problem-major, or P lists of G) serve "count", and "token-mean"
    without `lengths` [P, G]; `keys` (P*G canonical keys) serve "canonical". apply="positive" keeps
    weight 1 wherever advantages [P, G] <= 0."""
    flat, lengths = reco_io.occurrence_inputs(seq_logprobs, mode, list(OCCURRENCES), responses,
                                              lengths, advantages, apply, keys)  # checked
    inv_m = 1.0 / OCCURRENCES[mode](seq_logprobs.detach().double(), lengths, flat, keys)
    w = inv_m / inv_m.mean(dim=1, keepdim=True)  # [P, G]
    if apply == "positive":
        w = torch.where(advantages > 0, w, torch.ones_like(w))
    return w.to(seq_logprobs.dtype)


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log pi(y_t|s_t) of the temperature-scaled distribution. [B,T,V],[B,T] -> [B,T], in float32
    (float64 stays float64)."""
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    logp = F.log_softmax(z / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def variance_stat(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """V(s) = sum_v pi(v|s)(1 - pi(v|s)) = 1 - sum_v pi(v|s)^2, pi = softmax(z/tau).
    [..., V] -> [...] in float32 (float64 stays float64)."""
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    return 1.0 - F.softmax(z / temperature, dim=-1).square().sum(-1)


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """H(s) = -sum_v pi(v|s) log pi(v|s), pi = softmax(z/tau); a diagnostic. [..., V] -> [...]"""
    logp = F.log_softmax(logits.detach().float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi || ref) on samples of pi: e^q - q - 1, q = ref_logp - logp"""
    q = ref_logp - logp
    return torch.exp(q) - q - 1


@dataclass
class TokenTerms:  # what a token-ratio term may use; [B, T] unless noted
    logp: Tensor  # log pi_theta(y_t), carries the gradient
    r: Tensor  # importance ratio exp(clamp(logp - log pi_old(y_t), -20, 20))
    A: Tensor  # [B, 1] advantages
    keep: Tensor  # 0 where GRPO's clipped surrogate has zero gradient, else 1
    v: Tensor | None  # V_theta(s_t)
    v_old: Tensor | None  # V_old(s_t)
    v_old_mean: Tensor | None  # 0-d: mean V_old over the rollout batch's tokens (all ranks)
    select: Tensor | None = None  # 0/1 tokens of TOKEN_SELECTS[token_ratio], where registered
    logits: Tensor | None = None  # [B, T, V] the policy's logits, where the trainer keeps them
    temperature: float = 1.0  # pi_theta = softmax(logits / temperature)
    y: Tensor | None = None  # [B, T] the response tokens
    mask: Tensor | None = None  # [B, T] 1 on response tokens


# Token level. Signature: (TokenTerms, LossConfig) -> (per-token loss [B, T], rho [B, T] or None)
TOKEN_RATIOS: dict[str, Callable[[TokenTerms, LossConfig], tuple[Tensor, Tensor | None]]] = {}
# Token ratio -> the tokens it acts on, a [B, T] 0/1 mask from the step (train_rl: batch "select")
TOKEN_SELECTS: dict[str, Callable[[Step], Tensor]] = {}


@register(TOKEN_RATIOS, "is")
def importance_ratio(t: TokenTerms, cfg: LossConfig) -> tuple[Tensor, None]:
    """GRPO:  l_t = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)"""
    return -torch.min(t.r * t.A, torch.clamp(t.r, 1 - cfg.clip_low, 1 + cfg.clip_high) * t.A), None


@register(TOKEN_RATIOS, "variance")
def variance_ratio(t: TokenTerms, cfg: LossConfig) -> tuple[Tensor, Tensor]:
    """ReCo: l_t = -rho_t A exp(logp - sg(logp)) keep_t, rho_t = sg(min(V_theta / mean V_old, cap))

    Value -rho A, gradient -rho A grad log pi(y_t): the scale follows how undecided s_t is."""
    rho = torch.clamp(t.v / t.v_old_mean, max=cfg.variance_cap).detach()  # [B, T]
    return -rho * t.A * torch.exp(t.logp - t.logp.detach()) * t.keep, rho


@register(TOKEN_RATIOS, "variance-old")
def variance_old_ratio(t: TokenTerms, cfg: LossConfig) -> tuple[Tensor, Tensor]:
    """l_t = sg(min(V_old / V_old_mean, c_max)) * l_t of "is"; equal to "variance" on policy."""
    rho = torch.clamp(t.v_old / t.v_old_mean, max=cfg.variance_cap).detach()
    return rho * importance_ratio(t, cfg)[0], rho


TOKEN_RATIOS["simko"] = variants.simko_ratio  # a peer: GRPO's loss, smoothed at uncertain tokens


def policy_loss(logp: Tensor, batch: dict[str, Tensor], cfg: LossConfig, v: Tensor | None = None,
                num_tokens: float | Tensor | None = None, num_seqs: float | Tensor | None = None,
                logits: Tensor | None = None,
                temperature: float = 1.0) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO / ReCo surrogate of a (mini- or micro-) batch; `cfg` as resolved by `loss_config`.

    logp, v: [B, T] log pi_theta(y_t), V_theta(s_t). batch: "old_logp", "mask" [B, T], "advantages"
    [B]; optional "weights" [B], "v_old" [B, T], "v_old_mean" (0-d), "ref_logp", "select",
    "resp" [B, T];
    logits [B, T, V] at `temperature`, for a token term that reads them.
    num_tokens/num_seqs override the normaliser: micro-batches and ranks sum to the mini-batch.

      r_t    = exp(clamp(logp - old_logp, -20, 20))
      keep_t = 0 where (r > 1 + eps_high and A > 0) or (r < 1 - eps_low and A < 0)
      l_t    = TOKEN_RATIOS[cfg.token_ratio](...)
      dual clip C (A < 0): l_t = min(l_t, -C A)
      l_t   *= w_i;   l_t += beta * k3(logp, ref_logp)
    """
    mask = batch["mask"].to(logp.dtype)
    A = batch["advantages"].detach().unsqueeze(-1).to(logp.dtype)  # [B, 1]
    r = torch.exp(torch.clamp(logp - batch["old_logp"], -20.0, 20.0))  # [B, T]
    clipped_high, clipped_low = (r > 1 + cfg.clip_high) & (A > 0), (r < 1 - cfg.clip_low) & (A < 0)
    keep = (~(clipped_high | clipped_low)).to(logp.dtype)
    terms = TokenTerms(logp, r, A, keep, v, batch.get("v_old"), batch.get("v_old_mean"),
                       batch.get("select"), logits, temperature, batch.get("resp"), mask)
    loss, rho = TOKEN_RATIOS[cfg.token_ratio](terms, cfg)
    if cfg.dual_clip > 0:  # cap the loss of A < 0 at -C A (zero gradient where it binds)
        loss = torch.where(A < 0, torch.min(loss, -cfg.dual_clip * A), loss)
    if batch.get("weights") is not None:
        loss = loss * batch["weights"].detach().unsqueeze(-1).to(logp.dtype)
    if cfg.kl_coef > 0:
        loss = loss + cfg.kl_coef * k3(logp, batch["ref_logp"].detach())
    if cfg.aggregation == "token-mean":
        total = (loss * mask).sum() / (mask.sum() if num_tokens is None else num_tokens)
    else:  # seq-mean-token-mean
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        total = per_seq.sum() / (logp.shape[0] if num_seqs is None else num_seqs)
    with torch.no_grad():  # 0-d tensors: no device sync
        n = mask.sum().clamp(min=1)
        stats = {"ratio_mean": (r * mask).sum() / n, "ratio_max": (r * mask).max(),
                 "clip_frac_high": (clipped_high * mask).sum() / n,
                 "clip_frac_low": (clipped_low * mask).sum() / n,
                 "approx_kl_old": ((batch["old_logp"] - logp) * mask).sum() / n}
        if rho is not None:
            stats |= {"rho_mean": (rho * mask).sum() / n, "rho_max": (rho * mask).max()}
    return total, stats


# ==== Rollouts: sample (reco_io.sample, a KV-cache sampler), decode, score.

def rollout(cfg: Config, model, tokenizer, problems: list, n: int, gen: torch.Generator) -> dict:
    """n samples per problem (problem-major), decoded and scored by the task."""
    task = TASKS[cfg.task]
    prompts = [task.prompt(p, tokenizer) for p in problems for _ in range(n)]
    enc = tokenizer(prompts, padding=True, return_tensors="pt",  # a chat template may write the BOS
                    add_special_tokens=not reco_io.has_bos(prompts[0], tokenizer)).to(cfg.device)
    with reco_io.autocast(cfg.device, cfg.dtype):
        resp, mask = reco_io.sample(model, enc.input_ids, enc.attention_mask, cfg.max_new_tokens,
                                    cfg.temperature, task.stop_ids(tokenizer, model),
                                    tokenizer.pad_token_id, gen)
    texts = tokenizer.batch_decode(resp, skip_special_tokens=True)
    flat = [p for p in problems for _ in range(n)]
    rewards = torch.tensor(task.rewards(flat, texts), device="cpu")
    return dict(prompt_ids=enc.input_ids, prompt_mask=enc.attention_mask, resp=resp, mask=mask,
                texts=texts, rewards=rewards.view(len(problems), n))


# ==== RL: rollout -> reward -> advantage -> old stats -> weights -> updates (design 2)

def train_rl(cfg: Config, method: str, model, base, tokenizer, problems: list, run_dir: Path,
             eval_problems: list | None = None, on_step: Callable[[Step], dict] | None = None):
    """Train `model` with `method`: a row per step in run_dir/log.jsonl and, every cfg.eval_every
    steps, the evaluation on `eval_problems` in run_dir/trajectory.jsonl. `base` serves the KL term
    and kl_base when on the model's device. `on_step(step)`, if given, runs once a step before the
    updates; its dict joins the step's log row (the studies': experiments/diagnostics.py)."""
    loss_cfg = loss_config(cfg, method)
    task = TASKS[cfg.task]
    rng, gen = random.Random(cfg.seed), torch.Generator(cfg.device).manual_seed(cfg.seed)
    solved = set()  # the prompt gate's memory: problems with a success in an earlier step
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    P, G = cfg.prompts_per_step, cfg.group_size
    ckpt = run_dir / "model.pt"
    log = reco_log.RunLogger(run_dir / "log.jsonl", cfg.log, method, asdict(cfg))  # + --log sinks
    evals = cfg.eval_every and eval_problems
    trajectory = open(run_dir / "trajectory.jsonl", "w", buffering=1) if evals else None
    precision = reco_io.autocast(cfg.device, cfg.dtype)
    base_on_device = base is not None and base.device == model.device
    if loss_cfg.kl_coef > 0 and not base_on_device:
        raise ValueError("--kl-coef > 0 needs the base model on the model's device")
    if cfg.head_chunk > 0:
        reco_io.check_lm_head(model)  # the logits must be lm_head(last hidden state), nothing more
        if loss_cfg.token_ratio == "simko":
            raise ConfigError("head_chunk", "> 0 keeps no logits, which --token-ratio simko reads")
    for step in tqdm(range(cfg.steps), desc=f"rl {method}", leave=False):
        t0 = time.time()
        step_problems = rng.sample(problems, P)
        r = rollout(cfg, model, tokenizer, step_problems, G, gen)  # rollout -> reward
        A = ADVANTAGES[loss_cfg.advantage](r["rewards"], loss_cfg)  # advantage
        A = A * focal_scale(r["rewards"], loss_cfg.focal_gamma)[:, None]  # F-GRPO (gamma 0: 1)
        A = A * PROMPT_GATES[loss_cfg.prompt_gate](step_problems, r["rewards"], solved)[:, None]
        A = A.flatten().to(cfg.device)  # [P*G]
        t1 = time.time()
        mask = r["mask"].float()
        seqs = (r["prompt_ids"], r["prompt_mask"], r["resp"], r["mask"])
        old_logp, v_old, entropy = old_stats(cfg, model, seqs)  # old stats
        ref_logp = old_stats(cfg, base, seqs)[0] if base_on_device else None
        v_old_mean = ((v_old * mask).sum() / mask.sum() if loss_cfg.variance_norm == "batch"
                      else torch.ones((), device=cfg.device))
        responses = [row[m.bool()].tolist() for row, m in zip(r["resp"], r["mask"])]
        canonical = loss_cfg.occurrence == "canonical"
        keys = task.canonical_keys(step_problems, G, r["texts"]) if canonical else None
        w = occurrence_weights((old_logp * mask).sum(-1).view(P, G), loss_cfg.occurrence,  # weights
                               responses, mask.sum(-1).view(P, G), A.view(P, G),
                               loss_cfg.occurrence_apply, keys).flatten()
        w = w * RESPONSE_WEIGHTS[loss_cfg.response_weight](
            r["rewards"], (old_logp * mask).sum(-1).view(P, G), mask.sum(-1).view(P, G), loss_cfg
        ).flatten()
        this = Step(step_problems, G, r["texts"], r["resp"], mask, responses, r["rewards"], A,
                    old_logp, v_old, v_old_mean, entropy, w, loss_cfg, task, tokenizer)
        selects = TOKEN_SELECTS.get(loss_cfg.token_ratio)
        diagnostics = on_step(this) if on_step else {}
        batch = dict(old_logp=old_logp, advantages=A, mask=mask, weights=w, v_old=v_old,
                     resp=r["resp"],
                     ref_logp=ref_logp, select=selects(this) if selects else None)
        stats, t2 = {}, time.time()  # name -> one value per update (policy_loss's: per micro-batch)
        with reco_io.training(model, cfg.gradient_checkpointing):  # the updates
            for _ in range(cfg.epochs):
                order = torch.randperm(P * G, generator=gen, device=cfg.device)
                for idx in order.chunk(cfg.minibatches):
                    optimizer.zero_grad()
                    loss = 0.0
                    for mic in idx.split(cfg.micro_batch or len(idx)):  # gradients add up
                        with precision:  # the readable forward; --head-chunk: reco_io's sliced one
                            logits = None if cfg.head_chunk > 0 else reco_io.response_logits(
                                model, *(x[mic] for x in seqs))
                            if logits is None:
                                logp, v, _ = forward_stats(cfg, model, seqs, mic)
                            else:
                                logp = token_logprobs(logits, r["resp"][mic], cfg.temperature)
                                v = variance_stat(logits.detach(), cfg.temperature)
                        mb = {k: x[mic] for k, x in batch.items() if x is not None}
                        part, s = policy_loss(logp, mb | {"v_old_mean": v_old_mean}, loss_cfg, v=v,
                                              num_tokens=mask[idx].sum(), num_seqs=len(idx),
                                              logits=logits, temperature=cfg.temperature)
                        part.backward()  # normalised by the mini-batch: the parts sum to its loss
                        loss += part.item()
                        for k, x in s.items():
                            stats.setdefault(k, []).append(float(x))
                    clip = cfg.grad_clip or math.inf
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
                    reco_io.stop_if_not_finite(loss, grad_norm, f"{method} at step {step}", ckpt)
                    optimizer.step()
                    stats.setdefault("grad_norm", []).append(grad_norm)
                    stats.setdefault("loss", []).append(loss)
        if (step + 1) % 10 == 0 or step + 1 == cfg.steps:
            reco_io.save_atomic(model.state_dict(), ckpt)
        tokens = mask.sum()
        kl = ({"kl_base": ((k3(old_logp, ref_logp) * mask).sum() / tokens).item()}
              if base_on_device else {})
        log.log({"step": step, "reward_mean": r["rewards"].mean().item(),
                 "pass_rate": (r["rewards"].max(1).values > 0).float().mean().item(),
                 "adv_abs_mean": A.abs().mean().item(), "w_min": w.min().item(),
                 "w_mean": w.mean().item(), "w_max": w.max().item(),
                 "v_old_mean": float(v_old_mean),
                 "entropy": ((entropy * mask).sum() / tokens).item(), **kl,
                 "response_length": mask.sum(-1).mean().item(), **diagnostics,
                 **{k: sum(v) / len(v) for k, v in stats.items()},
                 **{k: max(v) for k, v in stats.items() if k.endswith("_max")},
                 "time_rollout": t1 - t0, "time_old_stats": t2 - t1,
                 "time_update": time.time() - t2})
        if trajectory and (step + 1) % cfg.eval_every == 0:
            result = evaluate(cfg, model, tokenizer, eval_problems, f"step {step + 1}")
            trajectory.write(json.dumps({"step": step + 1, **result}) + "\n")
    log.close()
    model.zero_grad(set_to_none=True)  # free the gradients for what follows (evaluation)
    return model


# ==== Evaluation: n samples per held-out problem -> unbiased Pass@k (design 3.5)

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from n samples with c correct (Chen et al. 2021):
    pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i)"""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def default_ks(n: int) -> list[int]:
    """The k of a Pass@k curve from n samples: 1, 2, 4, ... up to n, and n itself."""
    return sorted({2 ** i for i in range(n.bit_length()) if 2 ** i <= n} | {n})


@torch.no_grad()
def evaluate(cfg: Config, model, tokenizer, problems: list, desc: str) -> dict:
    """Pass@k averaged over problems, mean accuracy, distinct correct responses, solved-any; per
    problem the correct count and, where the task has solution forms, its correct samples per form.
    At most cfg.eval_batch responses at once: several problems per call, or one's n in chunks."""
    seed = cfg.seed + 1 if cfg.eval_seed < 0 else cfg.eval_seed
    gen = torch.Generator(cfg.device).manual_seed(seed)  # the same samples for every model
    task, n = TASKS[cfg.task], cfg.n_eval
    per_call, rows = max(1, cfg.eval_batch // n), min(n, cfg.eval_batch)  # problems, responses
    counts, distinct, forms = [], [], []
    for i in tqdm(range(0, len(problems), per_call), desc=f"eval {desc}", leave=False):
        group = problems[i: i + per_call]
        parts = [rollout(cfg, model, tokenizer, group, min(rows, n - s), gen)
                 for s in range(0, n, rows)]  # each: [len(group), m] rewards, problem-major texts
        for j, problem in enumerate(group):
            correct = [t for r in parts for t, good in zip(r["texts"][j * r["rewards"].shape[1]:],
                                                          r["rewards"][j].bool().tolist()) if good]
            counts.append(len(correct))
            distinct.append(len(set(correct)))
            forms.append(task.forms(problem, correct))
    ks = [int(k) for k in cfg.ks.split(",")] if cfg.ks else default_ks(n)
    curve = {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    return {"pass_at_k": curve, "mean_accuracy": sum(counts) / (n * len(counts)),
            "distinct_correct": sum(distinct) / len(distinct),
            "solved_any": sum(c > 0 for c in counts) / len(counts), "counts": counts,
            **({"forms": forms} if forms and None not in forms else {})}


# ==== main: build or load the base, train each method from it, evaluate them all.

QUICK = dict(n_train=64, n_test=16, hidden=64, layers=2, sft_steps=300, sft_batch=128, steps=4,
             prompts_per_step=8, n_eval=32)


def parse_config(argv: list[str] | None = None) -> Config:
    return reco_io.parse_config(Config, argv, QUICK, description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(argv)
    print(reco_io.describe_settings(cfg))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    out, start, task = Path(cfg.out), time.time(), TASKS[cfg.task]
    reco_io.refuse_reuse(cfg)  # --out holds another config's results: an error, unless --overwrite
    splits = task.splits(cfg)
    tokenizer, base = (reco_io.load_hf(cfg.model, cfg.device) if cfg.model
                       else task.tiny_base(cfg, splits))
    base.requires_grad_(False)
    results = {"config": asdict(cfg),
               "methods": {"base": evaluate(cfg, base, tokenizer, splits["test"], "base")}}
    base.to(cfg.device if cfg.kl_coef > 0 else "cpu")  # on the device for the KL term only
    for method in cfg.method_list:
        (out / method).mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        model = copy.deepcopy(base).to(cfg.device).requires_grad_(True)
        train_rl(cfg, method, model, base, tokenizer, splits["train"], out / method,
                 splits.get("val"))
        results["methods"][method] = evaluate(cfg, model, tokenizer, splits["test"], method)
    results["wall_time_s"] = round(time.time() - start, 1)
    reco_io.write_results(results, out)  # results.json, the Pass@k table and plot
    return results


if __name__ == "__main__":
    main()
