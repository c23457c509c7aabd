// The batch limits (worker.proto's BatchLimits) as every struct that carries them
// holds them: the server's flags, the engine and its scheduler, the worker pool, the
// Assignment, the rank, its sequence table and the CUDA model's buffers. One default and
// one set of bounds for them all, here, so that no layer can let through what the next
// refuses.
#ifndef TPSERVE_PROTO_TPSERVE_V1_BATCH_LIMITS_H_
#define TPSERVE_PROTO_TPSERVE_V1_BATCH_LIMITS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

using BatchLimits = worker::v1::BatchLimits;

inline constexpr int kDefaultMaxBatchTokens = 2048;
inline constexpr int kDefaultMaxSequences = 64;
inline constexpr int kMaxMaxContext = 1 << 30;
inline constexpr int kMaxMaxBatchTokens = 1 << 30;
inline constexpr int kMaxMaxSequences = 1 << 20;

// max_context 0 (the model's), max_batch_tokens kDefaultMaxBatchTokens, max_sequences
// kDefaultMaxSequences.
BatchLimits DefaultBatchLimits();

// BatchLimits with the given fields.
BatchLimits MakeBatchLimits(int max_context, int max_batch_tokens, int max_sequences);

// Each field within the bounds worker.proto documents. INVALID_ARGUMENT names
// "<where>.<field>", the value and the bounds.
absl::Status ValidateBatchLimits(const BatchLimits& limits, absl::string_view where);

// The longest context served: limits.max_context, or max_position_embeddings when it is
// 0. INVALID_ARGUMENT naming "<where>.max_context" when it exceeds
// max_position_embeddings, or when neither gives a length ≥ 1.
absl::StatusOr<int> ResolveMaxContext(const BatchLimits& limits, int max_position_embeddings,
                                      absl::string_view where);

}  // namespace tpserve

#endif  // TPSERVE_PROTO_TPSERVE_V1_BATCH_LIMITS_H_
