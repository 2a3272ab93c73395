"""A study's logged rows are unchanged by moving its diagnostics out of reco_mini's loop (issue 35), and the studies'
trainer out of reco_mini (issue 54).

experiments/lab.py's train_rl with the studies' hook (experiments/diagnostics.on_step) writes, bit for bit, the rows and
the final weights of reco_mini's train_rl as of commit b577fbf (tests/fixtures/train_rl_b577fbf.py, verbatim), which
computed the diagnostics in the loop: the long study's task and arms, a few steps, with the studies' pinned response
weights (lab.STUDY_PINS, the defaults before issue 52). reco_mini.train_rl, which has no hook, writes the same run
without them.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import diagnostics  # noqa: E402
import lab  # noqa: E402


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHARES = ("update_share_hard", "update_share_mid", "update_share_easy")  # logged since issue 52, after the fixtures


def _rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
            for line in (path / "log.jsonl").read_text().splitlines()]


def _without_shares(rows: list[dict]) -> list[dict]:
    """The rows with issue 52's update shares taken out (they must be there); every other value and its place stay."""
    assert all(set(SHARES) <= set(row) for row in rows)
    return [{k: v for k, v in row.items() if k not in SHARES} for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--method", "reco", "--occurrence", "canonical"],
                                  ["--method", "reco-token", "--kl-coef", "0.05"]])
def test_study_rows_are_bit_identical_to_b577fbf(tmp_path, monkeypatch, argv):
    # A random model seldom solves Countdown: a reward of the response's length keeps the advantages non-zero.
    old = _load(ROOT / "tests" / "fixtures" / "train_rl_b577fbf.py")
    reward = lambda problem, text: float(len(text) % 3 == 0)  # noqa: E731
    monkeypatch.setattr(old, "reward", reward)
    monkeypatch.setattr(TASKS["countdown-long"], "reward", reward)
    cfg = lab.parse_config([*lab.STUDY_PINS, "--task", "countdown-long", "--n-train", "32", "--n-test", "4", "--steps",
                            "3", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "24", *argv])
    tok = char_tokenizer(cfg.task)
    torch.manual_seed(0)
    base = tiny_model(tok, 32, 2, 128).requires_grad_(False)
    problems = make_splits(cfg)["train"]
    runs = {}
    for name, train, hook in (("old", old.train_rl, None), ("new", lab.train_rl, diagnostics.on_step),
                              ("plain", reco_mini.train_rl, None)):
        model = tiny_model(tok, 32, 2, 128)
        model.load_state_dict(base.state_dict())
        (tmp_path / name).mkdir()
        train(cfg, cfg.method_list[0], model, base, tok, problems, tmp_path / name, **({"on_step": hook} if hook else {}))
        runs[name] = (_rows(tmp_path / name), model.state_dict())
    (old_rows, old_state), (new_rows, new_state) = runs["old"], (_without_shares(runs["new"][0]), runs["new"][1])
    assert len(old_rows) == 3 and new_rows == old_rows and list(new_rows[0]) == list(old_rows[0])  # same order too
    assert all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    assert "share_fork" in old_rows[0] and all(row["adv_abs_mean"] > 0 for row in old_rows)
    plain = _without_shares(runs["plain"][0])
    assert [{k: r[k] for k in p} for r, p in zip(old_rows, plain)] == plain  # the same run, without the diagnostics
    assert not {"share_fork", "dup_exact", "w_dev_sequence"} & set(plain[0])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["reco-token-fork-oracle", "entropy-top20", "reco-token-fork-detected"])
def test_fork_study_rows_are_bit_identical_to_0b4b2eb(tmp_path, monkeypatch, method):
    """Issue 43: the fork arms' tokens now reach the loss through the hook's "batch" (fork_arms.on_step), not through
    reco_mini's TOKEN_SELECTS, and the old statistics come from the readable path: every logged value of the fork
    study's hook and loop (experiments/lab.py's since issue 54), and the final weights, equal those of the loop and
    hook as of commit 0b4b2eb."""
    import fork_arms

    registries = (reco_mini.METHODS, reco_mini.TOKEN_RATIOS)
    before = [dict(r) for r in registries]
    old = _load(ROOT / "tests" / "fixtures" / "train_rl_0b4b2eb.py")
    monkeypatch.setattr(old, "TOKEN_SELECTS", dict(fork_arms.SELECTS))
    monkeypatch.setattr(fork_arms, "DETECTOR", {"name": "entropy-contrast", "share": 0.1})
    reward = lambda problem, text: float(len(text) % 3 == 0)  # noqa: E731
    monkeypatch.setattr(TASKS["countdown-long"], "reward", reward)
    # A random model writes nothing in the grammar: labels by position give the oracle arm forks to select
    labels = lambda problems, G, texts, resp, mask, tok: [  # noqa: E731
        [("fork", "style", "determined")[t % 3] for t in range(int(n))] for n in mask.sum(-1).tolist()]
    monkeypatch.setattr(TASKS["countdown-long"], "token_labels", labels)
    try:
        cfg = lab.parse_config([*lab.STUDY_PINS, "--task", "countdown-long", "--n-train", "32", "--n-test", "4",
                                "--steps", "3", "--prompts-per-step", "4", "--group-size", "4", "--max-new-tokens", "24",
                                "--method", method])
        tok = char_tokenizer(cfg.task)
        torch.manual_seed(0)
        base = tiny_model(tok, 32, 2, 128).requires_grad_(False)
        problems = make_splits(cfg)["train"]
        runs = {}
        for name, train, hook in (("old", old.train_rl, old.fork_on_step), ("new", lab.train_rl, fork_arms.on_step)):
            model = tiny_model(tok, 32, 2, 128)
            model.load_state_dict(base.state_dict())
            (tmp_path / name).mkdir()
            train(cfg, method, model, base, tok, problems, tmp_path / name, on_step=hook)
            runs[name] = (_rows(tmp_path / name), model.state_dict())
    finally:
        for registry, names in zip(registries, before):
            registry.clear()
            registry.update(names)
    (old_rows, old_state), (new_rows, new_state) = runs["old"], (_without_shares(runs["new"][0]), runs["new"][1])
    assert len(old_rows) == 3 and new_rows == old_rows and list(new_rows[0]) == list(old_rows[0])  # same order too
    assert all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    assert all(row["select_share"] > 0 and row["adv_abs_mean"] > 0 for row in old_rows)  # the arm selected tokens
