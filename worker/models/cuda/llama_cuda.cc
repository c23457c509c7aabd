#include "worker/models/cuda/llama_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/device_buffer.h"
#include "worker/cuda/gemm.h"
#include "worker/cuda/pinned_buffer.h"
#include "worker/kernels/cuda/act_mul.h"
#include "worker/kernels/cuda/elementwise.h"
#include "worker/kernels/cuda/paged_attention.h"
#include "worker/kernels/cuda/rms_norm.h"
#include "worker/kernels/cuda/rope.h"
#include "worker/models/cuda/cuda_graphs.h"
#include "worker/models/cuda/cuda_layers.h"
#include "worker/models/cuda/cuda_step_metadata.h"
#include "worker/models/llama_tensors.h"
#include "worker/sampling/cuda_sampler.h"

namespace tpserve {

absl::Status CudaModelOptions::Validate() const {
  TPSERVE_RETURN_IF_ERROR(ValidateBatchLimits(limits, "cuda model options: limits"));
  if (max_logit_rows < 1) return absl::InvalidArgumentError("max_logit_rows must be ≥ 1");
  if (step_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("step_timeout must be positive");
  }
  if (graph_max_context < 1) return absl::InvalidArgumentError("graph_max_context must be ≥ 1");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaKvBudgetBytes(double memory_fraction) {
  if (!(memory_fraction > 0 && memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu memory fraction ", memory_fraction, " is outside (0, 1]"));
  }
  size_t free_bytes = 0, total_bytes = 0;
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double used = double(total_bytes) - double(free_bytes);
  const double budget = memory_fraction * double(total_bytes) - used;
  if (budget <= 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "gpu memory fraction ", memory_fraction, " of ", total_bytes, " bytes leaves nothing for ",
        "the KV cache: ", static_cast<int64_t>(used), " bytes are already in use"));
  }
  return static_cast<int64_t>(budget);
}

namespace {

absl::Status Launched(cudaError_t err, const char* what) { return CudaStatus(err, what); }

// A step's logits left on the GPU, scored by rank 0's CudaSampler; only results come
// back. `sampler` null: a rank that does not sample (its logits refuse to be scored).
class DeviceStepLogits : public StepLogits {
 public:
  DeviceStepLogits(CudaSampler* sampler, const float* logits, int64_t rows)
      : sampler_(sampler), logits_(logits), rows_(rows) {}
  absl::StatusOr<std::vector<SampleResult>> Sample(
      absl::Span<const SampleRequest> requests) override {
    if (sampler_ == nullptr) return NotSampling();
    return sampler_->SampleBatch(logits_, rows_, requests);
  }
  absl::StatusOr<std::vector<SampleResult>> PromptLogprobs(
      int64_t first_row, absl::Span<const int32_t> next_tokens, int top_n) override {
    if (sampler_ == nullptr) return NotSampling();
    return sampler_->PromptLogprobs(logits_, rows_, first_row, next_tokens, top_n);
  }

