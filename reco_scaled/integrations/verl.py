"""ReCo as a verl 0.9.1 plugin: a trainer on verl's sync v1 trainer, a `ppo_loss`-compatible loss, fp32 sum pi^2.

    # once: pip install --no-deps -e .   (this repo, in verl's environment: registers the `verl.plugins` entry point)
    python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo trainer.v1.trainer_mode=reco \
        +reco.method=reco +reco.occurrence=count ...             # docs/verl.md has the full recipes

Selected by `trainer.v1.trainer_mode=reco`; it then runs exactly as verl's `sync` trainer, plus:

- The actor's loss is `RecoLoss`: with every ReCo term off (occurrence none, token ratio is) it *is* verl's
  `ppo_loss`; otherwise `reco_mini.policy_loss` (imported: the single source of the math) on the micro-batch, with
  log pi and V = 1 - sum pi^2 from the engine's `model_output`, old log-probs, advantages, the response mask and the
  ReCo fields from `data`, verl's normalisers (token-mean: batch_num_tokens / dp_size; seq-mean-token-mean:
  global_batch_size / dp_size), and verl's own entropy and KL-loss terms and metric conventions.
- Old pass: the micro-batch flag `calculate_sum_pi_squared`, so the FSDP engine returns sum pi^2 per token; V_old goes
  to TransferQueue as `reco_v_old`. Update pass: the same flag when the token ratio is `variance` (V_theta).
- Before the update, on the driver, over the whole update batch (every real row; verl's padding rows skipped):
  F-GRPO's `reco_mini.focal_scale` on the advantages, then w_i with `reco_mini.occurrence_weights` by group (uid),
  reading the scaled advantages for `positive` (as reco_mini does), the default dividing 1/m_i by its mean over the
  batch; V_old's mean over every real response token (`reco_v_old_mean`); all written to TransferQueue, so they reach
  the loss's `data` whatever its mini- and micro-batches; logged as reco/w_*, reco/v_old_mean, reco/focal_*; the
  loss logs reco/rho_*.
- fp32 sum pi^2: verl computes sum pi^2 in the logits' dtype (bf16 in practice: V off by >10% on many tokens, and
  V = 0 on confident ones). When the loss reaches a worker process (Ray unpickles it there, in `set_loss_fn`), and
  only if it needs V, verl's function is replaced in that process by `sum_pi_squared_fp32`: reco_mini's V in fp32
  (fp64 logits stay fp64), no-grad (rho is a stop-gradient), 1024 tokens at a time. Processes that never receive a
  ReCo loss are untouched.

Settings: a top-level `reco` section (`+reco.<field>=...` on verl's command line), fields `RecoSettings` (method,
occurrence, occurrence_apply, occurrence_norm, token_ratio, focal_gamma, variance_cap, variance_norm) with
reco_mini.LossConfig's defaults and help. verl's `clip_ratio_low/high` (or `clip_ratio`), `clip_ratio_c` (dual clip;
always on in verl) and `loss_agg_mode` map onto LossConfig's clip_low, clip_high, dual_clip and aggregation.

Refused at start-up, each naming its field (`check_config`): the legacy trainer (trainer.use_v1=false), the async
modes, policy_loss.loss_mode other than vanilla, fused kernels, advantage estimators other than the per-response
ones (GAE, REINFORCE++, OTB, ... give per-token advantages), rollout correction (token- or sequence-level IS,
rejection sampling, bypass mode), loss_agg_mode other than token-mean and seq-mean-token-mean, on-policy
distillation, a non-FSDP actor strategy (Megatron's sum pi^2 is its own function, untested here), unknown `reco` keys,
and `trainer.v1.sync.parameter_sync_step` > 1 with a batch mean (reco.occurrence_norm or reco.variance_norm batch):
verl would update each sample batch with its own mean. Each checkpoint folder holds the run's loss settings
(reco_loss.json); a resume under other settings is refused, naming each.
The loss also stops if advantages vary within a response.

Registration: a `verl.plugins` entry point (pyproject.toml, reco_scaled/integrations/verl_entry.py), chosen over
VERL_USE_EXTERNAL_MODULES because verl loads it in every process that imports verl, Ray's TaskRunner actor included,
with no environment variable to forward; `VERL_USE_EXTERNAL_PLUGINS=none` switches it off. The entry point imports
nothing of verl: it imports this module right after verl's v1 trainer module, which registers the trainer "reco".
Importing this module patches nothing.

Private verl names this module depends on (check them on a verl upgrade):
- verl.trainer.ppo.v1.trainer_base (the module path the entry point waits for): PPOTrainer.trainer_mode (an
  attribute compared with "sync"), ._setup (its actor init_model sets ppo_loss, which set_loss_fn replaces after
  it), ._compute_old_log_prob, ._update_actor, .actor_rollout_wg, .config; KVBatchMeta.extra_info (passed to the
  engine as micro-batch flags), .tags["is_padding"] and .fields (the worker fetches only the fields listed there;
  kv_batch_put returns a handle listing every stored field, which `put_fields` hands on); the TransferQueue field
  names uid, responses, response_mask, rm_scores, old_log_probs, advantages and sum_pi_squared (the worker's output,
  full sequence).
- verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync (the class subclassed), its _save_checkpoint and _load_checkpoint
  (the folder default_local_dir/global_step_N, found as verl finds it: trainer.resume_mode auto through
  verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path, or trainer.resume_from_path), and
  trainer.v1.<mode>.parameter_sync_step.
- The micro-batch keys dp_size, batch_num_tokens, global_batch_size and calculate_sum_pi_squared, the
  model_output keys log_probs, entropy and sum_pi_squared, ActorConfig.global_batch_info and ppo_loss's metric
  names and aggregation rule (as verl.workers.utils.losses.ppo_loss uses them).
- verl.utils.torch_functional.calculate_sum_pi_squared_from_logits, looked up through the module by
  verl.workers.engine.fsdp.transformer_impl (the attribute replaced in ReCo's worker processes).
- verl.workers.utils.padding.no_padding_2_padding, response_from_nested (public functions of a private module).

Tested on CPU only, against verl 0.9.1's own code, TransferQueue and a local Ray, up to 2 steps of
`python -m verl.trainer.main_ppo` with the CPU platform and rollout of verl_cpu.py (tests/test_verl.py); never run on
a GPU or a multi-node Ray cluster (docs/verl.md).
"""
from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
import transfer_queue as tq
import verl.utils.torch_functional as verl_F
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding, response_from_nested

