#include "server/serving_core.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/grpc_status.h"
#include "base/status_macros.h"
#include "server/generate_convert.h"
#include "server/request_log.h"
#include "spdlog/spdlog.h"

namespace tpserve {

struct CallLedger {
  explicit CallLedger(int max_context) : metrics(max_context) {}

  ServerMetrics metrics;
  std::atomic<int> generating{0};
  std::atomic<uint64_t> calls{0};  // numbers the calls, from 1
  std::atomic<bool> log_requests{true};

  // Records a call with the status code its client gets, and logs its request line
  // (server/request_log.h): a warning when the server failed it, else info.
  void Record(uint64_t serial, const std::string& request_id, const absl::Status& status,
              RequestRecord record) {
    record.code = static_cast<absl::StatusCode>(ToGrpcStatus(status).error_code());
    metrics.Record(record);
    if (!log_requests.load()) return;
    const bool server_side = absl::IsInternal(status) || absl::IsUnavailable(status) ||
                             absl::IsUnknown(status) || absl::IsDataLoss(status);
    spdlog::log(server_side ? spdlog::level::warn : spdlog::level::info, "{}",
                RequestLogLine(serial, request_id, status, record));
  }
};

namespace {
// The call whose sink callback runs on this thread, if any (Cancel from inside it defers
// on_done until the callback returns).
thread_local const void* current_sink_call = nullptr;
}  // namespace

struct GenerateCall::Shared {
  std::shared_ptr<CallLedger> ledger;
  std::shared_ptr<Engine> engine;
  GenerateSink sink;
  std::string request_id;
  uint64_t serial = 0;  // the ledger's number for the call
  absl::Time start;

  absl::Mutex mu;
  std::vector<uint64_t> ids ABSL_GUARDED_BY(mu);
  int remaining ABSL_GUARDED_BY(mu) = 0;  // completions the engine has not ended
  bool ended ABSL_GUARDED_BY(mu) = false;  // recorded; the sink gets nothing more
  bool detached ABSL_GUARDED_BY(mu) = false;  // StartGenerate failed: no sink at all
  std::optional<absl::Status> failure ABSL_GUARDED_BY(mu);  // the first one
  RequestRecord record ABSL_GUARDED_BY(mu);
  // Per completion: when its last chunk with tokens arrived (since start), and the gaps.
  struct Stream {
    std::optional<double> last_token_s;
    std::vector<double> inter_token_s;
  };
  std::vector<Stream> streams ABSL_GUARDED_BY(mu);  // one per completion

  // Serialises the sink's callbacks.
  absl::Mutex sink_mu;
  std::optional<absl::Status> deferred_done ABSL_GUARDED_BY(sink_mu);

  // Marks the call ended with `status` (under mu), records it, and returns whether the
  // sink's on_done should run.
  bool EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ended = true;
    record.duration_s = absl::ToDoubleSeconds(absl::Now() - start);
    ledger->Record(serial, request_id, status, record);
    ledger->generating.fetch_sub(1);
    return !detached;
  }

  void AbortAll(const std::vector<uint64_t>& to_abort) {
    for (uint64_t id : to_abort) engine->Abort(id);
  }

  void RunDone(const absl::Status& status) {
    if (current_sink_call == this) {
      // Cancel from inside a sink callback: on_done follows it.
      deferred_done = status;  // sink_mu is held by this thread
      return;
    }
    absl::MutexLock lock(&sink_mu);
    if (sink.on_done) sink.on_done(status);
  }

  void OnChunk(int index, EngineChunk chunk) {
    {
      absl::MutexLock lock(&mu);
      if (ended) return;
      chunk.index = index;
      const double now = absl::ToDoubleSeconds(absl::Now() - start);
      Stream& stream = streams[index];
      if (!chunk.token_ids.empty()) {
        if (!record.first_token_s.has_value()) record.first_token_s = now;
        record.last_token_s = now;
        if (stream.last_token_s.has_value()) {
          stream.inter_token_s.push_back(now - *stream.last_token_s);
        }
        stream.last_token_s = now;
      }
      if (chunk.finish_reason.has_value()) {
        record.finished.push_back({*chunk.finish_reason, chunk.prompt_tokens,
                                   chunk.completion_tokens, chunk.cached_prompt_tokens,
                                   chunk.timing, std::move(stream.inter_token_s)});
      }
    }
    std::optional<absl::Status> done;
    {
      absl::MutexLock lock(&sink_mu);
      current_sink_call = this;
      if (sink.on_chunk) sink.on_chunk(chunk);
      current_sink_call = nullptr;
      done.swap(deferred_done);
      if (done.has_value() && sink.on_done) sink.on_done(*done);
    }
  }

