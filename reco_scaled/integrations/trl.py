"""ReCo inside TRL's GRPOTrainer (TRL 1.16, pinned in requirements-trl.txt): swap two class names.

    from reco_scaled.integrations.trl import ReCoGRPOConfig, ReCoGRPOTrainer
    args = ReCoGRPOConfig(output_dir="runs/trl", method="reco", occurrence="count", ...)  # every GRPOConfig field too
    ReCoGRPOTrainer(model="Qwen/Qwen2.5-Math-1.5B", reward_funcs=my_reward, args=args, train_dataset=ds).train()

Generation (transformers, or TRL's vLLM server/colocate modes), reward functions, advantages (`scale_rewards`,
`multi_objective_aggregation`), the reference model, logging, accelerate, checkpoints and PEFT stay TRL's. What changes:

- The per-token policy loss is `reco_mini.policy_loss` (imported, the single source of the math) with the settings of
  `ReCoGRPOConfig.reco_loss_config()`: the ReCo fields below on top of `method`'s defaults, and TRL's `epsilon`,
  `epsilon_high`, `delta` (= reco_mini's dual clip), `beta` and `loss_type` (its aggregation and normaliser).
- Response weights: `reco_mini.occurrence_weights`, once per generation batch, over every process's rows (gathered,
  as TRL gathers rewards): the default divides 1/m_i by its mean over that whole batch (occurrence_norm batch), which
  a row the loss masks whole (mask_truncated_completions) takes no part in. `focal_gamma > 0` scales each group's
  advantages by `reco_mini.focal_scale` (F-GRPO). A resume from a checkpoint whose saved args give another loss (a
  LossConfig field or loss_type) is refused, naming each changed setting.
- log pi, V and H per token come from `reco_scaled.kernels` (through `reco_scaled.loss.token_stats`: the chunked
  PyTorch path on CPU, Triton on CUDA), called inside the model's own forward (so DDP/FSDP hooks see it) and
  streaming the LM head over vocabulary tiles, so no [B, T, V] logits tensor is ever held (`reco_stats_path`
  "fused"). Under DeepSpeed ZeRO-3 the LM head's weight exists only inside its own module call, so there
  (`reco_stats_path` "auto" detects it, or "gathered") the model's own forward returns its [B, T, V] logits, as
  in TRL, and reco_mini's token_logprobs, variance_stat and token_entropy run on them in chunks of
  `reco_stats_chunk` tokens, each recomputed in backward (torch.utils.checkpoint), so at most one chunk's fp32
  log-softmax is held at a time beside the logits. V_old and the sequence
  log-probs for the weights take one extra no-grad forward per generation batch (skipped when every ReCo term is off).
- Old log-probs: TRL computes log pi_old only when a generation batch is reused (num_iterations > 1, or
  steps_per_generation > gradient_accumulation_steps) or for vLLM's importance-sampling correction. Otherwise the
  current log-probs, detached, stand in for them, exactly as in TRL: the ratio is then 1 on policy, nothing is clipped,
  and `variance` equals `variance-old`.

Supported: loss_type grpo (= seq-mean-token-mean), bnpo, dr_grpo, dapo (= token-mean: TRL's default); any
num_iterations, steps_per_generation and gradient accumulation; beta > 0 with use_bias_correction_kl=False; delta >
1 + epsilon_high; off_policy_mask_threshold and vLLM's sequence_* importance-sampling modes (per-response factors,
multiplied into the response weights); mask_truncated_completions (a truncated row takes no part in the weights'
batch mean); tools (their tokens are masked as in TRL); cast_lm_head_to_fp32. tests/test_trl.py (CPU) covers the
four loss types, delta, temperature, beta, the off-policy mask, every occurrence mode and token ratio, focal_gamma,
num_iterations, gradient accumulation, masked truncated rows, a refused resume, and the weights of two processes
(torchrun, gloo); the rest, and multi-process training (DDP, FSDP2), vLLM and PEFT, follow TRL's own code paths (and
its fused LM head's handling of sharded heads) but are not tested here.

Refused with an error at start-up: the other loss types, importance_sampling_level="sequence", the entropy bonus
and top_entropy_quantile < 1, vLLM's token_* correction modes, beta > 0 with the KL bias correction,
vision-language models, MoE router losses, reco_stats_path="fused" under DeepSpeed ZeRO-3, and (fused path only)
LM heads with a bias, a logit scale or softcapping.

Tested on CPU only: the gathered path's values and gradients (tests/test_trl.py, against the fused path and
against reco_mini on full logits). DeepSpeed itself is not installed here: that ZeRO-3 gathers the head inside the
model's forward, and the detection from accelerate's DeepSpeed plugin, are not tested.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate.utils import gather, gather_object, is_peft_model
from torch import Tensor
from torch.utils.checkpoint import checkpoint
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from reco_mini import (
    METHODS,
    ConfigError,
    LossConfig,
    focal_scale,
    k3,
    loss_config,
    occurrence_weights,
    policy_loss,
    token_entropy,
    token_logprobs,
    variance_stat,
)
from reco_scaled.loss import token_stats

# TRL loss_type -> reco_mini aggregation; the normaliser of each is in ReCoGRPOTrainer._normalisers
LOSS_TYPES = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dr_grpo": "token-mean", "dapo": "token-mean"}
# reco_mini's name of a LossConfig field -> the GRPOConfig field it is read from
TRL_NAMES = {"clip_low": "epsilon", "clip_high": "epsilon_high", "dual_clip": "delta", "kl_coef": "beta",
             "aggregation": "loss_type"}


STATS_PATHS = ("auto", "fused", "gathered")


def stats_path(requested: str, zero_stage: int | None) -> str:
    """The statistics path to use: "auto" is "gathered" under DeepSpeed ZeRO-3 (zero_stage 3), else "fused"."""
    if requested == "auto":
        return "gathered" if zero_stage == 3 else "fused"
    if requested == "fused" and zero_stage == 3:
        raise ValueError("reco_stats_path='fused' under DeepSpeed ZeRO-3: the kernel reads the LM head's weight "
                         "outside its module, where ZeRO-3 has partitioned it; use reco_stats_path='gathered' (or auto)")
    return requested


def _from_loss_config(name: str):
    """A config field with reco_mini.LossConfig's default and help text (the one source of both)."""
    f = LossConfig.__dataclass_fields__[name]
    return field(default=f.default, metadata=dict(f.metadata))


