#include "tpserve/v1/batch_limits.h"

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

absl::Status CheckField(absl::string_view where, absl::string_view field, int value, int low,
                        int high) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ".", field, " must be in [", low, ", ",
                                                 high, "], got ", value));
}

}  // namespace

BatchLimits DefaultBatchLimits() { return MakeBatchLimits(0, kDefaultMaxBatchTokens, kDefaultMaxSequences); }

BatchLimits MakeBatchLimits(int max_context, int max_batch_tokens, int max_sequences) {
  BatchLimits limits;
  limits.set_max_context(max_context);
  limits.set_max_batch_tokens(max_batch_tokens);
  limits.set_max_sequences(max_sequences);
  return limits;
}

absl::Status ValidateBatchLimits(const BatchLimits& limits, absl::string_view where) {
  absl::Status s = CheckField(where, "max_context", limits.max_context(), 0, kMaxMaxContext);
  if (s.ok()) {
    s = CheckField(where, "max_batch_tokens", limits.max_batch_tokens(), 1, kMaxMaxBatchTokens);
  }
  if (s.ok()) s = CheckField(where, "max_sequences", limits.max_sequences(), 1, kMaxMaxSequences);
  return s;
}

absl::StatusOr<int> ResolveMaxContext(const BatchLimits& limits, int max_position_embeddings,
                                      absl::string_view where) {
  if (limits.max_context() > max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".max_context ", limits.max_context(),
                     " exceeds the model's max_position_embeddings ", max_position_embeddings));
  }
  const int context = limits.max_context() > 0 ? limits.max_context() : max_position_embeddings;
  if (context < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".max_context is 0 and the model declares no max_position_embeddings"));
  }
  return context;
}

}  // namespace tpserve
