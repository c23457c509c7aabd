// Device side of mma_probe.h: fragments loaded and stored per mma.cuh's layout comment.
#include "worker/kernels/cuda/mma_probe.h"

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/mma.cuh"

namespace tpserve {
namespace {

// b [16, 8] row-major (k, n): the lane's two B words.
__device__ void LoadB(const __nv_bfloat16* b, int g, int t, uint32_t& b0, uint32_t& b1) {
  b0 = mma::JoinBf16(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
  b1 = mma::JoinBf16(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
}

// One warp: 32 threads.
__global__ void MmaProbeKernel(const __nv_bfloat16* a, const __nv_bfloat16* b,
                               const __nv_bfloat16* b2, const __nv_bfloat16* c, float* d,
                               float* e) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t af[4];
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
    af[r] = mma::JoinBf16(a[row * 16 + col], a[row * 16 + col + 1]);
  }
  uint32_t b0, b1;
  float dl[4] = {0, 0, 0, 0}, dr[4] = {0, 0, 0, 0};
  LoadB(b, g, t, b0, b1);
  mma::MmaBf16(dl, af, b0, b1);
  LoadB(b2, g, t, b0, b1);
  mma::MmaBf16(dr, af, b0, b1);
  for (int r = 0; r < 4; ++r) d[(g + 8 * (r / 2)) * 8 + 2 * t + r % 2] = dl[r];

  uint32_t pf[4];
  mma::PackA(dl, dr, pf);
  float ef[4] = {0, 0, 0, 0};
  LoadB(c, g, t, b0, b1);
  mma::MmaBf16(ef, pf, b0, b1);
  for (int r = 0; r < 4; ++r) e[(g + 8 * (r / 2)) * 8 + 2 * t + r % 2] = ef[r];
}

}  // namespace

cudaError_t LaunchMmaProbe(const __nv_bfloat16* a, const __nv_bfloat16* b,
                           const __nv_bfloat16* b2, const __nv_bfloat16* c, float* d, float* e,
                           cudaStream_t stream) {
  return LaunchKernel(MmaProbeKernel, dim3(1), dim3(32), 0, stream, a, b, b2, c, d, e);
}

}  // namespace tpserve
