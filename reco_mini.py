"""reco_mini.py: GRPO, ReCo (arXiv 2607.26862) and F-GRPO end to end, in one readable file.

GRPO with verl's defaults: G samples per prompt, group-relative advantages, a PPO-clipped token
surrogate, several mini-batch updates per rollout, token-mean aggregation, no KL. ReCo changes two
terms: each response's loss is multiplied by w_i, the inverse of its expected copies in its group,
m_i = 1 + (G - 1) pi_old(y_i|x), over its batch mean, where A_i > 0; and the ratio r_t = pi_theta /
pi_old becomes rho_t = sg(min(V_theta(s_t) / mean V_old, c_max)), V(s) = 1 - sum_v pi(v|s)^2.
F-GRPO (arXiv 2602.06717) scales a group's advantages by (1 - its success rate)^gamma. The
departures from the papers' text, and the evidence behind each default: docs/design.md §5. Read in
order: config, math (each function beside its equation), rollout, RL loop, evaluation, main. The
studies' trainer, this loop with their hook and the peers' methods, is experiments/lab.py.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from reco import cli, hf, log, report  # flags and checks, models and sampling, the run log, results
from reco.cli import ConfigError as ConfigError  # raised by cli.check; callers catch it here
from reco.cli import RunSettings, default_ks, opt, register
from reco.hf import sample, token_stats  # the KV-cache sampler, --head-chunk's memory-saving path
from reco.tasks import TASKS, TaskSettings  # the problems: splits, prompt, reward, keys, labels

METHODS = {  # method -> (occurrence mode, token ratio, focal gamma)
    "grpo": ("none", "is", 0.0),
    "reco": ("sequence", "variance", 0.0),
    "reco-response": ("sequence", "is", 0.0),
    "reco-token": ("none", "variance", 0.0),
    "f-grpo": ("none", "is", 1.0),
}


@dataclass
class LossConfig:
    """The policy-loss settings, shared with reco_scaled (`algo`) and the TRL and verl plugins."""

    occurrence: str = opt("", "response weight m_i (default: the method's)")
    occurrence_apply: str = opt("all", "weigh all responses, or those with A > 0")
    occurrence_norm: str = opt("group", "w_i = (1/m_i) / its mean in")
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

    def __post_init__(self):  # a bad setting raises ConfigError, which names its flag
        cli.check(self.checks())

    def checks(self) -> list[tuple[str, bool, str]]:  # (field, ok, message); reco_scaled's too
        return cli.loss_checks(self, list(OCCURRENCES), list(TOKEN_RATIOS))


def loss_config(cfg: LossConfig, method: str) -> LossConfig:
    """The loss settings of `method`, with every flag that was set on top."""
    occurrence, token_ratio, gamma = METHODS[method]
    settings = {f.name: getattr(cfg, f.name) for f in fields(LossConfig)}  # cfg may be a Config
    settings["occurrence"] = cfg.occurrence or occurrence
    settings["token_ratio"] = cfg.token_ratio or token_ratio
    settings["focal_gamma"] = gamma if cfg.focal_gamma is None else cfg.focal_gamma
    return LossConfig(**settings)


@dataclass
class Config(LossConfig, TaskSettings, RunSettings):
    """Every flag of `python reco_mini.py --help`: these, LossConfig's, the task's and the run's."""

    methods: str = opt("grpo,reco", "comma-separated methods to train, from")
    seed: int = opt(0, "seed of the SFT base, the RL run and the evaluation samples")
    task: str = opt("countdown", "the problems (math, code, code-chat need --model and --data)")
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
    eval_seed: int = opt(-1, "seed of the evaluation samples' generator (-1 = seed + 1)")
    eval_every: int = opt(0, "evaluate on the validation split every N RL steps (0 = at the end)")
    ks: str = opt("", "comma-separated k for Pass@k (default 1, 2, 4, ..., n_eval)")

    def __post_init__(self):  # the loss settings' checks, then the run's: task, files, sizes
        super().__post_init__()
        cli.check(cli.run_checks(self, list(METHODS), list(TASKS)))
        cli.resolve_defaults(self, TASKS[self.task], list(METHODS), list(TASKS))  # the task's

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


