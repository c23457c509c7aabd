// The Llama family on the GPU: CudaLlamaModel is a ModelRunner whose weights,
// activations and KV cache live on one CUDA device, computing in fp32 (the path that is
// checked against the CPU goldens) or bf16 (production) with fp32 accumulation.
//
// It is built from a host LlamaModel that has already loaded this rank's shards with the
// parallel layers' WeightLoaders, so sharding has one implementation for both backends;
// the host model can be dropped once Create returns. Per step:
//   embed (mask + all-reduce) → L × [RMSNorm → QKV GEMM → (qk-norm +) RoPE and KV write
//   in one kernel → paged attention → o_proj (all-reduce) → add+RMSNorm → gate_up GEMM → SiLU·mul →
//   down (all-reduce)] → add+RMSNorm on the logit rows only → LM head (all-gather)
// every launch enqueued on the NcclCommGroup's stream; the host waits once per step,
// through NcclCommGroup::WaitStream, so a hung peer fails the step within step_timeout.
// Decode steps replay a CUDA graph per padded batch size (cuda_graphs.h). For the rank
// executor, logits stay on the GPU and rank 0 samples there (CudaSampler); only the
// results come back.
//
// One instance per rank; one thread at a time (the thread whose current device is the
// comm group's). The comm group must outlive the model.
#ifndef TPSERVE_WORKER_MODELS_CUDA_LLAMA_CUDA_H_
#define TPSERVE_WORKER_MODELS_CUDA_LLAMA_CUDA_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/comm/nccl_comm_group.h"
#include "worker/cuda/device_dtype.h"
#include "worker/models/llama.h"
#include "worker/models/model_runner.h"

namespace tpserve {

struct CudaModelOptions {
  DeviceDType dtype = DeviceDType::kBFloat16;
  // Tokens and sequences one step may carry: the activation buffers are sized for them.
  // max_context, the longest context served (0: the model's max_position_embeddings),
  // sizes the RoPE table and the block tables a step may carry.
  BatchLimits limits = DefaultBatchLimits();
  // LM-head rows per pass; steps with more logit rows (all-position logits) loop.
  int max_logit_rows = 256;
  // A step that has not finished by then (a hung peer, a stuck kernel) fails the rank.
  absl::Duration step_timeout = absl::Seconds(60);
  // Decode steps (one new token per sequence) of up to min(limits.max_sequences,
  // max_logit_rows) sequences whose contexts fit graph_max_context replay CUDA graphs,
  // padded to the next captured size. At tp > 1 the graphs hold the step's NCCL
  // collectives too; every rank captures and replays the same sizes at the same steps
  // (their plans are the same), as NCCL requires, and a rank whose capture fails fails
  // the step rather than running it eagerly while its peers replay.
  bool cuda_graphs = true;
  int graph_max_context = 8192;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

// A ModelRunner on the GPU that can also leave a step's logits on the device, for a
// sampler on the device and for benchmarks.
class CudaModelRunner : public ModelRunner {
 public:
  // Runs one step of at most max_logit_rows logit rows. Returns device logits
  // [batch.NumLogitRows(), vocab_size] fp32, valid until the next call; the stream has
  // drained when it returns.
  virtual absl::StatusOr<const float*> ForwardToDevice(const StepBatch& batch) = 0;
  // Turns decode graphs on (as options.cuda_graphs allows) or off from the next step;
  // for measuring what they save.
  virtual void SetCudaGraphs(bool on) = 0;
  // How many decode graphs are captured now (0 when graphs are off or failed).
  virtual int num_decode_graphs() const = 0;
  // Host time of the last ForwardToDevice before its wait: validating the batch, staging
  // its metadata and enqueueing the step (one graph launch, or every kernel). The GPU
  // runs meanwhile, so this is what the host adds to a step when it falls behind.
  virtual absl::Duration last_enqueue_time() const = 0;
};

// Copies `host` (loaded; built on `comm`) to comm's device.
absl::StatusOr<std::unique_ptr<CudaModelRunner>> CreateCudaLlamaModel(const LlamaModel& host,
                                                                  NcclCommGroup* comm,
                                                                  const CudaModelOptions& options);

// Bytes a KV cache may take on the current device: memory_fraction × total device
// memory minus what is in use now (weights, activations, other processes).
// RESOURCE_EXHAUSTED when nothing is left, naming the numbers.
absl::StatusOr<int64_t> CudaKvBudgetBytes(double memory_fraction);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_CUDA_LLAMA_CUDA_H_
