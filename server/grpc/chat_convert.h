// The gRPC Chat RPC's conversions. ChatBody turns a tpserve.v1.ChatRequest into the
// body /v1/chat/completions would get (messages, tools, tool_choice, template inputs;
// sampling aside), so that both edges read chats with one reader (ReadChatRequest) and
// refuse the same things. AppendChatChunk adds one engine chunk, split by the choice's
// ChatSplitter, to a ChatResponse: a fresh response per chunk gives the Chat stream,
// one response for every chunk gives ChatUnary (whole = true: tool calls listed whole).
#ifndef TPSERVE_SERVER_GRPC_CHAT_CONVERT_H_
#define TPSERVE_SERVER_GRPC_CHAT_CONVERT_H_

#include "absl/status/statusor.h"
#include "server/chat/chat_splitter.h"
#include "server/openai/openai_request.h"
#include "server/request.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// INVALID_ARGUMENT naming the field for JSON fields that are not JSON of their kind.
absl::StatusOr<OrderedJson> ChatBody(const v1::ChatRequest& request);

void AppendChatChunk(const EngineChunk& chunk, ChatSplitter& splitter, bool whole,
                     v1::ChatResponse* response);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_GRPC_CHAT_CONVERT_H_