# Response level: m_i, the expected copies of y_i in its group, from (summed old log-probs [P, G]
# float64, lengths [P, G] float64 | None, responses: P*G tuples | None, keys | None) -> m [P, G]
OCCURRENCES: dict = {}


@register(OCCURRENCES, "sequence")
def copies_sequence(lp: Tensor, lengths, responses, keys) -> Tensor:
    """m_i = 1 + (G - 1) p_i, p_i = pi_old(y_i|x) = exp(sum_t log pi_old(y_it)): the paper's."""
    return 1.0 + (lp.shape[1] - 1) * lp.exp()


OCCURRENCES["token-mean"] = cli.copies_token_mean  # the rarely used ablations: reco/cli.py
OCCURRENCES["count"] = cli.copies_count
OCCURRENCES["canonical"] = cli.copies_canonical


@register(OCCURRENCES, "none")
def copies_none(lp: Tensor, lengths, responses, keys) -> Tensor:  # m_i = 1: GRPO
    return torch.ones_like(lp)


def occurrence_weights(
    seq_logp,
    mode,
    responses=None,
    lengths=None,
    advantages=None,
    apply=LossConfig.occurrence_apply,
    keys=None,
    norm=LossConfig.occurrence_norm,
    batch_mean=None,
) -> Tensor:
    """ReCo's response weights, no gradient: w_i = (1/m_i) / Z, m_i = OCCURRENCES[mode] of seq_logp
    [P, G] = sum_t log pi_old(y_it) and, where the mode reads them, responses, lengths or keys. Z by
    norm (docs/design.md §3.2): "group", the mean of 1/m_j over y_i's group (each keeps GRPO's total
    weight G); "batch", over the rollout batch (batch_mean: that mean, given a part of it); "none",
    1. apply="positive": w_i = 1 where A <= 0. The defaults are LossConfig's."""
    cli.check_occurrence(seq_logp, list(OCCURRENCES), mode, apply, norm, advantages)
    inv_m = 1.0 / OCCURRENCES[mode](seq_logp.detach().double(), lengths, responses, keys)  # [P, G]
    if norm == "group":
        w = inv_m / inv_m.mean(dim=1, keepdim=True)
    elif norm == "batch":
        w = inv_m / (inv_m.mean() if batch_mean is None else batch_mean)
    else:
        w = inv_m
    if apply == "positive":
        w = torch.where(advantages > 0, w, torch.ones_like(w))
    return w.to(seq_logp.dtype)


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log pi(y_t|s_t), pi = softmax(z/tau). [B,T,V],[B,T] -> [B,T] in float32 (float64 stays)"""
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    logp = F.log_softmax(z / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def variance_stat(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """V(s) = sum_v pi(v|s)(1 - pi(v|s)) = 1 - sum_v pi(v|s)^2. [..., V] -> [...], like log pi"""
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    return 1.0 - F.softmax(z / temperature, dim=-1).square().sum(-1)


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """H(s) = -sum_v pi(v|s) log pi(v|s), pi = softmax(z/tau): a diagnostic, no gradient. Like V."""
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    logp = F.log_softmax(z.detach() / temperature, dim=-1)
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
    logits: Tensor | None = None  # [B, T, V] the policy's logits, where the trainer keeps them
    temperature: float = 1.0  # pi_theta = softmax(logits / temperature)
    y: Tensor | None = None  # [B, T] the response tokens
    mask: Tensor | None = None  # [B, T] 1 on response tokens
    batch: dict = field(default_factory=dict)  # policy_loss's batch, for a term that reads more


# Token level. Signature: (TokenTerms, LossConfig) -> (per-token loss [B, T], rho [B, T] or None)
TOKEN_RATIOS: dict = {}


@register(TOKEN_RATIOS, "is")
def importance_ratio(t: TokenTerms, cfg: LossConfig) -> tuple[Tensor, None]:
    """GRPO:  l_t = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)"""
    clipped_r = torch.clamp(t.r, 1 - cfg.clip_low, 1 + cfg.clip_high)
    return -torch.min(t.r * t.A, clipped_r * t.A), None


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


def policy_loss(logp, batch, cfg, v=None, num_tokens=None, num_seqs=None, logits=None, tau=1.0):
    """GRPO / ReCo surrogate of a batch -> (loss, statistics); cfg: LossConfig. logp, v: [B, T] log
    pi_theta(y_t), V_theta(s_t); logits [B, T, V] at temperature tau. batch: "old_logp", "mask" [B,
    T], "advantages" [B]; optional "weights" [B], "v_old", "ref_logp", "resp" [B, T], "v_old_mean"
    (0-d), and what else a token term reads (TokenTerms.batch). num_tokens, num_seqs: the mini-
    batch's normalisers when this batch is a part of it (a micro-batch, a rank's share).

      r_t    = exp(clamp(logp - old_logp, -20, 20))
      keep_t = 0 where (r > 1 + eps_high and A > 0) or (r < 1 - eps_low and A < 0)
      l_t    = TOKEN_RATIOS[cfg.token_ratio](...)
      dual clip C (A < 0): l_t = min(l_t, -C A)
      l_t   *= w_i;   l_t += beta * k3(logp, ref_logp)"""
    mask = batch["mask"].to(logp.dtype)
    A = batch["advantages"].detach().unsqueeze(-1).to(logp.dtype)  # [B, 1]
    r = torch.exp(torch.clamp(logp - batch["old_logp"], -20.0, 20.0))  # [B, T]
    clipped_high = (r > 1 + cfg.clip_high) & (A > 0)
    clipped_low = (r < 1 - cfg.clip_low) & (A < 0)
    keep = (~(clipped_high | clipped_low)).to(logp.dtype)
    terms = dict(logp=logp, r=r, A=A, keep=keep, v=v, logits=logits, temperature=tau, mask=mask)
    terms |= dict(v_old=batch.get("v_old"), v_old_mean=batch.get("v_old_mean"), y=batch.get("resp"))
    loss, rho = TOKEN_RATIOS[cfg.token_ratio](TokenTerms(**terms, batch=batch), cfg)
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
        stats = {"ratio_mean": (r * mask).sum() / n, "ratio_max": (r * mask).max()}
        stats["clip_frac_high"] = (clipped_high * mask).sum() / n
        stats["clip_frac_low"] = (clipped_low * mask).sum() / n
        stats["approx_kl_old"] = ((batch["old_logp"] - logp) * mask).sum() / n
        if rho is not None:
            stats |= {"rho_mean": (rho * mask).sum() / n, "rho_max": (rho * mask).max()}
    return total, stats


# ==== Rollouts: sampling (reco.hf.sample: left-padded prompts), scoring; forwards over rollout rows
def rollout(cfg: Config, model, tokenizer, problems: list, n: int, gen: torch.Generator) -> dict:
    """n samples per problem (problem-major), decoded and scored by the task."""
    task = TASKS[cfg.task]
    flat = [p for p in problems for _ in range(n)]  # each problem n times
    prompts = [task.prompt(p, tokenizer) for p in flat]
    bos = not hf.has_bos(prompts[0], tokenizer)  # a chat template may write the BOS itself
    enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=bos)
    prompt_ids, prompt_mask = enc.input_ids.to(cfg.device), enc.attention_mask.to(cfg.device)
    stop_ids, pad_id = task.stop_ids(tokenizer, model), tokenizer.pad_token_id
    how = dict(temperature=cfg.temperature, stop_ids=stop_ids, pad_id=pad_id, gen=gen)
    with hf.autocast(cfg.device, cfg.dtype):
        resp, mask = sample(model, prompt_ids, prompt_mask, cfg.max_new_tokens, **how)
    resp, mask = task.trim(flat, resp, mask, tokenizer)  # code: cut after its stop sequence
    texts = tokenizer.batch_decode(resp, skip_special_tokens=True)
    rewards = torch.tensor(task.rewards(flat, texts), device="cpu").view(len(problems), n)
    rolled = dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, resp=resp, mask=mask)
    return rolled | dict(texts=texts, rewards=rewards)


def response_logits(model, prompt_ids, prompt_mask, resp, resp_mask, hidden=False) -> Tensor:
    """The logits that predicted each response token [B, T, V], by one forward: position i predicts
    token i + 1, so the last prompt column L - 1 predicts resp[:, 0] and the last response token
    nothing: [:, L-1:-1]. `hidden`: the decoder's last hidden states there [B, T, H] instead."""
    ids, attn = torch.cat([prompt_ids, resp], 1), torch.cat([prompt_mask, resp_mask], 1)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: positions start at the first token
    net = model.get_decoder() if hidden else model
    out = net(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False)
    return (out.last_hidden_state if hidden else out.logits)[:, prompt_ids.shape[1] - 1 : -1]


