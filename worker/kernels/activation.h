// The MLP activations tpserve implements, as transformers' ACT2FN defines them
// (transformers/activations.py), and their scalar math, shared by the CPU kernel and the
// CUDA kernel (host and device). config.json's hidden_act names one; any other name is
// refused when the config is read (worker/loader/hf_config.h).
#ifndef TPSERVE_WORKER_KERNELS_ACTIVATION_H_
#define TPSERVE_WORKER_KERNELS_ACTIVATION_H_

#include <cmath>

#if defined(__CUDACC__)
#define TPSERVE_HOST_DEVICE __host__ __device__
#else
#define TPSERVE_HOST_DEVICE
#endif

namespace tpserve {

enum class Activation {
  kSilu,      // "silu", "swish": x · sigmoid(x)
  kGelu,      // "gelu": x · Φ(x) = 0.5 · x · (1 + erf(x / √2))  (nn.GELU())
  kGeluTanh,  // "gelu_pytorch_tanh", "gelu_new": 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³)))
  kRelu,      // "relu": max(x, 0)
};

// act(g) in fp32.
TPSERVE_HOST_DEVICE inline float Activate(Activation act, float g) {
  switch (act) {
    case Activation::kSilu:
      return g / (1.0f + expf(-g));
    case Activation::kGelu:
      return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
    case Activation::kGeluTanh:
      return 0.5f * g * (1.0f + tanhf(0.79788456080286536f * (g + 0.044715f * g * g * g)));
    case Activation::kRelu:
      return g > 0.0f ? g : 0.0f;
  }
  return g;
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_ACTIVATION_H_
