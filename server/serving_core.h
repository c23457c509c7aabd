// ServingCore: what every public edge (gRPC's tpserve.v1.Inference, the OpenAI-compatible
// HTTP API) serves from — the served model's description, its tokenizer, the swappable
// engine, the request metrics — and the one way to run a generation, StartGenerate.
//
// A generation (GenerateCall) is one validated tpserve.v1.GenerateRequest submitted as
// its n engine requests. Its chunks reach the edge's sink from the engine thread, each
// tagged with its completion index, then the sink's on_done runs once with the call's
// status: OK once every completion finished; the first failure (the other completions
// are then aborted); or the reason the edge gave to Cancel (its client went away). After
// on_done, or after Cancel, no more chunks reach the sink. When a call ends it is
// recorded in the metrics (with the status code its client gets) and, when it failed and
// has a request_id, logged with that id.
//
// Sinks run on the engine thread, one callback at a time per call: they must be quick
// (format and queue, never wait) and must not call into the engine except through
// GenerateCall::Cancel (from inside a sink callback, the call's on_done then runs right
// after that callback returns).
//
// The engine is swappable: the process replaces it when the worker pool is rebuilt and
// sets none (generations get UNAVAILABLE) while starting or draining; a call keeps the
// engine it started on. Threading: every method may be called from any thread.
#ifndef TPSERVE_SERVER_SERVING_CORE_H_
#define TPSERVE_SERVER_SERVING_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/request_validation.h"
#include "server/tokenizer/tokenizer.h"
#include "tpserve/v1/batch_limits.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// The static part of ModelInfo, resolved by main from flags and config.json.
struct ServedModel {
  std::string architecture;
  std::string model_path;
  std::string model_name;
  int vocab_size = 0;
  int tp = 1;
  std::string dtype;
  std::string quantization;  // "none" or "int8"
  int generation_max_new_tokens = 0;  // generation_config.json's max_new_tokens; 0: none
  std::string device;
  int kv_block_size = 0;
  BatchLimits limits;  // max_context resolved: the served length, ≥ 1
  int max_queue = 0;  // the engine's; a call's n completions must fit in it (0: unchecked)
};

// Where a generation's output goes; both run on the engine thread (on_done also on the
// thread that calls Cancel, when the call was cancelled before the engine ended it).
struct GenerateSink {
  std::function<void(const EngineChunk&)> on_chunk;
  std::function<void(const absl::Status&)> on_done;
};

// The calls' metrics and the count of running calls.
struct CallLedger;

class GenerateCall {
 public:
  // Ends the call with `why` (e.g. CANCELLED: the client went away): aborts every
  // completion in the engine (their KV blocks are free within one step) and runs
  // on_done(why) unless the call has already ended. Idempotent.
  void Cancel(absl::Status why);

  GenerateCall(const GenerateCall&) = delete;
  GenerateCall& operator=(const GenerateCall&) = delete;

 private:
  friend class ServingCore;
  struct Shared;  // what the engine's callbacks and the handle share
  explicit GenerateCall(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  std::shared_ptr<Shared> shared_;
};

// SamplingParams.n, 1 when unset.
int CompletionCount(const v1::GenerateRequest& request);

class ServingCore {
 public:
  // `tokenizer` may be null (token ids only); it outlives the core.
  ServingCore(ServedModel model, const Tokenizer* tokenizer);
  ~ServingCore();

  // Validates `request` (INVALID_ARGUMENT naming the field; FAILED_PRECONDITION for text
  // without a tokenizer; UNAVAILABLE when not serving or draining), tokenizes it and
  // submits its completions (RESOURCE_EXHAUSTED when the queue cannot take them all).
  // On an error nothing reaches `sink` (and the call is already recorded). `deadline`:
  // the engine ends the call with DEADLINE_EXCEEDED past it.
  absl::StatusOr<std::shared_ptr<GenerateCall>> StartGenerate(const v1::GenerateRequest& request,
                                                              absl::Time deadline,
                                                              GenerateSink sink);

  absl::StatusOr<std::vector<int32_t>> Tokenize(const v1::TokenizeRequest& request) const;
  absl::StatusOr<std::string> Detokenize(const v1::DetokenizeRequest& request) const;
  void FillModelInfo(v1::ModelInfo* info) const;

  // The engine later calls use; null: UNAVAILABLE.
  void SetEngine(std::shared_ptr<Engine> engine);
  // Ends every request of the current engine with FINISH_REASON_CANCELLED (a drain's
  // grace is over).
  void CancelInFlight();
  // A drain began: later generations get UNAVAILABLE.
  void StopAccepting();
  // Generations running now (started and not yet ended).
  int generating() const;
  // Whether each finished call logs its line (server/request_log.h); on by default.
  void set_log_requests(bool on);
  // Whether ResetPrefixCache is served (tpserve --allow-reset-prefix-cache); off by
  // default.
  void set_allow_reset_prefix_cache(bool on) { allow_reset_prefix_cache_ = on; }
  // Empties the current engine's prefix cache (Engine::ResetPrefixCache); returns the
  // blocks dropped. FAILED_PRECONDITION unless allowed, UNAVAILABLE when not serving.
  absl::StatusOr<int64_t> ResetPrefixCache(absl::Time deadline);
  // The calls' token counters so far (the periodic stats line's throughput).
  RequestTotals Totals() const;
  // Whether an engine is set and no drain began.
  bool serving() const;

  const ServedModel& model() const { return model_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // Most tokens one request may hold now: max_context, or the KV cache's capacity when
  // the current engine has fewer tokens of cache than that.
  int ContextLimit() const;

  // The engine's state now, its counters summed over every engine the core has had.
  ServingSnapshot Snapshot() const;
  // The Prometheus exposition text (server/metrics.h) of the calls so far and Snapshot().
  std::string RenderMetrics() const;

 private:
  absl::StatusOr<EngineRequest> Prepare(const v1::GenerateRequest& request, absl::Time deadline,
                                        int context);
  int ContextLimit(const Engine* engine) const;
  absl::StatusOr<std::vector<int32_t>> PromptIds(const v1::GenerateRequest& request) const;
  std::shared_ptr<Engine> engine() const;
  uint64_t DrawSeed();

  const ServedModel model_;
  const Tokenizer* const tokenizer_;
  const RequestLimits limits_;

  mutable absl::Mutex mu_;
  std::shared_ptr<Engine> engine_ ABSL_GUARDED_BY(mu_);
  // The counters of the engines before engine_ (one per pool generation); its gauges
  // are unused.
  ServingSnapshot retired_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 seed_source_ ABSL_GUARDED_BY(mu_);  // seeded from random_device
  // Shared with the calls, which may end after the core is gone.
  std::shared_ptr<CallLedger> ledger_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> allow_reset_prefix_cache_{false};
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SERVING_CORE_H_
