"""reco_mini.train_rl with --micro-batch, --dtype and --gradient-checkpointing (issue 21).

- At the defaults, train_rl is bit-identical to the train_rl of commit c15662b (tests/fixtures/train_rl_c15662b.py,
  verbatim), run on the same rollouts: every log value and every final weight, over 8 steps, seed 0. ReCo runs with
  c15662b's response weights (--occurrence-norm group --occurrence-apply all), the defaults before issue 52.
- In float64, the gradient accumulated over micro-batches equals the one-forward mini-batch gradient, for both
  aggregations and every token ratio (the normaliser stays the mini-batch's).
- The flags do what they say: bf16 autocast in the forwards, each decoder layer recomputed in the backward pass,
  and the model back in eval mode without checkpointing for sampling.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

import reco_mini
from reco.tasks import TASKS
from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import lab  # noqa: E402  (SimKO's token ratio runs in its trainer)


def _old_train_rl():
    spec = importlib.util.spec_from_file_location("train_rl_c15662b", FIXTURES / "train_rl_c15662b.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train_rl


def _setup(argv: list[str], dtype=torch.float32, hidden: int = 32, trainer=reco_mini):
    cfg = trainer.parse_config(["--n-train", "64", *argv])
    tok = char_tokenizer()
    torch.manual_seed(0)
    base = tiny_model(tok, hidden, 2).to(dtype).requires_grad_(False)
    return cfg, tok, base, make_splits(cfg)["train"]


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
            for line in (path / "log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("argv", [["--method", "reco", "--occurrence-norm", "group", "--occurrence-apply", "all"],
                                  ["--method", "grpo", "--kl-coef", "0.05"]])
def test_default_training_is_bit_identical_to_c15662b(tmp_path, monkeypatch, argv):
    # P x G = 128 rows: token_stats splits the old-statistics pass into slices, as in the studies (256 rows).
    # A random model seldom solves Countdown: a reward of the response's length keeps the advantages non-zero.
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))
    cfg, tok, base, problems = _setup(["--steps", "8", "--seed", "0", "--prompts-per-step", "16", *argv])
    runs = {}
    for name, train in (("old", _old_train_rl()), ("new", reco_mini.train_rl)):
        torch.manual_seed(cfg.seed)
        model = tiny_model(tok, 32, 2)
        model.load_state_dict(base.state_dict())
        (tmp_path / name).mkdir()
        train(cfg, cfg.method_list[0], model, base, tok, problems, tmp_path / name)
        runs[name] = (_rows(tmp_path / name), model.state_dict())
    (old_rows, old_state), (new_rows, new_state) = runs["old"], runs["new"]
    # exact float equality of every value the old loop logged (the new rows add issue 19's diagnostics)
    assert len(new_rows) == 8 and [{k: r[k] for k in o} for r, o in zip(new_rows, old_rows)] == old_rows
    assert all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    assert all(not torch.equal(old_state[k], base.state_dict()[k]) for k in old_state)  # it did train
    assert all(row["adv_abs_mean"] > 0 and row["grad_norm"] > 0 for row in new_rows)


class GradRecorder:
    """Stands in for AdamW: keeps a copy of the gradient at each step and leaves the weights alone."""
    made: list[GradRecorder] = []

    def __init__(self, params, **kwargs):
        self.params, self.grads = list(params), []
        GradRecorder.made.append(self)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grads.append([p.grad.clone() for p in self.params])


# the ratios this repository trains with: reco_mini's, and the peer SimKO's in experiments/lab.py's trainer;
# experiments/fork_arms.py registers ratios that need its hook's select mask (tests/test_study_rows.py,
# tests/test_fork_study.py), if some other module has imported it before collection
OWN_RATIOS = [n for n, f in reco_mini.TOKEN_RATIOS.items() if f.__module__ == "reco_mini"] + ["simko"]


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("token_ratio", OWN_RATIOS)
def test_micro_batch_gradient_equals_mini_batch_gradient_in_float64(tmp_path, monkeypatch, aggregation, token_ratio):
    monkeypatch.setattr(torch.optim, "AdamW", GradRecorder)
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))
    GradRecorder.made.clear()
    argv = ["--method", "reco", "--token-ratio", token_ratio, "--aggregation", aggregation, "--kl-coef", "0.1",
            "--steps", "1", "--prompts-per-step", "4", "--group-size", "4", "--minibatches", "2", "--grad-clip", "0"]
    logs = {}
    # micro 0: one forward per mini-batch of 8 rows; 3: pieces of 3, 3, 2; "3h": the same with the lm head applied to
    # slices of 5 row-tokens (--head-chunk), whose logits are remade in the backward pass
    legs = [("0", ["--micro-batch", "0"]), ("3", ["--micro-batch", "3"]), ("1", ["--micro-batch", "1"]),
            ("3h", ["--micro-batch", "3", "--head-chunk", "5"])]
    trainer = lab if token_ratio == "simko" else reco_mini
    if token_ratio == "simko":  # it reads the logits, which --head-chunk never keeps (lab's Config refuses the pair)
        legs = legs[:3]
    for name, flags in legs:
        cfg, tok, base, problems = _setup(argv + flags, torch.float64, trainer=trainer)
        model = tiny_model(tok, 32, 2).double()
        model.load_state_dict(base.state_dict())
        (tmp_path / name).mkdir()
        trainer.train_rl(cfg, "reco", model, base, tok, problems, tmp_path / name)
        logs[name] = _rows(tmp_path / name)[0]
    full, *micro_runs = GradRecorder.made
    assert len(full.grads) == 4 * 1  # epochs x minibatches
    assert any(g.abs().max() > 0 for g in full.grads[0])
    for run in micro_runs:
        for g_full, g_micro in zip(full.grads, run.grads):
            for a, b in zip(g_full, g_micro):
                assert a.dtype == torch.float64
                torch.testing.assert_close(b, a, rtol=1e-11, atol=1e-15)
    assert len(micro_runs) == len(legs) - 1
    for key in ("loss", "entropy", "kl_base", "w_min", "w_max", "v_old_mean", "reward_mean"):
        assert logs["3"][key] == pytest.approx(logs["0"][key], rel=1e-12, abs=1e-15) == logs["1"][key]
        if "3h" in logs:
            assert logs["3h"][key] == pytest.approx(logs["0"][key], rel=1e-12, abs=1e-15)


def test_bfloat16_autocast_and_gradient_checkpointing_run_where_said(tmp_path, monkeypatch):
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))
    cfg, tok, base, problems = _setup(["--method", "reco", "--steps", "2", "--prompts-per-step", "4",
                                       "--group-size", "4", "--micro-batch", "3", "--dtype", "bfloat16",
                                       "--gradient-checkpointing"])
    model = tiny_model(tok, 32, 2).eval()
    model.load_state_dict(base.state_dict())
    calls, seen, layer = {"layer": 0}, set(), model.model.layers[0]
    forward = layer.forward

    def counted(*args, **kwargs):  # the forward itself: the backward pass's recomputation runs no forward hooks
        calls["layer"] += 1
        return forward(*args, **kwargs)

    layer.forward = counted
    model.lm_head.register_forward_hook(lambda m, i, o: seen.add((o.dtype, torch.is_grad_enabled(), m.training)))
    reco_mini.train_rl(cfg, "reco", model, base, tok, problems, tmp_path)
    rows = _rows(tmp_path)
    assert len(rows) == 2 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    assert {dtype for dtype, *_ in seen} == {torch.bfloat16}  # every forward (sampling, old stats, updates)
    assert (torch.bfloat16, True, True) in seen  # the update forwards, in training mode
    assert not model.training and not model.is_gradient_checkpointing  # as it was, for sampling and evaluation
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    # Forwards of layer 0 per step: sampling (one per token, 1 to 12), old stats (16 rows / 3 -> 6 pieces, policy and
    # base is another module), updates (2 epochs x 2 mini-batches x 3 pieces = 12), and 12 recomputations.
    assert calls["layer"] >= 2 * (1 + 6 + 12 + 12)


def test_kl_base_is_logged_only_where_the_base_is_at_hand(tmp_path):
    cfg, tok, base, problems = _setup(["--method", "grpo", "--steps", "1", "--prompts-per-step", "2", "--group-size", "4"])
    model = tiny_model(tok, 32, 2)
    reco_mini.train_rl(cfg, "grpo", model, None, tok, problems, tmp_path)
    assert "kl_base" not in _rows(tmp_path)[0] and "entropy" in _rows(tmp_path)[0]
    cfg = reco_mini.parse_config(["--n-train", "64", "--kl-coef", "0.1"])
    with pytest.raises(ValueError, match="--kl-coef > 0 needs the base model"):
        reco_mini.train_rl(cfg, "grpo", model, None, tok, problems, tmp_path)


def test_flags_and_defaults(tmp_path):
    assert reco_mini.parse_config([]).eval_batch == 4096  # countdown: unchanged
    data = tmp_path / "d.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n')
    math_cfg = reco_mini.parse_config(["--task", "math", "--model", "m", "--data", str(data)])
    assert math_cfg.eval_batch == 64 and math_cfg.head_chunk == 256 and reco_mini.parse_config([]).head_chunk == 0
    with pytest.raises(ValueError, match=r"--dtype must be one of \[.float32., .bfloat16.\], got .float16."):
        reco_mini.Config(dtype="float16")
    with pytest.raises(ValueError, match="--micro-batch must be >= 0"):
        reco_mini.Config(micro_batch=-1)
