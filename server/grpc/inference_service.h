// InferenceService: tpserve.v1.Inference over a ServingCore — the gRPC edge.
//
// Every handler is validate → call the core → ToGrpcStatus. Generate starts the call
// on the core and streams its chunks from a ChunkQueue, checking between chunks (every
// kCancelPollInterval at most) whether the call was cancelled or passed its deadline,
// and then cancels it on the core. GenerateUnary runs the same loop and collects the
// chunks into one response. Chat and ChatUnary read the conversation as the HTTP edge
// does (ChatBody, then ReadChatRequest and PrepareChat), run it the same way, and split
// each choice's answer with a ChatSplitter.
// Threading: gRPC calls the handlers from its thread pool.
#ifndef TPSERVE_SERVER_GRPC_INFERENCE_SERVICE_H_
#define TPSERVE_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/chat/chat_config.h"
#include "server/chat/chat_splitter.h"
#include "server/openai/openai_request.h"
#include "server/request.h"
#include "server/serving_core.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

inline constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

class InferenceService final : public v1::Inference::Service {
 public:
  // `core` (and what `chat` points to) outlive the service.
  explicit InferenceService(ServingCore* core, ChatConfig chat = {})
      : core_(core), chat_(std::move(chat)) {}

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                             v1::GenerateResponse* response) override;
  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::ChatResponse>* writer) override;
  grpc::Status ChatUnary(grpc::ServerContext* context, const v1::ChatRequest* request,
                         v1::ChatResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;
  grpc::Status ResetPrefixCache(grpc::ServerContext* context,
                                const v1::ResetPrefixCacheRequest* request,
                                v1::ResetPrefixCacheResponse* response) override;

 private:
  // Returns false when the client has gone away.
  using ChunkSink = std::function<bool(const EngineChunk&)>;

  // Runs the request on the core into `sink` until it ends, the client goes away or the
  // call passes its deadline.
  absl::Status RunGenerate(grpc::ServerContext* context, const v1::GenerateRequest& request,
                           const ChunkSink& sink);

  // Reads and renders a chat as the HTTP edge does (server/openai/openai_request.h).
  absl::StatusOr<PreparedChat> PrepareChat(const v1::ChatRequest& request) const;
  // One splitter per choice.
  absl::StatusOr<std::vector<std::unique_ptr<ChatSplitter>>> Splitters(
      const PreparedChat& chat) const;

  ServingCore* const core_;
  const ChatConfig chat_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_GRPC_INFERENCE_SERVICE_H_
