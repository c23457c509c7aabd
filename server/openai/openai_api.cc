#include "server/openai/openai_api.h"

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "server/openai/openai_error.h"
#include "server/openai/openai_request.h"
#include "server/openai/openai_response.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body = std::move(body);
  return response;
}

HttpResponse ErrorResponse(const absl::Status& status) {
  HttpResponse response = JsonResponse(HttpStatusOf(status), ErrorBody(status));
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    response.headers.push_back({"WWW-Authenticate", "Bearer"});
  }
  return response;
}

std::string Event(absl::string_view data) { return absl::StrCat("data: ", data, "\n\n"); }

// The engine's output for one request, in the endpoint's format.
struct Output {
  std::function<std::vector<std::string>(const EngineChunk&)> feed;
  std::function<std::string()> usage_event;
  std::function<std::string()> body;
};

// The request's own id, else the X-Request-Id header's (when it is a valid id).
void TakeRequestIdHeader(const HttpRequest& request, OpenAiCommon& common) {
  if (!common.request_id.empty()) return;
  std::optional<std::string> header = request.header("X-Request-Id");
  if (header.has_value() && ValidateRequestId(*header).ok()) common.request_id = *header;
}

}  // namespace

// One generation request: its calls on the core (one per prompt), the output being
// assembled and the HTTP answer. The calls' sinks and the connection's OnClose share it.
struct OpenAiApi::Exchange {
  std::shared_ptr<HttpResponder> responder;
  bool stream = false;
  bool include_usage = false;
  bool chat = false;
  int n = 1;  // choices per prompt: call p's completion j is choice p × n + j
  Output output;

  absl::Mutex mu;
  std::vector<std::shared_ptr<GenerateCall>> calls ABSL_GUARDED_BY(mu);
  int remaining ABSL_GUARDED_BY(mu) = 0;  // calls not yet ended
  bool started ABSL_GUARDED_BY(mu) = false;  // every call submitted (and the stream begun)
  bool done ABSL_GUARDED_BY(mu) = false;     // answered, failed to start, or client gone
  std::optional<absl::Status> failure ABSL_GUARDED_BY(mu);
  std::vector<std::string> pending ABSL_GUARDED_BY(mu);  // events before the stream began