@dataclass
class ReCoGRPOConfig(GRPOConfig):
    """GRPOConfig plus ReCo's loss settings, with reco_mini's names, meanings and defaults.

    The ReCo fields are taken from reco_mini.LossConfig one by one rather than inherited: LossConfig's other
    fields (clip_low, clip_high, dual_clip, kl_coef, aggregation, no_std) already exist in GRPOConfig under TRL's
    names (epsilon, epsilon_high, delta, beta, loss_type, scale_rewards), and a dataclass cannot drop an inherited
    field, so inheriting would give each of them two knobs.
    """
    method: str = field(default="reco", metadata={"help": "reco_mini method whose defaults fill occurrence, "
                                                          f"token_ratio and focal_gamma: {' | '.join(METHODS)}"})
    occurrence: str = _from_loss_config("occurrence")
    occurrence_apply: str = _from_loss_config("occurrence_apply")
    occurrence_norm: str = _from_loss_config("occurrence_norm")
    token_ratio: str = _from_loss_config("token_ratio")
    focal_gamma: float | None = _from_loss_config("focal_gamma")
    variance_cap: float = _from_loss_config("variance_cap")
    variance_norm: str = _from_loss_config("variance_norm")
    reco_stats_path: str = field(default="auto", metadata={"help": "how log pi, V and H are computed: fused (the "
                                 "streaming kernel on the LM head's weight), gathered (the model's own logits, chunked "
                                 "over tokens: DeepSpeed ZeRO-3), or auto (gathered under ZeRO-3, else fused)"})
    reco_stats_chunk: int = field(default=1024, metadata={"help": "gathered path: tokens per chunk of logits"})

    def __post_init__(self):
        super().__post_init__()
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: must be one of {list(METHODS)}")
        refused = refused_settings(self)  # first: a peer's token ratio is named as one, registered or not
        if refused:
            raise ValueError("ReCoGRPOTrainer does not support " + "; ".join(refused))
        self.reco_loss_config()
        if self.reco_stats_path not in STATS_PATHS:
            raise ValueError(f"reco_stats_path={self.reco_stats_path!r}: must be one of {list(STATS_PATHS)}")
        if self.reco_stats_chunk < 1:
            raise ValueError(f"reco_stats_chunk={self.reco_stats_chunk}: must be >= 1")

    def reco_loss_config(self) -> LossConfig:
        """reco_mini's loss settings of this run; raises ValueError naming the GRPOConfig field at fault."""
        try:
            own = LossConfig(occurrence=self.occurrence, occurrence_apply=self.occurrence_apply,
                             occurrence_norm=self.occurrence_norm, token_ratio=self.token_ratio,
                             focal_gamma=self.focal_gamma, variance_cap=self.variance_cap,
                             variance_norm=self.variance_norm, clip_low=self.epsilon,
                             clip_high=self.epsilon if self.epsilon_high is None else self.epsilon_high,
                             dual_clip=self.delta or 0.0, kl_coef=self.beta,
                             aggregation=LOSS_TYPES.get(self.loss_type, "token-mean"))
        except ConfigError as e:
            raise ValueError(f"{TRL_NAMES.get(e.name, e.name)}: {e.message}") from None
        return loss_config(own, self.method)


