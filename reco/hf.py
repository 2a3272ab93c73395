"""reco/hf.py: Hugging Face models for reco_mini: loading, the tokens that end a response, sampling, and the
switches of the forward and update passes.

load_hf loads a causal LM with one-line errors (a missing directory or an unreachable hub found first: model_problem;
a corrupt weights file: unreadable_weights); stop_token_ids gives the tokens that end a response (shared with
reco_scaled's engines); sample is reco_mini's KV-cache sampler; token_stats is the memory-saving path that
--head-chunk > 0 takes instead of reco_mini's readable forward (tested against it), and check_lm_head the model check
it needs; autocast (--dtype) and training (--gradient-checkpointing) are the precision and update contexts;
save_atomic writes checkpoints, and stop_if_not_finite ends a run before a non-finite update. --lora-rank: policy
makes the trained model (a copy of the base, or LoRA adapters on it through peft) and its KL reference (AdaptersOff),
save_lora writes the adapters and the merged model.
Nothing here imports reco_mini: it is handed what it needs.
"""
from __future__ import annotations

import copy
import math
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from reco.cli import fail


def load_hf(name_or_path: str, device: str, dtype: torch.dtype = torch.float32):
    """(tokenizer, model) of a Hugging Face causal LM, left-padded, in `dtype` (fp32: reco_mini's master weights; a
    LoRA base: base_dtype); a one-line error if it cannot load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if problem := model_problem(name_or_path):
        fail(f"--model {problem}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype).to(device)
    except (OSError, ValueError) as e:
        fail(f"--model {name_or_path}: cannot load it ({str(e).strip().splitlines()[0]})")
    except Exception:
        if problem := unreadable_weights(name_or_path):  # a truncated or corrupt weights file is bad input too
            fail(f"--model {name_or_path}: cannot load it ({problem})")
        raise
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    return tokenizer, model


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # a hub repository: NAME or OWNER/NAME


def model_problem(name: str) -> str:
    """Why the model `name` cannot be loaded here, as the rest of a one-line error ('' when it may load): a local path
    that does not exist, or a hub name that is not in the local cache while the hub is offline (HF_HUB_OFFLINE=1) or
    cannot be reached. Every entry point asks before it loads a model, so that a typo fails in a second, not after
    transformers' retries or its message about repo ids."""
    path = Path(name).expanduser()
    if path.is_dir():
        return ""
    if path.exists():
        return f"{name}: a file, not a model directory"
    if not HUB_ID.fullmatch(name) or ".." in name or "--" in name or name.count("/") > 1:
        return f"{name}: no such directory"
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return ""  # in the local cache: it loads offline
    if constants.HF_HUB_OFFLINE:
        return (f"{name}: no such directory; as a hub name it is not in the local cache, and the hub is offline "
                "(HF_HUB_OFFLINE=1)")
    if host := unreachable_hub(constants.ENDPOINT):
        return f"{name}: no such directory; as a hub name it is not in the local cache, and {host} cannot be reached"
    return ""


