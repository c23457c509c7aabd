// RankExecutor: the gRPC-free core of one tensor-parallel rank. It owns the rank's
// CommGroup, its LlamaModel shards, its KV cache and the sequence table, and turns each
// StepPlan (proto/tpserve/v1/worker.proto) into one forward step.
//
// Every rank of a group must Execute the same plans in the same order (their
// collectives pair up). Rank 0 samples and fills the StepResult; the other ranks return
// the step number only. Called from the worker's control loop (or a test's rank
// thread); one thread at a time.
#ifndef TPSERVE_WORKER_RANK_RANK_EXECUTOR_H_
#define TPSERVE_WORKER_RANK_RANK_EXECUTOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tpserve/v1/batch_limits.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/comm/comm_group.h"
#include "worker/kv_cache.h"
#include "worker/models/model_runner.h"
#include "worker/rank/sequence_table.h"

namespace tpserve {

struct RankExecutorOptions {
  int block_size = 16;
  int num_blocks = 0;        // KV blocks to allocate, ≥ 1 (the rank builder sizes it)
  // What every plan keeps to (max_context 0: the model's max_position_embeddings).
  BatchLimits limits = DefaultBatchLimits();

  absl::Status Validate() const;
};

class RankExecutor {
 public:
  // Takes a loaded model of any backend (its shards built on `comm`; the rank builder
  // makes both) and allocates its KV cache of options.num_blocks blocks. Errors name the
  // limit; nothing is half-built on failure.
  static absl::StatusOr<std::unique_ptr<RankExecutor>> Create(std::unique_ptr<CommGroup> comm,
                                                              std::unique_ptr<ModelRunner> model,
                                                              const RankExecutorOptions& options);

  // Runs one plan: validates it (steps consecutive from 1, the SequenceTable rules),
  // applies it, runs the forward step and, on rank 0, samples every sequence that
  // reached the end of its known tokens and scores requested prompt logprobs. Rank 0's
  // result has one SequenceOutput per scheduled sequence, in batch order (token_id
  // unset after a prefill chunk). A rejected plan (INVALID_ARGUMENT) changes nothing;
  // a failure after validation (a collective, the sampler) breaks the executor and
  // every later call returns FAILED_PRECONDITION.
  absl::StatusOr<worker::v1::StepResult> Execute(const worker::v1::StepPlan& plan);

  int rank() const { return comm_->rank(); }
  int num_kv_blocks() const { return model_->cache_shape().num_blocks; }
  int max_context() const { return limits_.batch.max_context(); }
  const ModelConfig& config() const { return model_->config(); }

 private:
  RankExecutor(std::unique_ptr<CommGroup> comm, std::unique_ptr<ModelRunner> model,
               const SequenceTableLimits& limits);
  absl::StatusOr<worker::v1::StepResult> Run(const worker::v1::StepPlan& plan);
  // Rank 0: fills result->sequences from the step's logits.
  absl::Status FillOutputs(const RankStep& step, StepLogits& logits,
                           worker::v1::StepResult* result) const;

  std::unique_ptr<CommGroup> comm_;  // outlives model_, which holds a pointer to it
  std::unique_ptr<ModelRunner> model_;  // with its KV cache
  SequenceTableLimits limits_;
  SequenceTable table_;
  uint64_t last_step_ = 0;
  absl::Status broken_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_RANK_EXECUTOR_H_