def policy_stats(cfg: Config, model, seqs: tuple, rows: Tensor, entropy: bool = False):
    """log pi(y_t) (with gradient where enabled), V(s_t) and, if asked, H(s_t) [B, T] of the rollout
    rows `rows` (seqs: prompt_ids, prompt_mask, resp, mask), and the logits [B, T, V]. --head-chunk
    N > 0: reco.hf's memory-saving path, the lm head N row-tokens at a time, no logits kept."""
    prompt_ids, prompt_mask, resp, mask = (x[rows] for x in seqs)
    if cfg.head_chunk > 0:
        hidden = response_logits(model, prompt_ids, prompt_mask, resp, resp_mask=mask, hidden=True)
        head = model.get_output_embeddings()
        return *token_stats(hidden, resp, cfg.temperature, cfg.head_chunk, head=head), None
    logits = response_logits(model, prompt_ids, prompt_mask, resp, resp_mask=mask)
    logp = token_logprobs(logits, resp, cfg.temperature)
    v = variance_stat(logits.detach(), cfg.temperature)
    h = token_entropy(logits, cfg.temperature) if entropy else None
    return logp, v, h, logits


@torch.no_grad()
def old_stats(cfg: Config, model, seqs: tuple) -> tuple[Tensor, Tensor, Tensor]:
    """log pi_old, V_old and H_old [B, T] of the rollout batch, cfg.micro_batch rows a pass"""
    rows = torch.arange(len(seqs[2]), device=seqs[2].device).split(cfg.micro_batch or len(seqs[2]))
    with hf.autocast(cfg.device, cfg.dtype):
        parts = [policy_stats(cfg, model, seqs, part, entropy=True)[:3] for part in rows]
    return tuple(torch.cat(t) for t in zip(*parts))


