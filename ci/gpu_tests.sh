#!/usr/bin/env bash
# The GPU test run: every test of every package in this interpreter, GPU tests included (tests marked
# `gpu` skip only where no GPU exists). Used on the GPU host and by `nox -s gpu`.
#   ci/gpu_tests.sh [pytest args...]      e.g. ci/gpu_tests.sh -m "gpu or detector" -x
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
python3 - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
PY
exec python3 -m pytest -p no:cacheprovider "$@"