 private:
  static absl::Status NotSampling() {
    return absl::FailedPreconditionError("this rank does not sample: it kept no scorable logits");
  }
  CudaSampler* sampler_;
  const float* logits_;  // [rows_, V] on the device
  int64_t rows_;
};

template <typename T>
struct CudaDecoderLayer {
  CudaColumnParallelLinear<T> qkv;      // [n, (n_q + n_kv)·d + n_kv·dv]
  CudaRowParallelLinear<T> o_proj;      // [n, H]
  CudaColumnParallelLinear<T> gate_up;  // [n, 2·I/T]
  CudaRowParallelLinear<T> down;        // [n, H]
  DeviceBuffer input_norm, post_attn_norm;  // [H]
  DeviceBuffer q_norm, k_norm;              // [d], empty unless qk_norm
};

// Activation buffers for up to max_tokens rows, allocated once.
template <typename T>
struct Activations {
  DeviceBuffer residual, normed, block_out;  // [max_tokens, H]
  DeviceBuffer qkv;                          // [max_tokens, qkv width]
  DeviceBuffer attn;                         // [max_tokens, n_q·dv]
  DeviceBuffer gate_up;                      // [max_tokens, 2·I/T]
  DeviceBuffer act;                          // [max_tokens, I/T]
  DeviceBuffer sel_residual, sel_x, sel_normed;  // [max_tokens, H]: the logit rows
  DeviceBuffer head_shard;                   // [max_logit_rows, Vp/T]
  DeviceBuffer head_gathered;                // [T, max_logit_rows, Vp/T] (T > 1)
  DeviceBuffer logits;                       // [max_logit_rows, V] fp32
  PinnedBuffer host_logits;                  // [max_logit_rows, V] fp32
};

template <typename T>
class CudaLlamaModel : public CudaModelRunner {
 public:
  static absl::StatusOr<std::unique_ptr<CudaModelRunner>> Create(const LlamaModel& host,
                                                             NcclCommGroup* comm,
                                                             const CudaModelOptions& options);

  const ModelConfig& config() const override { return config_; }
  KvCacheShape CacheShape(int num_blocks, int block_size) const override;
  absl::Status AllocateCache(int num_blocks, int block_size) override;
  const KvCacheShape& cache_shape() const override { return shape_; }
  absl::StatusOr<Tensor> Forward(const StepBatch& batch) override;
  absl::StatusOr<const float*> ForwardToDevice(const StepBatch& batch) override;
  int num_decode_graphs() const override { return graphs_.num_captured(); }
  absl::Duration last_enqueue_time() const override { return last_enqueue_time_; }
  absl::StatusOr<std::unique_ptr<StepLogits>> ForwardForSampling(const StepBatch& batch,
                                                                bool sampling) override;
  void SetCudaGraphs(bool on) override {
    graphs_.SetSizes(on ? GraphSizes(options_) : std::vector<int>{});
  }

 private:
  static std::vector<int> GraphSizes(const CudaModelOptions& options) {
    if (!options.cuda_graphs) return {};
    return DecodeGraphSizes(
        std::min({options.limits.max_sequences(), options.max_logit_rows,
                  options.limits.max_batch_tokens()}));
  }
  CudaLlamaModel(const ModelConfig& config, NcclCommGroup* comm, const CudaModelOptions& options,
                 int max_context)
      : config_(config),
        comm_(comm),
        options_(options),
        max_context_(max_context),
        graphs_(GraphSizes(options)) {}
  absl::Status Upload(const LlamaModel& host);
  absl::Status AllocateActivations();
  cudaStream_t stream() const { return comm_->stream(); }
  T* k_cache(int layer) const;
  T* v_cache(int layer) const;
  // Enqueues the decoder stack; leaves the residual stream and the last block's output
  // (not yet added) in acts_.
  absl::Status RunLayers(const CudaStepMetadata& meta);
  absl::Status Attention(int layer, const CudaStepMetadata& meta);
  // Validates the batch, stages its metadata and enqueues the step — by graph replay
  // for a decode batch that has a graph size — through the LM head of the first
  // min(rows, max_logit_rows) logit rows (into acts_.logits). Returns the staged
  // metadata; the final-normed logit rows stay in acts_.sel_normed for more head passes.
  absl::StatusOr<CudaStepMetadata> Enqueue(const StepBatch& batch);
  // The decoder stack, the final norm of the logit rows and the head of `head_rows`.
  absl::Status EnqueueStep(const CudaStepMetadata& meta, int64_t head_rows);
  // Grows the attention workspace for `meta` (dropping graphs, which hold the old one).
  absl::Status ReserveWorkspace(const CudaStepMetadata& meta);
  // The padded graph size for `batch`, or 0 to run it eagerly.
  int GraphSize(const StepBatch& batch) const;
  // Enqueues the LM head for `count` logit rows from `first` into acts_.logits.
  absl::Status RunHead(int64_t first, int64_t count);
  // Records the first failure after validation: the stream's state is unknown then.
  absl::Status Broken(absl::Status s);

