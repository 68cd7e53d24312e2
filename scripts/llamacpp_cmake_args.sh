# shellcheck shell=bash
# The CMake flags llama.cpp is built with here, sourced by scripts/install_llamacpp.sh (the binding) and
# scripts/build_llama_server.sh (the llama-server peer), so both are built alike. Sets and exports CMAKE_ARGS.
# The string is part of the binding's wheel-cache key: changing it rebuilds.
# GGML_OPENMP=OFF: ggml's own threads, which sleep between graphs. With OpenMP (the default) the workers of
# libgomp spin after every decode and fight torch's own OpenMP threads and other contexts for the 2 cores: on the
# real target (2026-12-04) one token went from 74 ms to 80-745 ms, 2 rows of one token up to 3.4 s.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DGGML_BLAS=OFF -DGGML_CUDA=OFF -DLLAVA_BUILD=OFF -DGGML_OPENMP=OFF ${LLAMACPP_EXTRA_CMAKE_ARGS:-}"
if ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  echo "this CPU has no AVX2: building with GGML_AVX2/FMA/F16C/BMI2 off (slower)" >&2
  CMAKE_ARGS="${CMAKE_ARGS//-DGGML_AVX2=ON/-DGGML_AVX2=OFF}"
  CMAKE_ARGS="${CMAKE_ARGS//-DGGML_FMA=ON/-DGGML_FMA=OFF}"
  CMAKE_ARGS="${CMAKE_ARGS//-DGGML_F16C=ON/-DGGML_F16C=OFF}"
  CMAKE_ARGS="${CMAKE_ARGS//-DGGML_BMI2=ON/-DGGML_BMI2=OFF}"
fi
