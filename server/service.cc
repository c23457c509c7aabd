#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "base/grpc_status.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "server/chunk_queue.h"
#include "server/generate_convert.h"

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

// SamplingParams.n, 1 when unset.
int Completions(const v1::GenerateRequest& request) {
  return request.sampling().has_n() ? request.sampling().n() : 1;
}

// Why a call whose client is gone ended: its deadline, when that has passed (what the
// client sees, so that the server's records agree with it), or `why`.
absl::Status ClientGone(const grpc::ServerContext& context, const char* why) {
  if (absl::Now() >= CallDeadline(context)) {
    return absl::DeadlineExceededError("the call passed its deadline");
  }
  return absl::CancelledError(why);
}

// Streams the requests' chunks into `sink` until the engine ends them; aborts them all
// in the engine when the call is cancelled, passes its deadline, the client goes away
// or one of them fails.
absl::Status Relay(grpc::ServerContext* context, Engine& engine, absl::Span<const uint64_t> ids,
                   ChunkQueue& queue, const std::function<bool(const EngineChunk&)>& sink) {
  const auto abort_all = [&] {
    for (uint64_t id : ids) engine.Abort(id);
  };
  EngineChunk chunk;
  absl::Status done;
  for (;;) {
    switch (queue.Pop(kCancelPollInterval, &chunk, &done)) {
      case ChunkQueue::Next::kDone:
        if (!done.ok()) abort_all();  // the other completions of a failed call
        return done;
      case ChunkQueue::Next::kChunk:
        if (sink(chunk)) continue;
        abort_all();
        return ClientGone(*context, "the client stopped reading the stream");
      case ChunkQueue::Next::kTimeout:
        if (!context->IsCancelled()) continue;
        abort_all();
        return ClientGone(*context, "the client cancelled the call");
    }
  }
}

}  // namespace

InferenceService::InferenceService(ServedModel model, const Tokenizer* tokenizer)
    : model_(std::move(model)),
      tokenizer_(tokenizer),
      limits_{model_.vocab_size, model_.limits.max_context(), tokenizer != nullptr},
      seed_source_(std::random_device{}()) {}

void InferenceService::SetEngine(std::shared_ptr<Engine> engine) {
  absl::MutexLock lock(&mu_);
  if (engine_ != nullptr && engine_ != engine) {
    // The step counters cover the server's life: a rebuilt pool's engine starts at 0.
    const EngineStats done = engine_->stats();
    retired_.steps += done.steps;
    retired_.preemptions += done.preemptions;
    retired_.prefix_cache_queried_tokens += done.prefix_cache_queried_tokens;
    retired_.prefix_cache_hit_tokens += done.prefix_cache_hit_tokens;
    retired_.step_wall_us += done.step_wall_us;
    retired_.worker_compute_us += done.worker_compute_us;
  }
  engine_ = std::move(engine);
}

void InferenceService::StopAccepting() { draining_ = true; }

void InferenceService::CancelInFlight() {
  if (std::shared_ptr<Engine> engine = this->engine()) engine->CancelAll();
}

std::shared_ptr<Engine> InferenceService::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_;
}

uint64_t InferenceService::DrawSeed() {
  absl::MutexLock lock(&mu_);
  return seed_source_();
}

grpc::Status InferenceService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const absl::Time start = absl::Now();
  RequestRecord record;
  const ChunkSink sink = [writer](const EngineChunk& chunk) {
    v1::GenerateResponse response;
    AppendChunk(chunk, &response);
    return writer->Write(response);
  };
  return Finish(*request, RunGenerate(context, *request, sink, start, record), record);
}

grpc::Status InferenceService::GenerateUnary(grpc::ServerContext* context,
                                             const v1::GenerateRequest* request,
                                             v1::GenerateResponse* response) {
  const absl::Time start = absl::Now();
  RequestRecord record;
  const int n = Completions(*request);
  const ChunkSink sink = [response, n](const EngineChunk& chunk) {
    if (n == 1) {
      AppendChunk(chunk, response);
      return true;
    }
    while (response->choices_size() < n) {
      response->add_choices()->set_index(response->choices_size() - 1);
    }
    AppendChunk(chunk, response->mutable_choices(chunk.index));
    return true;
  };
  return Finish(*request, RunGenerate(context, *request, sink, start, record), record);
}

grpc::Status InferenceService::Finish(const v1::GenerateRequest& request,
                                      const absl::Status& status, RequestRecord& record) {
  // The request id is echoed so that client and server records can be matched.
  // Both come from the client: escaped, so that they can neither forge a line nor
  // flood the log (the id is validated too, but a refused one is logged as well).
  if (!status.ok() && !request.request_id().empty()) {
    std::fprintf(stderr, "tpserve: request %s: %s\n", LogEscape(request.request_id()).c_str(),
                 LogEscape(status.ToString()).c_str());
  }
  grpc::Status sent = ToGrpcStatus(status);
  record.code = static_cast<absl::StatusCode>(sent.error_code());
  metrics_.Record(record);
  return sent;
}

