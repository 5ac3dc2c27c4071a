#!/usr/bin/env bash
# On a machine with a CUDA GPU: the checks and measurements a CPU cannot do, in one command.
#
#   PYTHON=python3 bash scripts/gpu_check.sh [RESULTS_DIR]      # default RESULTS_DIR: benchmarks/results
#
# PYTHON must have a CUDA build of torch plus this package's requirements (scripts/install.sh installs
# the CPU wheel: on a GPU machine, `pip install -e .` into an environment whose torch sees the GPU).
# 1. tests/models/test_cuda.py on its own (the suite's autouse fixture hides GPUs from whole-suite runs)
# 2. benchmarks/model_steps.py --device cuda --one-process: every model's step, fp32 and bf16, with CUDA
#    peak memory, against RecBole's SASRec and FEARec (a model that fails is a row with its error)
# 3. the same for SeqTransformer and EulerFormer under torch.compile (the `compile` switch on CUDA)
# Benchmarks run before the tests, on a quiet GPU; each step runs whatever the others' outcome; the
# exit code is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results}
python=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
"$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch in $python sees no CUDA device')" || exit 2
"$python" -c "import torch; print(torch.cuda.get_device_name(), torch.__version__, torch.version.cuda)" | tee "$out/gpu_check_device.txt"
"$python" benchmarks/model_steps.py --device cuda --one-process --rounds 3 --settle 0 \
    --json "$out/model_steps_cuda.json" 2>&1 | tee "$out/model_steps_cuda.log"
bench=${PIPESTATUS[0]}
"$python" benchmarks/model_steps.py --device cuda --one-process --rounds 1 --settle 0 --compile \
    --models SeqTransformer,EulerFormer --json "$out/model_steps_cuda_compile.json" 2>&1 \
    | tee "$out/model_steps_cuda_compile.log"
compiled=${PIPESTATUS[0]}
"$python" -m pytest -q -p no:cacheprovider tests/models/test_cuda.py 2>&1 | tee "$out/gpu_check_tests.log"
tests=${PIPESTATUS[0]}
for status in "$bench" "$compiled" "$tests"; do [ "$status" -ne 0 ] && exit "$status"; done
exit 0
