// What tpserve-cli prints: --json objects (one per command, machine-readable) and the
// human-readable forms. Pure functions; no I/O except the Print* helpers (stdout).
//
// Generate, --json: {"token_ids": [...], "text": "...", "finish_reason": "length",
// "usage": {"prompt_tokens": P, "completion_tokens": C}, "logprobs": [{"token_id",
// "logprob", "top": [{"token_id", "logprob", "text"}]}], "prompt_logprobs": [...]}.
// Any failed RPC, --json: {"error": {"code": "INVALID_ARGUMENT", "message": "..."}}.
#ifndef TPSERVE_CLIENT_OUTPUT_H_
#define TPSERVE_CLIENT_OUTPUT_H_

#include <string>

#include "grpcpp/support/status.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// "INVALID_ARGUMENT", "UNAVAILABLE", ...
std::string StatusCodeName(grpc::StatusCode code);
// "length", "stop", "eos", "cancelled"; "" while unfinished.
std::string FinishReasonName(v1::FinishReason reason);

// Appends a streamed chunk to the whole answer (text and lists concatenate).
void AppendGenerateChunk(const v1::GenerateResponse& chunk, v1::GenerateResponse* whole);

nlohmann::json GenerateJson(const v1::GenerateResponse& whole);
nlohmann::json ErrorJson(const grpc::Status& status);

// The lines printed after the completion's text, e.g.
// "token_ids: 1 2 3\nfinish_reason: length  prompt_tokens: 3  completion_tokens: 3\n".
std::string GenerateTrailer(const v1::GenerateResponse& whole);
// "error: INVALID_ARGUMENT: sampling.top_p must be ..."
std::string ErrorLine(const grpc::Status& status);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_OUTPUT_H_