# ==== RL: rollout -> reward -> advantage -> old statistics -> weights -> updates -> log
def train_rl(cfg, method, model, base, tokenizer, problems, run_dir, evals=None):
    """Train `model` with `method` on `problems` (docs/design.md §2): a row per step in log.jsonl
    and Pass@k on `evals` every cfg.eval_every steps in trajectory.jsonl, in run_dir."""
    loss_cfg = loss_config(cfg, method)
    task = TASKS[cfg.task]
    rng = random.Random(cfg.seed)  # draws the prompts of each step
    gen = torch.Generator(cfg.device).manual_seed(cfg.seed)  # the samples and the mini-batches
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    P, G, tau = cfg.prompts_per_step, cfg.group_size, cfg.temperature
    logger = log.RunLogger(run_dir / "log.jsonl", cfg.log, method, asdict(cfg))  # + --log sinks
    trajectory = log.Trajectory(run_dir, cfg.eval_every if evals else 0)
    base_on_device = base is not None and base.device == model.device  # the KL term, kl_base
    hf.check_training(cfg, loss_cfg, model, base_on_device)
    for step in log.tqdm(range(cfg.steps), desc=f"rl {method}", leave=False):
        t0 = time.time()
        # Rollout and reward: G responses to each of P prompts, scored by the task's verifier
        step_problems = rng.sample(problems, P)
        r = rollout(cfg, model, tokenizer, step_problems, n=G, gen=gen)
        rewards = r["rewards"]  # [P, G]
        # Advantage, times F-GRPO's focal scale (1 at gamma 0)
        A = group_advantages(rewards, scale_by_std=not loss_cfg.no_std)
        A = A * focal_scale(rewards, loss_cfg.focal_gamma)[:, None]
        A = A.flatten().to(cfg.device)  # [P*G]
        t1 = time.time()
        # Old statistics of every response token, without gradient: the policy is pi_old here
        mask = r["mask"].float()
        seqs = (r["prompt_ids"], r["prompt_mask"], r["resp"], r["mask"])
        old_logp, v_old, entropy = old_stats(cfg, model, seqs)
        ref_logp = old_stats(cfg, base, seqs)[0] if base_on_device else None  # for the KL
        v_old_mean = (v_old * mask).sum() / mask.sum()  # over every response token of the batch
        if loss_cfg.variance_norm == "none":
            v_old_mean = torch.ones((), device=cfg.device)
        # Weights: ReCo's w_i from the summed old log-probs (1 for GRPO)
        seq_logp, lengths = (old_logp * mask).sum(-1).view(P, G), mask.sum(-1).view(P, G)
        responses = [row[m.bool()].tolist() for row, m in zip(r["resp"], r["mask"])]
        canonical = loss_cfg.occurrence == "canonical"
        keys = task.canonical_keys(step_problems, G, r["texts"]) if canonical else None
        given = dict(responses=responses, lengths=lengths, advantages=A.view(P, G), keys=keys)
        how = dict(apply=loss_cfg.occurrence_apply, norm=loss_cfg.occurrence_norm)
        w = occurrence_weights(seq_logp, loss_cfg.occurrence, **given, **how).flatten()  # [P*G]
        # Updates: cfg.epochs passes over the batch, each a random split into mini-batches
        batch = dict(old_logp=old_logp, advantages=A, mask=mask, weights=w, v_old=v_old)
        batch |= dict(resp=r["resp"], ref_logp=ref_logp)
        stats, t2 = {}, time.time()  # name -> one value per update (policy_loss's: per micro-batch)
        with hf.training(model, cfg.gradient_checkpointing):
            for _ in range(cfg.epochs):
                order = torch.randperm(P * G, generator=gen, device=cfg.device)
                for idx in order.chunk(cfg.minibatches):
                    optimizer.zero_grad()
                    loss = 0.0
                    mini = dict(num_tokens=mask[idx].sum(), num_seqs=len(idx))  # its normalisers
                    for mic in idx.split(cfg.micro_batch or len(idx)):  # gradients add up
                        with hf.autocast(cfg.device, cfg.dtype):  # --dtype
                            logp, v, _, logits = policy_stats(cfg, model, seqs, mic)
                        mb = {k: x[mic] for k, x in batch.items() if x is not None}
                        mb["v_old_mean"] = v_old_mean
                        part, s = policy_loss(logp, mb, loss_cfg, v, logits=logits, tau=tau, **mini)
                        part.backward()
                        loss += part.item()
                        for k, x in s.items():
                            stats.setdefault(k, []).append(float(x))
                    clip = cfg.grad_clip or math.inf
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
                    hf.stop_if_not_finite(loss, grad_norm, f"{method} at step {step}", run_dir)
                    optimizer.step()
                    stats.setdefault("grad_norm", []).append(grad_norm)
                    stats.setdefault("loss", []).append(loss)
        if (step + 1) % 10 == 0 or step + 1 == cfg.steps:
            hf.save_atomic(model.state_dict(), run_dir / "model.pt")
        # Log: the step's statistics (docs/design.md §2 lists them) and the updates' means
        kl_base = k3(old_logp, ref_logp) if base_on_device else None
        tokens = dict(v_old_mean=v_old_mean, entropy=entropy, kl_base=kl_base, mask=mask)
        row = log.step_row(step, rewards, A, w, **tokens)
        row |= log.update_summary(stats)  # the updates' means, and largest *_max
        row |= {"time_rollout": t1 - t0, "time_old_stats": t2 - t1, "time_update": time.time() - t2}
        logger.log(row)
        if trajectory.due(step + 1):
            result = evaluate(cfg, model, tokenizer, evals, desc=f"step {step + 1}")
            trajectory.write(step + 1, result)
    logger.close()
    model.zero_grad(set_to_none=True)  # free the gradients for what follows (evaluation)
    return model