absl::Status InferenceService::RunGenerate(grpc::ServerContext* context,
                                           const v1::GenerateRequest& request,
                                           const ChunkSink& sink, absl::Time record_start,
                                           RequestRecord& record) {
  generating_.fetch_add(1);
  absl::Cleanup done = [this] { generating_.fetch_sub(1); };
  if (draining_) return absl::UnavailableError("not serving: the server is draining");
  std::shared_ptr<Engine> engine = this->engine();
  if (engine == nullptr) {
    return absl::UnavailableError("not serving: the worker pool is starting, lost or draining");
  }
  TPSERVE_ASSIGN_OR_RETURN(EngineRequest engine_request,
                           Prepare(request, CallDeadline(*context), ContextLimit(engine.get())));
  const int n = Completions(request);
  record.completions = n;
  auto queue = std::make_shared<ChunkQueue>(n);
  std::vector<uint64_t> ids;
  for (int i = 0; i < n; ++i) {
    EngineRequest completion = engine_request;
    if (i > 0) {
      // Its own sampler stream; prompt logprobs come with completion 0 only, so the
      // others can take the prompt's KV from the prefix cache.
      completion.sampling.set_seed(request.sampling().has_seed() ? engine_request.sampling.seed() + i
                                                                 : DrawSeed());
      completion.sampling.set_prompt_logprobs(-1);
    }
    absl::StatusOr<uint64_t> id = engine->Submit(
        std::move(completion),
        [queue, i](EngineChunk chunk) {
          chunk.index = i;
          queue->Push(std::move(chunk));
        },
        [queue](absl::Status status) { queue->Finish(std::move(status)); });
    if (!id.ok()) {
      for (uint64_t submitted : ids) engine->Abort(submitted);
      return id.status();
    }
    ids.push_back(*id);
  }
  const absl::Status relayed = Relay(context, *engine, ids, *queue, [&](const EngineChunk& chunk) {
    const double now = absl::ToDoubleSeconds(absl::Now() - record_start);
    if (!chunk.token_ids.empty()) {
      if (!record.first_token_s.has_value()) record.first_token_s = now;
      record.last_token_s = now;
    }
    if (chunk.finish_reason.has_value()) {
      record.finish_reasons.push_back(*chunk.finish_reason);
      record.prompt_tokens += chunk.prompt_tokens;
      record.completion_tokens += chunk.completion_tokens;
      record.cached_prompt_tokens += chunk.cached_prompt_tokens;
    }
    return sink(chunk);
  });
  record.duration_s = absl::ToDoubleSeconds(absl::Now() - record_start);
  return relayed;
}

int InferenceService::ContextLimit(const Engine* engine) const {
  if (engine == nullptr) return model_.limits.max_context();
  const int64_t cache_tokens = int64_t{engine->stats().kv_blocks_total} * model_.kv_block_size;
  if (cache_tokens <= 0) return model_.limits.max_context();
  return static_cast<int>(std::min<int64_t>(model_.limits.max_context(), cache_tokens));
}

absl::StatusOr<EngineRequest> InferenceService::Prepare(const v1::GenerateRequest& request,
                                                        absl::Time deadline, int context) {
  TPSERVE_RETURN_IF_ERROR(ValidateGenerateRequest(request, limits_));
  // Each completion is a request in the engine's queue: more than it holds would be
  // RESOURCE_EXHAUSTED every time, so it is a bad request.
  if (model_.max_queue > 0 && request.sampling().n() > model_.max_queue) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.n (", request.sampling().n(), ") exceeds the server's max_queue (",
                     model_.max_queue, "): at most that many requests wait at once"));
  }
  TPSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PromptIds(request));
  const v1::SamplingParams& s = request.sampling();
  // A request must fit in the KV cache alone, so a cache smaller than the context is
  // the limit: an unset max_tokens fills it, a larger one is refused naming it.
  TPSERVE_RETURN_IF_ERROR(ValidatePromptLength(
      static_cast<int>(ids.size()),
      s.has_max_tokens() ? std::optional<int>(s.max_tokens()) : std::nullopt, context,
      context < model_.limits.max_context() ? "max_context (the KV cache's capacity)" : "max_context"));
  return ToEngineRequest(request, std::move(ids), context, DrawSeed(), deadline);
}

