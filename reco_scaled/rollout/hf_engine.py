"""Rollouts from a plain transformers model: ancestral sampling with a KV cache (CPU, tests, small runs).

The engine has its own copy of the model, so that generation never runs through DDP or FSDP2
(FSDP2 would need every rank to take the same number of decoding steps); `sync_weights` copies
the trainer's full weights (and buffers) into it. Built with load_weights=False it never reads the
weights from disk: the trainer fills it with sync_weights at start-up.

Sample g of prompt i draws from its own generator, seeded with seed + i*n + g (as the vLLM engine
does), so a sample does not depend on which other prompts share the batch: the same global prompt
gets the same samples at any world size. The generator gives the row its uniforms u_1..u_T (float64) once,
at the start; token t is then the inverse-CDF draw of u_t, the first token whose cumulative probability
exceeds u_t (times the total). Every row draws in one batched search per token, with no per-row call and
no host sync but the all-rows-done check (a per-row multinomial cost about two host syncs per row per
token: issue 32 item 8).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reco_scaled.rollout.base import Rollout, RolloutEngine


class HFEngine(RolloutEngine):
    def __init__(self, model: nn.Module, *, eos_token_ids: list[int], pad_token_id: int, batch_size: int = 256) -> None:
        """model: the engine's own HF causal LM (generation runs on its device, in its dtype)."""
        self.model = model.requires_grad_(False).eval()
        self.eos = torch.tensor(eos_token_ids, device=self.device)
        self.pad_id, self.batch_size = pad_token_id, batch_size
        self.weights_valid = True  # False until sync_weights fills an engine built without weights

    @classmethod
    def from_pretrained(cls, path: str, tokenizer, device: torch.device, dtype: torch.dtype = torch.float32,
                        batch_size: int = 256, stop_token_ids: list[int] = (), load_weights: bool = True) -> HFEngine:
        """A model directory's model. A response ends at the tokenizer's EOS, the generation config's
        EOS ids, or any of `stop_token_ids`. load_weights=False: uninitialised weights on `device`, to be
        filled by sync_weights before the first generate."""
        from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

        if load_weights:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        else:
            from reco_scaled.distributed import to_empty

            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)
            model = to_empty(model, device)
            try:
                model.generation_config = GenerationConfig.from_pretrained(path)
            except OSError:  # no generation_config.json: the one derived from the model config stays
                pass
        eos = model.generation_config.eos_token_id
        eos_ids = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos]), *stop_token_ids} - {None}
        engine = cls(model, eos_token_ids=sorted(eos_ids), pad_token_id=tokenizer.pad_token_id, batch_size=batch_size)
        engine.weights_valid = load_weights
        return engine

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompt_ids: list[list[int]], n: int, *, temperature: float = 1.0, top_p: float = 1.0,
                 max_new_tokens: int = 64, seed: int | None = None) -> Rollout:
        """n samples per prompt (prompt-major), with the sampled tokens' log-probs under the sampler.

        temperature 0 is greedy (log-probs then of the untempered distribution); top_p < 1 samples from
        the nucleus, and the log-probs are those of the renormalised nucleus distribution.
        """
        if not self.weights_valid:
            raise RuntimeError("HFEngine was built without weights: call sync_weights(model) before generate")
        rows = [p for p in prompt_ids for _ in range(n)]
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), device="cpu").item())  # a host-side seed
        out = Rollout([], [], [])
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start: start + self.batch_size]
            uniforms = torch.stack([self._uniforms(seed + start + r, max_new_tokens) for r in range(len(chunk))])
            resp, logps = self._sample(chunk, uniforms, temperature, top_p, max_new_tokens)
            out.prompt_ids += chunk
            out.response_ids += resp
            out.sampler_logprobs += logps
        return out

    def _uniforms(self, seed: int, n: int) -> Tensor:
        """The n float64 uniforms in [0, 1) of the row whose generator is seeded with `seed`."""
        return torch.rand(n, generator=torch.Generator(self.device).manual_seed(seed), device=self.device, dtype=torch.float64)

    @torch.no_grad()
    def _sample(self, rows: list[list[int]], uniforms: Tensor, temperature: float, top_p: float,
                max_new_tokens: int) -> tuple[list[list[int]], list[list[float]]]:
        """uniforms [B, max_new_tokens]: each row's draws, in order."""
        from transformers import DynamicCache

        B, L = len(rows), max(len(r) for r in rows)
        ids = torch.full((B, L), self.pad_id, device=self.device)
        attn = torch.zeros((B, L), dtype=torch.long, device=self.device)
        for b, r in enumerate(rows):  # left padding
            ids[b, L - len(r):] = torch.tensor(r, device=self.device)
            attn[b, L - len(r):] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache,
                            use_cache=True, logits_to_keep=1).logits[:, -1]  # not [B, L, V] logits of the prompt
        done = torch.zeros(B, dtype=torch.bool, device=self.device)
        finite = torch.ones((), dtype=torch.bool, device=self.device)  # checked once, at the end: no sync per token
        tokens: list[Tensor] = []
        logps: list[Tensor] = []
        alive: list[Tensor] = []
        for t in range(max_new_tokens):
            finite &= (torch.isfinite(logits).all(-1) | done).all()
            nxt, lp = self._draw(logits.float(), uniforms[:, t], temperature, top_p)
            alive.append(~done)
            tokens.append(torch.where(done, self.pad_id, nxt))
            logps.append(lp)
            done = done | torch.isin(nxt, self.eos)
            if done.all():
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits = self.model(input_ids=tokens[-1][:, None], attention_mask=attn, position_ids=pos,
                                past_key_values=cache, use_cache=True).logits[:, -1]
        if not finite:
            raise FloatingPointError("HFEngine: the model gave non-finite logits while sampling")
        keep = torch.stack(alive, 1).cpu()
        tok, lp = torch.stack(tokens, 1).cpu(), torch.stack(logps, 1).cpu()
        return [t[k].tolist() for t, k in zip(tok, keep)], [x[k].tolist() for x, k in zip(lp, keep)]

    @staticmethod
    def _draw(logits: Tensor, u: Tensor, temperature: float, top_p: float) -> tuple[Tensor, Tensor]:
        """One token per row from the processed distribution, and its log-prob there. logits: [B, V]; u: [B] in [0, 1),
        float64 (u * total < total exactly, so a token of probability 0 is never drawn)."""
        if temperature == 0:
            nxt = logits.argmax(-1)
            return nxt, F.log_softmax(logits, -1).gather(-1, nxt[:, None]).squeeze(-1)
        logp = F.log_softmax(logits / temperature, dim=-1)
        if top_p < 1.0:  # keep the smallest set of tokens whose mass reaches top_p
            sorted_lp, order = logp.sort(-1, descending=True)
            outside = sorted_lp.exp().cumsum(-1) - sorted_lp.exp() >= top_p
            logp = torch.full_like(logp, -float("inf")).scatter(-1, order, sorted_lp.masked_fill(outside, -float("inf")))
            logp = F.log_softmax(logp, dim=-1)
        cdf = logp.double().exp().cumsum(-1)
        nxt = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
        return nxt, logp.gather(-1, nxt[:, None]).squeeze(-1)

    @torch.no_grad()
    def sync_weights(self, model: nn.Module) -> None:
        """Copy the trainer's HF model (plain, or with FSDP2-sharded parameters) into the engine's, one
        tensor at a time, buffers included; all ranks call this together (each FSDP2 shard is
        all-gathered in turn)."""
        own, theirs = _tensors(self.model), _tensors(model)
        if own.keys() != theirs.keys():
            raise ValueError(f"sync_weights: parameter names differ, e.g. {sorted(own.keys() ^ theirs.keys())[:3]}")
        for name, tensor in theirs.items():
            tensor = tensor.to(own[name].dtype)  # before the all-gather: an fp32 shard crosses as bf16 for a bf16 engine
            own[name].copy_(tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor)
        self.weights_valid = True


def _tensors(model: nn.Module) -> dict[str, Tensor]:
    """Name -> tensor of the state dict and of every buffer (non-persistent ones such as rotary inv_freq too); a model
    with LoRA adapters (model.lora_rank) gives the plain model's, with the adapters merged in."""
    from reco_scaled.model import merged_weights

    return {**dict(model.named_buffers()), **merged_weights(model)}
