// Running whole token sequences through a LlamaModel on one rank, step by step, the way
// the serving engine will: one-shot prefill, token-by-token decode, or a staggered mix
// in which some sequences prefill while others decode in the same step.
//
// Shared by the forward tool (one rank per process) and the golden tests (ranks as
// threads). Every rank of a group must call it with identical arguments.
#ifndef TPSERVE_WORKER_TOOLS_FORWARD_LIB_H_
#define TPSERVE_WORKER_TOOLS_FORWARD_LIB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/comm_group.h"
#include "worker/models/llama.h"
#include "worker/models/model_files.h"
#include "worker/models/model_runner.h"
#include "worker/tensor.h"

namespace tpserve {

enum class ForwardMode {
  kOneShot,      // one step: every sequence prefilled whole
  kIncremental,  // one token per sequence per step
  kStaggered,    // sequence i joins at step i with half its tokens, then one per step
};

// Logits for every position of every sequence: result[i] is [len_i, vocab_size].
// Allocates the runner's cache afresh (just the blocks the sequences need).
absl::StatusOr<std::vector<Tensor>> ForwardSequences(
    ModelRunner& runner, const std::vector<std::vector<int32_t>>& sequences,
    ForwardMode mode, int block_size = 16);
// The same on the CPU model (a CpuModelRunner borrowing `model`).
absl::StatusOr<std::vector<Tensor>> ForwardSequences(
    const LlamaModel& model, const std::vector<std::vector<int32_t>>& sequences,
    ForwardMode mode, int block_size = 16);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_TOOLS_FORWARD_LIB_H_
