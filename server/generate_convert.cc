#include "server/generate_convert.h"

#include <utility>

namespace tpserve {
namespace {

void CopySampling(const v1::SamplingParams& s, EngineRequest* out) {
  out->temperature = s.has_temperature() ? s.temperature() : 1.0f;
  out->top_k = s.top_k() < 0 ? 0 : s.top_k();
  out->top_p = s.has_top_p() ? s.top_p() : 1.0f;
  out->min_p = s.min_p();
  out->repetition_penalty = s.has_repetition_penalty() ? s.repetition_penalty() : 1.0f;
  out->presence_penalty = s.presence_penalty();
  out->frequency_penalty = s.frequency_penalty();
  out->logprobs = s.has_logprobs() ? s.logprobs() : -1;
  out->prompt_logprobs = s.has_prompt_logprobs() ? s.prompt_logprobs() : -1;
  out->stop.assign(s.stop().begin(), s.stop().end());
  out->stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  out->ignore_eos = s.ignore_eos();
}

void CopyLogprobs(const std::vector<PositionLogprobs>& from,
                  google::protobuf::RepeatedPtrField<v1::TokenLogprob>* to) {
  for (const PositionLogprobs& position : from) {
    v1::TokenLogprob* entry = to->Add();
    entry->set_token_id(position.chosen.token_id);
    entry->set_logprob(position.chosen.logprob);
    for (const TokenLogprob& alt : position.top) {
      v1::TopLogprob* top = entry->add_top();
      top->set_token_id(alt.token_id);
      top->set_logprob(alt.logprob);
      top->set_text(alt.text);
    }
  }
}

}  // namespace

EngineRequest ToEngineRequest(const v1::GenerateRequest& request,
                              std::vector<int32_t> prompt_ids, int max_context,
                              uint64_t seed, absl::Time deadline) {
  EngineRequest out;
  const v1::SamplingParams& s = request.sampling();
  const int room = max_context - static_cast<int>(prompt_ids.size());
  out.max_tokens = s.has_max_tokens() ? s.max_tokens() : room;
  out.prompt_ids = std::move(prompt_ids);
  CopySampling(s, &out);
  out.seed = s.has_seed() ? s.seed() : seed;
  out.skip_special_tokens =
      request.has_skip_special_tokens() ? request.skip_special_tokens() : true;
  out.deadline = deadline;
  return out;
}

void AppendChunk(const EngineChunk& chunk, v1::GenerateResponse* response) {
  response->set_index(chunk.index);
  response->mutable_token_ids()->Add(chunk.token_ids.begin(), chunk.token_ids.end());
  response->mutable_text()->append(chunk.text);
  CopyLogprobs(chunk.logprobs, response->mutable_logprobs());
  CopyLogprobs(chunk.prompt_logprobs, response->mutable_prompt_logprobs());
  if (chunk.finish_reason.has_value()) {
    response->set_finish_reason(ToProtoFinishReason(*chunk.finish_reason));
    response->mutable_usage()->set_prompt_tokens(chunk.prompt_tokens);
    response->mutable_usage()->set_completion_tokens(chunk.completion_tokens);
    response->mutable_usage()->set_cached_prompt_tokens(chunk.cached_prompt_tokens);
  }
}

v1::FinishReason ToProtoFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace tpserve
