// OpenAiApi: the OpenAI-compatible HTTP API on the same ServingCore as gRPC.
//
//   POST /v1/completions, POST /v1/chat/completions   streamed (SSE) or whole
//   GET  /v1/models, /v1/models/NAME                  the served model
//   POST /tokenize, POST /detokenize                  vLLM's shapes
//   GET  /health                                      200 serving, 503 not
//   GET  /metrics                                     Prometheus text, as --metrics-port
//
// A request is read on an HTTP I/O thread and handed to a small pool of prepare threads
// (parse, render the chat template, tokenize, submit), so that no I/O thread does
// request-sized work; a full pool queue (by count, or by the bodies' bytes) is 503. The engine's chunks become events on
// the engine thread and are queued on the connection (HttpResponder::Write never
// waits). A client that disconnects cancels its generations at once (their KV blocks
// are free within a step); a drain refuses new requests (503) and finishes the running
// ones. Streams end with `data: [DONE]`; a failure after the stream started is sent
// as a `data: {"error": ...}` event before it.
//
// With API keys (--api-key-file), every route but /health and /metrics needs
// "Authorization: Bearer KEY" (401 otherwise), as on gRPC.
//
// Threading: AddRoutes before the server starts; the handlers are thread-safe. The API
// must outlive the HttpServer serving its routes (stop the server first).
#ifndef TPSERVE_SERVER_OPENAI_OPENAI_API_H_
#define TPSERVE_SERVER_OPENAI_OPENAI_API_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/task_pool.h"
#include "server/auth.h"
#include "server/chat/chat_config.h"
#include "server/http/http_message.h"
#include "server/http/http_routes.h"
#include "server/openai/openai_request.h"
#include "server/serving_core.h"

namespace tpserve {

struct OpenAiApiOptions {
  ChatConfig chat;  // no template: chat requests are refused (400)
  const ApiKeys* api_keys = nullptr;  // null: open
  size_t prepare_threads = 2;
  size_t max_queued_prepares = 4096;  // requests read but not yet submitted
  size_t max_queued_prepare_bytes = size_t{256} << 20;  // their bodies, in all
};

class OpenAiApi {
 public:
  // `core` and what `options` points to outlive the API.
  OpenAiApi(ServingCore* core, OpenAiApiOptions options);
  ~OpenAiApi();  // finishes the requests being prepared

  void AddRoutes(HttpRoutes& routes);

 private:
  struct Exchange;  // one generation request's state, in openai_api.cc

  // Runs `prompts` (n choices each) into `output` (CompletionOutput or ChatOutput) and
  // answers `responder`, streamed or whole as `common` asks.
  template <typename Assembler>
  void Launch(std::shared_ptr<Assembler> output, const OpenAiCommon& common, bool chat, int n,
              std::vector<v1::GenerateRequest> prompts, std::shared_ptr<HttpResponder> responder);
  void Completions(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  void Chat(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  void TokenizeRoute(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  // POST /reset_prefix_cache (vLLM's route): ServingCore::ResetPrefixCache.
  void ResetPrefixCacheRoute(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  void DetokenizeRoute(HttpRequest request, std::shared_ptr<HttpResponder> responder);
  nlohmann::json ModelObject() const;
  HttpResponse Models() const;
  HttpResponse Model() const;
  HttpResponse Health() const;

  // Runs `work` on the prepare pool if the request is authorized; answers 401 or 503
  // itself otherwise.
  void Prepare(HttpRequest request, std::shared_ptr<HttpResponder> responder,
               void (OpenAiApi::*work)(HttpRequest, std::shared_ptr<HttpResponder>));
  bool Authorized(const HttpRequest& request) const;

  ServingCore* const core_;
  const OpenAiApiOptions options_;
  const int64_t created_;  // the model's "created": when the server started
  std::unique_ptr<TaskPool> pool_;
  std::atomic<size_t> queued_bytes_{0};  // bodies of the requests waiting in pool_
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_OPENAI_OPENAI_API_H_