  void Send(std::vector<std::string> events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!stream) return;
    for (std::string& e : events) {
      if (started) {
        responder->Write(Event(e));
      } else {
        pending.push_back(std::move(e));
      }
    }
  }

  // Answers once every call has ended (and every call was submitted).
  void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (done || !started || remaining > 0) return;
    done = true;
    if (!stream) {
      responder->Respond(failure.has_value() ? ErrorResponse(*failure)
                                             : JsonResponse(200, output.body()));
      return;
    }
    if (failure.has_value()) {
      responder->Write(Event(ErrorBody(*failure)));
    } else if (include_usage) {
      responder->Write(Event(output.usage_event()));
    }
    responder->Write(Event("[DONE]"));
    responder->End();
  }

  GenerateSink SinkFor(int prompt, const std::shared_ptr<Exchange>& self) {
    return GenerateSink{
        [self, prompt](const EngineChunk& chunk) {
          absl::MutexLock lock(&self->mu);
          if (self->done) return;
          EngineChunk c = chunk;
          c.index = prompt * self->n + chunk.index;
          self->Send(self->output.feed(c));
        },
        [self](const absl::Status& status) {
          std::vector<std::shared_ptr<GenerateCall>> to_cancel;
          absl::Status why = status;
          {
            absl::MutexLock lock(&self->mu);
            --self->remaining;
            if (!status.ok() && !self->failure.has_value()) {
              self->failure = RewriteCoreError(status, self->chat);
              to_cancel = self->calls;  // the other prompts of a failed request
            }
            self->MaybeFinish();
          }
          for (auto& call : to_cancel) call->Cancel(why);
        }};
  }

  // The client went away: every call is cancelled.
  void Abandon() {
    std::vector<std::shared_ptr<GenerateCall>> to_cancel;
    {
      absl::MutexLock lock(&mu);
      if (done) return;
      done = true;
      to_cancel = calls;
    }
    for (auto& call : to_cancel) call->Cancel(absl::CancelledError("the HTTP client disconnected"));
  }

  // Starts the request's calls (on a prepare thread) and begins the answer: a stream,
  // or nothing until the end. A call that cannot start fails the request with its
  // error (the started ones are cancelled).
  void Run(ServingCore& core, std::vector<v1::GenerateRequest> prompts,
           const std::shared_ptr<Exchange>& self) {
    {
      absl::MutexLock lock(&mu);
      if (done) return;  // the client left while the request was being prepared
      remaining = static_cast<int>(prompts.size());
    }
    for (size_t p = 0; p < prompts.size(); ++p) {
      absl::StatusOr<std::shared_ptr<GenerateCall>> call =
          core.StartGenerate(prompts[p], absl::InfiniteFuture(), SinkFor(static_cast<int>(p), self));
      std::vector<std::shared_ptr<GenerateCall>> to_cancel;
      absl::Status error;
      {
        absl::MutexLock lock(&mu);
        if (call.ok()) {
          calls.push_back(*call);
          if (done) to_cancel.push_back(*call);  // the client left meanwhile
        } else {
          error = RewriteCoreError(call.status(), chat);
          if (!done) {
            done = true;
            responder->Respond(ErrorResponse(error));
          }
          to_cancel = calls;
        }
      }
      for (auto& c : to_cancel) c->Cancel(call.ok() ? absl::CancelledError("the HTTP client disconnected") : error);
      if (!call.ok() || !to_cancel.empty()) return;
    }
    absl::MutexLock lock(&mu);
    if (done) return;
    if (stream) {
      responder->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      for (std::string& e : pending) responder->Write(Event(e));
      pending.clear();
    }
    started = true;
    MaybeFinish();
  }
};

OpenAiApi::OpenAiApi(ServingCore* core, OpenAiApiOptions options)
    : core_(core),
      options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())),
      pool_(std::make_unique<TaskPool>(options_.prepare_threads, options_.max_queued_prepares)) {}

OpenAiApi::~OpenAiApi() { pool_.reset(); }

bool OpenAiApi::Authorized(const HttpRequest& request) const {
  if (options_.api_keys == nullptr) return true;
  std::optional<std::string> header = request.header("Authorization");
  if (!header.has_value()) return false;
  absl::string_view value = absl::StripAsciiWhitespace(*header);
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  return options_.api_keys->Accepts(absl::StripAsciiWhitespace(value.substr(kScheme.size())));
}

void OpenAiApi::Prepare(HttpRequest request, std::shared_ptr<HttpResponder> responder,
                        void (OpenAiApi::*work)(HttpRequest, std::shared_ptr<HttpResponder>)) {
  if (!Authorized(request)) {
    responder->Respond(ErrorResponse(absl::UnauthenticatedError(
        "missing or wrong API key: send \"Authorization: Bearer KEY\"")));
    return;
  }
  // The HTTP server bounds bodies while it reads them; this bounds those waiting here.
  const size_t bytes = request.body.size();
  if (queued_bytes_.fetch_add(bytes) + bytes > options_.max_queued_prepare_bytes) {
    queued_bytes_.fetch_sub(bytes);
    responder->Respond(ErrorResponse(absl::UnavailableError(
        "the server is overloaded: too many request bytes are waiting to be prepared")));
    return;
  }
  auto shared_request = std::make_shared<HttpRequest>(std::move(request));
  const bool queued = pool_->TrySubmit([this, shared_request, responder, work, bytes] {
    HttpRequest taken = std::move(*shared_request);
    queued_bytes_.fetch_sub(bytes);
    (this->*work)(std::move(taken), responder);
  });
  if (!queued) {
    queued_bytes_.fetch_sub(bytes);
    responder->Respond(ErrorResponse(
        absl::UnavailableError("the server is overloaded: too many requests are being prepared")));
  }
}

