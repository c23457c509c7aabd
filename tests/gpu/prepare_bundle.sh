#!/usr/bin/env bash
# Builds the GPU test binaries here (nvcc is installed, no GPU needed) and copies them,
# with every shared library they load that the device machine lacks (gtest, abseil, ...;
# not the CUDA driver), into gpu_bundle/ (ignored by git), for the device tool to carry:
#   bash tests/gpu/prepare_bundle.sh && <device run, carry gpu_bundle> bash tests/gpu/device_check.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
bazel build $targets
rm -rf gpu_bundle && mkdir -p gpu_bundle/bin gpu_bundle/lib
for t in $targets; do
  bin="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp "$bin" gpu_bundle/bin/
  # Libraries outside the CUDA toolkit and libc travel along.
  ldd "$bin" | awk '/=> \// {print $3}' | grep -v -E '/usr/local/cuda|libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+' |
    xargs -r -I{} cp -L {} gpu_bundle/lib/ || true  # grep finds nothing for static tests
done
# The CUDA runtime travels too (small); cuBLAS and NCCL are too large to carry and come
# from the device image's own toolkit.
cp -L /usr/local/cuda/lib64/libcudart.so.13 gpu_bundle/lib/
echo "gpu_bundle: $(ls gpu_bundle/bin | wc -l) test binaries, $(du -sh gpu_bundle | cut -f1)"