  ModelConfig config_;
  NcclCommGroup* comm_;
  CudaModelOptions options_;
  int max_context_;  // options_.limits.max_context(), or the model's max_position_embeddings
  std::unique_ptr<CudaGemm> gemm_;
  CudaLayerContext ctx_;
  int64_t num_heads_ = 0, num_kv_heads_ = 0, head_dim_ = 0, v_head_dim_ = 0;
  int64_t qkv_width_ = 0, inter_per_rank_ = 0;
  float scale_ = 1.0f;
  CudaVocabEmbedding<T> embed_;
  std::vector<CudaDecoderLayer<T>> layers_;
  DeviceBuffer final_norm_;  // [H]
  CudaLMHead<T> lm_head_;
  DeviceBuffer cos_sin_;     // [max_context_, d] fp32 ([2 · max_context_, d] for longrope)
  std::optional<RotaryEmbedding> rope_;  // the host's, for longrope's table rows
  Activations<T> acts_;
  DeviceBuffer attn_workspace_;
  KvCacheShape shape_;
  DeviceBuffer kv_;  // per layer: keys [slots, n_kv, d] then values [slots, n_kv, dv]
  std::unique_ptr<CudaStepMetadataStager> stager_;
  DecodeGraphs graphs_;
  int graph_context_ = 0, graph_width_ = 0;  // context bound and table width of graph steps
  std::unique_ptr<CudaSampler> sampler_;     // rank 0's, made at its first sampled step
  absl::Duration last_enqueue_time_;
  absl::Status broken_;
};

template <typename T>
absl::StatusOr<std::unique_ptr<CudaModelRunner>> CudaLlamaModel<T>::Create(
    const LlamaModel& host, NcclCommGroup* comm, const CudaModelOptions& options) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  if (comm == nullptr) return absl::InvalidArgumentError("CudaLlamaModel needs a comm group");
  if (host.num_layers() < 1) return absl::InvalidArgumentError("the model has no layers");
  // The shards must fit on the device before the first upload (activations and the KV
  // cache are sized after them).
  size_t free_bytes = 0, total_bytes = 0;
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t weights = RankWeightBytes(host.config(), comm->size(), sizeof(T));
  if (weights > static_cast<int64_t>(free_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the weights take ", weights, " bytes per rank on the device (", comm->size(),
        " rank(s), ", sizeof(T) == 2 ? "bf16" : "fp32", "), more than its free memory (",
        free_bytes, " of ", total_bytes, " bytes)"));
  }
  TPSERVE_ASSIGN_OR_RETURN(const int max_context,
                           ResolveMaxContext(options.limits,
                                             host.config().max_position_embeddings,
                                             "cuda model options: limits"));
  std::unique_ptr<CudaLlamaModel> model(
      new CudaLlamaModel(host.config(), comm, options, max_context));
  TPSERVE_ASSIGN_OR_RETURN(model->gemm_, CudaGemm::Create(comm->stream()));
  model->ctx_ = CudaLayerContext{comm, model->gemm_.get()};
  TPSERVE_RETURN_IF_ERROR(model->Upload(host));
  TPSERVE_RETURN_IF_ERROR(model->AllocateActivations());
  // Upload waited for its own stream; this also covers anything on the legacy stream.
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  TPSERVE_RETURN_IF_ERROR(comm->WaitStream(options.step_timeout));
  return std::unique_ptr<CudaModelRunner>(std::move(model));
}

template <typename T>
absl::Status CudaLlamaModel<T>::Upload(const LlamaModel& host) {
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceUploader> uploader, DeviceUploader::Create());
  DeviceUploader& up = *uploader;
  const AttentionParams& p = host.attention(0).params();
  num_heads_ = p.num_heads;
  num_kv_heads_ = p.num_kv_heads;
  head_dim_ = p.head_dim;
  v_head_dim_ = p.v_head_dim;
  scale_ = p.scale;
  qkv_width_ = host.attention(0).qkv().output_size_per_partition();
  inter_per_rank_ = host.mlp(0).gate_up().output_size_per_partition() / 2;
  TPSERVE_ASSIGN_OR_RETURN(embed_, CudaVocabEmbedding<T>::FromHost(host.embedding(), ctx_, up));
  for (int i = 0; i < host.num_layers(); ++i) {
    CudaDecoderLayer<T> layer;
    const LlamaAttention& attn = host.attention(i);
    TPSERVE_ASSIGN_OR_RETURN(layer.qkv,
                             CudaColumnParallelLinear<T>::FromHost(attn.qkv(), ctx_, up));
    TPSERVE_ASSIGN_OR_RETURN(layer.o_proj,
                             CudaRowParallelLinear<T>::FromHost(attn.o_proj(), ctx_, up));
    TPSERVE_ASSIGN_OR_RETURN(
        layer.gate_up, CudaColumnParallelLinear<T>::FromHost(host.mlp(i).gate_up(), ctx_, up));
    TPSERVE_ASSIGN_OR_RETURN(layer.down,
                             CudaRowParallelLinear<T>::FromHost(host.mlp(i).down(), ctx_, up));
    TPSERVE_ASSIGN_OR_RETURN(layer.input_norm, UploadAs<T>(host.input_norm(i), up));
    TPSERVE_ASSIGN_OR_RETURN(layer.post_attn_norm, UploadAs<T>(host.post_attn_norm(i), up));
    if (config_.qk_norm) {
      TPSERVE_ASSIGN_OR_RETURN(layer.q_norm, UploadAs<T>(attn.q_norm(), up));
      TPSERVE_ASSIGN_OR_RETURN(layer.k_norm, UploadAs<T>(attn.k_norm(), up));
    }
    layers_.push_back(std::move(layer));
  }
  TPSERVE_ASSIGN_OR_RETURN(final_norm_, UploadAs<T>(host.final_norm(), up));
  TPSERVE_ASSIGN_OR_RETURN(
      lm_head_, CudaLMHead<T>::FromHost(host.lm_head(),
                                        config_.tie_word_embeddings ? &embed_ : nullptr, ctx_, up));
  rope_ = host.rope();
  const std::vector<float> table = rope_->CosSinTable(max_context_);  // [(2·)max_context_, d]
  TPSERVE_ASSIGN_OR_RETURN(cos_sin_, DeviceBuffer::Create(table.size() * sizeof(float)));
  TPSERVE_RETURN_IF_ERROR(up.Upload(table.data(), static_cast<int64_t>(table.size()),
                                    DeviceDType::kFloat32, cos_sin_.data()));
  return up.Finish();
}