  void OnCompletionDone(const absl::Status& status) {
    std::vector<uint64_t> to_abort;
    std::optional<absl::Status> final_status;
    {
      absl::MutexLock lock(&mu);
      --remaining;
      if (ended) return;
      if (!status.ok() && !failure.has_value()) {
        failure = status;
        to_abort = ids;  // the other completions of a failed call
      }
      if (remaining == 0) {
        const absl::Status result = failure.value_or(absl::OkStatus());
        if (EndLocked(result)) final_status = result;
      }
    }
    AbortAll(to_abort);
    if (final_status.has_value()) RunDone(*final_status);
  }
};

void GenerateCall::Cancel(absl::Status why) {
  std::vector<uint64_t> to_abort;
  bool run_done = false;
  {
    absl::MutexLock lock(&shared_->mu);
    if (shared_->ended) return;
    to_abort = shared_->ids;
    run_done = shared_->EndLocked(why);
  }
  shared_->AbortAll(to_abort);
  if (run_done) shared_->RunDone(why);
}

int CompletionCount(const v1::GenerateRequest& request) {
  return request.sampling().has_n() ? request.sampling().n() : 1;
}

ServingCore::ServingCore(ServedModel model, const Tokenizer* tokenizer)
    : model_(std::move(model)),
      tokenizer_(tokenizer),
      limits_{model_.vocab_size, model_.limits.max_context(), tokenizer != nullptr},
      seed_source_(std::random_device{}()),
      ledger_(std::make_shared<CallLedger>(model_.limits.max_context())) {}

ServingCore::~ServingCore() = default;

int ServingCore::generating() const { return ledger_->generating.load(); }

void ServingCore::set_log_requests(bool on) { ledger_->log_requests = on; }

RequestTotals ServingCore::Totals() const { return ledger_->metrics.Totals(); }

void ServingCore::SetEngine(std::shared_ptr<Engine> engine) {
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

void ServingCore::StopAccepting() { draining_ = true; }

bool ServingCore::serving() const { return !draining_ && engine() != nullptr; }

absl::StatusOr<int64_t> ServingCore::ResetPrefixCache(absl::Time deadline) {
  if (!allow_reset_prefix_cache_) {
    return absl::FailedPreconditionError(
        "ResetPrefixCache is off on this server: start tpserve with --allow-reset-prefix-cache");
  }
  std::shared_ptr<Engine> engine = this->engine();
  if (engine == nullptr || draining_) return absl::UnavailableError("the server is not serving");
  return engine->ResetPrefixCache(deadline);
}

void ServingCore::CancelInFlight() {
  if (std::shared_ptr<Engine> engine = this->engine()) engine->CancelAll();
}

std::shared_ptr<Engine> ServingCore::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_;
}

uint64_t ServingCore::DrawSeed() {
  absl::MutexLock lock(&mu_);
  return seed_source_();
}