from reco_mini import METHODS, ConfigError, LossConfig, focal_scale, loss_config, occurrence_weights, policy_loss, variance_stat

ACTOR = "actor_rollout_ref.actor"
LOSS_FILE = "reco_loss.json"  # in each checkpoint folder: the run's resolved reco_mini.LossConfig
SYNC_STEP = "trainer.v1.sync.parameter_sync_step"  # the sync trainer's (RecoTrainer's trainer_mode is "sync")
# verl's per-response advantage estimators (one advantage per response, repeated over its tokens)
PER_RESPONSE_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized")
VERL_SUM_PI_SQUARED = verl_F.calculate_sum_pi_squared_from_logits  # verl's own, kept for uninstall


class RecoConfigError(ValueError):
    """A setting the plugin cannot honour; the message starts with the config field's full name."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name


def _from_loss_config(name: str):
    """A field with reco_mini.LossConfig's default and help text (the one source of both)."""
    f = LossConfig.__dataclass_fields__[name]
    return field(default=f.default, metadata=dict(f.metadata))


@dataclass
class RecoSettings:
    """The `reco` section of verl's config: ReCo's settings, with reco_mini's names, meanings and defaults."""
    method: str = field(default="reco", metadata={"help": "reco_mini method whose defaults fill occurrence, "
                                                          f"token_ratio and focal_gamma: {' | '.join(METHODS)}"})
    occurrence: str = _from_loss_config("occurrence")
    occurrence_apply: str = _from_loss_config("occurrence_apply")
    occurrence_norm: str = _from_loss_config("occurrence_norm")
    token_ratio: str = _from_loss_config("token_ratio")
    focal_gamma: float | None = _from_loss_config("focal_gamma")
    variance_cap: float = _from_loss_config("variance_cap")
    variance_norm: str = _from_loss_config("variance_norm")


def settings_help() -> str:
    """One line per `reco.<field>`: default and help (docs/verl.md prints this)."""
    return "\n".join(f"reco.{f.name} (default {f.default!r}): {f.metadata['help']}" for f in fields(RecoSettings))


