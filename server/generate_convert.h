// Conversions between the public API (tpserve.v1) and the engine's request and chunk
// types, used by the gRPC edge after validation.
//
// ToEngineRequest resolves every default of inference.proto (unset max_tokens = the
// rest of the context, top_k -1 = no limit, ...). AppendChunk adds one EngineChunk to
// a GenerateResponse: a fresh response per chunk gives the Generate stream, appending
// every chunk to one response gives GenerateUnary. Pure; safe from any thread.
#ifndef TPSERVE_SERVER_GENERATE_CONVERT_H_
#define TPSERVE_SERVER_GENERATE_CONVERT_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "server/request.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// `request` must have passed ValidateGenerateRequest and ValidatePromptLength.
EngineRequest ToEngineRequest(const v1::GenerateRequest& request,
                              std::vector<int32_t> prompt_ids, int max_context,
                              uint64_t seed, absl::Time deadline);

void AppendChunk(const EngineChunk& chunk, v1::GenerateResponse* response);

// `from` added to `to`, one TokenLogprob per position.
void AppendLogprobs(const std::vector<PositionLogprobs>& from,
                    google::protobuf::RepeatedPtrField<v1::TokenLogprob>* to);

v1::FinishReason ToProtoFinishReason(FinishReason reason);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_GENERATE_CONVERT_H_
