"""The device guard (tests/device_guard.py) over one full reco_scaled step and one TRL ReCo step (issue 18).

No tensor factory on these paths may go without `device=`: on a GPU such a tensor lands on the CPU, as
reco_mini.copies_count's did before c15662b. The first tests show the guard catches that on synthetic code
that sits, by its file name, in the repository.
"""
from __future__ import annotations

import pytest
import torch
from device_guard import ROOT, FactoryDeviceGuard

TINY = str(ROOT / "reco_scaled" / "configs" / "tiny-cpu.yaml")
# Known device-less factories in project code that the guard tolerates: none left (hf_engine._sample was fixed).
KNOWN: set[tuple[str, str]] = set()

OLD_COPIES_COUNT = '''
def copies_count(lp, lengths, responses):
    P, G = lp.shape
    rows = [responses[p * G: (p + 1) * G] for p in range(P)]
    return torch.tensor([[row.count(y) for y in row] for row in rows], dtype=torch.float64)
'''


def load_as(source: str, path: str) -> dict:
    """Run `source` as if it were the file ROOT/path (the guard looks at the caller's file name only)."""
    namespace = {"torch": torch}
    exec(compile(source, str(ROOT / path), "exec"), namespace)
    return namespace


def test_guard_catches_the_old_copies_count():
    old = load_as(OLD_COPIES_COUNT, "reco_mini.py")["copies_count"]
    with pytest.raises(AssertionError, match=r"device guard: reco_mini.py:5 in copies_count: torch.tensor without device="):
        with FactoryDeviceGuard():
            old(torch.zeros(1, 2), None, [(1,), (1,)])


@pytest.mark.parametrize("call, caught", [
    ("torch.zeros(3)", True), ("torch.arange(4)", True), ("torch.full((2,), 1.0)", True), ("torch.randn(2)", True),
    ("torch.randint(0, 5, (2,))", True), ("torch.as_tensor([1.0])", True), ("torch.empty(2, device=None)", True),
    ("torch.zeros(3, device=x.device)", False), ('torch.tensor([1.0], device="cpu")', False),
    ("torch.zeros_like(x)", False), ("x.new_zeros(3)", False), ("torch.as_tensor(x)", False),
])
def test_guard_on_synthetic_factories(call, caught):
    fn = load_as(f"def make(x):\n    return {call}\n", "reco_scaled/synthetic.py")["make"]
    with FactoryDeviceGuard(strict=False) as guard:
        fn(torch.ones(2))
    assert bool(guard.violations) == caught, guard.violations
    in_tests = load_as(f"def make(x):\n    return {call}\n", "tests/synthetic.py")["make"]
    with FactoryDeviceGuard(strict=False) as guard:
        in_tests(torch.ones(2))
    assert not guard.violations  # tests may build CPU tensors freely


@pytest.fixture
def tiny_model(monkeypatch):
    from reco_scaled.config import load_config
    from reco_scaled.model import build_tiny_countdown, path_ready, tiny_countdown_dir

    monkeypatch.chdir(ROOT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = load_config(TINY)
    if not path_ready(tiny_countdown_dir(cfg)):
        build_tiny_countdown(cfg, tiny_countdown_dir(cfg))
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("overrides", [
    ["algo.occurrence=count"],
    ["algo.occurrence=token-mean", "train.fused_kernel=true", "algo.kl_coef=0.01", "algo.variance_norm=none"],
], ids=["count", "token-mean-fused-kl"])
def test_one_reco_scaled_step_under_the_guard(tmp_path, tiny_model, overrides):
    from reco_scaled import distributed
    from reco_scaled.config import load_config
    from reco_scaled.trainer import Trainer

    cfg = load_config(TINY, [f"out={tmp_path}", "train.steps=1", *overrides])
    trainer = Trainer(cfg, distributed.init())
    with FactoryDeviceGuard(allow=KNOWN) as guard:
        row = trainer.train_step()
    assert guard.checked > 0 and not guard.violations
    assert row["w_max"] > row["w_min"]  # the occurrence weights really were computed (not all 1)
    print(f"{guard.checked} project factory calls checked; known elsewhere: {sorted(set(guard.allowed))}")
    assert guard.checked > len(guard.allowed)  # reco_scaled's and reco_mini's own factories were seen too


def test_one_trl_reco_step_under_the_guard(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    from reco.tasks.countdown import char_tokenizer, tiny_model
    from reco_scaled.integrations.trl import ReCoGRPOConfig, ReCoGRPOTrainer

    torch.manual_seed(0)
    tok = char_tokenizer()
    model = tiny_model(tok, hidden=32, layers=2)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)  # peaked distributions: repeated responses, weights away from 1
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    args = ReCoGRPOConfig(output_dir=str(tmp_path / "out"), report_to="none", bf16=False, use_cpu=True, seed=0,
                          num_generations=4, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                          max_completion_length=6, logging_steps=1, save_strategy="no", disable_tqdm=True,
                          method="reco", occurrence="count", max_steps=1)
    trainer = ReCoGRPOTrainer(model=str(tmp_path / "model"), args=args,
                              reward_funcs=lambda completions, **kw: [float(len(c) % 2 == 0) for c in completions],
                              processing_class=AutoTokenizer.from_pretrained(tmp_path / "model"),
                              train_dataset=Dataset.from_dict({"prompt": ["3 5 7:", "12 4 9:", "8 2 6:", "1 9 5:"]}))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with FactoryDeviceGuard() as guard:
            trainer.train()
    finally:
        torch.set_num_threads(threads)
    assert guard.checked > 0 and not guard.violations
    print(f"{guard.checked} project factory calls checked")
    row = next(r for r in trainer.state.log_history if "loss" in r)
    assert "reco/rho_mean" in row and "reco/w_mean" in row
