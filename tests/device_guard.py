"""A guard for CPU tests: fail when this project's code builds a tensor without saying on which device.

On the CPU a tensor factory without `device=` is harmless (the default device is the CPU, like every
input), so no CPU test sees it; on a GPU it puts one tensor on the CPU and the first operation that
mixes it with CUDA tensors raises (issue 18: reco_mini.copies_count did). Under `FactoryDeviceGuard`,
each call of a factory below whose caller is a file of this repository (not tests/, not an installed
package) must pass `device=` (deliberate host tensors say device="cpu"); `*_like`, `Tensor.new_*`,
`.to()` and factories called by other libraries are not checked.

    with FactoryDeviceGuard() as guard:
        trainer.train_step()
    assert not guard.violations
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parents[1]
TORCH_DIR = Path(torch.__file__).resolve().parent
FACTORIES = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.arange, torch.empty,
             torch.rand, torch.randn, torch.randint, torch.randperm, torch.linspace, torch.eye}


def project_file(filename: str) -> str | None:
    """The repository-relative path of a source file of this project (tests and installed packages excluded)."""
    path = Path(filename).resolve()
    if not path.is_relative_to(ROOT) or "site-packages" in path.parts:
        return None
    rel = path.relative_to(ROOT)
    return None if rel.parts[0] == "tests" or rel.parts[0].startswith(".") else rel.as_posix()


class FactoryDeviceGuard(TorchFunctionMode):
    """Collects (and with strict=True raises at) every device-less factory call made by this project's code.

    allow: {(path, function)} sites that are known and left to their owners; they are collected in
    `allowed`, not in `violations`.
    """

    def __init__(self, strict: bool = True, allow: set[tuple[str, str]] = frozenset()):
        super().__init__()
        self.strict, self.allow = strict, set(allow)
        self.violations: list[str] = []
        self.allowed: list[str] = []
        self.checked = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and not (func is torch.as_tensor and args and isinstance(args[0], torch.Tensor)):
            self._check(func, kwargs.get("device") is not None)  # as_tensor(tensor) keeps its device: not a factory
        return func(*args, **kwargs)

    def _check(self, func, has_device: bool) -> None:
        frame = sys._getframe(2)
        while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(TORCH_DIR):
            frame = frame.f_back  # the first caller outside torch (e.g. past torch.functional wrappers)
        if frame is None or (path := project_file(frame.f_code.co_filename)) is None:
            return
        self.checked += 1  # project factory calls seen, with or without a device
        if has_device:
            return
        site = f"{path}:{frame.f_lineno} in {frame.f_code.co_name}: torch.{func.__name__} without device="
        if (path, frame.f_code.co_name) in self.allow:
            self.allowed.append(site)
            return
        self.violations.append(site)
        if self.strict:
            raise AssertionError(f"device guard: {site}")
