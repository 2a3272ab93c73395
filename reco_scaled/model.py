"""The policy: a Hugging Face causal LM behind a module that returns per-token statistics.

`PolicyModel` is what DDP and FSDP2 wrap. Its forward runs the decoder and the LM head (naive or
fused, see loss.token_stats) inside one module call, so FSDP2's root unshards the LM head for it.
`load_lm` loads a model directory (real weights on rank 0 only: `build_lm`); with model.path "" it
first builds reco_mini's tiny countdown model, SFT-ed by reco.tasks.countdown.sft and cached as a model
directory under runs/cache/. With model.lora_rank > 0, `add_adapters` puts LoRA adapters (peft) into it and
freezes the rest, and `merged_weights` gives the plain model's weights with the adapters merged in (the HF
engine's sync and the final export).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from torch import Tensor, nn

from reco.hf import lora_target_problem, unreadable_weights
from reco.tasks.countdown import char_tokenizer, make_splits, sft, tiny_model
from reco_mini import Config
from reco_scaled import distributed
from reco_scaled.config import ConfigError, RunConfig
from reco_scaled.loss import token_stats


class PolicyModel(nn.Module):
    def __init__(self, lm: nn.Module, fused: bool = False) -> None:
        super().__init__()
        self.lm, self.fused = lm, fused

    @property
    def layers(self) -> list[nn.Module]:
        """The decoder layers (FSDP2 shards each one)."""
        return list(self.lm.model.layers)

    def forward(self, prompt_ids: Tensor, prompt_mask: Tensor, resp: Tensor, resp_mask: Tensor,
                temperature: float) -> tuple[Tensor, Tensor, Tensor]:
        """(log pi(y_t), V_t, H_t) of every response token, each fp32 [B, T].

        prompt_ids/prompt_mask: [B, L] left-padded; resp/resp_mask: [B, T] right-padded.
        """
        ids, attn = torch.cat([prompt_ids, resp], 1), torch.cat([prompt_mask, resp_mask.long()], 1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        hidden = self.lm.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).last_hidden_state
        hidden = hidden[:, prompt_ids.shape[1] - 1: -1]  # [B, T, d]: the positions that predict resp
        head = self.lm.get_output_embeddings().weight
        logp, v, entropy = token_stats(hidden, head, resp, resp_mask, temperature, self.fused)
        return logp.clone(), v, entropy  # not a view: FSDP2 hooks the outputs of a wrapped module for backward


def load_lm(cfg: RunConfig, d: distributed.Dist) -> tuple[nn.Module, object, str]:
    """(HF causal LM, tokenizer, model directory): real weights on rank 0 only, see `build_lm`. fp32 (the master
    weights); with model.lora_rank > 0 the base is frozen in the compute dtype (bf16 on a GPU with precision bf16)."""
    from transformers import AutoTokenizer

    path = cfg.model.path
    if not path:
        path = str(tiny_countdown_dir(cfg))
        if d.main and not path_ready(path):
            build_tiny_countdown(cfg, Path(path))
        distributed.barrier()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    bf16_base = cfg.model.lora_rank and d.device.type == "cuda" and cfg.model.precision == "bf16"
    lm = build_lm(path, torch.bfloat16 if bf16_base else torch.float32, d)
    if cfg.model.gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.config.use_cache = False
    return lm, tokenizer, path


def build_lm(path: str, dtype: torch.dtype, d: distributed.Dist) -> nn.Module:
    """The causal LM of a model directory, on the CPU: read from disk by rank 0 (or a single process);
    built on the meta device, without weights or host memory, by the other ranks, which
    distributed.wrap then gives rank 0's weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if d.main or not d.active:
        try:
            return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        except OSError:
            raise
        except Exception as e:
            if problem := unreadable_weights(path):  # bad input (train.py: one line, exit code 2), not a bug
                raise OSError(problem) from e
            raise
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)


def add_adapters(cfg: RunConfig, lm: nn.Module):
    """model.lora_rank > 0: fresh LoRA adapters in lm's target layers, in place (peft: fp32, B = 0, so the policy
    starts as the base), the rest of lm frozen; returns the PeftModel around lm (disable_adapter, save_pretrained).
    None without LoRA. Targets that lm does not have are a ConfigError."""
    m = cfg.model
    if not m.lora_rank:
        return None
    if problem := lora_target_problem(m.lora_targets, lm):
        raise ConfigError(f"config key 'model.lora_targets' {problem}")
    from peft import LoraConfig, get_peft_model

    targets = m.lora_targets if m.lora_targets == "all-linear" else m.lora_targets.split(",")
    return get_peft_model(lm, LoraConfig(r=m.lora_rank, lora_alpha=m.lora_alpha, target_modules=targets,
                                         task_type="CAUSAL_LM"))


@torch.no_grad()
def merged_weights(lm: nn.Module) -> dict[str, Tensor]:
    """lm's state dict under the plain model's names, each LoRA layer's weight W + (alpha / r) B A (peft's
    get_delta_weight, in fp32 over the frozen W, which stays as it is); without LoRA layers, lm's state dict."""
    from peft.tuners.lora import LoraLayer

    state = {k.replace(".base_layer.", "."): v for k, v in lm.state_dict().items() if ".lora_" not in k}
    for name, layer in lm.named_modules():
        if isinstance(layer, LoraLayer) and not layer.disable_adapters:
            for adapter in layer.active_adapters:
                state[f"{name}.weight"] = state[f"{name}.weight"].float() + layer.get_delta_weight(adapter).float()
    return state


def mini_config(cfg: RunConfig) -> Config:
    """The reco_mini Config that defines the countdown problems and the tiny base model."""
    c = cfg.countdown
    return Config(seed=cfg.seed, device="cpu", n_train=c.n_train, n_test=c.n_test, hidden=c.hidden, layers=c.layers,
                  sft_steps=c.sft_steps, sft_batch=c.sft_batch, sft_lr=c.sft_lr)


def tiny_countdown_dir(cfg: RunConfig) -> Path:
    c = cfg.countdown
    return Path("runs/cache") / (f"scaled-countdown-h{c.hidden}-l{c.layers}-s{c.sft_steps}-b{c.sft_batch}"
                                 f"-lr{c.sft_lr}-seed{cfg.seed}-n{c.n_test}")


def path_ready(path: str | Path) -> bool:
    return (Path(path) / "config.json").exists()


def build_tiny_countdown(cfg: RunConfig, path: Path) -> None:
    """SFT reco_mini's tiny model on the skewed countdown demonstrations; save it as a model directory."""
    mc = mini_config(cfg)
    splits = make_splits(mc)
    tokenizer = char_tokenizer()
    with torch.random.fork_rng():
        torch.manual_seed(mc.seed)
        model = tiny_model(tokenizer, mc.hidden, mc.layers)
        sft(mc, model, tokenizer, set(splits["test"]) | set(splits["val"]))
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if path_ready(path):  # another process built it meanwhile
        shutil.rmtree(tmp)
    else:
        tmp.replace(path)  # atomic: a half-written directory is never picked up
