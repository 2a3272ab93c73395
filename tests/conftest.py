import os
import sys
from pathlib import Path

# Triton kernels run under the interpreter on CPU; this must be set before any @triton.jit runs.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
