"""The rollout engine interface shared by the HF and vLLM engines."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    """G samples per prompt, prompt-major: entry i*G + g is sample g of prompt i."""

    prompt_ids: list[list[int]]  # [P*G] prompt token ids (each prompt repeated G times)
    response_ids: list[list[int]]  # [P*G] response token ids, unpadded, EOS included if sampled
    sampler_logprobs: list[list[float]]  # [P*G] per response token, log-prob under the sampler (temperature-scaled)


class RolloutEngine(ABC):
    """Generates rollouts from the current policy; the trainer recomputes log pi_old itself."""

    @abstractmethod
    def generate(
        self,
        prompt_ids: list[list[int]],
        n: int,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
    ) -> Rollout:
        """Sample n responses for each prompt."""

    @abstractmethod
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Push the trainer's current weights into the engine."""

    def sleep(self) -> None:
        """Release engine memory between rollout phases (no-op where nothing to release)."""

    def wake(self) -> None:
        """Re-acquire engine memory before the next rollout phase."""
