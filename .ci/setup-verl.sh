#!/usr/bin/env bash
# Install verl 0.9.1 into a separate virtualenv, .venv-verl, for the verl plugin tests (tests/test_verl.py runs
# its checks with that venv's python) and for running ReCo on verl (docs/verl.md).
#
#   bash .ci/setup-verl.sh          # idempotent: does nothing if .venv-verl already imports verl and the plugin
#
# Why a separate venv: verl 0.9.1 needs transformers<5.11 and this project's requirements.txt needs >=5.16.1.
# Why --no-deps for verl: its dependency list pulls wandb, tensorboard, torchcodec, qwen_vl_utils, nvtx, ...;
# requirements-verl.txt lists what its loss, FSDP engine, workers and v1 trainer import (~1 min, ~1.8 GB).
# The project itself is installed editable (--no-deps) so that its `verl.plugins` entry point
# (pyproject.toml) registers the plugin on `import verl`.
#
# Exit code: 0 in every case where verl simply cannot be installed here (no network, no wheel for this
# platform); the message says so and the verl tests then skip with that reason. Set RECO_REQUIRE_VERL=1 to
# turn such a failure into exit code 1 instead.
# Environment: VERL_VENV (default <repo>/.venv-verl), PYTHON (default python3), VERL_SPEC (default verl==0.9.1).
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
PY="${PYTHON:-python3}"
SPEC="${VERL_SPEC:-verl==0.9.1}"
START=$(date +%s)

say() { echo "[setup-verl] $*"; }
give_up() {
    say "verl could not be installed: $*"
    say "the verl plugin tests (tests/test_verl.py) will be skipped on this machine."
    if [ "${RECO_REQUIRE_VERL:-0}" = "1" ]; then exit 1; fi
    exit 0
}
VERSIONS=""
ENTRY_POINT=$(sed -n 's/^reco = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml")
works() {
    # verl, the modules the plugin and its tests use, this checkout installed with pyproject.toml's entry point
    # (a changed entry point or another checkout's install means: install again), and the trainer registered.
    VERSIONS=$(cd / && "$VENV/bin/python" -c "
import importlib.metadata as md, os
import verl, torch, transformers, pytest, reco_scaled
import verl.workers.utils.losses, verl.workers.engine.fsdp.transformer_impl
from verl.trainer.ppo.v1 import get_trainer_cls
assert [e.value for e in md.entry_points(group='verl.plugins') if e.name == 'reco'] == ['$ENTRY_POINT'], 'entry point'
assert os.path.realpath(reco_scaled.__file__).startswith(os.path.realpath('$ROOT') + os.sep), 'another checkout'
get_trainer_cls('reco')
print(f'verl {verl.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')
" 2>/dev/null | tail -n 1)
    [ -n "$VERSIONS" ]
}
pip_install() {
    # (The grep drops pip's per-package notes about index folders that this machine's pip config names but
    # lacks; pip's own exit status is the one checked.)
    "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q "$@" 2>&1 \
        | grep -v "is ignored: it is neither a file nor a directory"
    return "${PIPESTATUS[0]}"
}

if [ -x "$VENV/bin/python" ] && works; then
    say "$VENV already works ($VERSIONS); nothing to do."
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV with $($PY --version 2>&1)"
    "$PY" -m venv "$VENV" || give_up "'$PY -m venv $VENV' failed"
fi

say "installing requirements-verl.txt and $SPEC (--no-deps) into $VENV (about a minute)"
# pip's global config on this machine (find-links /opt/wheels) supplies the local torch 2.13.0+cpu wheel.
pip_install -r "$ROOT/requirements-verl.txt" || give_up "'pip install -r requirements-verl.txt' failed (see the pip output above)"
pip_install --no-deps "$SPEC" || give_up "'pip install --no-deps $SPEC' failed"
pip_install --no-deps -e "$ROOT" || give_up "'pip install --no-deps -e $ROOT' (the plugin's entry point) failed"

if ! works; then
    say "import check failed; the error was:"
    (cd / && "$VENV/bin/python" -c "import verl.workers.engine.fsdp.transformer_impl; from verl.trainer.ppo.v1 import get_trainer_cls; get_trainer_cls('reco')" 2>&1 | tail -n 15)
    give_up "verl was installed but does not import with the plugin registered"
fi

say "done in $(( $(date +%s) - START )) s: $VERSIONS; venv size $(du -sh "$VENV" 2>/dev/null | cut -f1)"