def _get(config, path: str, default=None):
    value = OmegaConf.select(config, path, default=default)
    return default if value is None else value


def check_config(config) -> LossConfig:
    """The resolved reco_mini.LossConfig of a verl config, or RecoConfigError naming the field it cannot honour."""
    section = OmegaConf.to_container(config.get("reco") or OmegaConf.create({}), resolve=True)
    known = {f.name for f in fields(RecoSettings)}
    for key in section:
        if key not in known:
            raise RecoConfigError(f"reco.{key}", f"unknown setting; the reco section has {sorted(known)}")
    settings = RecoSettings(**section)
    if settings.method not in METHODS:
        raise RecoConfigError("reco.method", f"must be one of {list(METHODS)}, got {settings.method!r}")

    refusals = [
        ("trainer.use_v1", _get(config, "trainer.use_v1", True) is True,
         "must be true: the plugin is a v1 trainer (the legacy trainer is not supported)"),
        ("trainer.v1.trainer_mode", _get(config, "trainer.v1.trainer_mode") == "reco",
         "must be reco, which runs verl's sync trainer (colocate_async and separate_async are not supported)"),
        (f"{ACTOR}.policy_loss.loss_mode", _get(config, f"{ACTOR}.policy_loss.loss_mode", "vanilla") == "vanilla",
         "must be vanilla (ReCo replaces the PPO surrogate itself)"),
        (f"{ACTOR}.strategy", _get(config, f"{ACTOR}.strategy", "fsdp") in ("fsdp", "fsdp2"),
         "must be fsdp or fsdp2 (only verl's FSDP engine is covered by this plugin's tests)"),
        ("actor_rollout_ref.model.use_fused_kernels", not _get(config, "actor_rollout_ref.model.use_fused_kernels", False),
         "must be false: fused kernels never materialise the logits that sum pi^2 (V) needs"),
        (f"{ACTOR}.use_fused_kernels", not _get(config, f"{ACTOR}.use_fused_kernels", False),
         "must be false: fused kernels never materialise the logits that sum pi^2 (V) needs"),
        ("algorithm.adv_estimator", _get(config, "algorithm.adv_estimator") in PER_RESPONSE_ESTIMATORS,
         f"must be one of {list(PER_RESPONSE_ESTIMATORS)}: ReCo needs one advantage per response "
         "(GAE, REINFORCE++, optimal_token_baseline, ... give per-token advantages)"),
        ("algorithm.rollout_correction.rollout_is", _get(config, "algorithm.rollout_correction.rollout_is") is None,
         "must be null: rollout importance sampling (token or sequence level) is not supported"),
        ("algorithm.rollout_correction.rollout_rs", _get(config, "algorithm.rollout_correction.rollout_rs") is None,
         "must be null: rollout rejection sampling is not supported"),
        ("algorithm.rollout_correction.bypass_mode", not _get(config, "algorithm.rollout_correction.bypass_mode", False),
         "must be false: ReCo needs the old-policy pass (V_old)"),
        ("reco.token_ratio", settings.token_ratio != "simko",
         "simko is not supported: a peer's token ratio, which only experiments/lab.py's loop runs (it reads the "
         "policy's logits)"),
        ("reco.occurrence", settings.occurrence != "canonical",
         "canonical is not supported: its canonical keys come from reco_mini's tasks only; use count"),
        ("distillation.enabled", not _get(config, "distillation.enabled", False),
         "must be false: on-policy distillation replaces the actor loss"),
    ]
    for name, ok, message in refusals:
        if not ok:
            raise RecoConfigError(name, message)

    actor = OmegaConf.select(config, ACTOR)
    clip = actor.get("clip_ratio", 0.2)
    verl_names = {"clip_low": f"{ACTOR}.clip_ratio_low", "clip_high": f"{ACTOR}.clip_ratio_high",
                  "dual_clip": f"{ACTOR}.clip_ratio_c", "aggregation": f"{ACTOR}.loss_agg_mode"}
    try:
        own = LossConfig(occurrence=settings.occurrence, occurrence_apply=settings.occurrence_apply,
                         occurrence_norm=settings.occurrence_norm, token_ratio=settings.token_ratio,
                         focal_gamma=settings.focal_gamma, variance_cap=settings.variance_cap,
                         variance_norm=settings.variance_norm,
                         clip_low=_get(actor, "clip_ratio_low", clip), clip_high=_get(actor, "clip_ratio_high", clip),
                         dual_clip=actor.get("clip_ratio_c", 3.0), aggregation=actor.get("loss_agg_mode", "token-mean"))
    except ConfigError as e:
        raise RecoConfigError(verl_names.get(e.name, f"reco.{e.name}"), e.message) from None
    cfg = loss_config(own, settings.method)
    # verl updates the actor once per sample batch (train_batch_size / parameter_sync_step): a batch mean would be
    # that part's, not the whole batch's
    batch_means = [name for name, on in [
        ("reco.occurrence_norm", cfg.occurrence != "none" and cfg.occurrence_norm == "batch"),
        ("reco.variance_norm", cfg.token_ratio in ("variance", "variance-old") and cfg.variance_norm == "batch"),
    ] if on]
    if _get(config, SYNC_STEP, 1) != 1 and batch_means:
        raise RecoConfigError(SYNC_STEP, f"must be 1 with {batch_means[0]} batch: each of its sample batches would "
                                         "be normalised by its own mean, not the whole batch's")
    return cfg


