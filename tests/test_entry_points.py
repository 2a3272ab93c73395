"""Every entry point turns bad input into one line on stderr and exit code 2, never a traceback.

Each program runs as a user would run it (a subprocess) on a malformed file and on a model that cannot be
loaded: reco_scaled.train, reco_scaled.evaluate, reco_scaled.memory, examples/trl_reco.py and the two
studies (reco_mini's own cases are in tests/test_cli.py). The studies only use reco_mini's built-in tiny
model, so their bad inputs are files: a corrupt run result, a results page without its markers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
MISSING = "/nonexistent/model"
PROBLEMS = "".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n" for a, b in [(1, 2), (3, 4), (5, 6)])
BAD_JSONL = PROBLEMS + '{"problem": \n'  # line 4 is not JSON


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A tiny random Qwen2 (model/), good and malformed problem files, broken paper configs, a study's base."""
    import torch

    from reco.tasks.countdown import char_tokenizer, tiny_model

    root = tmp_path_factory.mktemp("entry")
    torch.manual_seed(0)
    tok = char_tokenizer()
    tiny_model(tok, hidden=32, layers=1).save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "good.jsonl").write_text(PROBLEMS)
    (root / "bad.jsonl").write_text(BAD_JSONL)
    configs = ROOT / "reco_scaled" / "configs"
    for name, edit in (("bad_yaml", lambda text: text + "\ntrain: [unclosed\n"),
                       ("unknown_model", lambda text: text.replace("path: Qwen/Qwen2.5-Math-1.5B", f"path: {MISSING}"))):
        (root / name).mkdir()
        for src in configs.glob("*-reco.yaml"):
            (root / name / src.name).write_text(edit(src.read_text()) if "1.5b" in src.name else src.read_text())
    # the studies' SFT base, cached where they look for it (random weights: these runs never get to train)
    subprocess.run([PY, "-c", "import reco_mini as rm\nfrom reco.tasks import countdown as rc\n"
                    "rc.sft = lambda cfg, model, tokenizer, exclude, demonstration: model\n"
                    "rc.load_base(rm.parse_config(['--quick', '--seed', '0']), rc.char_tokenizer(), set())"],
                   cwd=root, env=env(), check=True, capture_output=True, timeout=300)
    (root / "study" / "base" / "seed0").mkdir(parents=True)
    (root / "study" / "base" / "seed0" / "result.json").write_text('{"config": ')
    (root / "no_markers.md").write_text("# results\n")
    return root


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1"}


TRAIN = [PY, "-m", "reco_scaled.train", "--config", str(ROOT / "reco_scaled/configs/tiny-cpu.yaml"), "out=run", "task=math",
         "data.template=plain", "train.steps=1", "train.prompts_per_step=2", "train.micro_batch_size=4"]
EVALUATE = [PY, "-m", "reco_scaled.evaluate", "--engine", "hf", "--template", "plain", "--n", "2", "--out", "eval"]
TRL = [PY, str(ROOT / "examples/trl_reco.py"), "--max-steps", "1", "--template", "plain"]
CPU_STUDY = [PY, str(ROOT / "experiments/cpu_study.py"), "--quick", "--out", "study", "--seeds", "1"]
FRONTIER = [PY, str(ROOT / "experiments/frontier_study.py"), "--quick", "--out", "frontier", "--aggregate-only"]

CASES = {
    # reco_mini's own cases are in tests/test_cli.py (test_malformed_jsonl_..., test_model_that_cannot_be_loaded_...)
    "reco_scaled.train, malformed data": (TRAIN + ["model.path=model", "data.train=bad.jsonl"],
                                          "data error: bad.jsonl:4: not valid JSON"),
    "reco_scaled.train, missing model": (TRAIN + [f"model.path={MISSING}", "data.train=good.jsonl"],
                                         f"config error: config key 'model.path' {MISSING}: no such directory"),
    "reco_scaled.evaluate, malformed data": (EVALUATE + ["--model", "model", "--files", "b=bad.jsonl"],
                                             "error: bad.jsonl:4: not valid JSON"),
    "reco_scaled.evaluate, missing model": (EVALUATE + ["--model", MISSING, "--files", "g=good.jsonl"],
                                            f"error: --model {MISSING}: no such directory"),
    "reco_scaled.memory, malformed config": ([PY, "-m", "reco_scaled.memory", "--configs", "bad_yaml"],
                                             "qwen2.5-math-1.5b-reco.yaml: not valid YAML"),
    "reco_scaled.memory, unknown model": ([PY, "-m", "reco_scaled.memory", "--configs", "unknown_model"],
                                          f"no shape for model '{MISSING}'"),
    "examples/trl_reco.py, malformed data": (TRL + ["--tiny", "--data", "bad.jsonl"], "bad.jsonl:4: not valid JSON"),
    "examples/trl_reco.py, missing model": (TRL + ["--model", MISSING, "--data", "good.jsonl"],
                                            f"--model {MISSING}: no such directory"),
    "cpu_study, corrupt run result": (CPU_STUDY + ["--variants", "base"], "cpu_study.py: error: "),
    "frontier_study, page without markers": (FRONTIER + ["--write-readme", "no_markers.md"],
                                             "no_markers.md has no <!-- frontier-study:begin -->"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_code_2(work, case):
    if case.startswith("examples/trl_reco.py"):
        pytest.importorskip("trl", reason="examples/trl_reco.py needs requirements-trl.txt (CI installs it)")
    argv, needle = CASES[case]
    proc = subprocess.run(argv, cwd=work, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines()  # progress bars and warnings are not error lines
             if line.strip() and "%|" not in line and "warn" not in line.lower()]
    assert lines and needle in lines[-1], proc.stderr[-3000:]
    assert len(lines) == 1, f"more than one line of error:\n{proc.stderr[-3000:]}"
