#include "worker/models/cuda/cuda_layers.h"

#include <cuda_bf16.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/dtype.h"
#include "worker/kernels/cuda/elementwise.h"
#include "worker/kernels/cuda/embedding.h"

namespace tpserve {

template <typename T>
absl::StatusOr<DeviceBuffer> UploadAs(const Tensor& host, DeviceUploader& uploader) {
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Create(host.numel() * sizeof(T)));
  if (absl::Status s = uploader.Upload(host.data(), host.numel(), DeviceDTypeOf<T>(), buf.data());
      !s.ok()) {
    return s;
  }
  return buf;
}

namespace {

absl::Status Launched(cudaError_t err, const char* what) { return CudaStatus(err, what); }

}  // namespace

// ---- CudaColumnParallelLinear ----

template <typename T>
absl::StatusOr<CudaColumnParallelLinear<T>> CudaColumnParallelLinear<T>::FromHost(
    const ColumnParallelLinear& host, const CudaLayerContext& ctx, DeviceUploader& uploader) {
  if (host.gather_output() || host.skip_bias_add()) {
    return absl::UnimplementedError(
        "CudaColumnParallelLinear: gather_output and skip_bias_add are not used on the GPU");
  }
  CudaColumnParallelLinear layer;
  layer.ctx_ = ctx;
  layer.in_ = host.input_size();
  layer.out_ = host.output_size_per_partition();
  TPSERVE_ASSIGN_OR_RETURN(layer.weight_, UploadAs<T>(host.weight(), uploader));
  if (host.bias() != nullptr) {
    TPSERVE_ASSIGN_OR_RETURN(layer.bias_, UploadAs<T>(*host.bias(), uploader));
  }
  return layer;
}

template <typename T>
absl::Status CudaColumnParallelLinear<T>::Forward(const T* x, int64_t n, T* y) const {
  absl::Status s = ctx_.gemm->MatMulTransB(x, weight_.as<T>(), n, in_, out_, y);
  if (!s.ok() || bias_.data() == nullptr) return s;
  return Launched(LaunchAddBias(y, bias_.as<T>(), n, out_, ctx_.stream()), "column bias");
}

// ---- CudaRowParallelLinear ----

template <typename T>
absl::StatusOr<CudaRowParallelLinear<T>> CudaRowParallelLinear<T>::FromHost(
    const RowParallelLinear& host, const CudaLayerContext& ctx, DeviceUploader& uploader) {
  if (!host.input_is_parallel() || !host.reduce_results() || host.skip_bias_add()) {
    return absl::UnimplementedError(
        "CudaRowParallelLinear needs input_is_parallel and reduce_results, no skip_bias_add");
  }
  CudaRowParallelLinear layer;
  layer.ctx_ = ctx;
  layer.out_ = host.weight().dim(0);
  layer.in_ = host.weight().dim(1);
  TPSERVE_ASSIGN_OR_RETURN(layer.weight_, UploadAs<T>(host.weight(), uploader));
  // The bias joins the partial sum of rank 0 only, so the all-reduce adds it once.
  if (host.bias() != nullptr && ctx.comm->rank() == 0) {
    TPSERVE_ASSIGN_OR_RETURN(layer.bias_, UploadAs<T>(*host.bias(), uploader));
  }
  return layer;
}

template <typename T>
absl::Status CudaRowParallelLinear<T>::Forward(const T* x, int64_t n, T* y) const {
  TPSERVE_RETURN_IF_ERROR(ctx_.gemm->MatMulTransB(x, weight_.as<T>(), n, in_, out_, y));
  if (bias_.data() != nullptr) {
    if (absl::Status s = Launched(LaunchAddBias(y, bias_.as<T>(), n, out_, ctx_.stream()),
                                  "row bias");
        !s.ok()) {
      return s;
    }
  }
  if (ctx_.comm->size() == 1) return absl::OkStatus();
  return ctx_.comm->AllReduceSumDevice(y, n * out_, DeviceDTypeOf<T>());
}

// ---- CudaVocabEmbedding ----

template <typename T>
absl::StatusOr<CudaVocabEmbedding<T>> CudaVocabEmbedding<T>::FromHost(
    const VocabParallelEmbedding& host, const CudaLayerContext& ctx, DeviceUploader& uploader) {
  CudaVocabEmbedding layer;
  layer.ctx_ = ctx;
  layer.rows_ = host.weight().dim(0);
  layer.hidden_ = host.weight().dim(1);
  TPSERVE_ASSIGN_OR_RETURN(layer.weight_, UploadAs<T>(host.weight(), uploader));
  return layer;
}

template <typename T>
absl::Status CudaVocabEmbedding<T>::Forward(const int32_t* ids, int64_t n, T* out) const {
  const int64_t start = int64_t{ctx_.comm->rank()} * rows_;
  absl::Status s = Launched(
      LaunchEmbedding(ids, n, weight_.as<T>(), start, rows_, hidden_, out, ctx_.stream()),
      "embedding");
  if (!s.ok() || ctx_.comm->size() == 1) return s;
  return ctx_.comm->AllReduceSumDevice(out, n * hidden_, DeviceDTypeOf<T>());
}

// ---- CudaLMHead ----

template <typename T>
absl::StatusOr<CudaLMHead<T>> CudaLMHead<T>::FromHost(const ParallelLMHead& host,
                                                      const CudaVocabEmbedding<T>* tied,
                                                      const CudaLayerContext& ctx,
                                                      DeviceUploader& uploader) {
  CudaLMHead head;
  head.ctx_ = ctx;
  head.rows_ = host.shard().dim(0);
  head.hidden_ = host.shard().dim(1);
  head.vocab_ = host.vocab_size();
  if (tied != nullptr) {
    if (tied->rows_per_rank() != head.rows_) {
      return absl::InvalidArgumentError("CudaLMHead: the tied embedding has another vocab split");
    }
    head.weight_ = tied->weight().template as<T>();
    return head;
  }
  TPSERVE_ASSIGN_OR_RETURN(head.own_, UploadAs<T>(host.shard(), uploader));
  head.weight_ = head.own_.template as<T>();
  return head;
}

template <typename T>
absl::Status CudaLMHead<T>::Forward(const T* x, int64_t n, T* shard_out, T* gathered,
                                    float* logits) const {
  if (absl::Status s = ctx_.gemm->MatMulTransB(x, weight_, n, hidden_, rows_, shard_out);
      !s.ok()) {
    return s;
  }
  const int tp = ctx_.comm->size();
  const T* all = shard_out;  // [tp, n, Vp/T]
  if (tp > 1) {
    TPSERVE_RETURN_IF_ERROR(
        ctx_.comm->AllGatherDevice(shard_out, gathered, n * rows_, DeviceDTypeOf<T>()));
    all = gathered;
  }
  return Launched(LaunchUngatherVocab(all, tp, n, rows_, vocab_, logits, ctx_.stream()),
                  "lm head ungather");
}

#define TPSERVE_INSTANTIATE(T)                                                       \
  template absl::StatusOr<DeviceBuffer> UploadAs<T>(const Tensor&, DeviceUploader&); \
  template class CudaColumnParallelLinear<T>;                                        \
  template class CudaRowParallelLinear<T>;                                           \
  template class CudaVocabEmbedding<T>;                                              \
  template class CudaLMHead<T>;
TPSERVE_INSTANTIATE(float)
TPSERVE_INSTANTIATE(__nv_bfloat16)
#undef TPSERVE_INSTANTIATE

}  // namespace tpserve