# ==== Evaluation: n samples per held-out problem -> unbiased Pass@k (docs/design.md §3.5)
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from n samples with c correct (Chen et al. 2021):
    pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i)"""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@torch.no_grad()
def evaluate(cfg: Config, model, tokenizer, problems: list, desc: str) -> dict:
    """Pass@k over `problems` from cfg.n_eval samples each, mean accuracy, distinct correct answers,
    solved-any, per problem the correct count (and per form, if the task has forms); at most
    cfg.eval_batch responses at once: several problems a call, or one's n in chunks."""
    seed = cfg.seed + 1 if cfg.eval_seed < 0 else cfg.eval_seed
    gen = torch.Generator(cfg.device).manual_seed(seed)  # the same samples for every model
    task, n = TASKS[cfg.task], cfg.n_eval
    per_call, chunk = max(1, cfg.eval_batch // n), min(n, cfg.eval_batch)  # problems, samples
    counts, distinct, forms = [], [], []
    for i in log.tqdm(range(0, len(problems), per_call), desc=f"eval {desc}", leave=False):
        group = problems[i : i + per_call]
        correct = [[] for _ in group]  # the texts of each problem's correct samples
        for s in range(0, n, chunk):
            part = rollout(cfg, model, tokenizer, group, n=min(chunk, n - s), gen=gen)
            m = part["rewards"].shape[1]  # samples of each problem, problem-major
            for j, good in enumerate(part["rewards"].bool().tolist()):
                correct[j] += [t for t, ok in zip(part["texts"][j * m : (j + 1) * m], good) if ok]
        counts += [len(texts) for texts in correct]
        distinct += [len(set(texts)) for texts in correct]
        forms += [task.forms(problem, texts) for problem, texts in zip(group, correct)]
    ks = [int(k) for k in cfg.ks.split(",")] if cfg.ks else default_ks(n)
    curve = {str(k): sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    result = {"pass_at_k": curve, "mean_accuracy": sum(counts) / (n * len(counts))}
    result["distinct_correct"] = sum(distinct) / len(distinct)
    result |= {"solved_any": sum(c > 0 for c in counts) / len(counts), "counts": counts}
    if forms and None not in forms:
        result["forms"] = forms
    return result


# ==== main: build or load the base, train each method from it, evaluate them all.
def parse_config(argv: list[str] | None = None) -> Config:  # --quick: cli.QUICK's budget
    return cli.parse_config(Config, argv, description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_config(argv)
    print(cli.describe_settings(cfg))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    out, start, task = Path(cfg.out), time.time(), TASKS[cfg.task]
    cli.refuse_reuse(cfg)  # --out holds another config's results: an error, unless --overwrite
    splits = task.splits(cfg)
    tokenizer, base = task.base(cfg, splits)  # --model's, or a tiny model built here; frozen
    results = {"config": asdict(cfg), "methods": {}}
    results["methods"]["base"] = evaluate(cfg, base, tokenizer, splits["test"], desc="base")
    base.to(cfg.device if cfg.kl_coef > 0 else "cpu")  # on the device for the KL term only
    for method in cfg.method_list:
        (out / method).mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        model, reference = hf.policy(cfg, base)  # a trainable copy, or LoRA adapters on it
        data = dict(problems=splits["train"], run_dir=out / method, evals=splits.get("val"))
        train_rl(cfg, method, model, reference, tokenizer=tokenizer, **data)
        results["methods"][method] = evaluate(cfg, model, tokenizer, splits["test"], desc=method)
        hf.save_lora(cfg, model, tokenizer, out / method)  # --lora-rank: adapters/ and merged/
    results["wall_time_s"] = round(time.time() - start, 1)
    report.write_results(results, out)  # results.json, the Pass@k table and plot
    return results


if __name__ == "__main__":
    main()
