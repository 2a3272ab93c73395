"""The verl 0.9.1 plugin (reco_scaled/integrations/verl.py), tested on CPU against verl's own code.

verl 0.9.1 cannot share the main interpreter (it needs transformers<5.11), so it lives in .venv-verl, built by
`bash .ci/setup-verl.sh` (VERL_VENV names another one). Under the main interpreter this file holds one test, which runs
this same file with that venv's python (and skips, saying why, where it could not be built); under the venv it holds
the tests: GRPO parity with verl's ppo_loss; on the real data plane (a local Ray, the real TransferQueue, verl's
padding rows, verl's tqbridge in a Ray actor) ReCo parity with reco_mini.policy_loss, the handle the update gets and
the trainer glue; two ReCo steps on verl's own actor worker (FSDP2 on CPU, reco_scaled/integrations/verl_cpu.py);
two steps of `python -m verl.trainer.main_ppo` end to end (the hf_cpu rollout of verl_cpu.py);
sum pi^2 precision on bf16 logits; registration on `import verl`; the refusals; docs/verl.md's recipes against
verl's config. docs/stand_ins.md lists what stands in for what. Beyond the plugin's own list, the tests use verl
internals: FSDPEngineWithLMHead built with __new__ (tests/verl_tq_worker.py), upsample_batch_to_divisible_size, the
trainer's _compute_advantage, and the worker constructors ActorRolloutRefWorker(config, role) and RayResourcePool.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import itertools
import json
import math
import os
import re
import shlex
import string
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = Path(os.environ.get("VERL_VENV", ROOT / ".venv-verl")) / "bin" / "python"  # as .ci/setup-verl.sh
INNER = "RECO_VERL_INNER_RUN"
# verl on CPU (reco_scaled/integrations/verl_cpu.py): set before verl is imported, here and in Ray's worker processes
CPU_PLATFORM = {"VERL_USE_EXTERNAL_MODULES": "reco_scaled.integrations.verl_cpu", "VERL_PLATFORM": "cpu",
                "VERL_ENGINE_DEVICE": "cuda"}
if importlib.util.find_spec("verl") is not None:  # only in verl's venv
    for _name, _value in CPU_PLATFORM.items():
        os.environ.setdefault(_name, _value)

try:
    import verl
except ImportError:
    verl = None


def test_verl_plugin_in_venv_verl():
    """Run this file's verl tests with .venv-verl's python (the main interpreter has no verl)."""
    if os.environ.get(INNER):
        pytest.fail(f"{sys.executable} cannot import verl: rebuild .venv-verl with `bash .ci/setup-verl.sh`")
    if not VENV_PYTHON.exists():
        pytest.skip(".venv-verl is missing: `bash .ci/setup-verl.sh` builds it (CI runs it; it exits 0 without "
                    "building where verl 0.9.1 cannot be installed, e.g. no network)")
    env = os.environ | {INNER: "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    # the timeout guards against a hang only: on 2 cores shared with a background study these tests ran past 900 s
    run = subprocess.run([str(VENV_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=1800)
    report = run.stdout[-8000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    summary = run.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "failed" not in summary, report


if verl is not None:
    del test_verl_plugin_in_venv_verl  # here the tests below run directly

    import ray
    import transfer_queue
    import verl_tq_worker
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    import reco_mini
    from reco.tasks import countdown
    from reco_scaled.integrations import verl as plugin

    TEMPERATURE = 0.7
    VOCAB = 13

    def nested(rows: list) -> torch.Tensor:
        return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)

    @pytest.fixture(scope="module")
    def base_config():
        """verl's own ppo_trainer.yaml, composed by hydra as verl's main does, with the plugin selected."""
        with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
            return compose(config_name="ppo_trainer", overrides=[
                "algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=reco", "actor_rollout_ref.rollout.n=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                f"actor_rollout_ref.rollout.temperature={TEMPERATURE}", "+reco.method=reco"])

    def config_with(base, **settings):
        """A copy of `base` with dotted settings (`reco__occurrence="count"` sets reco.occurrence)."""
        cfg = copy.deepcopy(base)
        with open_dict(cfg):
            for key, value in settings.items():
                OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
        return cfg

    # ---------------------------------------------------------------- GRPO parity with verl's ppo_loss

    def grpo_micro_batch(seed: int, dp_size: int, agg: str, extras: bool = False):
        """A micro-batch in verl's no-padding layout with live clipping on both sides and a binding dual clip.

        extras: also an entropy output and reference log-probs (verl's entropy bonus and KL loss)."""
        g = torch.Generator().manual_seed(seed)
        prompt_lens, resp_lens = [3, 2, 4, 2, 3, 5], [5, 3, 6, 1, 4, 2]
        B = len(resp_lens)
        resp_mask = [torch.ones(n, dtype=torch.long) for n in resp_lens]
        resp_mask[2][3] = 0  # a masked token inside a response (e.g. a tool output)
        adv = torch.tensor([1.3, -0.8, 0.5, -1.7, 2.0, -0.4])
        old = [torch.randn(n, generator=g) * 0.5 - 1.0 for n in resp_lens]
        # new log-probs: log-ratios spread over [-1.5, 1.5] so that 1 -+ eps clip both ways and r > 3 occurs with A < 0
        delta = [torch.linspace(-1.5, 1.5, n) if n > 1 else torch.tensor([1.4]) for n in resp_lens]
        new_resp = [o + d for o, d in zip(old, delta)]
        full = [torch.cat([torch.randn(p, generator=g), r]) for p, r in zip(prompt_lens, new_resp)]
        values = torch.cat([torch.cat([f[1:], f[:1]]) for f in full]).clone().requires_grad_(True)
        # verl's log_probs at position t are for token t+1; the response's log-probs sit one step left
        offsets = torch.tensor([0, *torch.tensor([p + r for p, r in zip(prompt_lens, resp_lens)]).cumsum(0).tolist()])
        log_probs = torch.nested.nested_tensor_from_jagged(values, offsets)
        data = tu.get_tensordict({
            "prompts": nested(torch.zeros(p, dtype=torch.long) for p in prompt_lens),
            "responses": nested(torch.zeros(n, dtype=torch.long) for n in resp_lens),
            "response_mask": nested(resp_mask), "old_log_probs": nested(old),
            "advantages": nested(a * torch.ones(n) for a, n in zip(adv, resp_lens))})
        local_tokens = sum(int(m.sum()) for m in resp_mask)
        tu.assign_non_tensor(data, dp_size=dp_size, batch_num_tokens=local_tokens + 11 * (dp_size - 1),
                             global_batch_size=B * dp_size)
        # the clipping regimes the test claims to cover
        ratio = torch.cat([torch.exp(d) for d in delta])
        a_tok = torch.cat([a * torch.ones(n) for a, n in zip(adv, resp_lens)])
        assert ((ratio > 1.2) & (a_tok > 0)).any() and ((ratio < 0.8) & (a_tok < 0)).any() and ((ratio > 3) & (a_tok < 0)).any()
        out = {"log_probs": log_probs}
        if extras:
            out["entropy"] = torch.nested.nested_tensor_from_jagged(1.0 + 0.3 * values.sin(), offsets)
            data["ref_log_prob"] = nested(o + 0.2 * torch.randn(len(o), generator=g) for o in old)
        return out, data, values

    @pytest.mark.parametrize("agg,dp_size,extras", [("token-mean", 1, False), ("token-mean", 2, False),
                                                    ("seq-mean-token-mean", 1, False), ("seq-mean-token-mean", 2, False),
                                                    ("token-mean", 2, True)])
    def test_grpo_equals_verl_ppo_loss(base_config, agg, dp_size, extras):
        cfg = config_with(base_config, reco__method="grpo", actor_rollout_ref__actor__loss_agg_mode=agg)
        if extras:  # verl's entropy bonus and k3 KL loss, which the plugin adds as ppo_loss does
            cfg = config_with(cfg, actor_rollout_ref__actor__entropy_coeff=0.01, actor_rollout_ref__actor__use_kl_loss=True,
                              actor_rollout_ref__actor__kl_loss_coef=0.1, actor_rollout_ref__actor__kl_loss_type="low_var_kl")
        loss_cfg = plugin.check_config(cfg)
        assert plugin.terms_off(loss_cfg) and loss_cfg.dual_clip == 3.0 and loss_cfg.aggregation == agg
        results = []
        for which in ("verl", "plugin", "reco_mini path"):
            actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
            out, data, values = grpo_micro_batch(0, dp_size, agg, extras)
            if which == "verl":
                loss, metrics = ppo_loss(actor, out, data)
            elif which == "plugin":  # every ReCo term off: verl's ppo_loss itself
                loss, metrics = plugin.RecoLoss(actor, loss_cfg)(model_output=out, data=data, dp_group=None)
            else:  # the same settings through reco_mini.policy_loss, as ReCo's runs compute it
                loss, metrics = plugin.reco_ppo_loss(actor, out, data, loss_cfg=loss_cfg)
            (grad,) = torch.autograd.grad(loss, values)
            results.append((loss.detach(), grad, metrics))
        (ref, ref_grad, ref_m), *others = results
        assert ref_grad.abs().sum() > 0
        for loss, grad, metrics in others:
            torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
            torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)
            keys = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl") + (("actor/entropy_loss", "kl_loss") if extras else ())
            for key in keys:
                assert metrics[key].aggregation == ref_m[key].aggregation
                assert math.isclose(float(metrics[key].aggregate()), float(ref_m[key].aggregate()), rel_tol=1e-5, abs_tol=1e-7)

    # ---------------------------------------------------------------- the real data plane: Ray, TransferQueue, verl's bridge

    GROUP_RESPONSES = [  # P = 3 groups of G = 4; group 0 holds a duplicate (count weights 2/3, 2/3, 4/3, 4/3)
        [[5, 6, 7], [5, 6, 7], [8, 9], [10, 11, 12, 5]],
        [[6], [7, 8, 9, 10, 11], [12, 12], [9, 8, 7]],
        [[11, 10], [5, 5, 5, 5], [6, 7, 8], [9]],
    ]
    REWARDS = [[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
    BATCH_MULTIPLE = 16  # verl's upsampling adds 4 padding rows to the 12 real ones
    BATCH_COUNTER = itertools.count()

    @pytest.fixture(scope="module")
    def data_plane():
        """A local Ray, the real TransferQueue and the actor worker (tests/verl_tq_worker.py) in a Ray actor.

        One storage unit: each of TransferQueue's storage units is a Ray actor that holds a CPU. Shared by the tests of
        this file (Ray and TransferQueue take ~10 s to start); each test writes its own keys and clears them."""
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": CPU_PLATFORM | {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
                                                          "OMP_NUM_THREADS": "1"}})
        transfer_queue.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        worker = ray.remote(num_cpus=0)(verl_tq_worker.LogitsActorWorker).remote()
        yield worker
        transfer_queue.close()
        ray.shutdown()

    def put_rollout(seed: int = 0, rewards: list = REWARDS) -> KVBatchMeta:
        """Rows in TransferQueue as verl's agent loop leaves them, verl's own padding rows added; the handle as verl's
        replay buffer samples it (no field list: the old pass fetches every field)."""
        g = torch.Generator().manual_seed(seed)
        run = next(BATCH_COUNTER)
        rows, keys = [], []
        for p, group in enumerate(GROUP_RESPONSES):
            for i, resp in enumerate(group):
                prompt = torch.randint(1, VOCAB, (2 + (p + i) % 3,), generator=g)
                response = torch.tensor(resp)
                mask = torch.ones(len(resp), dtype=torch.long)
                if p == 1 and i == 1:
                    mask[2] = 0  # a tool-output token inside a response
                score = torch.zeros(len(resp))
                score[-1] = rewards[p][i]
                n = len(prompt) + len(resp)
                rows.append(dict(uid=f"run{run}prompt{p}", prompts=prompt, responses=response, response_mask=mask,
                                 loss_mask=mask, input_ids=torch.cat([prompt, response]), position_ids=torch.arange(n),
                                 attention_mask=torch.ones(n, dtype=torch.long), rm_scores=score,
                                 rollout_log_probs=torch.full((len(resp),), -1.0)))
                keys.append(f"run{run}prompt{p}_{i}_0")  # verl's key layout: {uid}_{session}_{index}
        tags = [{"status": "success"} for _ in rows]
        transfer_queue.kv_batch_put(keys=keys, partition_id="train", fields=tu.list_of_dict_to_tensordict(rows), tags=tags)
        batch = KVBatchMeta(keys=keys, tags=tags, partition_id="train")
        return upsample_batch_to_divisible_size(batch, batch_multiple=BATCH_MULTIPLE, eos_token_id=2)

    def read_rows(batch: KVBatchMeta, names: list[str]) -> list[dict]:
        data = transfer_queue.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=names)
        return [{n: data[n][b] for n in names} for b in range(len(batch))]

    class RayActorWorkerGroup:
        """The trainer's actor_rollout_wg: each call goes, with the trainer's KVBatchMeta, to one worker in a Ray actor.

        Stand-in for verl's RayWorkerGroup, whose resource pool asks Ray for GPUs (single_controller/ray/base.py);
        verl's dispatch over DP ranks is not run (one rank)."""

        def __init__(self, actor, old_logits, new_logits):
            self.actor, self.calls, self.seen = actor, [], None
            ray.get(actor.set_logits.remote(old_logits, new_logits))

        def set_loss_fn(self, loss_fn):
            ray.get(self.actor.fresh_process.remote())
            ray.get(self.actor.set_loss_fn.remote(loss_fn))  # Ray pickles the loss; the worker process unpickles it

        def compute_log_prob(self, batch):
            self.calls.append(("compute_log_prob", dict(batch.extra_info), batch.fields))
            return ray.get(self.actor.compute_log_prob.remote(batch))

        def update_actor(self, batch):
            self.calls.append(("update_actor", dict(batch.extra_info), batch.fields))
            output = ray.get(self.actor.update_actor.remote(batch))
            self.seen = ray.get(self.actor.last_update.remote())
            return output

    def run_trainer_steps(config, worker, seed=0, rewards=REWARDS):
        """verl's real _compute_old_log_prob, _compute_advantage and _update_actor through the plugin's trainer, on the
        real TransferQueue; the update's micro-batch is what verl's bridge fetched for the handle the trainer passed."""
        batch = put_rollout(seed, rewards)
        rows = read_rows(batch, ["prompts", "responses", "response_mask", "input_ids"])
        n_tok = sum(len(r["input_ids"]) for r in rows)
        g = torch.Generator().manual_seed(seed + 1)
        old_logits = torch.randn(n_tok, VOCAB, generator=g) * 2.0
        new_logits = old_logits + 0.4 * torch.randn(n_tok, VOCAB, generator=g)
        trainer = plugin.RecoTrainer(config)  # verl's own __init__ (replay buffer etc.) runs
        trainer.actor_rollout_wg = RayActorWorkerGroup(worker, old_logits, new_logits)
        trainer.actor_rollout_wg.set_loss_fn(trainer.make_loss())  # what the trainer's _setup does after init_model
        metrics = {}
        batch = trainer._compute_old_log_prob(batch, metrics)
        batch = trainer._compute_advantage(batch, metrics)
        advantages = [float(r["advantages"][0]) for r in read_rows(batch, ["advantages"])]  # verl's GRPO advantages
        for row, adv in zip(rows, advantages):
            row["advantage"] = adv
        trainer._update_actor(batch, metrics)
        transfer_queue.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        return trainer, metrics, rows, old_logits, new_logits

    def reference_loss(cfg, rows, old_logits, new_logits, global_batch_size):
        """reco_mini.policy_loss from full fp32 logits, laid out by hand (not by verl's code)."""
        logits = new_logits.clone().requires_grad_(True)
        B, T = len(rows), max(len(r["responses"]) for r in rows)
        logp, v, old_logp, v_old, mask = (torch.zeros(B, T) for _ in range(5))
        logp, v = list(logp), list(v)
        start = 0
        for b, r in enumerate(rows):
            p, n = len(r["prompts"]), len(r["responses"])
            pos = slice(start + p - 1, start + p + n - 1)  # the logits that predict the response tokens
            logp[b] = torch.nn.functional.pad(reco_mini.token_logprobs(logits[pos], r["responses"], TEMPERATURE), (0, T - n))
            v[b] = torch.nn.functional.pad(reco_mini.variance_stat(logits[pos], TEMPERATURE), (0, T - n))
            old_logp[b, :n] = reco_mini.token_logprobs(old_logits[pos], r["responses"], TEMPERATURE)
            v_old[b, :n] = reco_mini.variance_stat(old_logits[pos], TEMPERATURE)
            mask[b, :n] = r["response_mask"].float()
            start += p + n
        logp, v = torch.stack(logp), torch.stack(v)
        adv = torch.tensor([r["advantage"] for r in rows])
        P, G = len(GROUP_RESPONSES), len(GROUP_RESPONSES[0])
        real = slice(0, P * G)  # the rows after these are verl's padding rows: weight 1, mask 0
        weights = torch.ones(B)
        if cfg.occurrence != "none":
            weights[real] = reco_mini.occurrence_weights(
                (old_logp * mask).sum(-1)[real].view(P, G), cfg.occurrence, [r for g in GROUP_RESPONSES for r in g],
                lengths=mask.sum(-1)[real].view(P, G), advantages=adv[real].view(P, G), apply=cfg.occurrence_apply,
                norm=cfg.occurrence_norm).view(-1)
        v_old_mean = (v_old * mask).sum() / mask.sum() if cfg.variance_norm == "batch" else torch.tensor(1.0)
        batch = {"old_logp": old_logp, "mask": mask, "advantages": adv, "weights": weights, "v_old": v_old,
                 "v_old_mean": v_old_mean}
        num_seqs = global_batch_size if cfg.aggregation == "seq-mean-token-mean" else None
        loss, _ = reco_mini.policy_loss(logp, batch, cfg, v=v, num_seqs=num_seqs)
        (grad,) = torch.autograd.grad(loss, logits)
        return loss.detach(), grad, weights

    RECO_FIELDS = {"reco_weights", "reco_v_old", "reco_v_old_mean"}

    def test_update_handle_lists_every_field_the_loss_reads(base_config, data_plane):
        """The KVBatchMeta reaching update_actor lists ReCo's fields, and verl's bridge hands exactly those to the loss.

        Without the fix (the handle of a put thrown away) the worker's batch lacked reco_weights and reco_v_old_mean."""
        cfg = config_with(base_config, reco__occurrence="count", reco__token_ratio="variance-old")
        trainer, *_ = run_trainer_steps(cfg, data_plane)
        wg = trainer.actor_rollout_wg
        (_, _, old_fields), (_, _, update_fields) = wg.calls
        assert old_fields is None  # the replay buffer's handle: every field
        assert RECO_FIELDS <= set(update_fields) and {"advantages", "old_log_probs"} <= set(update_fields)
        assert RECO_FIELDS <= set(wg.seen["data"].keys())

    RECO_CASES = [(occ, ratio, "all", "batch", "token-mean", "group") for occ in ("sequence", "token-mean", "count")
                  for ratio in ("variance", "variance-old")]
    RECO_CASES += [("sequence", "variance", "positive", "batch", "token-mean", "group"),
                   ("count", "variance", "all", "none", "seq-mean-token-mean", "group"),
                   ("none", "variance-old", "all", "batch", "seq-mean-token-mean", "group"),
                   # reco.occurrence_norm: batch (1/m_i over every real row) with positive-only weights, and none
                   ("count", "variance", "positive", "batch", "token-mean", "batch"),
                   ("sequence", "variance", "all", "batch", "token-mean", "none")]

    @pytest.mark.parametrize("occurrence,token_ratio,apply,norm,agg,occurrence_norm", RECO_CASES)
    def test_reco_loss_equals_reco_mini_on_the_real_data_plane(base_config, data_plane, occurrence, token_ratio, apply,
                                                                norm, agg, occurrence_norm):
        cfg = config_with(base_config, reco__occurrence=occurrence, reco__token_ratio=token_ratio,
                          reco__occurrence_apply=apply, reco__variance_norm=norm, actor_rollout_ref__actor__loss_agg_mode=agg,
                          reco__occurrence_norm=occurrence_norm)
        trainer, metrics, rows, old_logits, new_logits = run_trainer_steps(cfg, data_plane)
        wg, loss_cfg = trainer.actor_rollout_wg, trainer.reco
        assert not plugin.terms_off(loss_cfg)
        ref_loss, ref_grad, ref_w = reference_loss(loss_cfg, rows, old_logits, new_logits,
                                                   global_batch_size=wg.seen["data"]["global_batch_size"])
        torch.testing.assert_close(wg.seen["loss"], ref_loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(wg.seen["grad"], ref_grad, rtol=1e-4, atol=1e-6)
        assert ref_grad.abs().sum() > 0
        if occurrence != "none":
            torch.testing.assert_close(wg.seen["data"]["reco_weights"], ref_w, rtol=1e-6, atol=1e-6)
            assert not torch.allclose(ref_w, torch.ones_like(ref_w))
        if token_ratio == "variance":
            assert "reco/rho_mean" in wg.seen["metrics"] and "reco/rho_max" in wg.seen["metrics"]

    @pytest.mark.parametrize("token_ratio", ["variance", "variance-old", "is"])
    def test_trainer_flags_fields_and_count_weights(base_config, data_plane, token_ratio):
        cfg = config_with(base_config, reco__occurrence="count", reco__token_ratio=token_ratio,
                          reco__occurrence_norm="group", reco__occurrence_apply="all")  # the closed forms below
        trainer, metrics, rows, *_ = run_trainer_steps(cfg, data_plane)
        wg = trainer.actor_rollout_wg
        assert type(trainer.replay_buffer) is ReplayBuffer  # the sync trainer's, not ReplayBufferAsync
        (old_call, old_info, _), (update_call, update_info, _) = wg.calls
        assert old_call == "compute_log_prob" and old_info["calculate_sum_pi_squared"] is (token_ratio != "is")
        assert old_info["compute_loss"] is False and old_info["temperature"] == TEMPERATURE
        assert update_call == "update_actor" and update_info["calculate_sum_pi_squared"] is (token_ratio == "variance")
        data = wg.seen["data"]
        # count weights: group 0 = [y, y, a, b] -> m = [2, 2, 1, 1] -> w = (1/m) / mean(1/m) = [2/3, 2/3, 4/3, 4/3];
        # groups 1 and 2 have distinct responses -> 1; verl's padding rows -> 1 and no effect
        expected = torch.tensor([2 / 3, 2 / 3, 4 / 3, 4 / 3] + [1.0] * (BATCH_MULTIPLE - 4))
        torch.testing.assert_close(data["reco_weights"], expected)
        assert metrics["reco/w_max"] == pytest.approx(4 / 3) and metrics["reco/w_min"] == pytest.approx(2 / 3)
        if token_ratio != "is":
            assert "reco_v_old" in data.keys() and metrics["reco/v_old_mean"] > 0
            assert not wg.seen["verl_sum_pi_squared"]  # ReCo's worker computes sum pi^2 in fp32
        else:
            assert "reco_v_old" not in data.keys() and wg.seen["verl_sum_pi_squared"]

    def test_f_grpo_scales_advantages_and_keeps_verl_loss(base_config, data_plane):
        cfg = config_with(base_config, reco__method="f-grpo", reco__focal_gamma=2.0)
        trainer, metrics, rows, *_ = run_trainer_steps(cfg, data_plane)
        assert plugin.terms_off(trainer.reco) and trainer.reco.focal_gamma == 2.0
        data = trainer.actor_rollout_wg.seen["data"]
        mu = torch.tensor(REWARDS).gt(0).float().mean(1)  # group success rates
        scale = torch.cat([((1 - mu) ** 2).repeat_interleave(4), torch.ones(BATCH_MULTIPLE - 12)])
        adv = torch.tensor([r["advantage"] for r in rows])  # verl's GRPO advantages before the update
        got = data["advantages"].to_padded_tensor(0.0)[:, 0]
        assert adv[:12].abs().min() > 0  # the real rows
        torch.testing.assert_close(got, adv * scale)
        assert not RECO_FIELDS & set(data.keys())

    def test_positive_reads_the_focal_scaled_advantages_as_reco_mini_does(base_config, data_plane):
        """Group 0's rewards are all > 0, so F-GRPO scales its advantages to 0 and `positive` gives its rows weight 1,
        as reco_mini does; the plugin used to read the advantages before the scale (issue 60: 0.539 against 1)."""
        rewards = [[1.0, 0.5, 0.5, 0.5], REWARDS[1], REWARDS[2]]
        cfg = config_with(base_config, reco__occurrence="count", reco__focal_gamma=2.0, reco__occurrence_apply="positive",
                          reco__occurrence_norm="batch")
        trainer, metrics, rows, *_ = run_trainer_steps(cfg, data_plane, rewards=rewards)
        P, G = len(GROUP_RESPONSES), len(GROUP_RESPONSES[0])
        R = torch.tensor(rewards, dtype=torch.float64)
        adv = torch.tensor([r["advantage"] for r in rows[: P * G]], dtype=torch.float64).view(P, G)  # verl's GRPO
        scaled = adv * reco_mini.focal_scale(R, 2.0)[:, None]
        responses = [r for g in GROUP_RESPONSES for r in g]
        lengths = torch.tensor([[len(r) for r in g] for g in GROUP_RESPONSES], dtype=torch.float64)

        def weights(advantages):
            return reco_mini.occurrence_weights(torch.zeros(P, G, dtype=torch.float64), "count", responses, lengths,
                                                advantages, "positive", norm="batch").flatten().float()

        got = trainer.actor_rollout_wg.seen["data"]["reco_weights"]
        torch.testing.assert_close(got[: P * G], weights(scaled))
        assert not torch.allclose(weights(scaled), weights(adv))  # before the scale, group 0's first row is weighed
        assert metrics["reco/w_max"] == pytest.approx(weights(scaled).max().item())

    # ---------------------------------------------------------------- resume and parameter sync

    def test_a_resume_under_another_loss_is_refused(base_config, tmp_path, monkeypatch):
        """The checkpoint folder holds the run's loss settings; resuming it under others is refused, naming each."""
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

        loaded = []
        monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", lambda self: None)  # verl's actor, dataloader: not here
        monkeypatch.setattr(PPOTrainerSync, "_load_checkpoint", lambda self: loaded.append(True))

        def trainer_with(**reco):
            trainer = plugin.RecoTrainer.__new__(plugin.RecoTrainer)  # the hooks read only config and reco
            trainer.config = config_with(base_config, trainer__default_local_dir=str(tmp_path), trainer__resume_mode="auto",
                                         **{f"reco__{k}": v for k, v in reco.items()})
            trainer.reco, trainer.global_steps = plugin.check_config(trainer.config), 3
            return trainer

        trainer_with(occurrence_norm="batch", occurrence_apply="positive")._save_checkpoint()
        (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")  # as verl's _save_checkpoint writes it
        with pytest.raises(plugin.RecoConfigError) as err:
            trainer_with()._load_checkpoint()
        assert "occurrence_norm='batch' there, 'group' here" in str(err.value)
        assert "occurrence_apply='positive' there, 'all' here" in str(err.value) and not loaded
        trainer_with(occurrence_norm="batch", occurrence_apply="positive")._load_checkpoint()
        assert loaded == [True]  # the same loss resumes

    def test_parameter_sync_step_above_one_is_refused_only_with_a_batch_mean(base_config):
        with pytest.raises(plugin.RecoConfigError) as err:
            plugin.check_config(config_with(base_config, trainer__v1__sync__parameter_sync_step=2,
                                            reco__occurrence_norm="batch"))
        assert err.value.name == "trainer.v1.sync.parameter_sync_step" and "reco.occurrence_norm batch" in str(err.value)
        per_group = config_with(base_config, trainer__v1__sync__parameter_sync_step=2, reco__occurrence_norm="group",
                                reco__variance_norm="none")
        assert plugin.check_config(per_group).occurrence_norm == "group"

    # ---------------------------------------------------------------- verl's own actor worker (FSDP2 on CPU), two steps

    @pytest.fixture(scope="module")
    def actor_workers(data_plane, tmp_path_factory):
        """verl's ActorRolloutRefWorker (role actor: FSDP2 engine, gloo) on a tiny random Qwen2, in verl's RayWorkerGroup.

        The worker group runs with use_gpu=False on the CPU platform of reco_scaled.integrations.verl_cpu. One
        mini-batch (both prompts) of two micro-batches (4 rows each)."""
        return actor_worker_group(tmp_path_factory.mktemp("tiny_qwen2"),
                                  f"actor_rollout_ref.actor.ppo_mini_batch_size={ACTOR_PROMPTS}",
                                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4")

    def actor_worker_group(path: Path, *split: str):
        """actor_workers' worker group, with the mini- and micro-batch settings `split`."""
        from transformers import GenerationConfig
        from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.workers.engine_workers import ActorRolloutRefWorker

        tokenizer = countdown.char_tokenizer()
        torch.manual_seed(0)
        model = countdown.tiny_model(tokenizer, hidden=64, layers=2)
        model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=[
                "algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=reco", "trainer.device=cpu",
                f"actor_rollout_ref.rollout.n={ACTOR_GROUP}", f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
                f"actor_rollout_ref.model.path={path}", "+actor_rollout_ref.model.override_config.attn_implementation=eager",
                "actor_rollout_ref.model.use_remove_padding=true", "actor_rollout_ref.actor.strategy=fsdp2",
                "actor_rollout_ref.actor.optim.lr=1e-3", *split,
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
                "+reco.method=reco", "+reco.occurrence=count"])
        pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
        workers = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(
            cls=ray.remote(ActorRolloutRefWorker), config=cfg.actor_rollout_ref, role="actor"), use_gpu=False, device_name="cpu")
        workers.init_model()
        return cfg, workers, model, tokenizer

    ACTOR_PROMPTS, ACTOR_GROUP = 2, 4

    def sample_rollout(model, tokenizer, step: int) -> KVBatchMeta:
        """Rollout stand-in (no verl rollout engine runs on CPU, docs/verl.md): HF `generate` from the initial
        checkpoint, rows written to TransferQueue as verl's agent loop writes them; group 0 gets a duplicate response
        (so that `count` gives weights != 1); rewards 1 for the first two responses of each group."""
        rows, keys = [], []
        g = torch.Generator().manual_seed(step)
        for p in range(ACTOR_PROMPTS):
            prompt = torch.cat([torch.tensor([tokenizer.bos_token_id]), torch.randint(4, len(tokenizer), (5,), generator=g)])
            torch.manual_seed(100 * step + p)
            with torch.no_grad():
                out = model.generate(prompt[None].repeat(ACTOR_GROUP, 1), do_sample=True, temperature=TEMPERATURE,
                                     max_new_tokens=6, min_new_tokens=2)
            responses = [r[r != tokenizer.pad_token_id] for r in out[:, len(prompt):]]
            if p == 0:
                responses[1] = responses[0].clone()
            for i, resp in enumerate(responses):
                n = len(prompt) + len(resp)
                score = torch.zeros(len(resp))
                score[-1] = float(i < 2)
                ones = torch.ones(len(resp), dtype=torch.long)
                rows.append(dict(uid=f"step{step}prompt{p}", prompts=prompt, responses=resp, input_ids=torch.cat([prompt, resp]),
                                 response_mask=ones, loss_mask=ones, attention_mask=torch.ones(n, dtype=torch.long),
                                 position_ids=torch.arange(n), rm_scores=score,
                                 rollout_log_probs=torch.zeros(len(resp))))
                keys.append(f"step{step}prompt{p}_{i}_0")
        tags = [{"status": "success"} for _ in rows]
        transfer_queue.kv_batch_put(keys=keys, partition_id="train", fields=tu.list_of_dict_to_tensordict(rows), tags=tags)
        return KVBatchMeta(keys=keys, tags=tags, partition_id="train")

    def test_two_reco_steps_on_verl_actor_worker(actor_workers):
        """Two steps of verl's sync pipeline after the rollout (old pass, GRPO advantages, actor update) with ReCo on verl's
        real actor worker, TransferQueue and Ray; the rollout is the stand-in above. The update logs ReCo's metrics from
        inside the loss (rho) and from the trainer (w), so a field dropped on the way to the worker fails here."""
        cfg, workers, model, tokenizer = actor_workers
        trainer = plugin.RecoTrainer(cfg)
        trainer.actor_rollout_wg = workers
        workers.set_loss_fn(trainer.make_loss())  # as RecoTrainer._setup does after init_model
        for step in range(2):
            metrics = {}
            batch = sample_rollout(model, tokenizer, step)
            batch = trainer._compute_old_log_prob(batch, metrics)
            batch = trainer._compute_advantage(batch, metrics)
            batch = trainer._update_actor(batch, metrics)
            transfer_queue.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
            assert metrics["reco/w_min"] < 1.0 < metrics["reco/w_max"]  # the duplicate in group 0
            assert 0.0 < metrics["actor/reco/rho_mean"] <= metrics["actor/reco/rho_max"] <= trainer.reco.variance_cap
            assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0

    def weights_reaching_the_loss(cfg, workers, model, tokenizer, out: Path) -> tuple[dict, dict, int]:
        """One step of verl's pipeline on `workers`, the loss recording what each micro-batch gets: (the weight each
        row (its input_ids) reached the loss with, reco_mini's count weights over the whole batch, the loss calls)."""
        cfg = config_with(cfg, reco__occurrence="count", reco__occurrence_norm="batch", reco__occurrence_apply="all")
        trainer = plugin.RecoTrainer(cfg)
        trainer.actor_rollout_wg = workers
        workers.set_loss_fn(verl_tq_worker.RecordingLoss(trainer.make_loss(), str(out)))
        metrics = {}
        batch = trainer._compute_old_log_prob(sample_rollout(model, tokenizer, 0), metrics)
        batch = trainer._compute_advantage(batch, metrics)
        rows = read_rows(batch, ["input_ids", "responses", "advantages"])
        trainer._update_actor(batch, metrics)
        transfer_queue.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        responses = [r["responses"].tolist() for r in rows]
        lengths = torch.tensor([len(r) for r in responses], dtype=torch.float64).view(ACTOR_PROMPTS, ACTOR_GROUP)
        adv = torch.stack([r["advantages"][0] for r in rows]).double().view(ACTOR_PROMPTS, ACTOR_GROUP)
        whole = reco_mini.occurrence_weights(torch.zeros_like(lengths), "count", responses, lengths, adv, "all",
                                             norm="batch").flatten()
        expected = {tuple(r["input_ids"].tolist()): w.item() for r, w in zip(rows, whole)}
        got = {}
        for line in out.read_text().splitlines():
            record = json.loads(line)
            got |= {tuple(ids): w for ids, w in zip(record["input_ids"], record["weights"])}
        per_group = reco_mini.occurrence_weights(torch.zeros_like(lengths), "count", responses, lengths, adv, "all", norm="group")
        assert not torch.allclose(whole, per_group.flatten())  # a mean over less than the batch would differ
        return got, expected, len(out.read_text().splitlines())

    def test_every_micro_batch_gets_the_whole_batchs_weights(actor_workers, tmp_path):
        """One mini-batch in two micro-batches on verl's real actor worker: each row reaches the loss with reco_mini's
        weight over the whole batch (1/m divided by its mean over every row)."""
        cfg, workers, model, tokenizer = actor_workers
        got, expected, calls = weights_reaching_the_loss(cfg, workers, model, tokenizer, tmp_path / "seen.jsonl")
        assert calls == 2 and got.keys() == expected.keys()
        assert got == pytest.approx(expected, rel=1e-6)

    def test_mini_batches_and_dynamic_batch_size_keep_the_whole_batchs_weights(actor_workers, tmp_path):
        """Two mini-batches (one prompt each) cut into micro-batches by token count (use_dynamic_bsz): the same."""
        cfg, _, model, tokenizer = actor_workers
        _, workers, *_ = actor_worker_group(tmp_path / "model", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                                            "actor_rollout_ref.actor.use_dynamic_bsz=true",
                                            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24")
        try:
            got, expected, calls = weights_reaching_the_loss(cfg, workers, model, tokenizer, tmp_path / "seen.jsonl")
        finally:
            for worker in workers.workers:
                ray.kill(worker)
        assert calls > 2 and got.keys() == expected.keys()
        assert got == pytest.approx(expected, rel=1e-6)

    # ---------------------------------------------------------------- end to end: verl's main_ppo, two steps on CPU

    def byte_level_tokenizer():
        """One token per printable character, in the byte-level alphabet that Qwen2's tokenizer class pre-tokenizes to
        (transformers loads any tokenizer of a qwen2 model as Qwen2Tokenizer; verl's agent loop needs "\\n" to be one
        token), with a chat template that concatenates the messages."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        byte_char = bytes_to_unicode()
        chars = [byte_char[ord(c)] for c in string.printable[:-2]]
        vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *chars])}
        backend = Tokenizer(models.BPE(vocab, merges=[], unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        backend.decoder = decoders.ByteLevel()
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                            unk_token="<unk>")
        tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        return tokenizer

    def step_metrics(log: str) -> dict[int, dict[str, float]]:
        """verl's console logger lines `step:N - name:value - ...`, by step."""
        steps = {}
        for line in re.findall(r"step:\d+ - .*", log):
            pairs = dict(item.rsplit(":", 1) for item in line.split(" - "))
            steps[int(pairs.pop("step"))] = {k: float(v) for k, v in pairs.items() if re.fullmatch(r"-?[\d.e+-]+|nan|-?inf", v)}
        return steps

    @pytest.mark.slow
    def test_main_ppo_two_reco_steps_on_cpu(tmp_path):
        """`python -m verl.trainer.main_ppo` as a user runs it, 2 steps of ReCo on a tiny random Qwen2 and a local parquet
        dataset: verl's Ray driver, TaskRunner, TransferQueue, dataloader, agent loop, reward loop, FSDP2 actor and
        checkpoint manager, with the CPU platform and the hf_cpu rollout of reco_scaled/integrations/verl_cpu.py."""
        import pandas as pd

        tokenizer = byte_level_tokenizer()
        torch.manual_seed(0)
        model = countdown.tiny_model(tokenizer, hidden=64, layers=2)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(tmp_path / "model")
        tokenizer.save_pretrained(tmp_path / "model")
        rows = [{"data_source": "reco_toy", "prompt": [{"role": "user", "content": f"{a}+{b}="}], "ability": "math",
                 "reward_model": {"style": "rule", "ground_truth": str(a + b)}, "extra_info": {"index": 4 * a + b}}
                for a in range(4) for b in range(4)]
        pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
        pd.DataFrame(rows[:4]).to_parquet(tmp_path / "val.parquet")
        (tmp_path / "reward.py").write_text(  # a toy reward with spread: even-length answers score 1
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
            "    return float(len(solution_str.strip()) % 2 == 0)\n")
        overrides = [
            # occurrence token-mean: the paper's `sequence` gives w_i = 1 to the last digit whenever every response in a
            # group has its 8 tokens (p_i ~ 260^-8 on a random byte model), as the CI run of 2026-12-04 met; the
            # per-token geometric mean keeps the weights off 1, so the check below reads weights that act
            "algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=reco", "+reco.method=reco",
            "+reco.occurrence=token-mean", "+reco.occurrence_norm=group", "+reco.occurrence_apply=all",  # every weight acts
            "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.total_training_steps=2",
            "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.logger=[console]",
            f"data.train_files={tmp_path / 'train.parquet'}", f"data.val_files={tmp_path / 'val.parquet'}",
            "data.train_batch_size=2", "data.max_prompt_length=16", "data.max_response_length=8", "data.dataloader_num_workers=0",
            f"actor_rollout_ref.model.path={tmp_path / 'model'}", "actor_rollout_ref.model.use_remove_padding=true",
            "+actor_rollout_ref.model.override_config.attn_implementation=eager", "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.name=hf_cpu", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.agent.num_workers=1",
            "actor_rollout_ref.rollout.checkpoint_engine.backend=naive", "reward.num_workers=1",
            f"reward.custom_reward_function.path={tmp_path / 'reward.py'}",
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
            # a logical GPU: verl's ResourcePoolManager counts GPUs (single_controller/ray/base.py:230); the CPU platform
            # asks Ray for CPUs for each worker
            "+ray_kwargs.ray_init.num_gpus=1", "ray_kwargs.ray_init.num_cpus=16", "+ray_kwargs.ray_init.include_dashboard=false",
        ]
        run = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides], cwd=tmp_path, capture_output=True,
                             text=True, timeout=600, env=os.environ | CPU_PLATFORM | {"OMP_NUM_THREADS": "1"})
        log = run.stdout + run.stderr
        assert run.returncode == 0, log[-6000:]
        steps = step_metrics(log)
        assert sorted(steps) == [1, 2], log[-6000:]
        for step in steps.values():
            assert step["reco/w_min"] < 1.0 < step["reco/w_max"]  # sequence weights, from the trainer
            assert 0.0 < step["actor/reco/rho_mean"] <= step["actor/reco/rho_max"] <= 10.0  # from inside the loss
            assert 0.0 < step["reco/v_old_mean"] < 1.0 and math.isfinite(step["actor/pg_loss"])
        assert any(step["actor/grad_norm"] > 0 for step in steps.values())

    # ---------------------------------------------------------------- precision of sum pi^2 on bf16 logits

    def test_fp32_sum_pi_squared_on_bf16_logits():
        g = torch.Generator().manual_seed(0)
        n, vocab = 256, 4096
        logits = torch.randn(n, vocab, generator=g) * torch.linspace(0.5, 4.0, n)[:, None]
        top = torch.randint(0, vocab, (n,), generator=g)
        logits[torch.arange(n), top] += torch.linspace(0.0, 17.0, n)  # from undecided to confident tokens
        bf16 = logits.to(torch.bfloat16)
        v64 = 1.0 - torch.softmax(bf16.double(), dim=-1).square().sum(-1)  # the exact V of the bf16 logits
        assert v64.min() > 1e-5 and v64.max() > 0.99  # the range the claim is made for (V near 1e-5 up to near 1)
        v_plugin = 1.0 - plugin.sum_pi_squared_fp32(bf16).double()
        v_verl = 1.0 - plugin.VERL_SUM_PI_SQUARED(bf16).double()
        assert plugin.sum_pi_squared_fp32(bf16).dtype == torch.float32
        assert ((v_plugin - v64).abs() / v64).max() < 0.01
        assert ((v_verl - v64).abs() / v64).max() > 0.01  # verl's shipped function, in the logits' dtype
        assert ((v_verl - v64).abs() / v64 > 0.10).float().mean() > 0.05 and (v_verl == 0).any()  # V = 0: confident tokens
        # no graph is kept: rho is a stop-gradient
        assert not plugin.sum_pi_squared_fp32(bf16.float().requires_grad_(True)).requires_grad

    # ---------------------------------------------------------------- registration and refusals

    def test_registers_on_import_verl_and_patches_nothing():
        code = ("import sys, verl\n"
                "print('reco_scaled.integrations.verl_entry' in sys.modules, 'reco_scaled.integrations.verl' in sys.modules,\n"
                "      'verl.trainer.ppo.v1.trainer_base' in sys.modules)\n"
                "import verl.utils.torch_functional as F\n"
                "from verl.trainer.ppo.v1 import get_trainer_cls\n"  # as verl's TaskRunnerV1 picks the trainer
                "print(get_trainer_cls('reco').__module__, F.calculate_sum_pi_squared_from_logits.__module__,\n"
                "      get_trainer_cls('sync').__module__)")
        env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_PLUGINS", *CPU_PLATFORM)}  # verl as shipped
        run = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        # on `import verl`: the entry point ran, the plugin and verl's trainer are not imported
        assert run.stdout.split() == ["True", "False", "False", "reco_scaled.integrations.verl",
                                      "verl.utils.torch_functional", "verl.trainer.ppo.v1.trainer_sync"]
        assert TRAINER_REGISTRY["reco"] is plugin.RecoTrainer

    @pytest.mark.parametrize("setting,field", [
        ({"trainer__use_v1": False}, "trainer.use_v1"),
        ({"trainer__v1__trainer_mode": "colocate_async"}, "trainer.v1.trainer_mode"),
        ({"actor_rollout_ref__actor__policy_loss__loss_mode": "gspo"}, "actor_rollout_ref.actor.policy_loss.loss_mode"),
        ({"actor_rollout_ref__model__use_fused_kernels": True}, "actor_rollout_ref.model.use_fused_kernels"),
        ({"actor_rollout_ref__actor__use_fused_kernels": True}, "actor_rollout_ref.actor.use_fused_kernels"),
        ({"distillation__enabled": True}, "distillation.enabled"),
        ({"algorithm__rollout_correction__rollout_rs": "token_k1"}, "algorithm.rollout_correction.rollout_rs"),
        ({"algorithm__adv_estimator": "gae"}, "algorithm.adv_estimator"),
        ({"algorithm__adv_estimator": "optimal_token_baseline"}, "algorithm.adv_estimator"),
        ({"algorithm__rollout_correction__rollout_is": "token"}, "algorithm.rollout_correction.rollout_is"),
        ({"algorithm__rollout_correction__bypass_mode": True}, "algorithm.rollout_correction.bypass_mode"),
        ({"actor_rollout_ref__actor__loss_agg_mode": "token-sum"}, "actor_rollout_ref.actor.loss_agg_mode"),
        ({"actor_rollout_ref__actor__strategy": "megatron"}, "actor_rollout_ref.actor.strategy"),
        ({"reco__occurrence": "bogus"}, "reco.occurrence"),
        ({"reco__occurrence": "canonical"}, "reco.occurrence"),
        ({"reco__token_ratio": "simko"}, "reco.token_ratio"),
        ({"reco__variance_cap": -1.0}, "reco.variance_cap"),
        ({"reco__method": "ppo"}, "reco.method"),
        ({"reco__gamma": 1.0}, "reco.gamma"),
    ])
    def test_refusals_name_the_field(base_config, setting, field):
        with pytest.raises(plugin.RecoConfigError) as err:
            plugin.check_config(config_with(base_config, **setting))
        assert str(err.value).startswith(f"{field}: ") and err.value.name == field

    def test_settings_carry_loss_config_defaults_and_help(base_config):
        cfg = plugin.check_config(base_config)  # +reco.method=reco and nothing else
        assert (cfg.occurrence, cfg.token_ratio, cfg.focal_gamma) == ("sequence", "variance", 0.0)
        assert (cfg.clip_low, cfg.clip_high, cfg.dual_clip, cfg.aggregation) == (0.2, 0.2, 3.0, "token-mean")
        for f in dataclasses.fields(plugin.RecoSettings):
            if f.name != "method":
                loss_field = reco_mini.LossConfig.__dataclass_fields__[f.name]
                assert (f.default, f.metadata["help"]) == (loss_field.default, loss_field.metadata["help"])
        assert "reco.variance_cap (default 10.0)" in plugin.settings_help()
        without = copy.deepcopy(base_config)
        with open_dict(without):
            del without["reco"]
        assert plugin.check_config(without) == cfg  # no reco section: the defaults (method reco)

    # ---------------------------------------------------------------- the recipes of docs/verl.md

    def recipe_commands() -> list[list[str]]:
        """Every `python3 -m verl.trainer.main_ppo` line of docs/verl.md, its bash arrays expanded, as overrides."""
        text = (ROOT / "docs" / "verl.md").read_text()
        blocks = re.findall(r"^([A-Z_0-9]+)=\(\n(.*?)^\)", text, re.M | re.S)
        arrays = {name: shlex.split(body, comments=True) for name, body in blocks}
        commands = []
        for line in re.findall(r"^python3 -m verl\.trainer\.main_ppo (.*)$", text, re.M):
            words = []
            for word in shlex.split(line):
                m = re.fullmatch(r"\$\{([A-Z_0-9]+)\[@\]\}", word)
                words += arrays[m.group(1)] if m else [word]
            commands.append([w.replace("$DATA", "/data") for w in words])
        return commands

    def test_recipes_compose_with_verl_config_and_pass_the_checks():
        commands = recipe_commands()
        assert len(commands) == 7  # 3 models x (GRPO, ReCo) on one node, and the 2-node example
        config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
        reco_runs = 0
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            for overrides in commands:
                cfg = compose(config_name="ppo_trainer", overrides=overrides)  # unknown keys or bad values raise
                omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # verl's own checks of the actor settings
                assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.algorithm.adv_estimator == "grpo"
                if cfg.trainer.v1.trainer_mode == "reco":
                    loss_cfg = plugin.check_config(cfg)
                    assert (loss_cfg.occurrence, loss_cfg.token_ratio, loss_cfg.dual_clip) == ("count", "variance", 3.0)
                    reco_runs += 1
                else:
                    assert cfg.trainer.v1.trainer_mode == "sync" and "reco" not in cfg
        assert reco_runs == 4

    # ---------------------------------------------------------------- the code reward, loaded as verl loads it

    def test_verl_loads_the_code_reward_from_the_keys_on_docs_page():
        """verl's get_custom_reward_fn, given docs/verl.md's CODE_REWARD keys (with verl's reward section), returns
        reco's compute_score; called as verl's naive reward manager calls it, it pays only a passing program, run in
        reco.rewards.code's sandbox."""
        import json

        from verl.trainer.ppo.reward import get_custom_reward_fn

        text = (ROOT / "docs" / "verl.md").read_text()
        body = re.search(r"^CODE_REWARD=\(\n(.*?)^\)", text, re.M | re.S).group(1)
        config = OmegaConf.from_dotlist(shlex.split(body, comments=True))
        score = get_custom_reward_fn(config)
        truth = json.dumps("assert f(2) == 4\n")
        info = {"num_turns": 2, "rollout_reward_scores": {}}
        right, wrong = "```python\ndef f(x):\n    return 2 * x\n```", "```python\ndef f(x):\n    return x + 3\n```"
        assert score(data_source="code", solution_str=right, ground_truth=truth, extra_info=info) == 1.0
        assert score(data_source="code", solution_str=wrong, ground_truth=truth, extra_info=info) == 0.0