void OpenAiApi::AddRoutes(HttpRoutes& routes) {
  const auto async = [this](void (OpenAiApi::*work)(HttpRequest, std::shared_ptr<HttpResponder>)) {
    return HttpAsyncHandler(
        [this, work](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
          Prepare(std::move(request), std::move(responder), work);
        });
  };
  routes.Add("POST", "/v1/completions", async(&OpenAiApi::Completions));
  routes.Add("POST", "/v1/chat/completions", async(&OpenAiApi::Chat));
  routes.Add("POST", "/tokenize", async(&OpenAiApi::TokenizeRoute));
  routes.Add("POST", "/detokenize", async(&OpenAiApi::DetokenizeRoute));
  routes.Add("POST", "/reset_prefix_cache", async(&OpenAiApi::ResetPrefixCacheRoute));
  routes.Add("GET", "/v1/models", HttpHandler([this](const HttpRequest& request) {
               if (!Authorized(request)) {
                 return ErrorResponse(absl::UnauthenticatedError(
                     "missing or wrong API key: send \"Authorization: Bearer KEY\""));
               }
               return Models();
             }));
  // GET /v1/models/NAME (the SDK's models.retrieve); any other path: OpenAI's 404.
  routes.SetFallback(HttpHandler([this](const HttpRequest& request) {
    constexpr absl::string_view kModel = "/v1/models/";
    if (request.method == "GET" && absl::StartsWith(request.path, kModel)) {
      if (!Authorized(request)) {
        return ErrorResponse(absl::UnauthenticatedError(
            "missing or wrong API key: send \"Authorization: Bearer KEY\""));
      }
      const std::string name = request.path.substr(kModel.size());
      if (name == core_->model().model_name) return Model();
      return ErrorResponse(WithParam(
          absl::NotFoundError(absl::StrCat("The model `", name, "` does not exist")), "model"));
    }
    return ErrorResponse(absl::NotFoundError(absl::StrCat(
        "no route ", request.method, " ", request.path,
        "; this server serves /v1/chat/completions, /v1/completions, /v1/models, /health, "
        "/metrics, /tokenize and /detokenize")));
  }));
  routes.Add("GET", "/health", HttpHandler([this](const HttpRequest&) { return Health(); }));
  routes.Add("GET", "/metrics", HttpHandler([this](const HttpRequest&) {
               HttpResponse response;
               response.content_type = "text/plain; version=0.0.4; charset=utf-8";
               response.body = core_->RenderMetrics();
               return response;
             }));
}

Json OpenAiApi::ModelObject() const {
  const ServedModel& model = core_->model();
  return Json{{"id", model.model_name},
              {"object", "model"},
              {"created", created_},
              {"owned_by", "tpserve"},
              {"root", model.model_path},
              {"parent", nullptr},
              {"max_model_len", core_->ContextLimit()}};
}

HttpResponse OpenAiApi::Models() const {
  return JsonResponse(
      200, Json{{"object", "list"}, {"data", Json::array({ModelObject()})}}.dump(
               -1, ' ', false, Json::error_handler_t::replace));
}

HttpResponse OpenAiApi::Model() const {
  return JsonResponse(200, ModelObject().dump(-1, ' ', false, Json::error_handler_t::replace));
}

HttpResponse OpenAiApi::Health() const {
  if (core_->serving()) return JsonResponse(200, "{\"status\":\"serving\"}");
  return JsonResponse(503, "{\"status\":\"not serving\"}");
}

