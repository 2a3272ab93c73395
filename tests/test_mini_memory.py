"""benchmarks/mini_memory.py --acceptance --smoke: the acceptance check's code path (one reco_mini RL step with
--micro-batch 4 --dtype bfloat16 --gradient-checkpointing on a random Qwen2.5-vocabulary model), tiny, on CPU."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_acceptance_smoke_writes_its_report(tmp_path):
    spec = importlib.util.spec_from_file_location("mini_memory", ROOT / "benchmarks" / "mini_memory.py")
    mini_memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mini_memory)
    mini_memory.main(["--acceptance", "--smoke", "--json", str(tmp_path / "smoke.json")])
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert report["ok"] and report["device"] == "cpu" and report["flags"] == mini_memory.AFTER
    assert report["peak_gb"] > 0 and report["rows"] == 8 and report["prompt_len"] > 0


def test_bilinear_fit_recovers_the_terms_of_a_hand_made_grid():
    spec = importlib.util.spec_from_file_location("mini_memory", ROOT / "benchmarks" / "mini_memory.py")
    mini_memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mini_memory)
    a, b, c, d, prompt = 5e8, 3e6, 7e5, 2.5e4, 91  # bytes: constant, per row, per token, per row-token

    def increase(rows, new):
        return a + b * rows + c * (prompt + new) + d * rows * (prompt + new)

    grid = {(r, t): {"increase": increase(r, t), "prompt_len": prompt} for r, t in mini_memory.SIZES}
    fit = mini_memory.bilinear_fit(grid)
    for key, value in (("constant", a), ("per_row", b), ("per_token", c), ("per_row_token", d)):
        assert abs(fit[key] - value) <= 1e-6 * value, key


@pytest.mark.slow
def test_acceptance_smoke_with_lora_on_the_1_5b_shape(tmp_path):
    """The GPU check of issue 62's 24 GB command (--shape qwen2.5-math-1.5b --lora-rank 16 --no-checkpointing,
    target 24 GB), tiny, on CPU."""
    spec = importlib.util.spec_from_file_location("mini_memory", ROOT / "benchmarks" / "mini_memory.py")
    mini_memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mini_memory)
    mini_memory.main(["--acceptance", "--smoke", "--shape", "qwen2.5-math-1.5b", "--lora-rank", "16",
                      "--no-checkpointing", "--json", str(tmp_path / "smoke.json")])
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert report["flags"] == ["--micro-batch", "4", "--dtype", "bfloat16", "--lora-rank", "16"]
    assert report["ok"] and report["target_gb"] == 24.0 and report["shape"].startswith("qwen2.5-math-1.5b")


@pytest.mark.parametrize("shape", ["qwen2.5-0.5b", "qwen2.5-math-1.5b"])
def test_lora_params_are_rank_times_in_plus_out_of_every_projection(shape):
    """peft's count (on a meta-device model) against LoRA's closed form: r (d_in + d_out) per adapted linear layer."""
    from reco_scaled.shapes import SHAPES

    spec = importlib.util.spec_from_file_location("mini_memory", ROOT / "benchmarks" / "mini_memory.py")
    mini_memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mini_memory)
    c = SHAPES[shape]
    h, i = c["hidden_size"], c["intermediate_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    per_layer = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h)  # q, k and v, o, gate and up, down
    for rank in (16, 64):
        assert mini_memory.lora_params(shape, rank) == rank * per_layer * c["num_hidden_layers"]
