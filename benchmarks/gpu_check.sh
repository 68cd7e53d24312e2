#!/usr/bin/env bash
# The prepared GPU check of issue 19: run it as is on a machine with one H100/H200-class GPU,
# from anywhere in a checkout:
#
#     bash benchmarks/gpu_check.sh              # everything, into results/gpu-check-<UTC date>/
#     bash benchmarks/gpu_check.sh --dry-run    # print the steps and their commands, run nothing
#                                               # (or GPU_CHECK_DRY_RUN=1)
#
# Steps (each with a time limit; the timed steps 1-5 are sized for < 8 min on one H200, step 0's
# downloads are extra and skipped when already done):
#   0 setup         install the package with its test extras (make install-test: torch is kept),
#                   fetch the default pair (bf16 on CUDA), a peer venv with outlines 1.3.3
#   1 env           environment report: GPU, driver, CUDA, torch, triton, transformers, outlines
#   2 kernels       the kernel and device tests compiled on the GPU (TRITON_INTERPRET unset) and
#                   the verify microseconds table (B 1,8,64 x k 1,4,8, V 151,936), Triton beside torch
#   3 e2e           the default pair on --device cuda: target-only, speculative (default mode,
#                   k5+grammar+lookup) and the outlines peer, greedy and T=0.7, the 8 bench prompts;
#                   tok/s, ratios, valid, greedy identity (e2e/e2e_summary.md)
#   4 distribution  the exhaustive distribution tests with the CUDA (Triton) verify, negative control included
#   5 batched       batched throughput at 1, 8 and 32 concurrent clients (bench.py --concurrency)
#
# It fails loudly: the first failing step stops the run with a non-zero exit and its name; nothing
# is skipped. Every log, table and JSON lands in the one results folder (steps.tsv: step, status,
# seconds). Environment: PYTHON (default python3), GPU_CHECK_OUT (the folder), GPU_CHECK_SKIP_SETUP=1
# (environment already installed and models fetched), PEER_PYTHON (an interpreter with outlines).
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DRY_RUN="${GPU_CHECK_DRY_RUN:-0}"
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,28p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check: unknown argument $arg (use --dry-run or --help)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
OUT="${GPU_CHECK_OUT:-results/gpu-check-$(date -u +%Y%m%d-%H%M)}"
PEER_PYTHON="${PEER_PYTHON:-$ROOT/.venv-peer/bin/python}"
unset TRITON_INTERPRET  # compiled kernels only; step 1 fails if something sets it again
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-0}" TOKENIZERS_PARALLELISM=false

# step NUMBER NAME TIME_LIMIT_S COMMAND: run COMMAND (a bash string) under a time limit, log to
# OUT/NUMBER-NAME.log, stop everything on failure naming the step.
step() {
  local number="$1" name="$2" limit="$3" command="$4"
  if [[ "$DRY_RUN" == 1 ]]; then
    printf 'step %s %s (limit %ss):\n    %s\n' "$number" "$name" "$limit" "$command"
    return 0
  fi
  local log="$OUT/$number-$name.log" start=$SECONDS status=0
  echo "== step $number $name (limit ${limit}s) -> $log"
  timeout --signal=TERM --kill-after=20 "$limit" bash -o pipefail -c "$command" 2>&1 | tee "$log" || status=$?
  local took=$((SECONDS - start))
  if [[ $status -ne 0 ]]; then
    local why="exit $status"
    [[ $status -eq 124 ]] && why="ran past its ${limit}s limit"
    printf '%s\t%s\tFAILED (%s)\t%s\n' "$number" "$name" "$why" "$took" >> "$OUT/steps.tsv"
    echo "GPU CHECK FAILED at step $number ($name): $why after ${took}s; see $log" | tee -a "$OUT/FAILED" >&2
    exit 1
  fi
  printf '%s\t%s\tok\t%s\n' "$number" "$name" "$took" >> "$OUT/steps.tsv"
}

