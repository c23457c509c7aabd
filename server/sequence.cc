#include "server/sequence.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"

namespace tpserve {
namespace {

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Sequence::Sequence(uint64_t id, EngineRequest request, const Tokenizer* tokenizer,
                   std::vector<int32_t> eos_token_ids)
    : id_(id),
      request_(std::move(request)),
      tokenizer_(tokenizer),
      eos_token_ids_(std::move(eos_token_ids)),
      stop_filter_(request_.stop) {
  if (tokenizer_ != nullptr) {
    detokenizer_ =
        std::make_unique<IncrementalDetokenizer>(tokenizer_, request_.skip_special_tokens);
  }
  // One entry per prompt token: the first has no context, so logprob 0 and no
  // alternatives (the API's promise); the ranks score the others.
  if (request_.sampling.prompt_logprobs() >= 0 && !request_.prompt_ids.empty()) {
    prompt_logprobs_.push_back({{request_.prompt_ids[0], 0.0f, ""}, {}});
  }
}

std::vector<int32_t> Sequence::TokenRange(int64_t begin, int64_t end) const {
  std::vector<int32_t> tokens;
  tokens.reserve(std::max<int64_t>(end - begin, 0));
  for (int64_t i = begin; i < end; ++i) {
    tokens.push_back(i < num_prompt_tokens() ? request_.prompt_ids[i]
                                             : output_ids_[i - num_prompt_tokens()]);
  }
  return tokens;
}

bool Sequence::StartsWith(absl::Span<const int32_t> prefix) const {
  if (static_cast<int64_t>(prefix.size()) > num_tokens()) return false;
  const int64_t prompt = std::min<int64_t>(prefix.size(), num_prompt_tokens());
  return std::equal(prefix.begin(), prefix.begin() + prompt, request_.prompt_ids.begin()) &&
         std::equal(prefix.begin() + prompt, prefix.end(), output_ids_.begin());
}

absl::StatusOr<std::optional<FinishReason>> Sequence::AppendToken(
    int32_t token, const worker::v1::PositionLogprobs& logprobs) {
  last_token_ = absl::Now();
  if (!first_token_.has_value()) first_token_ = last_token_;
  output_ids_.push_back(token);
  unsent_.token_ids.push_back(token);
  if (request_.sampling.logprobs() >= 0) unsent_.logprobs.push_back(ToLogprobs(logprobs));
  // EOS and stop ids end the sequence before reaching the text.
  if (!request_.ignore_eos && Contains(eos_token_ids_, token)) return FinishReason::kEos;
  if (Contains(request_.stop_token_ids, token)) return FinishReason::kStop;
  TPSERVE_RETURN_IF_ERROR(AppendText(token));
  if (stop_filter_.stopped()) return FinishReason::kStop;
  if (num_output_tokens() >= request_.max_tokens) return FinishReason::kLength;
  return std::nullopt;
}

absl::Status Sequence::AppendText(int32_t token) {
  if (detokenizer_ == nullptr) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(std::string text, detokenizer_->Step(token));
  unsent_.text += stop_filter_.Push(text);
  return absl::OkStatus();
}

void Sequence::AddPromptLogprobs(
    int64_t first_position,
    const google::protobuf::RepeatedPtrField<worker::v1::PositionLogprobs>& logprobs) {
  // After the first chunk they were streamed: a recompute must not add them again.
  if (request_.sampling.prompt_logprobs() < 0 || first_chunk_taken_) return;
  for (int i = 0; i < logprobs.size(); ++i) {
    const int64_t position = first_position + i;
    // Position p carries the logprob of prompt token p + 1, entry p + 1.
    if (position + 1 != static_cast<int64_t>(prompt_logprobs_.size())) continue;
    if (position + 1 >= num_prompt_tokens()) break;
    prompt_logprobs_.push_back(ToLogprobs(logprobs[i]));
  }
}

absl::Status Sequence::Finish(FinishReason reason) {
  if (detokenizer_ != nullptr && !stop_filter_.stopped()) {
    TPSERVE_ASSIGN_OR_RETURN(std::string rest, detokenizer_->Flush());
    unsent_.text += stop_filter_.Push(rest);
    if (stop_filter_.stopped()) reason = FinishReason::kStop;
    unsent_.text += stop_filter_.Flush();
  }
  finish_reason_ = reason;
  status_ = SequenceStatus::kFinished;
  finished_ = absl::Now();
  return absl::OkStatus();
}

EngineChunk Sequence::TakeChunk() {
  EngineChunk chunk = std::exchange(unsent_, EngineChunk());
  if (!first_chunk_taken_) {
    first_chunk_taken_ = true;
    chunk.prompt_logprobs = std::move(prompt_logprobs_);
  }
  if (finish_reason_.has_value()) {
    chunk.finish_reason = finish_reason_;
    chunk.prompt_tokens = static_cast<int>(num_prompt_tokens());
    chunk.completion_tokens = static_cast<int>(num_output_tokens());
    chunk.cached_prompt_tokens = static_cast<int>(num_cached_prompt_tokens_);
    chunk.timing = Timing();
  }
  return chunk;
}

StageTimes Sequence::Timing() const {
  const absl::Time end = finished_.value_or(absl::Now());
  const absl::Time first_token = first_token_.value_or(end);
  const absl::Time scheduled = std::min(first_scheduled_.value_or(end), first_token);
  const absl::Time last_token = last_token_.value_or(first_token);
  return {absl::ToDoubleSeconds(scheduled - submitted_),
          absl::ToDoubleSeconds(first_token - scheduled),
          absl::ToDoubleSeconds(last_token - first_token)};
}

PositionLogprobs Sequence::ToLogprobs(const worker::v1::PositionLogprobs& logprobs) const {
  PositionLogprobs out;
  out.chosen = ToTokenLogprob(logprobs.chosen());
  for (const worker::v1::Logprob& top : logprobs.top()) out.top.push_back(ToTokenLogprob(top));
  return out;
}

TokenLogprob Sequence::ToTokenLogprob(const worker::v1::Logprob& logprob) const {
  TokenLogprob out{logprob.token_id(), logprob.logprob(), ""};
  if (tokenizer_ != nullptr) {
    // A token that is not text on its own (a lone byte) decodes to U+FFFD; that is
    // what a client shows for it.
    auto text = tokenizer_->Decode({logprob.token_id()}, /*skip_special_tokens=*/false);
    if (text.ok()) out.text = *std::move(text);
  }
  return out;
}

}  // namespace tpserve
