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
    (["--group-size", "1"], "--group-size"),
    (["--clip-low", "0"], "--clip-low"),
    (["--clip-high", "-0.1"], "--clip-high"),
    (["--n-eval", "8", "--ks", "1,16"], "--ks"),
    (["--methods", "grpo,ppo"], "--methods"),
    (["--lr", "fast"], "invalid float value"),
    (["--task", "math"], "--model and --data"),
])
def test_bad_flags_give_one_line_and_exit_2(capsys, args, needle):
    from reco_mini import parse_config

    with pytest.raises(SystemExit) as exc:
        parse_config(args)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_bad_flag_exit_code_of_the_real_program(tmp_path):
    proc = run(["--group-size", "1"], tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["reco_mini.py: error: --group-size must be >= 2"]


def test_malformed_jsonl_names_file_line_and_field(tmp_path):
    from reco_mini import load_jsonl

    data = tmp_path / "probs.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n\n{"problem": "2+2"}\n')
    with pytest.raises(SystemExit, match=r"probs.jsonl:3: missing or non-scalar field 'answer'"):
        load_jsonl(str(data))
    data.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": \n')
    with pytest.raises(SystemExit, match=r"probs.jsonl:2: not valid JSON"):
        load_jsonl(str(data))


@pytest.mark.slow
def test_quick_pipeline_end_to_end(tmp_path):
    proc = run(["--quick", "--out", "runs/q"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "runs/q/results.json").read_text())
    assert set(results["methods"]) == {"base", "grpo", "reco"}
    n = results["config"]["n_eval"]
    for res in results["methods"].values():
        ks = [int(k) for k in res["pass_at_k"]]
        assert ks == [2 ** i for i in range(len(ks))] and ks[-1] == n
        curve = list(res["pass_at_k"].values())
        assert all(0.0 <= a <= b <= 1.0 for a, b in zip(curve, curve[1:]))  # Pass@k is monotone in k
        assert res["pass_at_k"]["1"] == pytest.approx(res["mean_accuracy"])
        assert 0.0 <= res["solved_any"] <= 1.0 and res["distinct_correct"] >= 0.0
    assert (tmp_path / "runs/q/pass_at_k.png").stat().st_size > 1000
    for method in ("grpo", "reco"):
        rows = [json.loads(x) for x in (tmp_path / f"runs/q/{method}/log.jsonl").read_text().splitlines()]
        assert len(rows) == results["config"]["steps"]
        for key in ("reward_mean", "w_min", "w_max", "clip_frac_low", "clip_frac_high", "kl_base", "entropy",
                    "grad_norm", "v_old_mean", "time_rollout"):
            assert key in rows[0]
    assert "pass@k" in proc.stdout


@pytest.mark.slow
def test_math_path_on_tiny_random_qwen2(tmp_path):
    import torch

    from reco_mini import char_tokenizer, tiny_model

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
                "--out", "runs/m"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "runs/m/results.json").read_text())
    assert set(results["methods"]) == {"base", "grpo"}
    assert results["methods"]["base"]["pass_at_k"].keys() == {"1", "2", "4"}


def test_nan_loss_stops_with_message_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    import torch

    import reco_mini

    calls = {"n": 0}
    real_loss = reco_mini.policy_loss

    def loss_that_turns_nan(*args, **kwargs):  # finite for 10 steps (4 updates each), then NaN
        calls["n"] += 1
        loss, stats = real_loss(*args, **kwargs)
        return (loss * float("nan") if calls["n"] > 40 else loss), stats

    monkeypatch.setattr(reco_mini, "policy_loss", loss_that_turns_nan)
    cfg = reco_mini.parse_config(["--quick", "--steps", "12"])
    tok = reco_mini.char_tokenizer()
    torch.manual_seed(0)
    model, base = reco_mini.tiny_model(tok, 32, 2), reco_mini.tiny_model(tok, 32, 2)
    problems = reco_mini.make_splits(cfg)["train"]
    with pytest.raises(SystemExit, match=r"non-finite loss or gradient in grpo at step 10; last good checkpoint kept at"):
        reco_mini.train_rl(cfg, "grpo", model, base, tok, problems, tmp_path)
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in state.values())
