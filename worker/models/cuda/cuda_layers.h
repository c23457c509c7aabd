// The parallel layers on the GPU: device copies of the host layers' shards, with the
// forward math and the collective each layer owns.
//
// The host layers (worker/layers/) stay the one place that knows how a checkpoint tensor
// is sharded: the model loads them with their WeightLoaders, then each Cuda* layer here
// copies its host layer's shard to the device in T (float or __nv_bfloat16) and runs
//   CudaColumnParallelLinear  y = x·Wᵀ (+ b)                      [n, out/T]
//   CudaRowParallelLinear     y = Σ_ranks x_r·W_rᵀ (+ b once)     [n, out]  (all-reduce)
//   CudaVocabEmbedding        masked lookup, then all-reduce      [n, H]
//   CudaLMHead                x·W_rᵀ, all-gather, unpad            [n, V] fp32
// FromHost enqueues the shard's upload on the uploader given (its values are there once
// the uploader's Finish returns). Every Forward enqueues on the group's stream and
// returns without waiting. Pointers are device pointers with room for n rows. One rank's
// compute thread; the comm group and the GEMM must outlive the layers.
#ifndef TPSERVE_WORKER_MODELS_CUDA_CUDA_LAYERS_H_
#define TPSERVE_WORKER_MODELS_CUDA_CUDA_LAYERS_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/nccl_comm_group.h"
#include "worker/cuda/device_buffer.h"
#include "worker/cuda/device_dtype.h"
#include "worker/cuda/device_uploader.h"
#include "worker/cuda/gemm.h"
#include "worker/layers/embedding.h"
#include "worker/layers/linear.h"
#include "worker/tensor.h"

namespace tpserve {

template <typename T>
constexpr DeviceDType DeviceDTypeOf() {
  return std::is_same_v<T, float> ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
}

// A device copy of a host fp32 tensor as T (bf16: round to nearest even), enqueued on
// `uploader`: it holds the values once uploader.Finish() returns.
template <typename T>
absl::StatusOr<DeviceBuffer> UploadAs(const Tensor& host, DeviceUploader& uploader);

// The layers' shared device context.
struct CudaLayerContext {
  NcclCommGroup* comm = nullptr;
  const CudaGemm* gemm = nullptr;
  cudaStream_t stream() const { return comm->stream(); }
};

template <typename T>
class CudaColumnParallelLinear {
 public:
  // gather_output and skip_bias_add are not supported here (the LM head gathers itself).
  static absl::StatusOr<CudaColumnParallelLinear> FromHost(const ColumnParallelLinear& host,
                                                           const CudaLayerContext& ctx,
                                                           DeviceUploader& uploader);
  // x: [n, in] -> y: [n, out/T], bias added.
  absl::Status Forward(const T* x, int64_t n, T* y) const;
  int64_t output_size_per_partition() const { return out_; }

 private:
  CudaLayerContext ctx_;
  int64_t in_ = 0, out_ = 0;
  DeviceBuffer weight_;  // [out/T, in]
  DeviceBuffer bias_;    // [out/T] or empty
};

template <typename T>
class CudaRowParallelLinear {
 public:
  // Needs input_is_parallel and reduce_results, no skip_bias_add (as the model uses it).
  static absl::StatusOr<CudaRowParallelLinear> FromHost(const RowParallelLinear& host,
                                                        const CudaLayerContext& ctx,
                                                        DeviceUploader& uploader);
  // x: [n, in/T] -> y: [n, out], summed over ranks; the bias is added by rank 0 only.
  absl::Status Forward(const T* x, int64_t n, T* y) const;

 private:
  CudaLayerContext ctx_;
  int64_t in_ = 0, out_ = 0;
  DeviceBuffer weight_;  // [out, in/T]
  DeviceBuffer bias_;    // [out] on rank 0 (others add nothing), or empty
};

template <typename T>
class CudaVocabEmbedding {
 public:
  static absl::StatusOr<CudaVocabEmbedding> FromHost(const VocabParallelEmbedding& host,
                                                     const CudaLayerContext& ctx,
                                                     DeviceUploader& uploader);
  // ids: [n] in [0, V) (validated by the caller) -> out: [n, H], replicated.
  absl::Status Forward(const int32_t* ids, int64_t n, T* out) const;
  const DeviceBuffer& weight() const { return weight_; }  // [Vp/T, H]
  int64_t rows_per_rank() const { return rows_; }

 private:
  CudaLayerContext ctx_;
  int64_t rows_ = 0, hidden_ = 0;
  DeviceBuffer weight_;  // [Vp/T, H]
};

template <typename T>
class CudaLMHead {
 public:
  // tied: the device embedding whose shard to share (must outlive the head), or null.
  static absl::StatusOr<CudaLMHead> FromHost(const ParallelLMHead& host,
                                             const CudaVocabEmbedding<T>* tied,
                                             const CudaLayerContext& ctx, DeviceUploader& uploader);
  // x: [n, H] -> logits: [n, V] fp32 on every rank. shard_out: [n, Vp/T] scratch;
  // gathered: [T, n, Vp/T] scratch (unused at T = 1).
  absl::Status Forward(const T* x, int64_t n, T* shard_out, T* gathered, float* logits) const;
  int64_t rows_per_rank() const { return rows_; }

 private:
  CudaLayerContext ctx_;
  int64_t rows_ = 0, hidden_ = 0, vocab_ = 0;
  const T* weight_ = nullptr;  // [Vp/T, H]: own_ or the tied embedding's
  DeviceBuffer own_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_CUDA_CUDA_LAYERS_H_
