// Limits on sampling parameters that inference.proto documents and that both the gRPC
// edge (server/request_validation.h) and the ranks (worker/sampling/sampler.h) enforce: one
// definition, so that the edge can never let through what a rank refuses.
#ifndef TPSERVE_PROTO_TPSERVE_V1_SAMPLING_LIMITS_H_
#define TPSERVE_PROTO_TPSERVE_V1_SAMPLING_LIMITS_H_

namespace tpserve {

// Most alternatives (top-n) per generated or prompt token.
inline constexpr int kMaxLogprobs = 20;
// presence_penalty and frequency_penalty lie in [-kMaxAbsPenalty, kMaxAbsPenalty].
inline constexpr float kMaxAbsPenalty = 2.0f;
// repetition_penalty lies in [kMinRepetitionPenalty, kMaxRepetitionPenalty]: dividing or
// multiplying any logit a model produces by it stays finite in fp32 (1e-38 would turn
// a logit of 10 into 1e39 = inf). transformers and vLLM take any positive value; useful
// ones lie within [0.5, 2].
inline constexpr float kMinRepetitionPenalty = 0.01f;
inline constexpr float kMaxRepetitionPenalty = 100.0f;

}  // namespace tpserve

#endif  // TPSERVE_PROTO_TPSERVE_V1_SAMPLING_LIMITS_H_
