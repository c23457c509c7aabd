// PlanDriver: a minimal scheduler for tests that generates text purely through
// StepPlans (proto/tpserve/v1/worker.proto), the way the engine will: sequences join at
// chosen steps, prefill in chunks, decode one token per step, are dropped when done, and
// their KV blocks are reused by later sequences.
//
// The executor is any function running one plan (a LocalRankGroup, a WorkerPool). One
// thread.
#ifndef TPSERVE_TESTS_GOLDEN_PLAN_DRIVER_H_
#define TPSERVE_TESTS_GOLDEN_PLAN_DRIVER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

struct DriverRequest {
  std::vector<int32_t> prompt;
  int max_new_tokens = 8;
  int join_step = 1;   // the first step that may admit it
  int chunk = 1 << 20;  // most tokens computed per step
  int prompt_logprobs = -1;
  int logprobs = 0;
  // When > 0: after this many generated tokens the sequence is dropped and re-admitted
  // in full (prompt + output so far), as after a preemption.
  int preempt_after = 0;
};

struct DriverOutput {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;         // chosen token's logprob per generated token
  std::vector<float> prompt_logprobs;  // chosen logprob per prompt position 1..n-1
};

using StepFn = std::function<absl::StatusOr<worker::v1::StepResult>(const worker::v1::StepPlan&)>;

// Greedy (temperature 0) generation of every request. Fails if the executor fails or
// answers inconsistently (an output for an unscheduled sequence, a token mid-prefill).
absl::StatusOr<std::vector<DriverOutput>> RunGreedy(const StepFn& step,
                                                    const std::vector<DriverRequest>& requests,
                                                    int block_size, int num_blocks);

// A plan's sampling parameters for greedy decoding.
worker::v1::WorkerSamplingParams GreedyParams(int logprobs, int prompt_logprobs);

}  // namespace tpserve

#endif  // TPSERVE_TESTS_GOLDEN_PLAN_DRIVER_H_