if [[ "$DRY_RUN" == 1 ]]; then
  echo "gpu_check dry run: results would go to $OUT (python: $PYTHON, peer: $PEER_PYTHON)"
else
  mkdir -p "$OUT"
  printf 'step\tname\tstatus\tseconds\n' > "$OUT/steps.tsv"
  git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
fi

# 0: install, models, the peer's venv (each part is a no-op when already done)
if [[ "${GPU_CHECK_SKIP_SETUP:-0}" == 1 ]]; then
  SETUP="echo 'setup skipped (GPU_CHECK_SKIP_SETUP=1)'"
else
  SETUP="make install-test PYTHON='$PYTHON' \
 && '$PYTHON' -m constrained_spec.cli fetch-models \
 && { [ -x '$PEER_PYTHON' ] || '$PYTHON' -m venv --system-site-packages '$(dirname "$(dirname "$PEER_PYTHON")")'; } \
 && { '$PEER_PYTHON' -c 'import outlines' 2>/dev/null || '$PEER_PYTHON' -m pip install --quiet outlines==1.3.3; }"
fi
step 0 setup 1200 "$SETUP"

# 1: environment report (fails without CUDA, without a compiled triton, or with the interpreter on)
step 1 env 120 "nvidia-smi && '$PYTHON' benchmarks/gpu_check_report.py env '$OUT' --peer-python '$PEER_PYTHON'"

# 2: kernel + device tests on the GPU, then the microseconds table
step 2 kernels 240 "CONSTRAINED_SPEC_TEST_DEVICE=cuda '$PYTHON' -m pytest -p no:cacheprovider -q -rs \
 tests/sampling/test_kernels.py tests/sampling/test_host_hints.py tests/engine/test_devices.py tests/models/test_device_option.py \
 --junitxml '$OUT/kernel-tests.xml' \
 && '$PYTHON' benchmarks/kernel_bench.py --require-triton --batches 1,8,64 --ks 1,4,8 --vocab 151936 --json '$OUT/kernel_table.json'"

# 3: end to end on the default pair, on the GPU
step 3 e2e 420 "'$PYTHON' benchmarks/bench.py --device cuda --workload default --prompts 8 --ks 5 --proposer-k 5 \
 --modes target,k5+grammar+lookup,peer --temperature 0.7 --peer-python '$PEER_PYTHON' --out '$OUT/e2e' --no-progress \
 && '$PYTHON' benchmarks/gpu_check_report.py e2e '$OUT/e2e'"

# 4: the exhaustive distribution tests with the CUDA verify (the Triton kernel where no row filters)
# (the cases the Triton kernel decides: no top-k / top-p; 10,000 runs each, negative controls included)
step 4 distribution 300 "CONSTRAINED_SPEC_TEST_DEVICE=cuda CONSTRAINED_SPEC_DIST_SAMPLES=10000 '$PYTHON' -m pytest -p no:cacheprovider -q -rs \
 tests/engine/test_distribution.py -k 'runs_on_the_test_device or T1-k3 or negative_controls or (point_mass and T1)' \
 --junitxml '$OUT/distribution-tests.xml'"

# 5: batched throughput at 1, 8 and 32 concurrent clients (benchmarks/concurrency.py through bench.py
# --concurrency: one-at-a-time against continuous batching; its Generators load on device auto, which
# step 1 has shown is CUDA here)
step 5 batched 360 "'$PYTHON' -m benchmarks.bench --help | grep -q -- --concurrency \
 || { echo 'step 5 (batched): benchmarks/bench.py has no --concurrency option: the batch API is not there' >&2; exit 3; }; \
 '$PYTHON' -m benchmarks.bench --concurrency 1,8,32 --prompts 32 --out '$OUT/batched'"

if [[ "$DRY_RUN" == 1 ]]; then
  exit 0
fi
echo "GPU CHECK PASSED: every step ran; results in $OUT (steps.tsv, env.json, kernel_table.json, e2e/e2e_summary.md, batched/)"