template <typename T>
absl::Status CudaLlamaModel<T>::AllocateActivations() {
  const int64_t t = options_.limits.max_batch_tokens(), h = config_.hidden_size;
  const int64_t rows = options_.max_logit_rows, shard = lm_head_.rows_per_rank();
  const int64_t e = sizeof(T);
  Activations<T>& a = acts_;
  for (DeviceBuffer* b : {&a.residual, &a.normed, &a.block_out, &a.sel_residual, &a.sel_x,
                          &a.sel_normed}) {
    TPSERVE_ASSIGN_OR_RETURN(*b, DeviceBuffer::Create(t * h * e));
  }
  TPSERVE_ASSIGN_OR_RETURN(a.qkv, DeviceBuffer::Create(t * qkv_width_ * e));
  TPSERVE_ASSIGN_OR_RETURN(a.attn, DeviceBuffer::Create(t * num_heads_ * v_head_dim_ * e));
  TPSERVE_ASSIGN_OR_RETURN(a.gate_up, DeviceBuffer::Create(t * 2 * inter_per_rank_ * e));
  TPSERVE_ASSIGN_OR_RETURN(a.act, DeviceBuffer::Create(t * inter_per_rank_ * e));
  TPSERVE_ASSIGN_OR_RETURN(a.head_shard, DeviceBuffer::Create(rows * shard * e));
  if (comm_->size() > 1) {
    TPSERVE_ASSIGN_OR_RETURN(a.head_gathered,
                             DeviceBuffer::Create(comm_->size() * rows * shard * e));
  }
  TPSERVE_ASSIGN_OR_RETURN(a.logits, DeviceBuffer::Create(rows * config_.vocab_size * 4));
  TPSERVE_ASSIGN_OR_RETURN(a.host_logits, PinnedBuffer::Create(rows * config_.vocab_size * 4));
  return absl::OkStatus();
}

