"""reco_variants.py: the rarely used response weights of reco_mini (`--occurrence token-mean | count | canonical`).

Each gives m_i, the expected copies of y_i in its group, with the signature of reco_mini.OCCURRENCES; reco_mini
files them in that registry, in the order of its flag's help. This module imports nothing of reco_mini: run as a
script, reco_mini.py is __main__, and an `import reco_mini` here would load a second copy with its own registries.
"""
from __future__ import annotations

import torch
from torch import Tensor


def copies_token_mean(lp: Tensor, lengths: Tensor, responses, keys) -> Tensor:
    """m_i with p_i = exp(mean_t log pi_old(y_it)), the geometric-mean token probability."""
    return 1.0 + (lp.shape[1] - 1) * (lp / lengths.clamp(min=1)).exp()


def copies_count(lp: Tensor, lengths, responses: list, keys=None) -> Tensor:
    """m_i = c_i, the copies of y_i in its group: identical token ids (the sequences of p_i)."""
    G = lp.shape[1]
    rows = [responses[i: i + G] for i in range(0, len(responses), G)]
    counts = [[row.count(y) for y in row] for row in rows]
    return torch.tensor(counts, dtype=torch.float64, device=lp.device)


def copies_canonical(lp: Tensor, lengths, responses, keys: list) -> Tensor:
    """m_i = the responses of y_i's group with its canonical key (the task's: reco_task)."""
    return copies_count(lp, lengths, keys)
