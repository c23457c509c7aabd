#!/usr/bin/env bash
# Builds, here (nvcc is installed; no GPU needed), everything the device check runs —
# the gpu-tagged tests, the forward tool and cuda_benchmark — and copies them into
# gpu_bundle/ (ignored by git) with every shared library they load that the device
# machine lacks (abseil, gtest, gloo, openblas, ...). The device image brings its own
# CUDA driver, cuBLAS and NCCL (device_check.sh finds them); only the small CUDA
# runtime travels.
#   bash tests/gpu/prepare_bundle.sh
#   <device run, carry gpu_bundle>: bash tests/gpu/device_check.sh "$OUT"
set -euo pipefail
cd "$(dirname "$0")/../.."
tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
tools="//worker/tools:forward //worker/tools:cuda_benchmark //worker/kernels/cuda:paged_attention_benchmark //server:tpserve //worker/rank:tpserve_worker_cuda //client:tpserve-cli"
bazel build -c opt $tests $tools
rm -rf gpu_bundle && mkdir -p gpu_bundle/tests gpu_bundle/bin gpu_bundle/lib
for t in $tests $tools; do
  bin="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  case " $tools " in *" $t "*) dst=gpu_bundle/bin ;; *) dst=gpu_bundle/tests ;; esac
  cp "$bin" "$dst/"
  # Libraries outside the CUDA toolkit and the C runtime travel along.
  ldd "$bin" | awk '/=> \// {print $3}' |
    grep -v -E '/usr/local/cuda|libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+|libcuda\.so' |
    xargs -r -I{} cp -L -n {} gpu_bundle/lib/ || true  # grep finds nothing for static binaries
done
cp -L /usr/local/cuda/lib64/libcudart.so.13 gpu_bundle/lib/
chmod -R u+w gpu_bundle
tar czf gpu_bundle.tgz gpu_bundle
echo "gpu_bundle: $(ls gpu_bundle/tests | wc -l) tests, $(ls gpu_bundle/bin | wc -l) tools, $(du -sh gpu_bundle | cut -f1)"
