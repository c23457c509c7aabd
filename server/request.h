// What the engine takes in and streams out for one request: EngineRequest (tokenized
// and validated by the edge), EngineChunk (one streamed piece of the answer).
//
// Token ids and text: a chunk's token_ids include every generated token, also an EOS
// or stop token id that ended the request (it counts in completion_tokens), but the
// text never contains the EOS/stop token's text, a matched stop string, or anything
// after it. The text deltas concatenate exactly to the final text.
#ifndef TPSERVE_SERVER_REQUEST_H_
#define TPSERVE_SERVER_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

enum class FinishReason { kLength, kStop, kEos, kCancelled };

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;
  std::string text;  // the token decoded alone
};

struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

// Sampling with nothing asked for: temperature 1, top_p 1, repetition_penalty 1, no
// logprobs (-1), no prompt logprobs (-1), every other knob off (0), seed 0.
inline worker::v1::WorkerSamplingParams DefaultSampling() {
  worker::v1::WorkerSamplingParams p;
  p.set_temperature(1.0f);
  p.set_top_p(1.0f);
  p.set_repetition_penalty(1.0f);
  p.set_logprobs(-1);
  p.set_prompt_logprobs(-1);
  return p;
}

// Everything Generate needs after the edge has tokenized and validated the request.
struct EngineRequest {
  std::vector<int32_t> prompt_ids;
  int max_tokens = 0;  // > 0; the edge resolves "unset" to the remaining context
  // Sampling exactly as every rank gets it in the sequence's NewSequence: each default
  // resolved, the seed set (the edge draws one if unset), logprobs and prompt_logprobs
  // -1 for none. The edge fills it once (ToEngineRequest); nothing copies it field by
  // field on the way to the ranks.
  worker::v1::WorkerSamplingParams sampling = DefaultSampling();
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  absl::Time deadline = absl::InfiniteFuture();
};

// How long a finished request spent in each stage, as the engine saw it: submitted →
// first scheduled in a step (queue) → its first token sampled (prefill) → its last
// (decode). A preempted request keeps its first scheduling. A stage it never reached
// (cancelled while waiting or prefilling) is 0, and the one it was in runs to its end.
struct StageTimes {
  double queue_s = 0;
  double prefill_s = 0;
  double decode_s = 0;
};

struct EngineChunk {
  int index = 0;  // which of the call's completions (SamplingParams.n); set by the service
  std::vector<int32_t> token_ids;             // new tokens in this chunk
  std::string text;                           // text delta (valid UTF-8)
  std::vector<PositionLogprobs> logprobs;     // per new token, when asked
  std::vector<PositionLogprobs> prompt_logprobs;  // first chunk only, when asked
  std::optional<FinishReason> finish_reason;  // last chunk only
  int prompt_tokens = 0;                      // last chunk only
  int completion_tokens = 0;                  // last chunk only
  int cached_prompt_tokens = 0;               // last chunk only: from the prefix cache
  StageTimes timing;                          // last chunk only
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_REQUEST_H_
