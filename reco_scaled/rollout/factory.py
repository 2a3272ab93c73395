"""The one place that builds a rollout engine, for training (reco_scaled.trainer) and evaluation
(reco_scaled.evaluate) alike, and that decides which tokens end a response (reco.hf.stop_token_ids, shared
with reco_mini).

vllm is imported only when the vLLM engine is asked for.
"""
from __future__ import annotations

import torch

from reco.hf import stop_token_ids
from reco_scaled.rollout.base import RolloutEngine

ENGINES = ("hf", "vllm")


class EngineStartError(RuntimeError):
    """The rollout engine could not start (the message names it and suggests the transformers engine)."""


def make_engine(kind: str, model_dir: str, tokenizer, *, template: str | None, device: torch.device,
                dtype: torch.dtype, seed: int = 0, hf_batch_size: int = 256, load_weights: bool = True,
                max_model_len: int = 4096, gpu_memory_utilization: float = 0.5, tensor_parallel_size: int = 1,
                enable_sleep_mode: bool = False, sleep_level: int = 2, distributed: bool = False) -> RolloutEngine:
    """The `kind` engine ("hf" or "vllm") for the model directory `model_dir`.

    With load_weights=False the engine is built without reading the weights, and `sync_weights` must fill it
    before the first `generate` (the trainer does that at start-up): hf on `device` in `dtype`, uninitialised;
    vllm with ``load_format="dummy"`` (random weights; its memory profiling runs on them). The vLLM-only
    arguments are described in VLLMEngine. A vLLM engine that fails to start, or that PYTORCH_CUDA_ALLOC_CONF
    would break (expandable segments), raises EngineStartError.
    """
    if kind not in ENGINES:
        raise ValueError(f"rollout engine must be one of {ENGINES}, got {kind!r}")
    stop = stop_token_ids(tokenizer, template)
    if kind == "hf":
        from reco_scaled.rollout.hf_engine import HFEngine

        return HFEngine.from_pretrained(model_dir, tokenizer, device, dtype, batch_size=hf_batch_size,
                                        stop_token_ids=stop, load_weights=load_weights)
    from reco_scaled.rollout.vllm_engine import HINT, VLLMEngine  # imports without vllm; the engine imports it

    try:
        return VLLMEngine(model_dir, max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                          tensor_parallel_size=tensor_parallel_size, dtype=str(dtype).removeprefix("torch."),
                          enable_sleep_mode=enable_sleep_mode, sleep_level=sleep_level, seed=seed,
                          distributed=distributed, stop_token_ids=stop, load_weights=load_weights)
    except Exception as e:
        message = str(e) if HINT in str(e) else f"rollout engine 'vllm' failed to start: {type(e).__name__}: {e}. {HINT}"
        raise EngineStartError(message) from e
