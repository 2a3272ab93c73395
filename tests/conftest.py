import os
import sys
from pathlib import Path

import pytest

# Triton kernels run under the interpreter on CPU; this must be set before any @triton.jit runs.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def code_model(tmp_path_factory) -> Path:
    """A tiny model that has learned correct programs for HumanEval/53 and an MBPP row (tests/tiny_code_model.py)."""
    from tiny_code_model import code_model

    return code_model(tmp_path_factory.mktemp("code-model"))


@pytest.fixture
def one_thread():
    """One torch thread for a test of a tiny model (several times faster so on a busy machine), restored after it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def graded(monkeypatch) -> list[str]:
    """The programs that reach reco.rewards.code.grade_many (which still grades them): tests/test_code_task.py and
    tests/test_code_scaled.py."""
    from reco.rewards import code as code_reward

    seen: list[str] = []
    real = code_reward.grade_many

    def spy(programs, tests, **kwargs):
        seen.extend(programs)
        return real(programs, tests, **kwargs)

    monkeypatch.setattr(code_reward, "grade_many", spy)
    return seen