def unreachable_hub(endpoint: str, timeout_s: float = 5.0) -> str:
    """The hub's host when a connection to it fails within `timeout_s` (name lookup included), else ''. Behind a
    proxy (HTTPS_PROXY and the like) it is not probed: the proxy decides."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return ""
    url = urlparse(endpoint)
    host, port, reached = url.hostname or "", url.port or (443 if url.scheme == "https" else 80), []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            reached.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout_s)
    return "" if reached else host


def unreadable_weights(model_dir: str | Path) -> str | None:
    """'FILE: cannot read its weights (reason)' for the first weights file of a local model directory that cannot
    be read (a truncated or corrupt *.safetensors or *.bin), else None. Reads the safetensors headers and maps the
    .bin files: call it after a load failed, to tell bad input from a bug."""
    paths = sorted(Path(model_dir).glob("*.safetensors")) + sorted(Path(model_dir).glob("*.bin"))
    for path in paths:
        try:
            if path.suffix == ".safetensors":
                from safetensors import safe_open

                with safe_open(str(path), "pt") as f:
                    f.keys()
            else:
                torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except Exception as e:  # SafetensorError, UnpicklingError, RuntimeError: every way a weights file is unreadable
            return f"{path}: cannot read its weights ({(str(e).strip().splitlines() or [type(e).__name__])[0]})"
    return None


def stop_token_ids(tokenizer, template: str | None, generation_config=None) -> list[int]:
    """Tokens that end a response: the tokenizer's EOS, the EOS ids of the model's generation config and, for the
    qwen-boxed or a chat template, ``<|im_end|>`` (a Qwen base model's EOS is ``<|endoftext|>``, but it closes the
    chat turn with ``<|im_end|>`` and may then keep writing, and a later ``\\boxed{}`` would be graded).
    `template` None (no prompt template, e.g. countdown): none. reco_mini's math task and reco_scaled's engines."""
    if template is None:
        return []
    eos = getattr(generation_config, "eos_token_id", None)
    stop = [tokenizer.eos_token_id] + (eos if isinstance(eos, list) else [eos])
    if template in ("qwen-boxed", "chat") and "<|im_end|>" in tokenizer.get_vocab():
        stop.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return list(dict.fromkeys(t for t in stop if t is not None))


def has_bos(text: str, tokenizer) -> bool:
    """Chat templates (Llama 3) already write the BOS token; the tokenizer must not add a second."""
    return bool(tokenizer.bos_token) and text.startswith(tokenizer.bos_token)


# reco_mini's sampler (reco_mini.sample). The prompts of a batch differ in length, so the tokenizer pads them on the
# left (_, mask 0). Every prompt then ends in the same column, L - 1, and each step of the sampler appends one token to
# every row at once. Positions count from each row's first real token (A and E are 0):
#     prompt_ids [B, L]        resp [B, T]   (mask 1 up to and including the stop token)
#     _  _  A  B  C  D   ->    x  y  <eos>
#     E  F  G  H  I  J   ->    z  <eos>  _   (a finished row gets padding, mask 0)
@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, max_new_tokens, temperature, stop_ids, pad_id, gen):
    """Responses [B, T] and their mask [B, T] to left-padded prompts [B, L], token by token from softmax(logits / tau),
    a row until its first of `stop_ids`. The KV cache keeps each layer's keys and values, so each step feeds only the
    new token."""
    from transformers import DynamicCache

    stop = torch.tensor(stop_ids, device=prompt_ids.device).view(-1)
    ids, attn, kv = prompt_ids, prompt_mask, DynamicCache()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L]
    done = torch.zeros(prompt_ids.shape[0], dtype=torch.bool, device=prompt_ids.device)
    tokens, alive = [], []
    for _ in range(max_new_tokens):  # the last position's logits only, not [B, L, V]
        out = model(ids, attention_mask=attn, position_ids=pos, past_key_values=kv, logits_to_keep=1)
        probs = F.softmax(out.logits[:, -1].float() / temperature, dim=-1)  # [B, V]
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)  # [B]
        alive.append(~done)
        tokens.append(torch.where(done, pad_id, nxt))
        done = done | torch.isin(nxt, stop)
        if done.all():
            break
        ids, pos = tokens[-1][:, None], pos[:, -1:] + 1  # only the new token: the rest is in kv
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
    return torch.stack(tokens, 1), torch.stack(alive, 1).long()


@torch.no_grad()
def check_lm_head(model) -> None:
    """--head-chunk makes the logits as lm_head(decoder's last hidden state): refuse a model whose forward does more
    there (a logit scale, a soft cap), by comparing both on four tokens."""
    ids = torch.arange(1, 5, device=model.device)[None] % model.config.vocab_size
    full = model(input_ids=ids, use_cache=False).logits.float()
    try:
        split = model.get_output_embeddings()(model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state)
    except (AttributeError, NotImplementedError, TypeError) as e:
        raise ValueError(f"--head-chunk: {type(model).__name__} has no decoder and lm head to call apart ({e}); "
                         "use --head-chunk 0") from e
    if not torch.allclose(full, split.float(), rtol=1e-4, atol=1e-4):
        raise ValueError(f"--head-chunk: {type(model).__name__}'s logits are not its lm head applied to the last hidden "
                         "state; use --head-chunk 0")


def stop_if_not_finite(loss: float, grad_norm: float, where: str, run_dir: Path) -> None:
    """Stop the run, before the optimizer step, on a non-finite loss or gradient: the last good weights stay
    (run_dir/model.pt)."""
    ckpt = Path(run_dir) / "model.pt"
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        kept = f"last good checkpoint kept at {ckpt}" if ckpt.exists() else "no checkpoint yet"
        sys.exit(f"error: non-finite loss or gradient in {where}; {kept}")


def token_stats(logits: Tensor, targets: Tensor, temperature: float = 1.0, chunk: int = 256,
                head: torch.nn.Module | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """reco_mini's memory-saving path (--head-chunk > 0, and --task math by default): its token_logprobs,
    variance_stat and token_entropy in one pass without their fp32 copies of [B, T, V], one fp32 slice of about
    `chunk` tokens at a time, the same values bit for bit from the logits (tests/test_mini_token_stats.py checks it
    against the readable path, as llm.c checks its fast path). log pi's gradient recomputes its slice in the backward
    pass (checkpoint), so only the logits stay alive. [B,T,V],[B,T] -> 3 x [B,T]; V and H: no gradient. With `head`
    (the lm head), `logits` are the last hidden states [B,T,H]: each slice makes its logits, and the backward pass
    remakes them, so no [B, T, V] tensor is kept."""
    def one_slice(z: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = z if head is None else head(z)
        z = (z.double() if z.dtype == torch.float64 else z.float()) / temperature  # the one upcast
        logp = F.log_softmax(z, dim=-1)
        with torch.no_grad():
            v, h = 1.0 - F.softmax(z, dim=-1).square().sum(-1), -(logp.exp() * logp).sum(-1)
        return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1), v, h

    width = max(1, chunk // max(1, logits.shape[0]))
    grad = torch.is_grad_enabled() and logits.requires_grad
    parts = [checkpoint(one_slice, z, y, use_reentrant=False) if grad else one_slice(z, y)
             for z, y in zip(logits.split(width, dim=1), targets.split(width, dim=1))]
    logp, v, h = (torch.cat(t, dim=1) for t in zip(*parts))
    return logp, v.detach(), h.detach()


def check_training(cfg, loss_cfg, model, base_on_device: bool) -> None:
    """reco_mini.train_rl's checks before the first step: the KL term needs the base on the model's device, and
    --head-chunk > 0 a model whose logits are its lm head on the last hidden state."""
    if loss_cfg.kl_coef > 0 and not base_on_device:
        raise ValueError("--kl-coef > 0 needs the base model on the model's device")
    if cfg.head_chunk > 0:
        check_lm_head(model)


def autocast(device: str, dtype: str) -> torch.autocast:
    """--dtype: bfloat16 runs the forwards under bf16 autocast (the weights stay fp32, the optimizer's master
    copy); float32 is a disabled context, so the default path is untouched. CPU autocast works the same way."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


@contextmanager
def training(model, gradient_checkpointing: bool):
    """The update passes. With gradient checkpointing, HF models recompute each decoder layer in the backward
    pass; they do so only in training mode, where they also drop the KV cache, so sampling (outside this
    context) runs in eval mode without it. Without the flag, nothing changes."""
    if not gradient_checkpointing:
        yield
        return
    was_training = model.training
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    try:
        yield
    finally:
        model.gradient_checkpointing_disable()
        model.train(was_training)


def save_atomic(state: dict, path: Path) -> None:
    """torch.save to a temporary file, then rename: a crash never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


# --lora-rank R > 0: the base stays frozen in the dtype it was loaded in (base_dtype) and only LoRA adapters train
# (fp32, through peft); their policy's reference for the KL term and kl_base is the same model with the adapters off.
def base_dtype(cfg) -> torch.dtype:
    """The dtype --model loads in: fp32 (the weights train, in fp32 under --dtype's autocast); with --lora-rank, the
    frozen base is kept in --dtype (bfloat16: half the memory of fp32)."""
    return torch.bfloat16 if cfg.lora_rank and cfg.dtype == "bfloat16" else torch.float32


def check_lora_targets(cfg, model) -> None:
    """--lora-targets: each name is a linear layer of the model; else one line and exit 2, before any work."""
    if cfg.lora_rank and (problem := lora_target_problem(cfg.lora_targets, model)):
        fail(f"--lora-targets {problem}")


def lora_target_problem(targets: str, model) -> str:
    """Why LoRA `targets` (all-linear, or comma-separated names, which peft matches with the last part of a
    module's name) do not fit `model`, as the rest of a one-line error; '' when they do."""
    if targets == "all-linear":
        return ""
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    unknown = [t for t in targets.split(",") if t not in linear]
    return (f"{unknown[0]}: {type(model).__name__} has no linear layer of that name (its linear layers: "
            f"{','.join(linear)})") if unknown else ""


def policy(cfg, base):
    """(model, reference): the policy reco_mini trains from the frozen `base` and train_rl's `base`, the reference of
    the KL term and kl_base. Without --lora-rank, a trainable copy of the base, and the base. With it, a copy of the
    base, frozen in its dtype, with fresh LoRA adapters (fp32: peft's autocast_adapter_dtype; B = 0, so the policy
    starts as the base), and that same model with its adapters off: no second copy of the weights."""
    if not cfg.lora_rank:
        return copy.deepcopy(base).to(cfg.device).requires_grad_(True), base
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_targets if cfg.lora_targets == "all-linear" else cfg.lora_targets.split(",")
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=targets, task_type="CAUSAL_LM")
    model = get_peft_model(copy.deepcopy(base.to("cpu")), lora).to(cfg.device)  # the base waits on the CPU
    return model, AdaptersOff(model)


class AdaptersOff:
    """A LoRA model with its adapters off (peft's disable_adapter): the base policy on the trained model's own
    weights. It answers what reco_mini asks of a base: a forward, the decoder and the lm head (--head-chunk's
    path), the device."""

    def __init__(self, model, net=None):
        self.model, self.net = model, model if net is None else net

    @property
    def device(self) -> torch.device:
        return self.model.device

    def __call__(self, *args, **kwargs):
        with self.model.disable_adapter():
            return self.net(*args, **kwargs)

    def get_decoder(self) -> AdaptersOff:
        return AdaptersOff(self.model, self.model.get_decoder())

    def get_output_embeddings(self) -> AdaptersOff:
        return AdaptersOff(self.model, self.model.get_output_embeddings())


def save_lora(cfg, model, tokenizer, run_dir: Path) -> None:
    """--lora-rank: the trained policy in run_dir twice, as adapters/ (peft's adapter_config.json and weights, which
    PeftModel.from_pretrained puts on the base) and merged/ (the base with the adapters merged in, in the base's
    dtype, with the tokenizer: a Hugging Face model directory that reco_scaled.evaluate and vLLM load as they are).
    Without it, nothing: model.pt is the trained model."""
    if not cfg.lora_rank:
        return
    model.save_pretrained(run_dir / "adapters")
    copy.deepcopy(model).to("cpu").merge_and_unload().save_pretrained(run_dir / "merged")
    tokenizer.save_pretrained(run_dir / "merged")
