"""A weights file that cannot be read is bad input (issue 32 item 9): reco_mini.py --task math and reco_scaled.train
each say so in one line naming the file, with exit code 2, where a truncated model.safetensors gave a full traceback
(`SafetensorError: ... incomplete metadata`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """good/: a tiny random Qwen2 with its tokenizer; header/ and data/: the same with model.safetensors cut inside
    its header and inside its tensors; problems.jsonl."""
    import torch

    from reco.tasks.countdown import char_tokenizer, tiny_model

    root = tmp_path_factory.mktemp("weights")
    torch.manual_seed(0)
    tok = char_tokenizer()
    tiny_model(tok, hidden=32, layers=1).save_pretrained(root / "good")
    tok.save_pretrained(root / "good")
    size = (root / "good" / "model.safetensors").stat().st_size
    for name, keep in (("header", 50), ("data", size - 100)):
        (root / name).mkdir()
        for f in (root / "good").iterdir():
            (root / name / f.name).write_bytes(f.read_bytes()[:keep] if f.name == "model.safetensors" else f.read_bytes())
    (root / "problems.jsonl").write_text("".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n"
                                                 for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (9, 1)]))
    return root


def test_unreadable_weights_names_the_file(work):
    from reco.hf import unreadable_weights

    assert unreadable_weights(work / "good") is None
    for name in ("header", "data"):
        problem = unreadable_weights(work / name)
        assert problem.startswith(f"{work / name / 'model.safetensors'}: cannot read its weights ("), problem


ENTRY_POINTS = {
    "reco_mini.py --task math": [PY, str(ROOT / "reco_mini.py"), "--task", "math", "--data", "problems.jsonl", "--steps", "1",
                                 "--model"],
    "reco_scaled.train": [PY, "-m", "reco_scaled.train", "--config", str(ROOT / "reco_scaled/configs/tiny-cpu.yaml"),
                          "out=run", "task=math", "data.template=plain", "data.train=problems.jsonl", "model.path="],
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_truncated_weights_are_one_line_and_exit_code_2(work, entry):
    """Cut inside the tensors: the issue's `incomplete metadata, file not fully covered`."""
    argv, cut = ENTRY_POINTS[entry], "data"
    argv = [*argv[:-1], argv[-1] + cut] if argv[-1].endswith("=") else [*argv, cut]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip() and "%|" not in x and "warn" not in x.lower()]
    assert len(lines) == 1 and f"{cut}/model.safetensors: cannot read its weights" in lines[0], proc.stderr[-3000:]