template <typename Assembler>
void OpenAiApi::Launch(std::shared_ptr<Assembler> output, const OpenAiCommon& common, bool chat,
                       int n, std::vector<v1::GenerateRequest> prompts,
                       std::shared_ptr<HttpResponder> responder) {
  auto exchange = std::make_shared<Exchange>();
  exchange->responder = responder;
  exchange->stream = common.stream;
  exchange->include_usage = common.include_usage;
  exchange->chat = chat;
  exchange->n = n;
  exchange->output = Output{[output](const EngineChunk& c) { return output->Feed(c); },
                            [output] { return output->UsageEvent(); },
                            [output] { return output->Body(); }};
  // The connection's end cancels the calls; the exchange does not keep itself alive.
  std::weak_ptr<Exchange> weak = exchange;
  responder->OnClose([weak] {
    if (auto e = weak.lock()) e->Abandon();
  });
  exchange->Run(*core_, std::move(prompts), exchange);
}

void OpenAiApi::Completions(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const auto fail = [&](const absl::Status& status) { responder->Respond(ErrorResponse(status)); };
  absl::StatusOr<OrderedJson> body = ParseRequestBody(request.body);
  if (!body.ok()) return fail(body.status());
  absl::StatusOr<CompletionRequest> parsed = ReadCompletionRequest(*body, core_->model().model_name);
  if (!parsed.ok()) return fail(parsed.status());
  TakeRequestIdHeader(request, parsed->common);
  std::vector<std::string> echo;
  if (parsed->echo) {
    for (v1::GenerateRequest& prompt : parsed->prompts) {
      if (prompt.has_text()) {
        echo.push_back(prompt.text());
        continue;
      }
      v1::DetokenizeRequest detokenize;
      *detokenize.mutable_token_ids() = prompt.token_ids().ids();
      detokenize.set_skip_special_tokens(false);
      absl::StatusOr<std::string> text = core_->Detokenize(detokenize);
      if (!text.ok()) return fail(WithParam(text.status(), "echo"));
      echo.push_back(*std::move(text));
    }
  }
  for (v1::GenerateRequest& prompt : parsed->prompts) {
    prompt.set_request_id(parsed->common.request_id);
  }
  auto output = std::make_shared<CompletionOutput>(
      ResponseIdentity{NewResponseId("cmpl-"), absl::ToUnixSeconds(absl::Now()),
                       core_->model().model_name},
      static_cast<int>(parsed->prompts.size()), parsed->n, parsed->logprobs, std::move(echo),
      parsed->common.include_usage);
  output->set_return_token_ids(parsed->common.return_token_ids);
  const int n = parsed->n;
  Launch(std::move(output), parsed->common, /*chat=*/false, n, std::move(parsed->prompts),
         std::move(responder));
}

void OpenAiApi::Chat(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const auto fail = [&](const absl::Status& status) { responder->Respond(ErrorResponse(status)); };
  absl::StatusOr<OrderedJson> body = ParseRequestBody(request.body);
  if (!body.ok()) return fail(body.status());
  absl::StatusOr<ChatRequest> parsed = ReadChatRequest(*body, core_->model().model_name);
  if (!parsed.ok()) return fail(parsed.status());
  TakeRequestIdHeader(request, parsed->common);
  parsed->generate.set_request_id(parsed->common.request_id);
  const OpenAiCommon common = parsed->common;
  const int logprobs = parsed->logprobs ? parsed->top_logprobs : -1;
  absl::StatusOr<PreparedChat> prepared = PrepareChat(*std::move(parsed), options_.chat);
  if (!prepared.ok()) return fail(prepared.status());
  const int n = prepared->choices;
  absl::StatusOr<std::unique_ptr<ChatOutput>> made = ChatOutput::Create(
      ResponseIdentity{NewResponseId("chatcmpl-"), absl::ToUnixSeconds(absl::Now()),
                       core_->model().model_name},
      n, logprobs, prepared->parsing, common.include_usage);
  if (!made.ok()) return fail(made.status());
  std::shared_ptr<ChatOutput> output = *std::move(made);
  output->set_return_token_ids(common.return_token_ids);
  std::vector<v1::GenerateRequest> prompts;
  prompts.push_back(std::move(prepared->generate));
  Launch(std::move(output), common, /*chat=*/true, n, std::move(prompts), std::move(responder));
}

