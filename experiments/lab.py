"""experiments/lab.py: the research trainer, reco_mini's RL loop with what the studies add to it.

- The studies' hook: `train_rl(..., on_step=f)` calls f(Step) once a step, after the weights and before the updates.
  The dict f returns joins the step's log row, except its "batch" entry (tensors with one row per response), which
  joins the update's batch, where policy_loss hands it to the token term as TokenTerms.batch
  (experiments/diagnostics.py, experiments/fork_arms.py).
- The peers' methods (issue 42; their functions are in reco/peers.py): an advantage (ADVANTAGES, --advantage), a
  prompt gate (PROMPT_GATES, --prompt-gate), a response weight (RESPONSE_WEIGHTS, --response-weight), and SimKO's
  token ratio (--token-ratio simko), which importing this module files in reco_mini.TOKEN_RATIOS. Config adds their
  settings (reco.peers.PeerSettings) to reco_mini's; parse_config lists them in --help's "peers" group.
- The studies' own research arms (StudySettings, --help's "studies" group): WEIGHT_POOLS (--weight-pool), which pools
  ReCo's response weights within a group (the replication study's reco-prompt, docs/replication_study.md).

The math is reco_mini's, imported and never copied. train_rl's loop is the one thing written twice: with no hook and
the peers at their defaults, tests/test_lab.py holds it to reco_mini.train_rl, bit for bit, at every method and setting
reco_mini has. The studies import this module with experiments/ on sys.path (`import lab`); it has no command line.
"""
from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import reco_mini as rm  # noqa: E402
from reco import cli, hf, log, peers  # noqa: E402
from reco.tasks import TASKS  # noqa: E402

# The peers' advantages, prompt gates and response weights; each default leaves reco_mini's loop unchanged.
ADVANTAGES: dict[str, Callable] = {  # (rewards [P, G], LossConfig) -> A [P, G]
    "grpo": lambda rewards, cfg: rm.group_advantages(rewards, scale_by_std=not cfg.no_std),
    "pass-at-k": lambda rewards, cfg: peers.pass_at_k_advantages(rewards, cfg.pass_k),
}
PROMPT_GATES: dict[str, Callable] = {  # (problems, rewards [P, G], the run's memory) -> 0/1 [P]
    "none": lambda problems, rewards, memory: torch.ones(len(problems), device=rewards.device),
    "zero-success": peers.zero_success_gate,
}
RESPONSE_WEIGHTS: dict[str, Callable] = {  # (rewards, summed old log-probs, lengths [P, G], LossConfig) -> w [P, G]
    "none": lambda rewards, lp, lengths, cfg: torch.ones_like(lp),
    "ucpo": peers.ucpo_response_weights,
}
rm.TOKEN_RATIOS["simko"] = peers.simko_ratio  # GRPO's loss, smoothed at uncertain tokens; reads the logits


def pool_positive_mean(w: Tensor, A: Tensor) -> Tensor:
    """w_i -> the mean of w_j over the A_j > 0 responses of y_i's group, where A_i > 0; w_i elsewhere. [P, G] -> [P, G].
    The replication study's reco-prompt arm (docs/replication_study.md): ReCo's default weights made a prompt weight."""
    positive = A > 0
    mean = (w * positive).sum(1, keepdim=True) / positive.sum(1, keepdim=True).clamp(min=1)
    return torch.where(positive, mean, w)


WEIGHT_POOLS: dict[str, Callable] = {  # (w [P, G], A [P, G]) -> w [P, G]: a research arm's, not a peer's
    "none": lambda w, A: w,
    "prompt-mean": pool_positive_mean,
}


@dataclass
class StudySettings:
    """The studies' own research settings (not a peer's method): flags of this trainer, in --help's "studies" group."""
    weight_pool: str = cli.opt("none", "pool ReCo's w_i within a group (prompt-mean: the mean over its A > 0)")


PEERS = tuple(f.name for f in fields(peers.PeerSettings))
STUDIES = tuple(f.name for f in fields(StudySettings))
# reco_mini's response-weight defaults before issue 52 made them batch / positive (docs/norm_study.md), with which every
# committed study ran ReCo. Each study's runner puts these flags first, so its rows stay as committed (runs are keyed
# by spec, not by flags) and an arm's own flags (norm_study's --occurrence-norm batch) still override them.
STUDY_PINS = ("--occurrence-norm", "group", "--occurrence-apply", "all")
GROUPS = cli.GROUPS | {"peers": PEERS, "studies": STUDIES}  # --help: reco_mini's groups, the peers', the studies'


