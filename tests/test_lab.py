"""experiments/lab.py's loop against reco_mini's (issue 54).

lab.train_rl is reco_mini's RL loop written a second time, with the studies' hook and the peers' terms added. With no
hook and every peer at its default, it must train exactly as reco_mini.train_rl does: at every method reco_mini has and
every value of every setting, on a fixed seed, the log rows (all fields but the times), each update's inputs (the
response weights w and the advantages handed to policy_loss, and the loss it returns), the Pass@k trajectory and the
final parameters are equal, bit for bit. The tiny Countdown model, 2 steps of 4 prompts x 4 responses, and a reward of
the response's length (a random model seldom solves Countdown), so that the advantages are not zero. Beside the runs,
lab's loop is reco_mini's line for line but for the lines it replaces (REPLACED).
"""
from __future__ import annotations

import ast
import copy
import difflib
import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

import reco_mini
from reco.tasks import TASKS
from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import lab  # noqa: E402

BUDGET = ["--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--n-train", "16", "--n-test", "4"]
# every method at its defaults, then every value of every setting (on reco, or where it acts, on another method)
RUNS = {f"method {m}": ["--method", m] for m in reco_mini.METHODS} | {
    **{f"occurrence {o}": ["--method", "reco", "--occurrence", o] for o in ("sequence", "token-mean", "none")},
    # one-token responses in groups of 8, so that a group holds copies to count
    **{f"occurrence {o}": ["--method", "reco", "--occurrence", o, "--max-new-tokens", "1", "--group-size", "8"]
       for o in ("count", "canonical")},
    **{f"token ratio {t}": ["--method", "reco", "--token-ratio", t] for t in ("is", "variance", "variance-old")},
    "occurrence apply all": ["--method", "reco", "--occurrence-apply", "all"],  # the defaults are positive, batch
    "occurrence norm group": ["--method", "reco", "--occurrence-norm", "group"],
    "occurrence before issue 52": ["--method", "reco", "--occurrence-norm", "group", "--occurrence-apply", "all"],
    "occurrence norm none": ["--method", "reco", "--occurrence-norm", "none"],
    "variance norm none": ["--method", "reco", "--variance-norm", "none"],
    "variance cap": ["--method", "reco", "--variance-cap", "1.0005"],
    "focal gamma": ["--method", "reco", "--focal-gamma", "0.5"],
    "clip": ["--method", "grpo", "--clip-low", "0.05", "--clip-high", "0.1", "--lr", "3e-3"],
    "dual clip": ["--method", "grpo", "--dual-clip", "1.05", "--lr", "3e-3"],
    "kl coef": ["--method", "reco", "--kl-coef", "0.1"],
    "no std": ["--method", "reco", "--no-std"],
    "aggregation seq-mean-token-mean": ["--method", "reco", "--aggregation", "seq-mean-token-mean"],
    "micro batch": ["--method", "reco", "--micro-batch", "3"],
    "head chunk": ["--method", "reco", "--head-chunk", "5"],
    "dtype bfloat16": ["--method", "reco", "--dtype", "bfloat16"],
    "gradient checkpointing": ["--method", "reco", "--gradient-checkpointing"],
    "one update a step": ["--method", "reco", "--epochs", "1", "--minibatches", "1", "--grad-clip", "0"],
    "temperature": ["--method", "reco", "--temperature", "0.7"],
    "eval every": ["--method", "reco", "--eval-every", "1", "--n-eval", "4", "--ks", "1,4"],
}


@pytest.fixture(scope="module")
def setup():
    tok = char_tokenizer()
    torch.manual_seed(0)
    return tok, tiny_model(tok, 32, 2).requires_grad_(False)


@pytest.fixture(autouse=True)
def length_reward(monkeypatch):
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))


def run(trainer, argv: list[str], setup, out: Path, monkeypatch, **hook) -> dict:
    """One run of `trainer` (reco_mini or lab) from the base's weights: its rows without the times, what each
    update handed policy_loss (weights, advantages) and got back (the loss), the trajectory and the final weights."""
    tok, base = setup
    cfg = trainer.parse_config([*BUDGET, *argv, "--out", str(out)])
    updates, policy_loss = [], reco_mini.policy_loss

    def recorded(logp, batch, *args, **kwargs):
        loss, stats = policy_loss(logp, batch, *args, **kwargs)
        updates.append((batch["weights"].clone(), batch["advantages"].clone(), loss.detach().clone()))
        return loss, stats

    monkeypatch.setattr(reco_mini, "policy_loss", recorded)
    model = copy.deepcopy(base).requires_grad_(True)
    out.mkdir()
    splits = make_splits(cfg)
    trainer.train_rl(cfg, cfg.method_list[0], model, base, tok, splits["train"], out, splits["val"], **hook)
    monkeypatch.setattr(reco_mini, "policy_loss", policy_loss)
    rows = [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
            for line in (out / "log.jsonl").read_text().splitlines()]
    trajectory = (out / "trajectory.jsonl").read_text() if (out / "trajectory.jsonl").exists() else None
    return {"rows": rows, "updates": updates, "trajectory": trajectory, "state": model.state_dict()}