template <typename T>
KvCacheShape CudaLlamaModel<T>::CacheShape(int num_blocks, int block_size) const {
  KvCacheShape shape;
  shape.num_layers = config_.num_hidden_layers;
  shape.num_blocks = num_blocks;
  shape.block_size = block_size;
  shape.num_kv_heads = static_cast<int>(num_kv_heads_);
  shape.head_dim = static_cast<int>(head_dim_);
  shape.v_head_dim = static_cast<int>(v_head_dim_);
  shape.bytes_per_element = sizeof(T);
  return shape;
}

template <typename T>
absl::Status CudaLlamaModel<T>::AllocateCache(int num_blocks, int block_size) {
  graphs_.Clear();  // they captured the old cache and metadata buffers
  kv_ = DeviceBuffer();
  shape_ = KvCacheShape();
  stager_.reset();
  if (num_blocks < 1 || block_size < 1) {
    return absl::InvalidArgumentError("KV cache dimensions must be positive");
  }
  const KvCacheShape shape = CacheShape(num_blocks, block_size);
  const int max_blocks_per_seq = (max_context_ + block_size - 1) / block_size;
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer kv, DeviceBuffer::Create(shape.bytes()));
  absl::StatusOr<std::unique_ptr<CudaStepMetadataStager>> stager = CudaStepMetadataStager::Create(
      options_.limits.max_batch_tokens(),
      // A step holds at most one sequence per token.
      std::min(options_.limits.max_sequences(), options_.limits.max_batch_tokens()),
      max_blocks_per_seq, block_size, RopeRows{&*rope_, max_context_});
  if (!stager.ok()) return stager.status();  // kv is freed: nothing half-built stays
  kv_ = std::move(kv);
  stager_ = *std::move(stager);
  shape_ = shape;
  graph_context_ = std::min(options_.graph_max_context, max_context_);
  graph_width_ = (graph_context_ + block_size - 1) / block_size;
  // The largest workspace a graph step may need, now, so that growing it never drops
  // captured graphs while load ramps up.
  for (int size : GraphSizes(options_)) {
    CudaStepMetadata plan;
    plan.attention.num_seqs = plan.attention.num_tokens = size;
    plan.attention.max_query_len = 1;
    plan.attention.max_context_len = graph_context_;
    plan.attention.max_blocks_per_seq = graph_width_;
    TPSERVE_RETURN_IF_ERROR(ReserveWorkspace(plan));
  }
  return absl::OkStatus();
}

template <typename T>
T* CudaLlamaModel<T>::k_cache(int layer) const {
  const int64_t k = shape_.num_slots() * num_kv_heads_ * head_dim_;
  const int64_t v = shape_.num_slots() * num_kv_heads_ * v_head_dim_;
  return kv_.as<T>() + layer * (k + v);
}

template <typename T>
T* CudaLlamaModel<T>::v_cache(int layer) const {
  return k_cache(layer) + shape_.num_slots() * num_kv_heads_ * head_dim_;
}