absl::StatusOr<std::vector<int32_t>> InferenceService::PromptIds(
    const v1::GenerateRequest& request) const {
  if (request.has_token_ids()) {
    return std::vector<int32_t>(request.token_ids().ids().begin(),
                                request.token_ids().ids().end());
  }
  const bool add_special = request.has_add_special_tokens() ? request.add_special_tokens() : true;
  TPSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                           tokenizer_->Encode(request.text(), add_special));
  if (ids.empty()) return absl::InvalidArgumentError("text tokenizes to no tokens");
  TPSERVE_RETURN_IF_ERROR(ValidateTokenIds(ids, model_.vocab_size, "text (tokenized)"));
  return ids;
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  return ToGrpcStatus(DoTokenize(*request, response));
}

absl::Status InferenceService::DoTokenize(const v1::TokenizeRequest& request,
                                          v1::TokenizeResponse* response) {
  TPSERVE_RETURN_IF_ERROR(RequireTokenizer(limits_, "Tokenize"));
  TPSERVE_RETURN_IF_ERROR(ValidateUtf8Field(request.text(), "text"));
  const bool add_special = request.has_add_special_tokens() ? request.add_special_tokens() : true;
  TPSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                           tokenizer_->Encode(request.text(), add_special));
  response->mutable_token_ids()->Add(ids.begin(), ids.end());
  return absl::OkStatus();
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext*,
                                          const v1::DetokenizeRequest* request,
                                          v1::DetokenizeResponse* response) {
  return ToGrpcStatus(DoDetokenize(*request, response));
}

absl::Status InferenceService::DoDetokenize(const v1::DetokenizeRequest& request,
                                            v1::DetokenizeResponse* response) {
  TPSERVE_RETURN_IF_ERROR(RequireTokenizer(limits_, "Detokenize"));
  TPSERVE_RETURN_IF_ERROR(ValidateTokenIds(request.token_ids(), model_.vocab_size, "token_ids"));
  const bool skip = request.has_skip_special_tokens() ? request.skip_special_tokens() : true;
  TPSERVE_ASSIGN_OR_RETURN(*response->mutable_text(),
                           tokenizer_->Decode(request.token_ids(), skip));
  return absl::OkStatus();
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                                            v1::ModelInfo* info) {
  info->set_architecture(model_.architecture);
  info->set_model_path(model_.model_path);
  info->set_model_name(model_.model_name);
  info->set_vocab_size(model_.vocab_size);
  std::shared_ptr<Engine> engine = this->engine();
  info->set_max_context(ContextLimit(engine.get()));
  info->set_tp(model_.tp);
  info->set_dtype(model_.dtype);
  info->set_device(model_.device);
  info->set_kv_block_size(model_.kv_block_size);
  info->set_max_batch_tokens(model_.limits.max_batch_tokens());
  info->set_max_sequences(model_.limits.max_sequences());
  const ServingSnapshot s = Snapshot();
  info->set_kv_blocks_total(s.kv_blocks_total);
  info->set_kv_blocks_in_use(s.kv_blocks_in_use);
  info->set_engine_steps(s.steps);
  info->set_preemptions(s.preemptions);
  info->set_prefix_cache_queried_tokens(s.prefix_cache_queried_tokens);
  info->set_prefix_cache_hit_tokens(s.prefix_cache_hit_tokens);
  info->set_kv_blocks_cached(s.kv_blocks_cached);
  info->set_step_wall_us(s.step_wall_us);
  info->set_worker_compute_us(s.worker_compute_us);
  return grpc::Status::OK;
}

ServingSnapshot InferenceService::Snapshot() const {
  // Under mu_ throughout, so an engine is never counted both live and retired.
  absl::MutexLock lock(&mu_);
  ServingSnapshot s = retired_;
  s.serving = engine_ != nullptr;
  if (engine_ == nullptr) return s;
  const EngineStats stats = engine_->stats();
  s.running = stats.running;
  s.waiting = stats.waiting;
  s.kv_blocks_total = stats.kv_blocks_total;
  s.kv_blocks_in_use = stats.kv_blocks_in_use;
  s.kv_blocks_cached = stats.kv_blocks_cached;
  s.steps += stats.steps;
  s.step_wall_us += stats.step_wall_us;
  s.worker_compute_us += stats.worker_compute_us;
  s.preemptions += stats.preemptions;
  s.prefix_cache_queried_tokens += stats.prefix_cache_queried_tokens;
  s.prefix_cache_hit_tokens += stats.prefix_cache_hit_tokens;
  return s;
}

std::string InferenceService::RenderMetrics() const {
  const std::map<std::string, std::string> info = {{"model", model_.model_name},
                                                   {"architecture", model_.architecture},
                                                   {"device", model_.device},
                                                   {"dtype", model_.dtype},
                                                   {"tp", std::to_string(model_.tp)}};
  return metrics_.Render(info, Snapshot());
}

}  // namespace tpserve