def terms_off(cfg: LossConfig) -> bool:
    """True when the loss is GRPO's (F-GRPO only rescales advantages, in the trainer)."""
    return cfg.occurrence == "none" and cfg.token_ratio == "is"


def needs_v_old(cfg: LossConfig) -> bool:
    return cfg.token_ratio == "variance-old" or (cfg.token_ratio == "variance" and cfg.variance_norm == "batch")


@torch.no_grad()
def sum_pi_squared_fp32(logits: torch.Tensor, chunk_tokens: int = 1024) -> torch.Tensor:
    """sum_v pi(v|s)^2 = 1 - V(s), V from reco_mini.variance_stat in fp32 (fp64 stays fp64), no gradient.

    A drop-in for verl.utils.torch_functional.calculate_sum_pi_squared_from_logits ([..., V] -> [...]), computed
    `chunk_tokens` rows at a time so that the fp32 copy of bf16 logits stays small.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.cat([1.0 - variance_stat(rows) for rows in flat.split(chunk_tokens)]) if flat.shape[0] else \
        flat.new_zeros(0, dtype=torch.float64 if logits.dtype == torch.float64 else torch.float32)
    return out.view(logits.shape[:-1])


def install_fp32_sum_pi_squared() -> None:
    """Make verl's engines compute sum pi^2 with `sum_pi_squared_fp32`, in this process only."""
    verl_F.calculate_sum_pi_squared_from_logits = sum_pi_squared_fp32


def uninstall_fp32_sum_pi_squared() -> None:
    verl_F.calculate_sum_pi_squared_from_logits = VERL_SUM_PI_SQUARED


def _padded(value: torch.Tensor) -> torch.Tensor:
    return value.to_padded_tensor(0.0) if value.is_nested else value


def _reco_field(data: TensorDict, name: str) -> torch.Tensor:
    """A field the trainer wrote for the loss; missing means the worker's KVBatchMeta did not list it."""
    if name not in data.keys():
        raise KeyError(f"reco: the actor's micro-batch has no field {name!r}: RecoTrainer writes it to TransferQueue before "
                       "update_actor, and the worker fetches only the fields on the KVBatchMeta it is given")
    return data[name]


