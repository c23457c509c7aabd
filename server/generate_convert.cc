#include "server/generate_convert.h"

#include <utility>

namespace tpserve {
namespace {

// The API's sampling message with every default resolved, as the ranks take it.
worker::v1::WorkerSamplingParams ResolveSampling(const v1::SamplingParams& s, uint64_t seed) {
  worker::v1::WorkerSamplingParams p = DefaultSampling();
  if (s.has_temperature()) p.set_temperature(s.temperature());
  p.set_top_k(s.top_k() < 0 ? 0 : s.top_k());
  if (s.has_top_p()) p.set_top_p(s.top_p());
  p.set_min_p(s.min_p());
  if (s.has_repetition_penalty()) p.set_repetition_penalty(s.repetition_penalty());
  p.set_presence_penalty(s.presence_penalty());
  p.set_frequency_penalty(s.frequency_penalty());
  p.set_seed(s.has_seed() ? s.seed() : seed);
  if (s.has_logprobs()) p.set_logprobs(s.logprobs());
  if (s.has_prompt_logprobs()) p.set_prompt_logprobs(s.prompt_logprobs());
  return p;
}

void CopyStops(const v1::SamplingParams& s, EngineRequest* out) {
  out->stop.assign(s.stop().begin(), s.stop().end());
  out->stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  out->ignore_eos = s.ignore_eos();
}

}  // namespace

void AppendLogprobs(const std::vector<PositionLogprobs>& from,
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

EngineRequest ToEngineRequest(const v1::GenerateRequest& request,
                              std::vector<int32_t> prompt_ids, int max_context,
                              uint64_t seed, absl::Time deadline) {
  EngineRequest out;
  const v1::SamplingParams& s = request.sampling();
  const int room = max_context - static_cast<int>(prompt_ids.size());
  out.max_tokens = s.has_max_tokens() ? s.max_tokens() : room;
  out.prompt_ids = std::move(prompt_ids);
  out.sampling = ResolveSampling(s, seed);
  CopyStops(s, &out);
  out.skip_special_tokens =
      request.has_skip_special_tokens() ? request.skip_special_tokens() : true;
  out.deadline = deadline;
  return out;
}

void AppendChunk(const EngineChunk& chunk, v1::GenerateResponse* response) {
  response->set_index(chunk.index);
  response->mutable_token_ids()->Add(chunk.token_ids.begin(), chunk.token_ids.end());
  response->mutable_text()->append(chunk.text);
  AppendLogprobs(chunk.logprobs, response->mutable_logprobs());
  AppendLogprobs(chunk.prompt_logprobs, response->mutable_prompt_logprobs());
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