template <typename T>
absl::Status CudaLlamaModel<T>::Attention(int layer, const CudaStepMetadata& meta) {
  const CudaDecoderLayer<T>& l = layers_[layer];
  const int64_t n = meta.num_tokens;
  T* qkv = acts_.qkv.template as<T>();
  // Keys and values go straight from the projection (keys rotated) into the cache.
  RopeCacheWrite<T> cache;
  cache.slots = meta.slots;
  cache.k_cache = k_cache(layer), cache.v_cache = v_cache(layer);
  cache.v_col = (num_heads_ + num_kv_heads_) * head_dim_;
  cache.v_head_dim = static_cast<int>(v_head_dim_);
  TPSERVE_RETURN_IF_ERROR(Launched(
      LaunchRopeWriteKv(qkv, qkv_width_, meta.positions, n, static_cast<int>(num_heads_),
                        static_cast<int>(num_kv_heads_), static_cast<int>(head_dim_),
                        cos_sin_.as<float>(), l.q_norm.template as<T>(),
                        l.k_norm.template as<T>(), static_cast<float>(config_.rms_norm_eps),
                        cache, stream()),
      "rope and kv write"));
  return Launched(
      LaunchPagedAttention(qkv, qkv_width_, k_cache(layer), v_cache(layer), meta.attention,
                           shape_.block_size, static_cast<int>(num_heads_),
                           static_cast<int>(num_kv_heads_), static_cast<int>(head_dim_),
                           static_cast<int>(v_head_dim_), scale_, config_.sliding_window,
                           acts_.attn.template as<T>(), attn_workspace_.as<float>(), stream()),
      "paged attention");
}