def reco_ppo_loss(config, model_output, data: TensorDict, dp_group=None, *, loss_cfg: LossConfig):
    """ReCo's actor loss on one micro-batch, with verl's `ppo_loss` signature, normalisers and metrics."""
    log_prob = no_padding_2_padding(model_output["log_probs"], data)  # [B, T]
    # bf16/fp16 engine outputs (verl's FSDP mixed precision): ReCo's loss is computed in fp32
    log_prob = log_prob.to(torch.promote_types(log_prob.dtype, torch.float32))
    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)
    v = None
    if loss_cfg.token_ratio == "variance":
        sum_pi_sq = no_padding_2_padding(model_output["sum_pi_squared"], data)
        v = (1.0 - sum_pi_sq.double()).to(log_prob.dtype)

    dp_size, batch_num_tokens, global_batch_size = data["dp_size"], data["batch_num_tokens"], data["global_batch_size"]
    config.global_batch_info.update(dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                                    global_batch_size=global_batch_size, loss_scale_factor=config.loss_scale_factor)
    summed = dp_size > 1 or batch_num_tokens is not None or global_batch_size is not None or config.loss_scale_factor is not None
    metric_aggregation = AggregationType.SUM if summed else AggregationType.MEAN

    mask = _padded(data["response_mask"]).to(log_prob.dtype)
    advantages = _padded(data["advantages"]).double()
    n_tok = mask.sum(-1)
    adv = (advantages * mask).sum(-1) / n_tok.clamp(min=1)  # [B]: the response's advantage
    if ((advantages - adv[:, None]).abs() * mask).max() > 1e-5 * (1.0 + adv.abs().max()):
        raise RecoConfigError("algorithm.adv_estimator", "gave advantages that vary within a response; "
                                                         "ReCo needs one advantage per response")
    batch = {"old_logp": _padded(data["old_log_probs"]).to(log_prob.dtype), "mask": mask, "advantages": adv.to(log_prob.dtype)}
    if loss_cfg.occurrence != "none":
        batch["weights"] = _reco_field(data, "reco_weights").to(log_prob.dtype)
    if needs_v_old(loss_cfg):
        batch["v_old"] = _padded(_reco_field(data, "reco_v_old")).to(log_prob.dtype)
        batch["v_old_mean"] = _reco_field(data, "reco_v_old_mean")[0].to(log_prob.dtype)
    elif loss_cfg.token_ratio == "variance":  # variance_norm none
        batch["v_old_mean"] = torch.ones((), dtype=log_prob.dtype, device=log_prob.device)

    if loss_cfg.aggregation == "token-mean":
        if batch_num_tokens is None and dp_size > 1:
            raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
        num_tokens, num_seqs = (None if batch_num_tokens is None else batch_num_tokens / dp_size), None
    else:
        if global_batch_size is None and dp_size > 1:
            raise ValueError("global_batch_size is required when dp_size > 1")
        num_tokens = None
        num_seqs = (n_tok > 0).sum() if global_batch_size is None else global_batch_size / dp_size
    pg_loss, stats = policy_loss(log_prob, batch, loss_cfg, v=v, num_tokens=num_tokens, num_seqs=num_seqs)

    metrics = Metric.from_dict({"actor/pg_clipfrac": stats["clip_frac_high"] + stats["clip_frac_low"],
                                "actor/ppo_kl": stats["approx_kl_old"]}, aggregation=AggregationType.MEAN)
    if "rho_mean" in stats:
        metrics["reco/rho_mean"] = Metric(value=stats["rho_mean"], aggregation=AggregationType.MEAN)
        metrics["reco/rho_max"] = Metric(value=stats["rho_max"], aggregation=AggregationType.MAX)
    metrics["actor/pg_loss"] = Metric(value=pg_loss, aggregation=metric_aggregation)
    total = pg_loss

    # verl's own entropy bonus and KL loss, exactly as ppo_loss adds them
    response_mask = mask.to(bool)
    if entropy is not None:
        entropy_loss = agg_loss(loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode,
                                **config.global_batch_info)
        total = total - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=metric_aggregation)
    if config.use_kl_loss:
        kld = kl_penalty(logprob=log_prob, ref_logprob=_padded(data["ref_log_prob"]), kl_penalty=config.kl_loss_type)
        kl_loss = agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode,
                           **config.global_batch_info)
        total = total + kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=metric_aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
    return total, metrics


class RecoLoss:
    """The actor loss a worker group gets through `set_loss_fn`: `ppo_loss`'s call signature, picklable.

    Unpickling it (Ray does, in each worker process) installs the fp32 sum pi^2 there when the loss needs V.
    """

    def __init__(self, actor_config, loss_cfg: LossConfig):
        self.actor_config, self.loss_cfg = actor_config, loss_cfg

    def __call__(self, model_output, data: TensorDict, dp_group=None):
        if terms_off(self.loss_cfg):
            return ppo_loss(self.actor_config, model_output, data, dp_group)
        return reco_ppo_loss(self.actor_config, model_output, data, dp_group, loss_cfg=self.loss_cfg)

    def __getstate__(self):
        return {"actor_config": self.actor_config, "loss_cfg": asdict(self.loss_cfg)}

    def __setstate__(self, state):
        self.actor_config, self.loss_cfg = state["actor_config"], LossConfig(**state["loss_cfg"])
        if self.loss_cfg.token_ratio in ("variance", "variance-old"):
            install_fp32_sum_pi_squared()


