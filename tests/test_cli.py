"""reco_mini.py as a program: bad input, the --quick pipeline, the math path on a tiny model."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "reco_mini.py")


def run(args, cwd, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.mark.parametrize("args, needle", [
    (["--bogus"], "unrecognized arguments"),
    (["--group-size", "1"], "--group-size must be >= 2"),
    (["--clip-low", "0"], "--clip-low"),
    (["--clip-high", "-0.1"], "--clip-high"),
    (["--n-eval", "8", "--ks", "1,16"], "--ks"),
    (["--methods", "grpo,ppo"], "--methods"),
    (["--lr", "fast"], "invalid float value"),
    (["--task", "math"], "--model and --data"),
    (["--temperature", "0"], "--temperature must be > 0"),
    (["--temperature", "-1"], "--temperature must be > 0"),
    (["--steps", "-1"], "--steps must be >= 1"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--occurrence", "sometimes"], "--occurrence must be one of ['sequence', 'token-mean', 'count', 'canonical', 'none']"),
    (["--token-ratio", "ppo"], "--token-ratio must be one of ['is', 'variance', 'variance-old'"),  # + simko once lab is imported
    (["--focal-gamma", "-1"], "--focal-gamma must be >= 0"),
    (["--task", "math", "--model", "m", "--data", "/nonexistent/train.jsonl"], "/nonexistent/train.jsonl: no such file"),
])
def test_bad_flags_give_one_line_and_exit_2(capsys, args, needle):
    from reco_mini import parse_config

    with pytest.raises(SystemExit) as exc:
        parse_config(args)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_a_config_built_in_code_is_validated():
    from reco_mini import Config, ConfigError, LossConfig

    with pytest.raises(ConfigError, match="--temperature must be > 0"):
        Config(temperature=0.0)
    with pytest.raises(ConfigError, match="--token-ratio must be one of"):
        LossConfig(token_ratio="ppo")
    assert Config(quick=True).out == "runs/quick" and Config().out == "runs/default"
    assert Config(task="code-tiny").out == "runs/code-tiny" and Config(task="code-tiny", quick=True).out == "runs/code-tiny-quick"


def test_start_up_lines_show_only_the_settings_that_differ():
    from reco.cli import describe_settings
    from reco_mini import parse_config

    text = describe_settings(parse_config(["--quick", "--lr", "1e-3", "--occurrence-apply", "all"]))
    lines = text.splitlines()
    assert lines[0].startswith("reco_mini.py: grpo, reco on ") and "runs/quick/" in lines[0]
    assert any(line.split() == ["--lr", "0.001", "(default", "0.0002)"] for line in lines)
    assert any(line.split() == ["--quick", "(default", "off)"] for line in lines)
    assert any(line.split() == ["--steps", "4", "(default", "60)"] for line in lines)  # --quick's budget is shown too
    assert not any(flag in text for flag in ("--seed", "--group-size", "--clip-low", "{"))
    assert describe_settings(parse_config([])).splitlines()[1:] == ["  every setting at its default"]


def test_every_flag_has_help_text():
    from dataclasses import fields

    from reco_mini import Config

    assert all(f.metadata.get("help") for f in fields(Config))


def test_bad_flag_exit_code_of_the_real_program(tmp_path):
    proc = run(["--group-size", "1"], tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["reco_mini.py: error: --group-size must be >= 2, got 1"]


def test_model_that_cannot_be_loaded_is_one_line_and_exit_2(tmp_path):
    proc = run(["--model", str(tmp_path / "nonexistent"), "--steps", "1"], tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == f"reco_mini.py: error: --model {tmp_path / 'nonexistent'}: no such directory"
    assert "Traceback" not in proc.stderr


def test_malformed_jsonl_names_file_line_and_field(tmp_path):
    data = tmp_path / "probs.jsonl"
    for text, needle in [('{"problem": "1+1", "answer": "2"}\n\n{"problem": "2+2"}\n', "probs.jsonl:3: missing field 'answer'"),
                         ('{"problem": "1+1", "answer": "2"}\n{"problem": \n', "probs.jsonl:2: not valid JSON")]:
        data.write_text(text)
        proc = run(["--task", "math", "--model", "unused", "--data", str(data)], tmp_path, timeout=300)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert needle in proc.stderr.strip().splitlines()[-1]


def test_math_held_out_split_is_fixed_and_disjoint(tmp_path):
    from reco.data.math import math_splits

    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(10)))
    a, b = math_splits(str(data)), math_splits(str(data))
    assert [p["id"] for p in a["test"]] == [p["id"] for p in b["test"]] and len(a["test"]) == 2
    assert not {p["id"] for p in a["train"]} & {p["id"] for p in a["test"]} and len(a["train"]) == 8
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"problem": "9+9", "answer": "18"}) + "\n")
    c = math_splits(str(data), str(held))
    assert len(c["train"]) == 10 and [p["problem"] for p in c["test"]] == ["9+9"]


@pytest.mark.slow
def test_quick_pipeline_end_to_end(tmp_path):
    proc = run(["--quick"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "runs/quick/results.json").read_text())  # --quick never overwrites runs/default
    assert not (tmp_path / "runs/default").exists()
    assert results["methods"]["base"]["pass_at_k"]["32"] > 0  # the smoke run's base solves something
    assert set(results["methods"]) == {"base", "grpo", "reco"}
    n = results["config"]["n_eval"]
    for res in results["methods"].values():
        ks = [int(k) for k in res["pass_at_k"]]
        assert ks == [2 ** i for i in range(len(ks))] and ks[-1] == n
        curve = list(res["pass_at_k"].values())
        assert all(0.0 <= a <= b <= 1.0 for a, b in zip(curve, curve[1:]))  # Pass@k is monotone in k
        assert res["pass_at_k"]["1"] == pytest.approx(res["mean_accuracy"])
        assert 0.0 <= res["solved_any"] <= 1.0 and res["distinct_correct"] >= 0.0
    assert (tmp_path / "runs/quick/pass_at_k.png").stat().st_size > 1000
    for method in ("grpo", "reco"):
        rows = [json.loads(x) for x in (tmp_path / f"runs/quick/{method}/log.jsonl").read_text().splitlines()]
        assert len(rows) == results["config"]["steps"]
        for key in ("reward_mean", "w_min", "w_max", "clip_frac_low", "clip_frac_high", "kl_base", "entropy",
                    "grad_norm", "v_old_mean", "time_rollout"):
            assert key in rows[0]
    assert "pass@k" in proc.stdout
    first = proc.stdout.splitlines()[0]  # the start-up lines, not the whole config
    assert first.startswith("reco_mini.py: grpo, reco on ") and "writing runs/quick/" in first and "  --quick" in proc.stdout


@pytest.mark.slow
def test_math_path_on_tiny_random_qwen2(tmp_path):
    import torch

    from reco.tasks.countdown import char_tokenizer, tiny_model

    torch.manual_seed(0)
    tok = char_tokenizer()
    model_dir = tmp_path / "tiny-qwen2"
    tiny_model(tok, hidden=32, layers=2).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n"
                            for a, b in [(1, 2), (3, 4), (10, 5), (7, 7), (2, 9)]))
    proc = run(["--task", "math", "--model", str(model_dir), "--data", str(data), "--methods", "grpo",
                "--steps", "2", "--prompts-per-step", "2", "--n-eval", "4", "--max-new-tokens", "8",
                "--out", "runs/m", "--log", "tensorboard"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "runs/m/results.json").read_text())
    assert set(results["methods"]) == {"base", "grpo"}
    assert results["methods"]["base"]["pass_at_k"].keys() == {"1", "2", "4"}
    assert list((tmp_path / "runs/m/grpo/tensorboard").glob("events.out.tfevents.*"))  # --log tensorboard


def test_nan_loss_stops_with_message_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    import torch

    import reco_mini
    from reco.tasks import countdown

    calls = {"n": 0}
    real_loss = reco_mini.policy_loss

    def loss_that_turns_nan(*args, **kwargs):  # finite for 10 steps (4 updates each), then NaN
        calls["n"] += 1
        loss, stats = real_loss(*args, **kwargs)
        return (loss * float("nan") if calls["n"] > 40 else loss), stats

    monkeypatch.setattr(reco_mini, "policy_loss", loss_that_turns_nan)
    cfg = reco_mini.parse_config(["--quick", "--steps", "12"])
    tok = countdown.char_tokenizer()
    torch.manual_seed(0)
    model, base = countdown.tiny_model(tok, 32, 2), countdown.tiny_model(tok, 32, 2)
    problems = countdown.make_splits(cfg)["train"]
    with pytest.raises(SystemExit, match=r"non-finite loss or gradient in grpo at step 10; last good checkpoint kept at"):
        reco_mini.train_rl(cfg, "grpo", model, base, tok, problems, tmp_path)
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in state.values())
