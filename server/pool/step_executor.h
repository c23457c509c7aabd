// StepExecutor: what the engine drives — something that runs one StepPlan on every
// rank and returns rank 0's StepResult.
//
// WorkerPool implements it over rank processes; tests implement it in process. Called
// from the engine's step thread only, one step at a time.
#ifndef TPSERVE_SERVER_POOL_STEP_EXECUTOR_H_
#define TPSERVE_SERVER_POOL_STEP_EXECUTOR_H_

#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  // Runs `plan` (step numbers consecutive from 1) and returns rank 0's result, with
  // one SequenceOutput per scheduled sequence in batch order (new_sequences, then
  // running); token_id is set when the step reached the end of the sequence's known
  // tokens, unset after a prefill chunk that did not.
  // Any failure (a rank errored, died or missed the deadline) is UNAVAILABLE and
  // final: every later call fails too, and the executor must be replaced.
  virtual absl::StatusOr<worker::v1::StepResult> RunStep(const worker::v1::StepPlan& plan) = 0;

  // The KV geometry every rank allocated (the minimum over ranks).
  virtual int num_kv_blocks() const = 0;
  virtual int kv_block_size() const = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_STEP_EXECUTOR_H_
