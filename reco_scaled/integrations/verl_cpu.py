"""A CPU platform and a CPU rollout for verl 0.9.1, so that `python -m verl.trainer.main_ppo` runs without an accelerator.

verl 0.9.1 ships platforms for cuda, npu and rocm only (verl/plugin/platform/platform_manager.py falls back to cuda)
and server rollouts that need CUDA. Loaded in every process that imports verl with

    VERL_USE_EXTERNAL_MODULES=reco_scaled.integrations.verl_cpu VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda

(verl/__init__.py imports VERL_USE_EXTERNAL_MODULES on `import verl`; VERL_PLATFORM picks the platform;
VERL_ENGINE_DEVICE=cuda makes verl's EngineRegistry hand out its FSDP engine, registered for cuda and npu only).
Under VERL_PLATFORM=cpu this module also registers the rollout `hf_cpu` (actor_rollout_ref.rollout.name=hf_cpu) in
verl's two rollout registries, and changes one thing of verl's in each process: the default backend of verl's
process-group start becomes "cpu:gloo" (`_gloo_process_group`). docs/verl.md ("verl on CPU") has the other settings;
tests/test_verl.py runs it. For tests and small experiments: HF `generate` one prompt at a time.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import verl.utils.distributed as verl_distributed
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM = "cpu"


class CpuDeviceModule:
    """torch.cpu, plus the accelerator calls verl makes on its device module: memory reads 0, caches are no-ops."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    memory_reserved = memory_allocated = max_memory_reserved = max_memory_allocated = staticmethod(lambda *a, **k: 0)
    empty_cache = ipc_collect = set_per_process_memory_fraction = staticmethod(lambda *a, **k: None)
    mem_get_info = staticmethod(lambda *a, **k: (0, 0))
    get_device_name = staticmethod(lambda *a, **k: "cpu")
    get_rng_state = staticmethod(lambda *a, **k: torch.get_rng_state())
    set_rng_state = staticmethod(lambda state, *a, **k: torch.set_rng_state(state))


CPU_DEVICE_MODULE = CpuDeviceModule()


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """The host CPU as verl's accelerator: device "cpu" (also where verl asks for a device id), gloo, no IPC."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        return False  # chosen only through VERL_PLATFORM=cpu, never by auto-detection

    def current_device(self):
        # verl moves tensors and modules to get_device_id(); torch reads the integer 0 as cuda:0
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets; it stays empty on a CPU-only worker

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict:
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


def _gloo_process_group(initialize=verl_distributed.initialize_global_process_group_ray):
    """verl's process-group start with the backend "cpu:gloo": verl builds "cpu:gloo,{device}:{backend}", which torch
    refuses when the device is cpu (a duplicate device type; verl/utils/distributed.py:89)."""

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return initialize(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    return initialize_global_process_group_ray




# ---------------------------------------------------------------- a CPU rollout: HF generate behind verl's server API

ROLLOUT = "hf_cpu"


def _server_name(replica_rank: int) -> str:
    return f"reco_hf_cpu_rollout_server_{replica_rank}"


class HFRolloutServer:
    """A rollout server (a Ray actor) that answers verl's token-in-token-out `generate` with HF `generate` on CPU."""

    def __init__(self, model_path: str):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.global_steps = None  # of the weights served; verl tags each sample with it

    @torch.no_grad()
    def generate(self, request_id=None, *, prompt_ids: list[int], sampling_params: dict, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        temperature = float(sampling_params.get("temperature", 1.0))
        max_new = int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens") or 16)
        ids = torch.tensor([prompt_ids], device="cpu")  # the CPU rollout: its model is on the CPU
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=temperature > 0,
                                  temperature=temperature if temperature > 0 else None,
                                  top_p=float(sampling_params.get("top_p", 1.0)),
                                  top_k=0, max_new_tokens=max_new, pad_token_id=self.model.generation_config.eos_token_id)
        response = out[0, ids.shape[1]:]
        logits = self.model(out).logits[0, ids.shape[1] - 1:-1].float() / max(temperature, 1e-6)
        log_probs = torch.log_softmax(logits, -1).gather(-1, response[:, None])[:, 0]
        return TokenOutput(token_ids=response.tolist(), log_probs=log_probs.tolist(), stop_reason="completed",
                           extra_fields={"global_steps": self.global_steps})

    def load_weights(self, state: dict, global_steps: int | None) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # a tied head may be left out
            raise ValueError(f"hf_cpu rollout: weights do not match the model (missing {missing}, unexpected {unexpected})")
        self.global_steps = global_steps

    def _no_op(self, *args, **kwargs) -> None:
        return None

    wake_up = sleep = clear_kv_cache = release_kv_cache = resume_kv_cache = resume_generation = _no_op
    abort_all_requests = start_profile = stop_profile = _no_op


def _replica_class():
    from verl.workers.rollout.replica import RolloutReplica

    class HFRolloutReplica(RolloutReplica):
        """verl's rollout replica for `actor_rollout_ref.rollout.name=hf_cpu`: one HFRolloutServer, no device."""

        def rollout_worker_use_gpu(self) -> bool:
            return False

        async def launch_servers(self):
            import ray

            server = ray.remote(HFRolloutServer).options(name=_server_name(self.replica_rank), num_cpus=0).remote(
                self.model_config.path)
            self.servers, self._server_handle, self._server_address = [server], server, _server_name(self.replica_rank)

    return HFRolloutReplica


def _adapter_class():
    from verl.workers.rollout.base import BaseRollout

    class HFRolloutAdapter(BaseRollout):
        """The actor worker's side of the hf_cpu rollout: sends the actor's weights to the replica's server."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
            super().__init__(config, model_config, device_mesh)
            self.replica_rank = max(replica_rank, 0)
            self.is_leader_rank = True

        async def resume(self, tags: list[str]):
            return None

        async def release(self):
            return None

        async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps=None, **kwargs):
            import ray

            state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
            await ray.get_actor(_server_name(self.replica_rank)).load_weights.remote(state, global_steps)

    return HFRolloutAdapter


def __getattr__(name):  # verl's rollout registry imports the adapter by name (verl.workers.rollout.base)
    if name == "HFRolloutAdapter":
        return _adapter_class()
    raise AttributeError(name)


def register_rollout() -> None:
    """`actor_rollout_ref.rollout.name=hf_cpu` through verl's two rollout registries."""
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(ROLLOUT, _replica_class)
    _ROLLOUT_REGISTRY[(ROLLOUT, "async")] = f"{__name__}.HFRolloutAdapter"


if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM:
    # before verl's workers import the function by name (this module loads on `import verl`)
    verl_distributed.initialize_global_process_group_ray = _gloo_process_group()
    register_rollout()
