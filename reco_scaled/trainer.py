"""The RL loop (docs/design.md §2) under torchrun: rollout -> reward -> advantage -> old statistics ->
response weights -> mini-batch updates -> weight sync -> log, with checkpoints.

Memory: only rank 0 reads the weights from disk (the others build the model on the meta device and
receive rank 0's weights, distributed.wrap); on GPU with precision bf16, FSDP2 computes in bf16 over
fp32 master weights and reduce-scatters fp32 gradients after every micro-batch, and autocast covers
the forward only. The reference model is built only when algo.kl_coef > 0; without it `kl_base` is
not logged (docs/design.md §2 lists it; it would cost a second model and a forward pass per step). With
model.lora_rank > 0 only LoRA adapters train (model.add_adapters), and the reference is the policy with its
adapters off: no second model.
The rollout engine sleeps during the update and is woken in the order weights -> sync -> KV cache.

Distribution: each rank owns prompts_per_step / world_size whole groups, so advantages
(reco_mini.group_advantages) need no communication. What is global is all-reduced: the mean of 1/m_i over every
rollout of the step on every rank, which ReCo's default response weights divide by (occurrence_norm batch;
reco_mini.occurrence_weights), mean V_old over all response tokens (docs/design.md §3.3) and each mini-batch's
loss normaliser (its token count, or sequence count), fixed before the micro-batch loop. Mini-batch
m holds the rollouts with local index i = m (mod minibatches) on every rank, which is the same set
of rollouts at any world size; the loss is therefore independent of the world size and of the
micro-batch size.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import time
from collections.abc import Callable

import torch
from torch import Tensor

from reco.log import RunLogger, tqdm, update_shares, update_sizes  # tqdm: in a log file, a line a minute at most
from reco_mini import focal_scale, group_advantages, k3, occurrence_weights
from reco_scaled import checkpoint, distributed
from reco_scaled.config import RunConfig, batch_plan, describe, flatten
from reco_scaled.loss import StatSums, collate, micro_loss, take
from reco_scaled.model import PolicyModel, add_adapters, build_lm, load_lm
from reco_scaled.rollout.factory import make_engine
from reco_scaled.task import PromptSampler, load_task


class Trainer:
    def __init__(self, cfg: RunConfig, d: distributed.Dist, problems: list[dict] | None = None) -> None:
        """`problems`: task math's or code's training problems when the caller has read them already
        (reco_scaled.train reads them before any model loads); else they are read here."""
        self.cfg, self.d = cfg, d
        self.plan = batch_plan(cfg, d.world_size)
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        lm, self.tokenizer, model_dir = load_lm(cfg, d)
        self.adapted = add_adapters(cfg, lm)  # model.lora_rank: the PeftModel around lm, else None
        self.signature = checkpoint.signature(lm)
        self.task = load_task(cfg, self.tokenizer, problems)
        self.sampler = PromptSampler(len(self.task.problems), cfg.seed)
        self.bf16 = d.device.type == "cuda" and cfg.model.precision == "bf16"
        if d.main:
            print(describe(cfg, self.plan))
            print(memory_note(lm, cfg, d.world_size))
            print(f"training problems: {len(self.task.problems)}", flush=True)
        dtype = torch.bfloat16 if self.bf16 else torch.float32  # compute dtype (the policy's weights stay fp32)
        self.lm = lm
        policy = PolicyModel(lm, fused=cfg.train.fused_kernel)
        self.model = distributed.wrap(policy, policy.layers, cfg.train.parallel, d,
                                      param_dtype=torch.bfloat16 if self.bf16 else None)
        self.kl = cfg.loss.kl_coef > 0
        self.ref = None  # the frozen base policy, for the KL penalty only; with LoRA, the policy's adapters off
        if self.kl and self.adapted is None:
            ref = PolicyModel(build_lm(model_dir, dtype, d), fused=cfg.train.fused_kernel).requires_grad_(False).eval()
            self.ref = distributed.wrap(ref, ref.layers, cfg.train.parallel, d, trainable=False)
        loaded = distributed.per_rank(distributed.peak_rss_gib(), d)
        # last: vLLM checks at start-up that its gpu_memory_utilization share of the GPU is still free
        r = cfg.rollout
        template = cfg.data.template if cfg.task in ("math", "code") else None  # which tokens end a response
        self.engine = make_engine(r.engine, model_dir, self.tokenizer, template=template,
                                  device=d.device, dtype=dtype, seed=cfg.seed,
                                  hf_batch_size=r.engine_batch_size, load_weights=False, max_model_len=r.max_model_len,
                                  gpu_memory_utilization=r.gpu_memory_utilization,
                                  tensor_parallel_size=r.tensor_parallel_size, enable_sleep_mode=r.enable_sleep_mode,
                                  sleep_level=r.sleep_level, distributed=d.world_size > 1)
        started = distributed.per_rank(distributed.peak_rss_gib(), d)
        if d.main:
            print(f"host memory, peak RSS per rank: {_gib(loaded)} GiB after loading the model, "
                  f"{_gib(started)} GiB with the rollout engine", flush=True)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
        warmup = cfg.train.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1)))
        self.step = 0
        self.ckpt_root = cfg.out_dir / "checkpoints"
        self.log_path = cfg.out_dir / "log.jsonl"
        self._resume()
        self.engine.sync_weights(self.lm)  # the HF engine was built without weights; a resume changed them

    # ------------------------------------------------------------------------------------ set-up

    def _resume(self) -> None:
        cfg, d = self.cfg, self.d
        path = checkpoint.resume_point(cfg)  # another run's checkpoint is refused, naming the keys
        if d.main:
            cfg.out_dir.mkdir(parents=True, exist_ok=True)
        if path is None:
            if d.main:
                self.log_path.write_text("")
            return
        meta = checkpoint.load(path, self.model, self.optimizer, self.signature, d)
        self.scheduler.load_state_dict(meta["scheduler"])
        self.sampler.load_state_dict(meta["sampler"])
        self.step = meta["step"]
        if d.main:
            now = flatten(dataclasses.asdict(cfg))
            changed = [k for k, v in flatten(meta["config"]).items() if now.get(k) != v]
            print(f"resumed from {path} at step {self.step}" + (f"; config keys changed since: {changed}" if changed else ""))
            if self.log_path.exists():  # drop the log lines of steps after the checkpoint
                rows = [r for r in self.log_path.read_text().splitlines() if r and json.loads(r)["step"] <= self.step]
                self.log_path.write_text("".join(r + "\n" for r in rows))

    def _amp(self) -> contextlib.AbstractContextManager:
        return torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    # ------------------------------------------------------------------------------------ the loop

    def fit(self) -> None:
        cfg, d = self.cfg, self.d
        bar = tqdm(total=cfg.train.steps, initial=self.step, desc=cfg.name, disable=not d.main)
        with (RunLogger(self.log_path, cfg.train.loggers, cfg.name, dataclasses.asdict(cfg), mode="a") if d.main
              else contextlib.nullcontext()) as log:
            while self.step < cfg.train.steps:
                row = self.train_step()
                if d.main:  # logged before the checkpoint: a resume rewrites the rows after its checkpoint
                    log.log(row)  # log.jsonl, and the train.loggers sinks
                    bar.set_postfix(reward=f"{row['reward_mean']:.3f}", loss=f"{row['loss']:.4f}")
                    bar.update()
                every = cfg.checkpoint.every
                if every and self.step % every == 0 or self.step == cfg.train.steps:
                    t = time.perf_counter()
                    meta = {"scheduler": self.scheduler.state_dict(), "sampler": self.sampler.state_dict(),
                            "signature": self.signature, "config": dataclasses.asdict(cfg)}
                    path = checkpoint.save(self.ckpt_root, self.step, self.model, self.optimizer, meta, d,
                                           cfg.checkpoint.keep)
                    if d.main:
                        bar.write(f"saved {path} in {time.perf_counter() - t:.1f} s")
        bar.close()
        final = cfg.out_dir / "final"
        checkpoint.export_hf(final, self.model, self.lm, self.tokenizer,
                             torch.bfloat16 if self.bf16 else torch.float32, d)
        if d.main and self.adapted is not None:
            self.adapted.save_pretrained(cfg.out_dir / "adapters")
        if d.main:
            print(f"final policy (Hugging Face format): {final}" + (f"; its LoRA adapters: {cfg.out_dir / 'adapters'}"
                                                                     if self.adapted is not None else ""))

    def train_step(self) -> dict:
        cfg, d = self.cfg, self.d
        P, G, Pr = cfg.train.prompts_per_step, cfg.rollout.group_size, self.plan["prompts_per_rank"]
        times = {}
        t = time.perf_counter()
        mine = self.sampler.next(P)[d.rank * Pr: (d.rank + 1) * Pr]
        # sample g of global prompt j uses seed base + j*G + g, whatever the world size
        base = (cfg.seed * 1_000_003 + self.step) * P * G + d.rank * Pr * G
        self.engine.wake()
        ro = self.engine.generate([self.task.prompt_ids[i] for i in mine], G, temperature=cfg.rollout.temperature,
                                  max_new_tokens=cfg.rollout.max_new_tokens, seed=base)
        self.engine.sleep()
        times["rollout"], t = time.perf_counter() - t, time.perf_counter()

        flat = [i for i in mine for _ in range(G)]
        ro = self.task.trim(flat, ro, self.tokenizer)  # code: a completion ends at its stop sequence
        texts = self.tokenizer.batch_decode(ro.response_ids, skip_special_tokens=True)
        scores = self.task.rewards(flat, texts)
        rewards = torch.tensor(scores, device=d.device)
        rewards = rewards.view(Pr, G)
        times["reward"], t = time.perf_counter() - t, time.perf_counter()

        batch, sampler_logp = collate(ro, self.tokenizer.pad_token_id, d.device)
        old_logp, v_old, entropy = self._forward_no_grad(self.model, batch)
        if self.kl:
            batch["ref_logp"] = self._reference_logp(batch)
        mask = batch["mask"]
        n_tokens = distributed.all_sum(mask.sum().double())
        loss_cfg = cfg.loss
        if loss_cfg.variance_norm == "batch":
            batch["v_old_mean"] = (distributed.all_sum((v_old * mask).sum().double()) / n_tokens).float()
        else:
            batch["v_old_mean"] = torch.tensor(1.0, device=d.device)
        focal = focal_scale(rewards, loss_cfg.focal_gamma)[:, None]  # 1 unless algo.focal_gamma (F-GRPO)
        advantages = group_advantages(rewards, scale_by_std=not loss_cfg.no_std) * focal  # [Pr, G]
        weights = response_weights(loss_cfg, (old_logp * mask).sum(-1).view(Pr, G), ro.response_ids,
                                   mask.sum(-1).view(Pr, G), advantages)
        batch.update(old_logp=old_logp, v_old=v_old, advantages=advantages.flatten(), weights=weights.flatten())
        times["old_stats"], t = time.perf_counter() - t, time.perf_counter()

        lr = self.optimizer.param_groups[0]["lr"]
        update = self._update(batch)
        if d.device.type == "cuda":  # hand the update's cached blocks back before the engine wakes
            torch.cuda.empty_cache()
        times["update"], t = time.perf_counter() - t, time.perf_counter()
        self.engine.sync_weights(self.lm)  # a sleeping vLLM engine wakes its weights only; wake() adds the KV cache
        self.scheduler.step()
        self.step += 1
        times["sync"] = time.perf_counter() - t

        row = {"step": self.step, **self._rollout_metrics(batch, rewards, entropy, sampler_logp, n_tokens), **update,
               "lr": lr}
        row.update({f"time_{k}": v for k, v in times.items()}, time_step=sum(times.values()))
        if d.device.type == "cuda":
            peak = torch.tensor(torch.cuda.max_memory_allocated() / 2**30, device=d.device)
            row["gpu_mem_peak_gib"] = distributed.all_max(peak).item()  # the largest over ranks
            torch.cuda.reset_peak_memory_stats()
        return row

    @torch.no_grad()
    def _forward_no_grad(self, model: torch.nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """(log pi, V, H) [B, T] of every rollout, in micro-batches."""
        model.eval()
        rows = torch.arange(batch["resp"].shape[0], device=self.d.device)
        outs = []
        for chunk in rows.split(self.cfg.train.micro_batch_size):
            mb, T = take(batch, chunk)
            with self._amp():
                stats = model(mb["prompt_ids"], mb["prompt_mask"], mb["resp"], mb["mask"], self.cfg.rollout.temperature)
            outs.append([torch.nn.functional.pad(x, (0, batch["resp"].shape[1] - T)) for x in stats])
        return tuple(torch.cat(parts) for parts in zip(*outs))

    def _reference_logp(self, batch: dict[str, Tensor]) -> Tensor:
        """log pi_base(y_t) [B, T]: the reference model's, or with LoRA the policy's with its adapters off."""
        if self.adapted is None:
            return self._forward_no_grad(self.ref, batch)[0]
        with self.adapted.disable_adapter():
            return self._forward_no_grad(self.model, batch)[0]

    def _update(self, batch: dict[str, Tensor]) -> dict[str, float]:
        cfg, d = self.cfg, self.d
        M, B = cfg.train.minibatches, batch["resp"].shape[0]
        stats, losses, norms = StatSums(), [], []
        self.model.train()
        for _ in range(cfg.train.epochs):
            for m in range(M):
                self.optimizer.zero_grad(set_to_none=True)
                loss = accumulate_gradients(self.model, cfg, batch, torch.arange(m, B, M, device=d.device), stats,
                                            d.world_size, self._amp)
                norm = distributed.grad_norm_clip(self.params, cfg.train.grad_clip)  # global: every rank stops alike
                if not (math.isfinite(loss) and math.isfinite(norm)):  # stop before the weights go bad
                    last = checkpoint.latest(self.ckpt_root)
                    raise FloatingPointError(f"non-finite loss ({loss}) or gradient norm ({norm}) at step {self.step + 1}"
                                             f"; the weights were not updated; last good checkpoint: {last or 'none yet'}")
                self.optimizer.step()
                norms.append(norm)
                losses.append(loss)
        self.optimizer.zero_grad(set_to_none=True)  # no gradients held through the rollout phase
        return {**stats.reduce(d.device), "loss": sum(losses) / len(losses), "grad_norm": sum(norms) / len(norms),
                "grad_norm_max": max(norms)}

    def _rollout_metrics(self, batch: dict[str, Tensor], rewards: Tensor, entropy: Tensor, sampler_logp: Tensor,
                         n_tokens: Tensor) -> dict[str, float]:
        """Global rollout statistics: sums all-reduced, then divided by global counts; kl_base only with a
        reference model (algo.kl_coef > 0)."""
        mask, A, w = batch["mask"], batch["advantages"], batch["weights"]
        kl = mask.new_zeros(()) if not self.kl else torch.where(mask.bool(), k3(batch["old_logp"], batch["ref_logp"]), 0.0)
        lengths = mask.sum(-1)
        sums = distributed.all_sum(torch.stack([
            rewards.sum(), rewards.new_tensor(float(rewards.numel())), (rewards.max(1).values > 0).sum(),
            rewards.new_tensor(float(rewards.shape[0])),
        ]).double()).tolist()
        tok = distributed.all_sum(torch.stack([
            A.abs().sum(), (A != 0).sum().float(), w.sum(), (entropy * mask).sum(), kl.sum(),
            ((sampler_logp - batch["old_logp"]).abs() * mask).sum(),
        ]).double()).tolist()
        top = distributed.all_max(torch.stack([w.max(), -w.min(), lengths.max()]).double()).tolist()
        n_roll, n_tok = sums[1], n_tokens.item()
        row = {"reward_mean": sums[0] / n_roll, "pass_rate": sums[2] / sums[3],
               "adv_abs_mean": tok[0] / n_roll, "adv_nonzero_frac": tok[1] / n_roll,
               "w_min": -top[1], "w_mean": tok[2] / n_roll, "w_max": top[0],
               "v_old_mean": batch["v_old_mean"].item(), "entropy": tok[3] / n_tok,
               "response_length": n_tok / n_roll, "response_length_max": top[2],
               "engine_logp_abs_diff": tok[5] / n_tok}
        if self.kl:
            row["kl_base"] = tok[4] / n_tok
        return row | update_shares(distributed.all_sum(update_sizes(rewards, A, w)))

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


# ---------------------------------------------------------------------------------------- helpers

def response_weights(loss_cfg, seq_logp: Tensor, responses: list, lengths: Tensor, advantages: Tensor) -> Tensor:
    """reco_mini.occurrence_weights of this rank's groups [Pr, G]; under occurrence_norm batch, 1/m_i is divided by
    its mean over every rank's rollouts (all-reduced in float64, like reco_mini's mean), so the weights do not depend
    on the world size."""
    batch_mean = None
    if loss_cfg.occurrence_norm == "batch":  # float64 in, float64 1/m out: not rounded to seq_logp's dtype first
        inv_m = occurrence_weights(seq_logp.double(), loss_cfg.occurrence, responses, lengths, apply="all", norm="none")
        batch_mean = distributed.all_sum(inv_m.sum()) / distributed.all_sum(inv_m.new_tensor(float(inv_m.numel())))
    return occurrence_weights(seq_logp, loss_cfg.occurrence, responses, lengths, advantages, loss_cfg.occurrence_apply,
                              norm=loss_cfg.occurrence_norm, batch_mean=batch_mean)


def accumulate_gradients(model: torch.nn.Module, cfg: RunConfig, batch: dict[str, Tensor], rows: Tensor,
                         stats: StatSums, world_size: int,
                         amp: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> float:
    """Backward one mini-batch (this rank's `rows`) in micro-batches; returns the global mini-batch loss.

    The normaliser (token or sequence count of the whole mini-batch on all ranks) is fixed before the
    micro-batch loop, so the gradients do not depend on the micro-batch size or the world size.
    """
    num_tokens = distributed.all_sum(batch["mask"][rows].sum().float())
    num_seqs = distributed.all_sum(torch.tensor(float(len(rows)), device=rows.device))
    chunks = rows.split(cfg.train.micro_batch_size)
    loss_sum = torch.zeros((), device=rows.device)
    for j, chunk in enumerate(chunks):  # no .item() in here: statistics stay on the device until the mini-batch ends
        mb, _ = take(batch, chunk)
        loss, s = backward_micro_batch(model, cfg, mb, num_tokens, num_seqs, world_size, j == len(chunks) - 1, amp)
        stats.add(s, mb["mask"].sum())
        loss_sum += loss
    return distributed.all_sum(loss_sum).item()


def backward_micro_batch(model: torch.nn.Module, cfg: RunConfig, mb: dict[str, Tensor], num_tokens: Tensor,
                         num_seqs: Tensor, world_size: int, last: bool,
                         amp: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
                         ) -> tuple[Tensor, dict[str, Tensor]]:
    """Forward and backward of one micro-batch; returns its (detached) loss and statistics (0-d tensors).

    Autocast covers the forward only, so no autocast cache outlives it. DDP all-reduces the gradients
    on the `last` micro-batch only; FSDP2 reduce-scatters them on every one (distributed.gradient_sync).
    """
    with distributed.gradient_sync(model, last):
        with amp():
            logp, v, _ = model(mb["prompt_ids"], mb["prompt_mask"], mb["resp"], mb["mask"], cfg.rollout.temperature)
        loss, s = micro_loss(cfg, logp, v, mb, num_tokens, num_seqs)
        (loss * world_size).backward()  # DDP and FSDP2 average gradients over ranks; the loss is a global mean
    return loss.detach(), s


def memory_note(lm: torch.nn.Module, cfg: RunConfig, world_size: int) -> str:
    n = sum(p.numel() for p in lm.parameters())
    if cfg.model.lora_rank:
        trained = sum(p.numel() for p in lm.parameters() if p.requires_grad)
        frozen = sum(p.numel() * p.element_size() for p in lm.parameters() if not p.requires_grad)
        return (f"model: {n / 1e6:.1f}M parameters, {trained / 1e6:.2f}M of them LoRA adapters (fp32 + grads + AdamW: "
                f"{_bytes(16 * trained)}) on a frozen base of {_bytes(frozen)}, before activations and engine")
    state = 16 * n  # bytes: fp32 weights + gradients + two AdamW moments
    shard = state / world_size if cfg.train.parallel == "fsdp2" else state
    return (f"model: {n / 1e6:.1f}M parameters; fp32 weights + grads + AdamW = 16 B/param = {_bytes(state)} "
            f"({_bytes(shard)} per rank under {cfg.train.parallel}), before activations, reference model and engine")


def _gib(values: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def _bytes(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