def peer_checks(cfg) -> list[tuple[str, bool, str]]:
    """The peers' settings' checks: (field, ok, message)."""
    choices = peers.PEER_CHOICES | {"advantage": ADVANTAGES, "prompt_gate": PROMPT_GATES,
                                    "response_weight": RESPONSE_WEIGHTS, "weight_pool": WEIGHT_POOLS}
    return ([rule.check(name, getattr(cfg, name)) for name, rule in peers.PEER_NUMBERS.items()]
            + [cli.choice(cfg, name, list(values)) for name, values in choices.items()])


@dataclass
class LossConfig(rm.LossConfig, peers.PeerSettings, StudySettings):
    """reco_mini's loss settings and the peers' (a method's: loss_config)."""

    def checks(self) -> list[tuple[str, bool, str]]:
        return super().checks() + peer_checks(self)


def loss_config(cfg, method: str) -> LossConfig:
    """reco_mini.loss_config of `method`, with cfg's peer and study settings."""
    own = rm.loss_config(cfg, method)
    return LossConfig(**asdict(own), **{name: getattr(cfg, name) for name in PEERS + STUDIES})


@dataclass
class Config(rm.Config, peers.PeerSettings, StudySettings):
    """reco_mini's Config and the peers' settings."""

    def __post_init__(self):  # reco_mini's checks (with the peers': checks) and the task's defaults, then these
        super().__post_init__()
        cli.check([
            ("pass_k", self.advantage != "pass-at-k" or self.pass_k <= self.group_size,
             f"must be at most --group-size ({self.group_size}), got {self.pass_k}"),
            ("head_chunk", self.head_chunk <= 0 or self.token_ratio != "simko",
             f"{self.head_chunk} keeps no logits, which --token-ratio simko reads; use --head-chunk 0"),
            ("lora_rank", self.lora_rank == 0, "is reco_mini's (reco.hf.policy); the studies train the full model"),
        ])

    def checks(self) -> list[tuple[str, bool, str]]:
        return super().checks() + peer_checks(self)


def parse_config(argv: list[str] | None = None) -> Config:
    """reco_mini's flags and the peers' (--help: their group "peers"); a bad one is a one-line error."""
    choices = {"advantage": list(ADVANTAGES), "prompt_gate": list(PROMPT_GATES),
               "response_weight": list(RESPONSE_WEIGHTS), "weight_pool": list(WEIGHT_POOLS)} | peers.PEER_CHOICES
    return cli.parse_config(Config, argv, __doc__.split("\n")[0], groups=GROUPS, choices=choices,
                            prog="experiments/lab.py")


@dataclass
class Step:
    """One RL step once the response weights are computed: what train_rl's on_step hook is given.
    B = P*G rows, problem-major; T response tokens."""
    problems: list  # the step's P problems
    group_size: int  # G
    texts: list[str]  # the P*G decoded responses
    resp: Tensor  # [B, T] response token ids
    mask: Tensor  # [B, T] float, 1 on response tokens
    responses: list[list[int]]  # each response's token ids
    rewards: Tensor  # [P, G]
    advantages: Tensor  # [B]
    old_logp: Tensor  # [B, T] log pi_old(y_t)
    v_old: Tensor  # [B, T] V_old(s_t)
    v_old_mean: Tensor  # 0-d
    entropy: Tensor  # [B, T] H_old(s_t)
    weights: Tensor  # [B] w_i
    loss_cfg: LossConfig  # the method's (loss_config)
    task: object  # the task (reco.tasks.TASKS)
    tokenizer: object


