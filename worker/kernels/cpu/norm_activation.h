// CPU elementwise kernels of the Llama block: RMSNorm (plain and fused with the
// residual add) and the gated MLP's act·mul. fp32, reentrant; each is its own reference.
#ifndef TPSERVE_WORKER_KERNELS_CPU_NORM_ACTIVATION_H_
#define TPSERVE_WORKER_KERNELS_CPU_NORM_ACTIVATION_H_

#include <cstdint>

#include "worker/kernels/activation.h"

namespace tpserve {

// x, out: [n, dim] (may alias), weight: [dim].
// out = x / sqrt(mean(x²) + eps) · weight, as HF's LlamaRMSNorm in fp32.
void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// residual += x; out = RmsNorm(residual). residual, x, out: [n, dim]; x may alias out.
void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t n, int64_t dim,
                float eps, float* out);

// gate_up: [n, 2·width] = [gate | up] -> out: [n, width], out = act(gate) · up
// (Activate of worker/kernels/activation.h).
void ActMul(Activation act, const float* gate_up, int64_t n, int64_t width, float* out);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_NORM_ACTIVATION_H_