def assert_same(a: dict, b: dict) -> None:
    assert a["rows"] == b["rows"] and [list(r) for r in a["rows"]] == [list(r) for r in b["rows"]]  # values, order
    assert len(a["updates"]) == len(b["updates"]) > 0
    for (w, adv, loss), (w2, adv2, loss2) in zip(a["updates"], b["updates"]):
        assert torch.equal(w, w2) and torch.equal(adv, adv2) and torch.equal(loss, loss2)
    assert a["trajectory"] == b["trajectory"]
    assert a["state"].keys() == b["state"].keys() and all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])


@pytest.mark.parametrize("name", RUNS)
def test_lab_trains_as_reco_mini_at_every_method_and_setting(name, setup, tmp_path, monkeypatch, one_thread):
    argv = RUNS[name]
    mini = run(reco_mini, argv, setup, tmp_path / "mini", monkeypatch)
    assert_same(run(lab, argv, setup, tmp_path / "lab", monkeypatch), mini)
    # the comparison has something to compare: the runs trained, on non-zero advantages, and ReCo's terms acted
    rows, loss_cfg = mini["rows"], reco_mini.loss_config(reco_mini.parse_config([*BUDGET, *argv]), argv[1])
    assert len(rows) == 2 and any(row["adv_abs_mean"] > 0 for row in rows)
    assert any(not torch.equal(mini["state"][k], v) for k, v in setup[1].state_dict().items())
    weights = torch.cat([w for w, _, _ in mini["updates"]])
    assert torch.equal(weights, torch.ones_like(weights)) == (loss_cfg.occurrence == "none"), name
    assert ("rho_mean" in rows[0]) == loss_cfg.token_ratio.startswith("variance")
    assert "kl_base" in rows[0] and (mini["trajectory"] is not None) == ("--eval-every" in argv)
    if name == "clip":  # and the settings that act only sometimes did act here
        assert all(row["clip_frac_low"] > 0 and row["clip_frac_high"] > 0 for row in rows)
    if name == "variance cap":
        assert max(row["rho_max"] for row in rows) == pytest.approx(1.0005)
    if name == "dual clip":
        plain = run(reco_mini, ["--method", "grpo", "--lr", "3e-3"], setup, tmp_path / "plain", monkeypatch)
        assert any(not torch.equal(mini["state"][k], v) for k, v in plain["state"].items())


def test_the_comparison_sees_a_peer_and_a_hooks_fields(setup, tmp_path, monkeypatch, one_thread):
    """The same comparison fails where lab does something reco_mini does not: a peer's advantage. A hook's fields join
    lab's rows and leave every other value as it was."""
    argv = ["--method", "reco"]
    mini = run(reco_mini, argv, setup, tmp_path / "mini", monkeypatch)
    with pytest.raises(AssertionError):
        assert_same(run(lab, [*argv, "--advantage", "pass-at-k", "--pass-k", "2"], setup, tmp_path / "peer", monkeypatch),
                    mini)
    seen = []
    hooked = run(lab, argv, setup, tmp_path / "hook", monkeypatch,
                 on_step=lambda step: seen.append(step.weights.clone()) or {"probe": float(len(seen))})
    assert [row.pop("probe") for row in hooked["rows"]] == [1.0, 2.0]
    assert_same(hooked, mini)
    first_epoch = torch.cat([w for w, _, _ in mini["updates"][:2]])  # its two mini-batches: every response once
    assert torch.equal(seen[0].sort().values, first_epoch.sort().values)  # the hook saw the step's weights


def loop_lines(train_rl) -> list[str]:
    """The lines of a train_rl below its docstring, with lab's `rm.` taken off."""
    source = inspect.getsource(train_rl)
    first = ast.parse(source).body[0].body[1].lineno  # the statement after the docstring
    return [line.replace("rm.", "").rstrip() for line in source.splitlines()[first - 1:]]


# reco_mini's loop lines that lab's replaces: the advantage (a peer's), and the weights (times a peer's), with comments
REPLACED = ["    loss_cfg = loss_config(cfg, method)",
            "        # Advantage, times F-GRPO's focal scale (1 at gamma 0)",
            "        A = group_advantages(rewards, scale_by_std=not loss_cfg.no_std)",
            "        # Weights: ReCo's w_i from the summed old log-probs (1 for GRPO)",
            "        w = occurrence_weights(seq_logp, loss_cfg.occurrence, **given, **how).flatten()  # [P*G]",
            "        batch |= dict(resp=r[\"resp\"], ref_logp=ref_logp)",
            "        # Log: the step's statistics (docs/design.md §2 lists them) and the updates' means",
            "        row |= log.update_summary(stats)  # the updates' means, and largest *_max"]


def test_lab_loop_is_reco_minis_but_for_the_lines_it_replaces():
    """The source tie beside the runs above: every line of reco_mini's loop is in lab's, in order, but for REPLACED, so
    that a change to reco_mini's loop fails here until lab's loop has it too (or this list says why not)."""
    mini, ours = loop_lines(reco_mini.train_rl), loop_lines(lab.train_rl)
    ops = difflib.SequenceMatcher(a=mini, b=ours, autojunk=False).get_opcodes()
    assert [line for tag, i1, i2, _, _ in ops if tag != "equal" for line in mini[i1:i2]] == REPLACED
    assert len(mini) > 60 and sum(i2 - i1 for tag, i1, i2, _, _ in ops if tag == "equal") == len(mini) - len(REPLACED)