def train_rl(cfg, method, model, base, tokenizer, problems, run_dir, evals=None, on_step: Callable | None = None):
    """reco_mini.train_rl with the peers' terms (cfg's advantage, prompt gate and response weight) and the studies'
    hook `on_step` (this module's docstring). Its loop is reco_mini's, line for line, but for the lines marked
    "lab:"."""
    loss_cfg = loss_config(cfg, method)  # lab: with the peers' settings
    task = TASKS[cfg.task]
    rng = random.Random(cfg.seed)  # draws the prompts of each step
    gen = torch.Generator(cfg.device).manual_seed(cfg.seed)  # the samples and the mini-batches
    solved = set()  # lab: the prompt gate's memory, problems with a success in an earlier step
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
        r = rm.rollout(cfg, model, tokenizer, step_problems, n=G, gen=gen)
        rewards = r["rewards"]  # [P, G]
        # Advantage (lab: the peer's), times F-GRPO's focal scale (1 at gamma 0) and the prompt gate (lab; 1: none)
        A = ADVANTAGES[loss_cfg.advantage](rewards, loss_cfg)
        A = A * rm.focal_scale(rewards, loss_cfg.focal_gamma)[:, None]
        A = A * PROMPT_GATES[loss_cfg.prompt_gate](step_problems, rewards, solved)[:, None]
        A = A.flatten().to(cfg.device)  # [P*G]
        t1 = time.time()
        # Old statistics of every response token, without gradient: the policy is pi_old here
        mask = r["mask"].float()
        seqs = (r["prompt_ids"], r["prompt_mask"], r["resp"], r["mask"])
        old_logp, v_old, entropy = rm.old_stats(cfg, model, seqs)
        ref_logp = rm.old_stats(cfg, base, seqs)[0] if base_on_device else None  # for the KL
        v_old_mean = (v_old * mask).sum() / mask.sum()  # over every response token of the batch
        if loss_cfg.variance_norm == "none":
            v_old_mean = torch.ones((), device=cfg.device)
        # Weights: ReCo's w_i from the summed old log-probs (1 for GRPO), times a peer's (lab; 1: none)
        seq_logp, lengths = (old_logp * mask).sum(-1).view(P, G), mask.sum(-1).view(P, G)
        responses = [row[m.bool()].tolist() for row, m in zip(r["resp"], r["mask"])]
        canonical = loss_cfg.occurrence == "canonical"
        keys = task.canonical_keys(step_problems, G, r["texts"]) if canonical else None
        given = dict(responses=responses, lengths=lengths, advantages=A.view(P, G), keys=keys)
        how = dict(apply=loss_cfg.occurrence_apply, norm=loss_cfg.occurrence_norm)
        w = rm.occurrence_weights(seq_logp, loss_cfg.occurrence, **given, **how)
        w = w * RESPONSE_WEIGHTS[loss_cfg.response_weight](rewards, seq_logp, lengths, loss_cfg)  # lab
        w = WEIGHT_POOLS[loss_cfg.weight_pool](w, A.view(P, G))  # lab: a study's pooling ("none": w)
        w = w.flatten()  # [P*G]
        # lab: the study's hook gets the step; it returns fields to log and, under "batch", loss inputs
        hooked = on_step(Step(problems=step_problems, group_size=G, texts=r["texts"], resp=r["resp"], mask=mask,
                              responses=responses, rewards=rewards, advantages=A, old_logp=old_logp, v_old=v_old,
                              v_old_mean=v_old_mean, entropy=entropy, weights=w, loss_cfg=loss_cfg, task=task,
                              tokenizer=tokenizer)) if on_step else {}
        # Updates: cfg.epochs passes over the batch, each a random split into mini-batches
        batch = dict(old_logp=old_logp, advantages=A, mask=mask, weights=w, v_old=v_old)
        batch |= dict(resp=r["resp"], ref_logp=ref_logp, **hooked.pop("batch", {}))  # lab: the hook's
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
                            logp, v, _, logits = rm.policy_stats(cfg, model, seqs, mic)
                        mb = {k: x[mic] for k, x in batch.items() if x is not None}
                        mb["v_old_mean"] = v_old_mean
                        part, s = rm.policy_loss(logp, mb, loss_cfg, v, logits=logits, tau=tau, **mini)
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
        # Log: the step's statistics (docs/design.md §2 lists them), the hook's (lab) and the updates' means
        kl_base = rm.k3(old_logp, ref_logp) if base_on_device else None
        tokens = dict(v_old_mean=v_old_mean, entropy=entropy, kl_base=kl_base, mask=mask)
        row = log.step_row(step, rewards, A, w, **tokens)
        row |= hooked | log.update_summary(stats)  # lab: the hook's fields, then the updates' means
        row |= {"time_rollout": t1 - t0, "time_old_stats": t2 - t1, "time_update": time.time() - t2}
        logger.log(row)
        if trajectory.due(step + 1):
            result = rm.evaluate(cfg, model, tokenizer, evals, desc=f"step {step + 1}")
            trajectory.write(step + 1, result)
    logger.close()
    model.zero_grad(set_to_none=True)  # free the gradients for what follows (evaluation)
    return model