def put_fields(batch: KVBatchMeta, fields_out: dict) -> KVBatchMeta:
    """Write per-row fields for `batch`'s keys to TransferQueue; returns `batch` with a field list that includes them.

    verl's workers fetch only the fields a KVBatchMeta lists (verl.utils.transferqueue_utils, kv_batch_meta2batch_meta),
    so a handle made before a put does not carry the put's fields: every put must hand its handle on.
    """
    stored = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                             fields=TensorDict(fields_out, batch_size=len(batch.keys)))
    missing = set(fields_out) - set(stored.fields or ())
    if missing:
        raise RuntimeError(f"reco: TransferQueue did not list {sorted(missing)} after writing them")
    return replace(batch, fields=list(stored.fields))


def _nested(values: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(values, layout=torch.jagged)


@register_trainer("reco")
class RecoTrainer(PPOTrainerSync):
    """verl's sync v1 trainer with ReCo's loss, the sum pi^2 flags and the per-response fields (module docstring)."""

    # verl compares trainer_mode with "sync" (replay buffer, refills, checkpoints); this trainer is the sync one.
    trainer_mode = property(lambda self: "sync", lambda self, value: None)

    def __init__(self, config):
        self.reco = check_config(config)
        super().__init__(config)

    def _setup(self):
        super()._setup()  # builds the worker groups; the actor's init_model set verl's ppo_loss, replaced here
        self.actor_rollout_wg.set_loss_fn(self.make_loss())

    def make_loss(self) -> RecoLoss:
        return RecoLoss(omega_conf_to_dataclass(self.config.actor_rollout_ref.actor), self.reco)

    def _save_checkpoint(self):
        """verl's checkpoint, with this run's loss settings (LOSS_FILE) written first, for a resume to compare."""
        folder = Path(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / LOSS_FILE).write_text(json.dumps(asdict(self.reco), indent=1))
        super()._save_checkpoint()

    def _load_checkpoint(self):
        """verl's resume, refused (RecoConfigError naming each changed setting) where the checkpoint's loss settings
        differ from this run's: resuming would go on training that run under another objective."""
        trainer = self.config.trainer
        if trainer.resume_mode == "auto":
            folder = find_latest_ckpt_path(os.path.abspath(trainer.default_local_dir))
        else:
            folder = trainer.resume_from_path if trainer.resume_mode == "resume_path" else None
        saved = Path(os.path.abspath(folder), LOSS_FILE) if folder else None
        if saved is not None and saved.is_file():
            written, here = json.loads(saved.read_text()), asdict(self.reco)
            differ = [f"{k}={written.get(k)!r} there, {v!r} here" for k, v in here.items() if written.get(k) != v]
            if differ:
                raise RecoConfigError("trainer.resume_mode", f"checkpoint {folder} was trained under another loss "
                                      f"({'; '.join(differ)}); set these as they were, or use a new default_local_dir")
        return super()._load_checkpoint()

    def _compute_old_log_prob(self, batch, metrics: dict):
        cfg = self.reco
        batch.extra_info["calculate_sum_pi_squared"] = needs_v_old(cfg)
        batch = super()._compute_old_log_prob(batch, metrics=metrics)
        if needs_v_old(cfg):
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                   select_fields=["sum_pi_squared", "response_mask"])
            sum_pi_sq = response_from_nested(data["sum_pi_squared"], data["response_mask"])
            v_old = torch.nested.nested_tensor_from_jagged(1.0 - sum_pi_sq.values().float(), sum_pi_sq.offsets())
            batch = put_fields(batch, {"reco_v_old": v_old})
        batch.extra_info["calculate_sum_pi_squared"] = False  # the ref pass does not need it
        return batch

    def _update_actor(self, batch, metrics: dict):
        cfg = self.reco
        if not terms_off(cfg) or cfg.focal_gamma > 0:
            batch = self._put_reco_fields(batch, metrics)
        batch.extra_info["calculate_sum_pi_squared"] = cfg.token_ratio == "variance"
        return super()._update_actor(batch, metrics=metrics)

    def _put_reco_fields(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """w_i, V_old's batch mean and F-GRPO's advantage scale, written to TransferQueue; the handle that lists them."""
        cfg = self.reco
        select = ["uid", "response_mask", "old_log_probs", "advantages", "responses", "rm_scores"]
        if needs_v_old(cfg):
            select.append("reco_v_old")
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=select)
        uids = data.get("uid").tolist()  # as verl's _compute_advantage reads them
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        mask = _padded(data["response_mask"]).double()
        old_lp, adv = _padded(data["old_log_probs"]).double(), _padded(data["advantages"]).double()
        rewards = _padded(data["rm_scores"]).double().sum(-1)
        seq_lp, lengths, adv_i = (old_lp * mask).sum(-1), mask.sum(-1), (adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        # the sampled token ids, for `count` (copies are identical responses)
        responses = [tuple(r.tolist()) for r in data["responses"].unbind()] if cfg.occurrence == "count" else None

        groups = defaultdict(list)  # uid -> rows, in batch order; padding rows belong to no group
        for row, (uid, pad) in enumerate(zip(uids, padding)):
            if not pad:
                groups[uid].append(row)
        dev = seq_lp.device  # the driver's batch (TransferQueue): the CPU today; follow it if that changes
        weights = torch.ones(len(uids), dtype=torch.float64, device=dev)
        scale = torch.ones_like(weights)

        if cfg.focal_gamma > 0:
            for rows in groups.values():
                idx = torch.tensor(rows, device=dev)
                scale[idx] = focal_scale(rewards[idx].view(1, -1), cfg.focal_gamma).expand(len(rows))
        scaled_adv = adv_i * scale  # `positive` reads the focal-scaled advantages, as in reco_mini

        def group_weights(rows: list[int], norm: str, apply: str, batch_mean=None) -> torch.Tensor:
            idx = torch.tensor(rows, device=dev)
            return occurrence_weights(seq_lp[idx].view(1, -1), cfg.occurrence,
                                      None if responses is None else [responses[r] for r in rows],
                                      lengths=lengths[idx].view(1, -1), advantages=scaled_adv[idx].view(1, -1),
                                      apply=apply, norm=norm, batch_mean=batch_mean).view(-1)

        if cfg.occurrence != "none":
            batch_mean = None  # reco.occurrence_norm batch: 1/m_i's mean over every real row of the batch
            if cfg.occurrence_norm == "batch":
                batch_mean = torch.cat([group_weights(rows, "none", "all") for rows in groups.values()]).mean()
            for rows in groups.values():
                weights[torch.tensor(rows, device=dev)] = group_weights(rows, cfg.occurrence_norm,
                                                                         cfg.occurrence_apply, batch_mean)

        fields_out = {}
        real = torch.tensor([not p for p in padding], device=dev)
        if cfg.occurrence != "none":
            fields_out["reco_weights"] = weights.float()
            metrics |= {"reco/w_mean": weights[real].mean().item(), "reco/w_min": weights[real].min().item(),
                        "reco/w_max": weights[real].max().item()}
        if cfg.focal_gamma > 0:
            new_adv = [a * s.to(a.dtype) for a, s in zip(data["advantages"].unbind(), scale)]
            fields_out["advantages"] = _nested(new_adv)
            metrics["reco/focal_scale_mean"] = scale[real].mean().item()
        if needs_v_old(cfg):
            v_old = _padded(data["reco_v_old"]).double()
            real_mask = mask * real[:, None]
            v_mean = ((v_old * real_mask).sum() / real_mask.sum().clamp(min=1)).item() if cfg.variance_norm == "batch" else 1.0
            if not math.isfinite(v_mean) or v_mean <= 0:
                raise ValueError(f"reco: mean V_old over the batch is {v_mean}; reco.variance_norm=none avoids dividing by it")
            fields_out["reco_v_old_mean"] = torch.full((len(uids),), v_mean, dtype=torch.float32, device=dev)
            metrics["reco/v_old_mean"] = v_mean
        return put_fields(batch, fields_out) if fields_out else batch
