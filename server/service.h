// InferenceService: tpserve.v1.Inference over the Engine, the Tokenizer and the model's
// description — the gRPC edge.
//
// Every handler is validate → call the core → ToGrpcStatus. Generate submits to the
// engine and streams its chunks from a per-request ChunkQueue, checking between
// chunks (every kCancelPollInterval at most) whether the call was cancelled or passed
// its deadline, and then aborts the request in the engine. GenerateUnary runs the same
// loop and collects the chunks into one response.
//
// The engine is swappable: the process replaces it when the worker pool is rebuilt,
// and sets none (RPCs that need it get UNAVAILABLE) while starting or draining.
// Threading: gRPC calls the handlers from its thread pool; SetEngine from any thread.
#ifndef TPSERVE_SERVER_SERVICE_H_
#define TPSERVE_SERVER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/request_validation.h"
#include "server/tokenizer/tokenizer.h"
#include "tpserve/v1/batch_limits.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

// The static part of ModelInfo, resolved by main from flags and config.json.
struct ServedModel {
  std::string architecture;
  std::string model_path;
  std::string model_name;
  int vocab_size = 0;
  int tp = 1;
  std::string dtype;
  std::string device;
  int kv_block_size = 0;
  BatchLimits limits;  // max_context resolved: the served length, ≥ 1
  int max_queue = 0;  // the engine's; a call's n completions must fit in it (0: unchecked)
};

inline constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

class InferenceService final : public v1::Inference::Service {
 public:
  // `tokenizer` may be null (token ids only); it outlives the service.
  InferenceService(ServedModel model, const Tokenizer* tokenizer);

  // The engine later RPCs use; null: UNAVAILABLE. Requests already running keep the
  // engine they started on.
  void SetEngine(std::shared_ptr<Engine> engine);
  // Ends every request of the current engine with FINISH_REASON_CANCELLED (a drain's
  // grace is over). Any thread.
  void CancelInFlight();
  // A drain began: later Generate calls get UNAVAILABLE. Any thread.
  void StopAccepting();
  // Generate calls running now. Any thread.
  int generating() const { return generating_.load(); }

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                             v1::GenerateResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;

  // The engine's state now, its counters summed over every engine the service has had.
  ServingSnapshot Snapshot() const;
  // The Prometheus exposition text (server/metrics.h) of the calls so far and Snapshot().
  std::string RenderMetrics() const;

 private:
  // Returns false when the client has gone away.
  using ChunkSink = std::function<bool(const EngineChunk&)>;

  // Logs a failed request with its request_id, records the call in the metrics, then
  // converts its status.
  grpc::Status Finish(const v1::GenerateRequest& request, const absl::Status& status,
                      RequestRecord& record);
  // Runs the request into `sink`; fills `record`'s tokens, finish and times as chunks
  // pass (times from `record_start`).
  absl::Status RunGenerate(grpc::ServerContext* context, const v1::GenerateRequest& request,
                           const ChunkSink& sink, absl::Time record_start, RequestRecord& record);
  // Validates `request` against `context` (ContextLimit) and resolves its defaults.
  absl::StatusOr<EngineRequest> Prepare(const v1::GenerateRequest& request,
                                        absl::Time deadline, int context);
  // Most tokens one request may hold: max_context, or the KV cache's capacity when
  // `engine` (may be null) has fewer tokens of cache than that.
  int ContextLimit(const Engine* engine) const;
  absl::StatusOr<std::vector<int32_t>> PromptIds(const v1::GenerateRequest& request) const;
  absl::Status DoTokenize(const v1::TokenizeRequest& request, v1::TokenizeResponse* response);
  absl::Status DoDetokenize(const v1::DetokenizeRequest& request,
                            v1::DetokenizeResponse* response);
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
  ServerMetrics metrics_;
  std::mt19937_64 seed_source_ ABSL_GUARDED_BY(mu_);  // seeded from random_device
  std::atomic<int> generating_{0};      // Generate calls inside RunGenerate
  std::atomic<bool> draining_{false};   // StopAccepting was called
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SERVICE_H_
