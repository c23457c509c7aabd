#!/usr/bin/env bash
# Installs the parts of the CUDA 13.0 toolkit that building tpserve needs (nvcc, the
# runtime, cuBLAS, NCCL) from NVIDIA's PyPI wheels into PREFIX/cuda-13.0, laid out as
# the toolkit installer would (lib64 -> lib, targets/x86_64-linux), with
# PREFIX/cuda -> cuda-13.0. tpserve_worker links cudart, cuBLAS and NCCL even when it
# serves on CPU, and third_party/cuda.BUILD expects them under /usr/local/cuda.
# The versions are the ones this repository's CI machine builds with.
#   bash deploy/install_cuda_toolkit.sh [PREFIX]   (default /usr/local; needs python3-pip)
set -euo pipefail
prefix=${1:-/usr/local}
wheels=(
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
  nvidia-cublas==13.1.0.3 nvidia-nccl-cu13==2.28.9
)
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
# --target installs outside the system environment, so Debian's PEP 668 guard does not apply.
python3 -m pip install --quiet --no-cache-dir --no-deps --root-user-action=ignore \
  --target "$staging" "${wheels[@]}"

cuda="$prefix/cuda-13.0"
mkdir -p "$cuda/targets/x86_64-linux"
cp -a "$staging/nvidia/cu13/." "$cuda/"
cp -a "$staging/nvidia/nccl/include/." "$cuda/include/"
cp -a "$staging/nvidia/nccl/lib/." "$cuda/lib/"
ln -sfn lib "$cuda/lib64"
# nvcc.profile looks for headers and libraries under targets/x86_64-linux.
ln -sfn ../../include "$cuda/targets/x86_64-linux/include"
ln -sfn ../../lib "$cuda/targets/x86_64-linux/lib"
# The wheels ship only versioned libraries; the linker's -lcudart wants the plain names.
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  ln -sfn "$lib" "$cuda/lib/${lib%.so.*}.so"
done
ln -sfn cuda-13.0 "$prefix/cuda"
"$cuda/bin/nvcc" --version | tail -1
