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

}  // namespace tpserve

#endif  // TPSERVE_PROTO_TPSERVE_V1_SAMPLING_LIMITS_H_