void OpenAiApi::TokenizeRoute(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const auto fail = [&](const absl::Status& status) { responder->Respond(ErrorResponse(status)); };
  absl::StatusOr<OrderedJson> body = ParseRequestBody(request.body);
  if (!body.ok()) return fail(body.status());
  v1::TokenizeRequest tokenize;
  if (body->contains("messages")) {
    // The chat form: the messages rendered as /v1/chat/completions would send them.
    absl::StatusOr<ChatRequest> chat = ReadChatRequest(*body, core_->model().model_name);
    if (!chat.ok()) return fail(chat.status());
    chat->tool_choice = ToolChoice::kNone;  // only the prompt is wanted
    absl::StatusOr<PreparedChat> prepared = PrepareChat(*std::move(chat), options_.chat);
    if (!prepared.ok()) return fail(prepared.status());
    tokenize.set_text(prepared->generate.text());
    tokenize.set_add_special_tokens(prepared->generate.add_special_tokens());
  } else {
    const OrderedJson& prompt = (*body)["prompt"];
    if (!prompt.is_string()) return fail(ParamError("prompt", "prompt must be a string"));
    tokenize.set_text(prompt.get<std::string>());
    const auto add = body->find("add_special_tokens");
    if (add != body->end() && !add->is_null()) {
      if (!add->is_boolean()) return fail(ParamError("add_special_tokens", "add_special_tokens must be a boolean"));
      tokenize.set_add_special_tokens(add->get<bool>());
    }
  }
  absl::StatusOr<std::vector<int32_t>> ids = core_->Tokenize(tokenize);
  if (!ids.ok()) return fail(RewriteCoreError(ids.status(), false));
  Json out = {{"count", ids->size()},
              {"max_model_len", core_->ContextLimit()},
              {"tokens", *ids},
              {"token_strs", nullptr}};
  responder->Respond(JsonResponse(200, out.dump(-1, ' ', false, Json::error_handler_t::replace)));
}

void OpenAiApi::DetokenizeRoute(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  const auto fail = [&](const absl::Status& status) { responder->Respond(ErrorResponse(status)); };
  absl::StatusOr<OrderedJson> body = ParseRequestBody(request.body);
  if (!body.ok()) return fail(body.status());
  const OrderedJson& tokens = (*body)["tokens"];
  if (!tokens.is_array()) return fail(ParamError("tokens", "tokens must be an array of token ids"));
  v1::DetokenizeRequest detokenize;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i].is_number_integer() || tokens[i].get<int64_t>() < 0 ||
        tokens[i].get<int64_t>() > INT32_MAX) {
      return fail(ParamError("tokens", absl::StrCat("tokens[", i, "] must be a token id")));
    }
    detokenize.add_token_ids(static_cast<int32_t>(tokens[i].get<int64_t>()));
  }
  absl::StatusOr<std::string> text = core_->Detokenize(detokenize);
  if (!text.ok()) return fail(WithParam(text.status(), "tokens"));
  responder->Respond(JsonResponse(
      200, Json{{"prompt", *text}}.dump(-1, ' ', false, Json::error_handler_t::replace)));
}

void OpenAiApi::ResetPrefixCacheRoute(HttpRequest, std::shared_ptr<HttpResponder> responder) {
  absl::StatusOr<int64_t> dropped = core_->ResetPrefixCache(absl::Now() + absl::Minutes(1));
  if (!dropped.ok()) return responder->Respond(ErrorResponse(dropped.status()));
  responder->Respond(JsonResponse(200, Json{{"blocks_dropped", *dropped}}.dump()));
}

}  // namespace tpserve