def refused_settings(args: GRPOConfig) -> list[str]:
    """The GRPOConfig settings that ReCoGRPOTrainer refuses, each with the reason (empty if none)."""
    eps_high = args.epsilon if args.epsilon_high is None else args.epsilon_high
    checks = [
        (args.loss_type in LOSS_TYPES, f"loss_type={args.loss_type!r}: use one of {list(LOSS_TYPES)} (the others "
                                       "replace the clipped ratio, which ReCo's token term replaces itself)"),
        (args.importance_sampling_level == "token", "importance_sampling_level='sequence': ReCo's ratio is per token"),
        (args.delta is None or args.delta > 1 + eps_high, f"delta={args.delta} <= 1 + epsilon_high: reco_mini's dual "
                                                          "clip (which delta becomes) must lie above the clip range"),
        (args.beta == 0 or not args.use_bias_correction_kl, "beta > 0 with use_bias_correction_kl=True: reco_mini's "
                                                            "KL term is the plain k3; set use_bias_correction_kl=False"),
        (getattr(args, "occurrence", "") != "canonical", "occurrence='canonical': its canonical keys come from "
                                                          "reco_mini's tasks only (countdown's response_key); use count"),
        (getattr(args, "token_ratio", "") != "simko", "token_ratio='simko': a peer's token ratio, which only "
                                                       "experiments/lab.py's loop runs (it reads the policy's logits)"),
        (args.top_entropy_quantile == 1.0, "top_entropy_quantile < 1"),
        (args.entropy_coef == 0 and not args.use_adaptive_entropy, "an entropy bonus (entropy_coef, use_adaptive_entropy)"),
        (not (args.use_vllm and args.vllm_importance_sampling_correction
              and args.vllm_importance_sampling_mode.startswith("token")),
         f"vllm_importance_sampling_mode={args.vllm_importance_sampling_mode!r}: use a sequence_* mode (a per-response "
         "factor, multiplied into the response weights) or vllm_importance_sampling_correction=False"),
    ]
    return [reason for ok, reason in checks if not ok]


def changed_loss(saved: GRPOConfig, args: ReCoGRPOConfig) -> list[str]:
    """'field=old there, new here' for each loss setting (reco_mini.LossConfig's, and loss_type, which also picks the
    normaliser) on which a checkpoint's saved args differ from this run's, under TRL's names; empty if none."""
    if not isinstance(saved, ReCoGRPOConfig):  # no ReCo settings at hand to compare
        return []
    old, new = saved.reco_loss_config(), args.reco_loss_config()
    differ = [(TRL_NAMES.get(f.name, f.name), getattr(old, f.name), getattr(new, f.name))
              for f in dataclasses.fields(LossConfig) if f.name != "aggregation"]
    differ.append(("loss_type", saved.loss_type, args.loss_type))
    return [f"{name}={a!r} there, {b!r} here" for name, a, b in differ if a != b]


def refused_model(model) -> list[str]:
    """What about the (unwrapped) policy model the fused statistics cannot handle (empty if nothing)."""
    text = model.config.get_text_config()
    head = model.get_output_embeddings()
    scaled = [k for k in ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                          "logits_scaling") if getattr(text, k, None) not in (None, 1.0)]
    return [reason for bad, reason in [
        (getattr(head, "bias", None) is not None, "an LM head with a bias"),
        (bool(scaled), f"logits scaled or softcapped by the config ({', '.join(scaled)})"),
    ] if bad]


