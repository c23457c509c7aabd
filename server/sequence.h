// Sequence: one request's state inside the engine — its tokens (prompt, then generated),
// its place in the scheduler (status, KV tokens computed, what the workers have been
// sent), and its output side (incremental detokenizer, stop-string filter, logprobs and
// text not yet streamed).
//
// Token accounting. Tokens [0, num_computed_tokens) have KV in the workers' cache; the
// rest are computed in later steps (the prompt, chunk by chunk, then one sampled token
// per step). Preemption frees the KV and sets num_computed_tokens back to 0: the whole
// sequence, generated tokens included, is recomputed. The KV block table itself is
// owned by the BlockManager under the sequence's id.
//
// Text. With a tokenizer, each generated token goes through an IncrementalDetokenizer
// (so chunks are whole UTF-8 characters) and a StopStringFilter. An EOS or stop token
// id is appended to the token ids but never decoded into the text. Without a
// tokenizer the text stays empty and stop strings are not checked.
//
// Timing. It notes when it was created (submitted), first scheduled (MarkScheduled),
// sampled its first and last tokens, and finished: the last chunk's StageTimes.
//
// Owned by the engine; used from the engine thread only.
#ifndef TPSERVE_SERVER_SEQUENCE_H_
#define TPSERVE_SERVER_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/request.h"
#include "server/stop_strings.h"
#include "server/tokenizer/incremental_detokenizer.h"
#include "server/tokenizer/tokenizer.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

enum class SequenceStatus { kWaiting, kRunning, kPreempted, kFinished };

class Sequence {
 public:
  // `tokenizer` may be null; it outlives the sequence.
  Sequence(uint64_t id, EngineRequest request, const Tokenizer* tokenizer,
           std::vector<int32_t> eos_token_ids);

  uint64_t id() const { return id_; }
  const EngineRequest& request() const { return request_; }
  SequenceStatus status() const { return status_; }
  void set_status(SequenceStatus status) { status_ = status; }

  // Tokens: the prompt, then the generated ones.
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(request_.prompt_ids.size()); }
  int64_t num_tokens() const { return num_prompt_tokens() + num_output_tokens(); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_ids_.size()); }
  const std::vector<int32_t>& output_ids() const { return output_ids_; }
  // Tokens [begin, end) of the whole sequence.
  std::vector<int32_t> TokenRange(int64_t begin, int64_t end) const;
  // Whether the sequence's tokens begin with `prefix` (without copying them).
  bool StartsWith(absl::Span<const int32_t> prefix) const;

  // Scheduler state.
  int64_t num_computed_tokens() const { return num_computed_tokens_; }
  void set_num_computed_tokens(int64_t n) { num_computed_tokens_ = n; }
  // Tokens still to compute before the next token can be sampled.
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens_; }
  // Whether the workers hold this sequence (sent as new, not dropped since), and how
  // many of its tokens they were sent.
  bool known_to_workers() const { return known_to_workers_; }
  int64_t num_tokens_sent() const { return num_tokens_sent_; }
  void MarkSent(bool known) {
    known_to_workers_ = known;
    num_tokens_sent_ = known ? num_tokens() : 0;
  }
  // Steps it waited at admission for another sequence to compute a prefix block.
  int num_prefix_deferrals() const { return num_prefix_deferrals_; }
  void count_prefix_deferral() { ++num_prefix_deferrals_; }
  // Prompt tokens the prefix cache held at the sequence's first admission (usage).
  int64_t num_cached_prompt_tokens() const { return num_cached_prompt_tokens_; }
  void set_num_cached_prompt_tokens(int64_t n) { num_cached_prompt_tokens_ = n; }
  // It is in a step that starts at `now`; only the first call counts (queue time ends).
  void MarkScheduled(absl::Time now) {
    if (!first_scheduled_.has_value()) first_scheduled_ = now;
  }

  // Output side.
  // Appends a sampled token (and its logprobs, when the request asked for them);
  // returns the finish reason when this token ends the sequence (then call Finish).
  absl::StatusOr<std::optional<FinishReason>> AppendToken(
      int32_t token, const worker::v1::PositionLogprobs& logprobs);
  // Prompt logprobs for positions first_position, first_position + 1, ...; positions
  // already received (a recompute after preemption) or past the prompt are ignored.
  void AddPromptLogprobs(
      int64_t first_position,
      const google::protobuf::RepeatedPtrField<worker::v1::PositionLogprobs>& logprobs);
  // Ends the sequence with `reason`: releases held-back text, which may still complete
  // a stop string (the reason then becomes kStop).
  absl::Status Finish(FinishReason reason);
  std::optional<FinishReason> finish_reason() const { return finish_reason_; }
  // Everything not streamed yet; the first chunk carries the prompt logprobs, the one
  // after Finish the finish reason and usage.
  EngineChunk TakeChunk();

 private:
  absl::Status AppendText(int32_t token);
  PositionLogprobs ToLogprobs(const worker::v1::PositionLogprobs& logprobs) const;
  TokenLogprob ToTokenLogprob(const worker::v1::Logprob& logprob) const;
  StageTimes Timing() const;

  const uint64_t id_;
  const EngineRequest request_;
  const Tokenizer* const tokenizer_;
  const std::vector<int32_t> eos_token_ids_;
  SequenceStatus status_ = SequenceStatus::kWaiting;
  std::vector<int32_t> output_ids_;
  int64_t num_computed_tokens_ = 0;
  bool known_to_workers_ = false;
  int64_t num_tokens_sent_ = 0;
  int64_t num_cached_prompt_tokens_ = 0;
  int num_prefix_deferrals_ = 0;
  // The moments of StageTimes; unset: not reached.
  const absl::Time submitted_ = absl::Now();
  std::optional<absl::Time> first_scheduled_;
  std::optional<absl::Time> first_token_;
  std::optional<absl::Time> last_token_;
  std::optional<absl::Time> finished_;

  std::unique_ptr<IncrementalDetokenizer> detokenizer_;  // null without a tokenizer
  StopStringFilter stop_filter_;
  std::vector<PositionLogprobs> prompt_logprobs_;  // received, in position order
  bool first_chunk_taken_ = false;
  EngineChunk unsent_;  // tokens, text and logprobs not streamed yet
  std::optional<FinishReason> finish_reason_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SEQUENCE_H_