template <typename T>
absl::Status CudaLlamaModel<T>::RunLayers(const CudaStepMetadata& meta) {
  const int64_t n = meta.num_tokens, h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  T* residual = acts_.residual.template as<T>();
  T* normed = acts_.normed.template as<T>();
  T* block_out = acts_.block_out.template as<T>();
  TPSERVE_RETURN_IF_ERROR(embed_.Forward(meta.token_ids, n, residual));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const CudaDecoderLayer<T>& l = layers_[i];
    // The previous block's output joins the residual stream inside the norm.
    TPSERVE_RETURN_IF_ERROR(Launched(
        i == 0 ? LaunchRmsNorm(residual, l.input_norm.template as<T>(), n, h, eps, normed, stream())
               : LaunchAddRmsNorm(residual, block_out, l.input_norm.template as<T>(), n, h, eps,
                                  normed, stream()),
        "input norm"));
    TPSERVE_RETURN_IF_ERROR(l.qkv.Forward(normed, n, acts_.qkv.template as<T>()));
    TPSERVE_RETURN_IF_ERROR(Attention(static_cast<int>(i), meta));
    TPSERVE_RETURN_IF_ERROR(l.o_proj.Forward(acts_.attn.template as<T>(), n, block_out));
    TPSERVE_RETURN_IF_ERROR(Launched(
        LaunchAddRmsNorm(residual, block_out, l.post_attn_norm.template as<T>(), n, h, eps,
                         normed, stream()),
        "post-attention norm"));
    TPSERVE_RETURN_IF_ERROR(l.gate_up.Forward(normed, n, acts_.gate_up.template as<T>()));
    TPSERVE_RETURN_IF_ERROR(Launched(
        LaunchActMul(config_.hidden_act, acts_.gate_up.template as<T>(), n, inter_per_rank_,
                     acts_.act.template as<T>(), stream()),
        "act_mul"));
    TPSERVE_RETURN_IF_ERROR(l.down.Forward(acts_.act.template as<T>(), n, block_out));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaLlamaModel<T>::Broken(absl::Status s) {
  if (!s.ok() && broken_.ok()) broken_ = s;
  return s;
}

template <typename T>
absl::Status CudaLlamaModel<T>::ReserveWorkspace(const CudaStepMetadata& meta) {
  const size_t bytes = PagedAttentionWorkspaceBytes(
      meta.attention, static_cast<int>(num_heads_), static_cast<int>(num_kv_heads_),
      static_cast<int>(head_dim_), static_cast<int>(v_head_dim_));
  if (bytes <= attn_workspace_.bytes()) return absl::OkStatus();
  graphs_.Clear();
  TPSERVE_ASSIGN_OR_RETURN(attn_workspace_, DeviceBuffer::Create(bytes));
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaLlamaModel<T>::EnqueueStep(const CudaStepMetadata& meta, int64_t head_rows) {
  TPSERVE_RETURN_IF_ERROR(RunLayers(meta));
  const int64_t rows = meta.num_logit_rows, h = config_.hidden_size;
  T* sel_residual = acts_.sel_residual.template as<T>();
  T* sel_x = acts_.sel_x.template as<T>();
  // Only the rows that need logits finish the residual stream and pass the final norm.
  TPSERVE_RETURN_IF_ERROR(Launched(LaunchGatherRows(acts_.residual.template as<T>(),
                                                    meta.logit_rows, rows, h, sel_residual,
                                                    stream()),
                                   "gather residual rows"));
  TPSERVE_RETURN_IF_ERROR(Launched(LaunchGatherRows(acts_.block_out.template as<T>(),
                                                    meta.logit_rows, rows, h, sel_x, stream()),
                                   "gather block rows"));
  TPSERVE_RETURN_IF_ERROR(Launched(
      LaunchAddRmsNorm(sel_residual, sel_x, final_norm_.as<T>(), rows, h,
                       static_cast<float>(config_.rms_norm_eps),
                       acts_.sel_normed.template as<T>(), stream()),
      "final norm"));
  return RunHead(0, head_rows);
}

template <typename T>
int CudaLlamaModel<T>::GraphSize(const StepBatch& batch) const {
  for (const SequenceStep& s : batch.seqs) {
    if (s.num_new_tokens != 1 || s.all_logits || s.context_len > graph_context_) return 0;
  }
  return graphs_.PaddedSize(static_cast<int>(batch.seqs.size()));
}

template <typename T>
absl::StatusOr<CudaStepMetadata> CudaLlamaModel<T>::Enqueue(const StepBatch& batch) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA model is unusable after an earlier failure: ", broken_.message()));
  }
  if (stager_ == nullptr) return absl::FailedPreconditionError("no KV cache allocated");
  if (batch.seqs.empty()) return absl::InvalidArgumentError("a step without sequences");
  TPSERVE_RETURN_IF_ERROR(batch.Validate(shape_, max_context_));
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  // Staging reuses the pinned buffer: the previous step ended with the stream drained.
  if (const int padded = GraphSize(batch); padded > 0) {
    TPSERVE_ASSIGN_OR_RETURN(CudaStepMetadata meta,
                             stager_->StageDecode(batch, padded, graph_width_, stream()));
    meta.attention.max_context_len = graph_context_;  // the bound every replay honours
    TPSERVE_RETURN_IF_ERROR(Broken(ReserveWorkspace(meta)));
    bool capture_failed = false;
    absl::Status s = graphs_.Run(padded, stream(), [&] { return EnqueueStep(meta, padded); },
                                 &capture_failed);
    if (s.ok()) return meta;
    if (!capture_failed) return Broken(s);
    if (comm_->size() > 1) {
      // Whether a collective is captured must agree across ranks: the peers may be
      // replaying this step, so this rank cannot run it eagerly instead.
      return Broken(absl::InternalError(absl::StrCat(
          s.message(), " (at tp ", comm_->size(),
          " every rank must replay the same graphs; serve with --enforce-eager)")));
    }
    // A failed capture enqueued nothing: this step runs eagerly, and so does every later
    // one, since capturing would fail again.
    spdlog::warn("CUDA graphs off: {}", std::string(s.message()));
    graphs_.SetSizes({});
    TPSERVE_RETURN_IF_ERROR(Broken(EnqueueStep(meta, padded)));
    return meta;
  }
  TPSERVE_ASSIGN_OR_RETURN(const CudaStepMetadata meta, stager_->Stage(batch, stream()));
  TPSERVE_RETURN_IF_ERROR(Broken(ReserveWorkspace(meta)));
  TPSERVE_RETURN_IF_ERROR(Broken(EnqueueStep(
      meta, std::min<int64_t>(meta.num_logit_rows, options_.max_logit_rows))));
  return meta;
}

