#include "server/grpc/inference_service.h"

#include <chrono>
#include <memory>
#include <utility>

#include "base/grpc_status.h"
#include "server/chunk_queue.h"
#include "server/generate_convert.h"
#include "server/grpc/chat_convert.h"

namespace tpserve {
namespace {

// The call's deadline; gRPC reports "none" as the largest time point.
absl::Time CallDeadline(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

// A client cancels its call at its own deadline, which is earlier than the server's
// copy of it by the request's transit time (the server starts the clock on arrival): a
// cancellation seen this close to the deadline is the deadline.
constexpr absl::Duration kDeadlineTransitSlack = absl::Milliseconds(100);

// Why a call whose client is gone ended: its deadline, when that has passed (what the
// client sees, so that the server's records agree with it), or `why`.
absl::Status ClientGone(const grpc::ServerContext& context, const char* why) {
  if (absl::Now() + kDeadlineTransitSlack >= CallDeadline(context)) {
    return absl::DeadlineExceededError("the call passed its deadline");
  }
  return absl::CancelledError(why);
}

}  // namespace

absl::Status InferenceService::RunGenerate(grpc::ServerContext* context,
                                           const v1::GenerateRequest& request,
                                           const ChunkSink& sink) {
  auto queue = std::make_shared<ChunkQueue>(1);
  absl::StatusOr<std::shared_ptr<GenerateCall>> call = core_->StartGenerate(
      request, CallDeadline(*context),
      GenerateSink{[queue](const EngineChunk& chunk) { queue->Push(chunk); },
                   [queue](const absl::Status& status) { queue->Finish(status); }});
  if (!call.ok()) return call.status();
  // The client going away ends the call on the core at once (which records it with
  // that reason); its blocks are free within a step.
  const auto gone = [&](const char* why) {
    const absl::Status status = ClientGone(*context, why);
    (*call)->Cancel(status);
    return status;
  };
  EngineChunk chunk;
  absl::Status done;
  for (;;) {
    switch (queue->Pop(kCancelPollInterval, &chunk, &done)) {
      case ChunkQueue::Next::kDone:
        return done;
      case ChunkQueue::Next::kChunk:
        if (sink(chunk)) continue;
        return gone("the client stopped reading the stream");
      case ChunkQueue::Next::kTimeout:
        if (!context->IsCancelled()) continue;
        return gone("the client cancelled the call");
    }
  }
}

grpc::Status InferenceService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return ToGrpcStatus(RunGenerate(context, *request, [writer](const EngineChunk& chunk) {
    v1::GenerateResponse response;
    AppendChunk(chunk, &response);
    return writer->Write(response);
  }));
}

grpc::Status InferenceService::GenerateUnary(grpc::ServerContext* context,
                                             const v1::GenerateRequest* request,
                                             v1::GenerateResponse* response) {
  const int n = CompletionCount(*request);
  return ToGrpcStatus(RunGenerate(context, *request, [response, n](const EngineChunk& chunk) {
    if (n == 1) {
      AppendChunk(chunk, response);
      return true;
    }
    while (response->choices_size() < n) {
      response->add_choices()->set_index(response->choices_size() - 1);
    }
    AppendChunk(chunk, response->mutable_choices(chunk.index));
    return true;
  }));
}

absl::StatusOr<PreparedChat> InferenceService::PrepareChat(
    const v1::ChatRequest& request) const {
  absl::StatusOr<OrderedJson> body = ChatBody(request);
  if (!body.ok()) return body.status();
  absl::StatusOr<ChatRequest> chat = ReadChatRequest(*body, "");
  if (!chat.ok()) return chat.status();
  *chat->generate.mutable_sampling() = request.sampling();
  if (request.has_skip_special_tokens()) {
    chat->generate.set_skip_special_tokens(request.skip_special_tokens());
  }
  chat->generate.set_request_id(request.request_id());
  return tpserve::PrepareChat(*std::move(chat), chat_);
}

absl::StatusOr<std::vector<std::unique_ptr<ChatSplitter>>> InferenceService::Splitters(
    const PreparedChat& chat) const {
  std::vector<std::unique_ptr<ChatSplitter>> out;
  for (int i = 0; i < chat.choices; ++i) {
    absl::StatusOr<std::unique_ptr<ChatSplitter>> splitter = ChatSplitter::Create(chat.parsing);
    if (!splitter.ok()) return splitter.status();
    out.push_back(*std::move(splitter));
  }
  return out;
}

grpc::Status InferenceService::Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                                    grpc::ServerWriter<v1::ChatResponse>* writer) {
  absl::StatusOr<PreparedChat> chat = PrepareChat(*request);
  if (!chat.ok()) return ToGrpcStatus(chat.status());
  absl::StatusOr<std::vector<std::unique_ptr<ChatSplitter>>> splitters = Splitters(*chat);
  if (!splitters.ok()) return ToGrpcStatus(splitters.status());
  return ToGrpcStatus(RunGenerate(context, chat->generate, [&](const EngineChunk& chunk) {
    v1::ChatResponse response;
    AppendChatChunk(chunk, *(*splitters)[chunk.index], /*whole=*/false, &response);
    return writer->Write(response);
  }));
}

grpc::Status InferenceService::ChatUnary(grpc::ServerContext* context,
                                         const v1::ChatRequest* request,
                                         v1::ChatResponse* response) {
  absl::StatusOr<PreparedChat> chat = PrepareChat(*request);
  if (!chat.ok()) return ToGrpcStatus(chat.status());
  absl::StatusOr<std::vector<std::unique_ptr<ChatSplitter>>> splitters = Splitters(*chat);
  if (!splitters.ok()) return ToGrpcStatus(splitters.status());
  const int n = chat->choices;
  for (int i = 0; n > 1 && i < n; ++i) response->add_choices()->set_index(i);
  return ToGrpcStatus(RunGenerate(context, chat->generate, [&](const EngineChunk& chunk) {
    v1::ChatResponse* choice = n > 1 ? response->mutable_choices(chunk.index) : response;
    AppendChatChunk(chunk, *(*splitters)[chunk.index], /*whole=*/true, choice);
    return true;
  }));
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  absl::StatusOr<std::vector<int32_t>> ids = core_->Tokenize(*request);
  if (ids.ok()) response->mutable_token_ids()->Add(ids->begin(), ids->end());
  return ToGrpcStatus(ids.status());
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext*,
                                          const v1::DetokenizeRequest* request,
                                          v1::DetokenizeResponse* response) {
  absl::StatusOr<std::string> text = core_->Detokenize(*request);
  if (text.ok()) *response->mutable_text() = *std::move(text);
  return ToGrpcStatus(text.status());
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                                            v1::ModelInfo* info) {
  core_->FillModelInfo(info);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ResetPrefixCache(grpc::ServerContext* context,
                                                const v1::ResetPrefixCacheRequest*,
                                                v1::ResetPrefixCacheResponse* response) {
  // A step boundary comes within a step's time; the call's deadline, at most a minute.
  const absl::Time deadline = std::min(CallDeadline(*context), absl::Now() + absl::Minutes(1));
  absl::StatusOr<int64_t> dropped = core_->ResetPrefixCache(deadline);
  if (dropped.ok()) response->set_blocks_dropped(*dropped);
  return ToGrpcStatus(dropped.status());
}

}  // namespace tpserve
