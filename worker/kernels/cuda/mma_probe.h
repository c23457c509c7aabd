// A probe of mma.cuh's fragment contract, for its test: one warp loads A [16, 16] and
// B [16, 8] (bf16) into fragments exactly as mma.cuh documents them, multiplies, and
// writes D [16, 8] from the documented C layout; then feeds D (as C fragments, through
// PackA beside a second product) back in as the A operand of a second MMA. A device
// whose mma.sync disagreed with the documented layout, or a PackA that did not turn C
// fragments into A fragments, gives the wrong products. Test-only.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_MMA_PROBE_H_
#define TPSERVE_WORKER_KERNELS_CUDA_MMA_PROBE_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace tpserve {

// d = a · b and e = [bf16(d) | bf16(d2)] · c, where d2 = a · b2:
//   a [16, 16], b [16, 8], b2 [16, 8], c [16, 8] row-major bf16 (device)
//   d [16, 8], e [16, 8] row-major fp32 (device)
// One warp on `stream`; returns the launch's error.
cudaError_t LaunchMmaProbe(const __nv_bfloat16* a, const __nv_bfloat16* b,
                           const __nv_bfloat16* b2, const __nv_bfloat16* c, float* d, float* e,
                           cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_MMA_PROBE_H_