template <typename T>
absl::Status CudaLlamaModel<T>::RunHead(int64_t first, int64_t count) {
  return lm_head_.Forward(acts_.sel_normed.template as<T>() + first * config_.hidden_size, count,
                          acts_.head_shard.template as<T>(), acts_.head_gathered.template as<T>(),
                          acts_.logits.template as<float>());
}

template <typename T>
absl::StatusOr<Tensor> CudaLlamaModel<T>::Forward(const StepBatch& batch) {
  TPSERVE_RETURN_IF_ERROR(Enqueue(batch).status());
  const int64_t rows = batch.NumLogitRows(), v = config_.vocab_size;
  Tensor logits({rows, v});
  for (int64_t first = 0; first < rows; first += options_.max_logit_rows) {
    const int64_t count = std::min<int64_t>(options_.max_logit_rows, rows - first);
    // The first pass of the head was enqueued with the step.
    absl::Status s = first == 0 ? absl::OkStatus() : RunHead(first, count);
    if (s.ok()) {
      s = Launched(cudaMemcpyAsync(acts_.host_logits.data(), acts_.logits.data(), count * v * 4,
                                   cudaMemcpyDeviceToHost, stream()),
                   "logits to host");
    }
    if (s.ok()) s = comm_->WaitStream(options_.step_timeout);
    TPSERVE_RETURN_IF_ERROR(Broken(s));
    std::memcpy(logits.row(first), acts_.host_logits.data(), count * v * 4);
  }
  return logits;
}

template <typename T>
absl::StatusOr<const float*> CudaLlamaModel<T>::ForwardToDevice(const StepBatch& batch) {
  if (batch.NumLogitRows() > options_.max_logit_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a step with ", batch.NumLogitRows(), " logit rows exceeds max_logit_rows ",
        options_.max_logit_rows, " for device logits"));
  }
  const absl::Time start = absl::Now();
  TPSERVE_RETURN_IF_ERROR(Enqueue(batch).status());
  last_enqueue_time_ = absl::Now() - start;
  TPSERVE_RETURN_IF_ERROR(Broken(comm_->WaitStream(options_.step_timeout)));
  return acts_.logits.template as<float>();
}

template <typename T>
absl::StatusOr<std::unique_ptr<StepLogits>> CudaLlamaModel<T>::ForwardForSampling(
    const StepBatch& batch, bool sampling) {
  // Steps with more logit rows than one head pass (all-position logits of a long prompt
  // chunk) are rare: they go through the host.
  if (batch.NumLogitRows() > options_.max_logit_rows) {
    return ModelRunner::ForwardForSampling(batch, sampling);
  }
  TPSERVE_ASSIGN_OR_RETURN(const float* logits, ForwardToDevice(batch));
  if (sampling && sampler_ == nullptr) {
    TPSERVE_ASSIGN_OR_RETURN(sampler_, CudaSampler::Create(config_.vocab_size,
                                                           options_.max_logit_rows, stream()));
  }
  return std::unique_ptr<StepLogits>(
      new DeviceStepLogits(sampling ? sampler_.get() : nullptr, logits, batch.NumLogitRows()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaModelRunner>> CreateCudaLlamaModel(const LlamaModel& host,
                                                                  NcclCommGroup* comm,
                                                                  const CudaModelOptions& options) {
  if (options.dtype == DeviceDType::kFloat32) {
    return CudaLlamaModel<float>::Create(host, comm, options);
  }
  return CudaLlamaModel<__nv_bfloat16>::Create(host, comm, options);
}

}  // namespace tpserve