def stats_from_logits(logits: Tensor, targets: Tensor, mask: Tensor, temperature: float,
                      chunk: int = 1024) -> tuple[Tensor, Tensor, Tensor]:
    """(log pi(y_t), V_t, H_t), fp32 [B, T] each, from the logits [B, T, V] that predict targets [B, T], with
    reco_mini's functions on `chunk` tokens at a time. Each chunk's log pi is recomputed in backward, so its fp32
    log-softmax is not kept for it; V and H are detached. Masked positions hold 0, as on the fused path."""
    flat, tgt = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    parts = []
    for s in range(0, flat.shape[0], chunk):
        z, y = flat[s: s + chunk], tgt[s: s + chunk]
        logp = checkpoint(token_logprobs, z, y, temperature, use_reentrant=False) if z.requires_grad else \
            token_logprobs(z, y, temperature)
        with torch.no_grad():
            parts.append((logp, variance_stat(z, temperature), token_entropy(z, temperature)))
    m = mask.to(torch.float32)
    return tuple(torch.cat(x).view(targets.shape) * m for x in zip(*parts))


def add_reco_stats(model, temperature: float, fp32_head: bool, path: str = "fused", chunk: int = 1024) -> None:
    """Patch `model.forward` so that `model(input_ids=, attention_mask=, reco_stats=T)` returns (log pi(y_t), V_t, H_t),
    fp32 [B, T] each, for the last T tokens; any other call runs the previous forward.

    path "fused": the backbone's hidden states and the LM head's weight through reco_scaled.kernels.
    path "gathered": the previous forward's own logits (so ZeRO-3 gathers the head inside its module), then
    stats_from_logits in chunks of `chunk` tokens. Either way the whole model runs inside its own forward, so
    DDP, FSDP and DeepSpeed see one module call, as with TRL's fused LM head. V and H are detached; masked
    positions (attention 0) hold 0.
    """
    inner = model.forward

    @functools.wraps(type(model).forward)  # generate() validates its kwargs against this signature
    def forward(self, *args, reco_stats: int = 0, **kwargs):
        if not reco_stats:
            return inner(*args, **kwargs)
        ids, attn = kwargs["input_ids"], kwargs["attention_mask"]
        if path == "gathered":  # logits of the positions that predict the last T tokens, as TRL computes them
            logits = inner(input_ids=ids, attention_mask=attn, use_cache=False, logits_to_keep=reco_stats + 1).logits
            return stats_from_logits(logits[:, :-1], ids[:, -reco_stats:], attn[:, -reco_stats:], temperature, chunk)
        hidden = self.base_model(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
        hidden = hidden[:, -reco_stats - 1: -1]  # [B, T, d]: the positions that predict the last T tokens
        weight = self.get_output_embeddings().weight
        if hasattr(weight, "full_tensor"):  # an FSDP2-sharded head
            weight = weight.full_tensor()
        targets, mask = ids[:, -reco_stats:], attn[:, -reco_stats:]
        if not fp32_head:
            return token_stats(hidden, weight, targets, mask, temperature, fused=True)
        with torch.autocast(hidden.device.type, enabled=False):
            return token_stats(hidden.float(), weight.float(), targets, mask, temperature, fused=True)

    model.forward = types.MethodType(forward, model)


class ReCoGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose policy loss is reco_mini's (module docstring: what changes, what is refused)."""

    _tag_names = [*GRPOTrainer._tag_names, "reco"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, ReCoGRPOConfig):
            raise TypeError(f"ReCoGRPOTrainer needs args=ReCoGRPOConfig(...), got {type(self.args).__name__}")
        model = self.model.get_base_model() if is_peft_model(self.model) else self.model
        zero_stage = self.accelerator.state.deepspeed_plugin.zero_stage if self.is_deepspeed_enabled else None
        self.reco_stats_path = stats_path(self.args.reco_stats_path, zero_stage)
        refused = (refused_model(model) if self.reco_stats_path == "fused" else []) + [reason for bad, reason in [
            (self._is_vlm, "vision-language models"),
            (self.aux_loss_enabled, "MoE router auxiliary losses (router_aux_loss_coef)"),
        ] if bad]
        if refused:
            raise ValueError("ReCoGRPOTrainer does not support " + "; ".join(refused))
        self.reco = self.args.reco_loss_config()
        self._reco_rewards: Tensor | None = None
        add_reco_stats(model, self.temperature, self.args.cast_lm_head_to_fp32, self.reco_stats_path,
                       self.args.reco_stats_chunk)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """TRL's train; a resume from a checkpoint written under another loss is refused (ValueError naming each
        changed setting), since it would go on training that run under this objective."""
        path = get_last_checkpoint(self.args.output_dir) if resume_from_checkpoint is True else resume_from_checkpoint
        saved = Path(path) / TRAINING_ARGS_NAME if path else None
        if saved is not None and saved.is_file():
            differ = changed_loss(torch.load(saved, weights_only=False), self.args)
            if differ:
                raise ValueError(f"checkpoint {path} was trained under another loss ({'; '.join(differ)}): resuming it "
                                 "would change the run's objective; set these as they were, or use a new output_dir")
        return super().train(resume_from_checkpoint, *args, **kwargs)

    # ------------------------------------------------------------------------------------ rollout side

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # all processes' rows, weighted and summed as TRL logs them: F-GRPO's success rate counts rewards > 0
        self._reco_rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        out.update(self._reco_inputs(out, self._reco_rewards))
        return out

    def _reco_stats(self, model, input_ids: Tensor, attention_mask: Tensor, T: int,
                    batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """(log pi, V, H) [B, T] of the last T tokens, in chunks of batch_size rows."""
        batch_size = batch_size or input_ids.shape[0]
        outs = []
        for s in range(0, input_ids.shape[0], batch_size):
            with self.accelerator.autocast():
                outs.append(model(input_ids=input_ids[s: s + batch_size],
                                  attention_mask=attention_mask[s: s + batch_size], reco_stats=T))
        return tuple(torch.cat(parts) for parts in zip(*outs))

    def _reco_inputs(self, out: dict, rewards: Tensor | None) -> dict:
        """What the ReCo loss needs beyond TRL's batch, computed once per generation batch with the policy as it
        sampled: focal-scaled "advantages", "reco_weights" [B], "reco_v_old" [B, T], "reco_v_old_mean" (scalar).

        out: TRL's local batch; rewards: the summed rewards of all processes' rows (group-major, as TRL's).
        """
        cfg, mode = self.reco, "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval
        B, T = out["completion_ids"].shape
        mine = slice(self.accelerator.process_index * B, (self.accelerator.process_index + 1) * B)
        mask = (out["completion_mask"] * out.get("tool_mask", 1)).float()  # the tokens the policy sampled
        new, adv = {}, out["advantages"]
        if cfg.focal_gamma > 0:
            adv = new["advantages"] = adv * focal_scale(rewards.view(-1, G), cfg.focal_gamma).repeat_interleave(G)[mine]
        need_logp = cfg.occurrence in ("sequence", "token-mean")
        need_v = cfg.token_ratio == "variance-old" or (cfg.token_ratio == "variance" and cfg.variance_norm == "batch")
        if need_logp or need_v:
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
            attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
            with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
                batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
                old_logp, v_old, _ = self._reco_stats(self.model, ids, attn, T, batch_size)
        if cfg.token_ratio != "is":
            v_mean = torch.ones((), device=mask.device)
            if cfg.variance_norm == "batch":  # over every response token of the generation batch, all processes
                sums = self.accelerator.reduce(torch.stack([(v_old * mask).sum(), mask.sum()]), reduction="sum")
                v_mean = sums[0] / sums[1].clamp(min=1)
            new["reco_v_old_mean"] = v_mean
            self._metrics[mode]["reco/v_old_mean"].append(v_mean.item())
            if cfg.token_ratio == "variance-old":
                new["reco_v_old"] = v_old
        if cfg.occurrence != "none":
            seq = (old_logp * mask).sum(-1) if need_logp else torch.zeros(B, device=mask.device)
            comp = out["completion_ids"].tolist()
            responses = [r[: int(n)] for r, n in zip(comp, out["completion_mask"].sum(-1).tolist())]
            # over the gathered generation batch: every process's rows
            seq, lengths, adv = gather(seq).view(-1, G), gather(mask.sum(-1)).view(-1, G), gather(adv).view(-1, G)
            responses = gather_object(responses) if cfg.occurrence == "count" else None
            kept = lengths > 0  # a row the loss masks whole (mask_truncated_completions) takes no part in the mean
            batch_mean = None
            if cfg.occurrence_norm == "batch" and kept.any():
                inv_m = occurrence_weights(seq.double(), cfg.occurrence, responses, lengths, apply="all", norm="none")
                batch_mean = inv_m[kept].mean()
            w = occurrence_weights(seq, cfg.occurrence, responses, lengths, adv, cfg.occurrence_apply,
                                   norm=cfg.occurrence_norm, batch_mean=batch_mean).flatten()
            new["reco_weights"] = w[mine]
            logged = w[kept.flatten()] if kept.any() else w
            for k, x in (("min", logged.min()), ("mean", logged.mean()), ("max", logged.max())):
                self._metrics[mode][f"reco/w_{k}"].append(x.item())
        return new

    # ------------------------------------------------------------------------------------ loss side

    def _normalisers(self, inputs: dict, mask: Tensor, mode: str) -> tuple[Tensor | float | None, float | None]:
        """(num_tokens, num_seqs) for reco_mini.policy_loss that reproduce TRL's normaliser of each loss_type."""
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.loss_type == "grpo":  # mean over sequences, / gradient accumulation
            return None, mask.shape[0] * accum
        if self.loss_type == "bnpo":  # this micro-batch's tokens
            return mask.sum().clamp(min=1.0) * accum, None
        if self.loss_type == "dr_grpo":  # a constant: rows x max_completion_length
            return mask.shape[0] * self.max_completion_length * accum, None
        n = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes  # dapo: the global batch
        return (n * accum / self.args.steps_per_generation if mode == "train" else n), None

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        ids = torch.cat([prompt_ids, completion_ids], 1)
        attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        mask = (inputs["completion_mask"] * inputs.get("tool_mask", 1)).float()
        logp, v, entropy = self._reco_stats(model, ids, attn, completion_ids.shape[1])
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old  # on policy (module docstring)
        A = inputs["advantages"]
        weights = inputs.get("reco_weights")
        factors = []  # per-response factors that TRL multiplies into the loss before its KL term
        if self.use_vllm and self.vllm_importance_sampling_correction:
            factors.append(inputs["importance_sampling_ratio"].view(-1))  # sequence_* modes: [B, 1]
        if self.off_policy_mask_threshold is not None:
            sampling = inputs.get("sampling_per_token_logps", old)
            factors.append(self.get_off_policy_mask(A.unsqueeze(1), logp, sampling, mask,
                                                    self.off_policy_mask_threshold).view(-1))
        for f in factors:
            weights = f if weights is None else weights * f
        batch = {"old_logp": old, "mask": mask, "advantages": A, "weights": weights, "v_old": inputs.get("reco_v_old"),
                 "v_old_mean": inputs.get("reco_v_old_mean"), "ref_logp": inputs.get("ref_per_token_logps")}
        num_tokens, num_seqs = self._normalisers(inputs, mask, mode)
        loss, stats = policy_loss(logp, batch, self.reco, v=v, num_tokens=num_tokens, num_seqs=num_seqs)
        self._log_loss_stats(mode, stats, mask, entropy, k3(logp.detach(), batch["ref_logp"]) if self.beta else None)
        return loss

    def _log_loss_stats(self, mode: str, stats: dict[str, float], mask: Tensor, entropy: Tensor,
                        kl: Tensor | None) -> None:
        """Token-weighted means over all processes (maxima for *_max), under TRL's names where TRL has one."""
        n = mask.sum()
        means = {"entropy": (entropy * mask).sum() / n.clamp(min=1), "clip_ratio/low_mean": stats["clip_frac_low"],
                 "clip_ratio/high_mean": stats["clip_frac_high"],
                 "clip_ratio/region_mean": stats["clip_frac_low"] + stats["clip_frac_high"],
                 "reco/ratio_mean": stats["ratio_mean"], "reco/approx_kl_old": stats["approx_kl_old"]}
        if kl is not None:
            means["kl"] = (kl * mask).sum() / n.clamp(min=1)
        maxes = {"reco/ratio_max": stats["ratio_max"]}
        if "rho_mean" in stats:
            means["reco/rho_mean"], maxes["reco/rho_max"] = stats["rho_mean"], stats["rho_max"]
        local = torch.stack([n, *(torch.as_tensor(x, device=n.device, dtype=n.dtype) * n for x in means.values())])
        total = self.accelerator.reduce(local.detach(), reduction="sum")
        top = self.accelerator.gather(torch.tensor(list(maxes.values()), device=n.device)[None]).amax(0)
        for k, x in zip(means, total[1:]):
            self._metrics[mode][k].append((x / total[0].clamp(min=1)).item())
        for k, x in zip(maxes, top):
            self._metrics[mode][k].append(x.item())