absl::StatusOr<std::shared_ptr<GenerateCall>> ServingCore::StartGenerate(
    const v1::GenerateRequest& request, absl::Time deadline, GenerateSink sink) {
  auto shared = std::make_shared<GenerateCall::Shared>();
  shared->ledger = ledger_;
  shared->sink = std::move(sink);
  shared->request_id = request.request_id();
  shared->serial = ledger_->calls.fetch_add(1) + 1;
  shared->start = absl::Now();
  const int n = CompletionCount(request);
  ledger_->generating.fetch_add(1);
  // Fails the call before anything was submitted.
  const auto refuse = [&](const absl::Status& status) {
    absl::MutexLock lock(&shared->mu);
    shared->detached = true;
    shared->EndLocked(status);
    return status;
  };
  if (draining_) return refuse(absl::UnavailableError("not serving: the server is draining"));
  shared->engine = engine();
  if (shared->engine == nullptr) {
    return refuse(
        absl::UnavailableError("not serving: the worker pool is starting, lost or draining"));
  }
  absl::StatusOr<EngineRequest> prepared =
      Prepare(request, deadline, ContextLimit(shared->engine.get()));
  if (!prepared.ok()) return refuse(prepared.status());
  {
    absl::MutexLock lock(&shared->mu);
    shared->record.completions = n;
    shared->streams.resize(n);
    shared->remaining = n;
  }
  for (int i = 0; i < n; ++i) {
    EngineRequest completion = *prepared;
    if (i > 0) {
      // Its own sampler stream; prompt logprobs come with completion 0 only, so the
      // others can take the prompt's KV from the prefix cache.
      completion.sampling.set_seed(request.sampling().has_seed() ? prepared->sampling.seed() + i
                                                                 : DrawSeed());
      completion.sampling.set_prompt_logprobs(-1);
    }
    absl::StatusOr<uint64_t> id = shared->engine->Submit(
        std::move(completion),
        [shared, i](EngineChunk chunk) { shared->OnChunk(i, std::move(chunk)); },
        [shared](absl::Status status) { shared->OnCompletionDone(status); });
    std::vector<uint64_t> to_abort;
    {
      absl::MutexLock lock(&shared->mu);
      if (!id.ok()) {
        // The completions not submitted never end in the engine; the call fails with
        // this status, before the sink saw anything.
        shared->remaining -= n - i;
        to_abort = shared->ids;
        shared->detached = true;
        if (!shared->ended) shared->EndLocked(id.status());
      } else {
        shared->ids.push_back(*id);
        // A completion that failed meanwhile ended the call: this one goes too.
        if (shared->ended || shared->failure.has_value()) to_abort.push_back(*id);
      }
    }
    shared->AbortAll(to_abort);
    if (!id.ok()) return id.status();
  }
  return std::shared_ptr<GenerateCall>(new GenerateCall(std::move(shared)));
}

int ServingCore::ContextLimit() const { return ContextLimit(engine().get()); }

int ServingCore::ContextLimit(const Engine* engine) const {
  if (engine == nullptr) return model_.limits.max_context();
  const int64_t cache_tokens = int64_t{engine->stats().kv_blocks_total} * model_.kv_block_size;
  if (cache_tokens <= 0) return model_.limits.max_context();
  return static_cast<int>(std::min<int64_t>(model_.limits.max_context(), cache_tokens));
}

absl::StatusOr<EngineRequest> ServingCore::Prepare(const v1::GenerateRequest& request,
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
      context < model_.limits.max_context() ? "max_context (the KV cache's capacity)"
                                            : "max_context"));
  return ToEngineRequest(request, std::move(ids), context, DrawSeed(), deadline);
}

absl::StatusOr<std::vector<int32_t>> ServingCore::PromptIds(
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

absl::StatusOr<std::vector<int32_t>> ServingCore::Tokenize(
    const v1::TokenizeRequest& request) const {
  TPSERVE_RETURN_IF_ERROR(RequireTokenizer(limits_, "Tokenize"));
  TPSERVE_RETURN_IF_ERROR(ValidateUtf8Field(request.text(), "text"));
  const bool add_special = request.has_add_special_tokens() ? request.add_special_tokens() : true;
  return tokenizer_->Encode(request.text(), add_special);
}

absl::StatusOr<std::string> ServingCore::Detokenize(const v1::DetokenizeRequest& request) const {
  TPSERVE_RETURN_IF_ERROR(RequireTokenizer(limits_, "Detokenize"));
  TPSERVE_RETURN_IF_ERROR(ValidateTokenIds(request.token_ids(), model_.vocab_size, "token_ids"));
  const bool skip = request.has_skip_special_tokens() ? request.skip_special_tokens() : true;
  return tokenizer_->Decode(request.token_ids(), skip);
}

void ServingCore::FillModelInfo(v1::ModelInfo* info) const {
  info->set_architecture(model_.architecture);
  info->set_model_path(model_.model_path);
  info->set_model_name(model_.model_name);
  info->set_vocab_size(model_.vocab_size);
  info->set_max_context(ContextLimit());
  info->set_tp(model_.tp);
  info->set_dtype(model_.dtype);
  info->set_quantization(model_.quantization.empty() ? "none" : model_.quantization);
  info->set_generation_max_new_tokens(model_.generation_max_new_tokens);
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
}

ServingSnapshot ServingCore::Snapshot() const {
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

std::string ServingCore::RenderMetrics() const {
  const std::map<std::string, std::string> info = {{"model", model_.model_name},
                                                   {"architecture", model_.architecture},
                                                   {"device", model_.device},
                                                   {"dtype", model_.dtype},
                                                   {"quantization", model_.quantization.empty()
                                                                        ? "none"
                                                                        : model_.quantization},
                                                   {"tp", std::to_string(model_.tp)}};
  return ledger_->metrics.Render(info, Snapshot());
}

}  // namespace tpserve
