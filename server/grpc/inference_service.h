// InferenceService: tpserve.v1.Inference over a ServingCore — the gRPC edge.
//
// Every handler is validate → call the core → ToGrpcStatus. Generate starts the call
// on the core and streams its chunks from a ChunkQueue, checking between chunks (every
// kCancelPollInterval at most) whether the call was cancelled or passed its deadline,
// and then cancels it on the core. GenerateUnary runs the same loop and collects the
// chunks into one response.
// Threading: gRPC calls the handlers from its thread pool.
#ifndef TPSERVE_SERVER_SERVICE_H_
#define TPSERVE_SERVER_SERVICE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/request.h"
#include "server/serving_core.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

inline constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

class InferenceService final : public v1::Inference::Service {
 public:
  // `core` outlives the service.
  explicit InferenceService(ServingCore* core) : core_(core) {}

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

 private:
  // Returns false when the client has gone away.
  using ChunkSink = std::function<bool(const EngineChunk&)>;

  // Runs the request on the core into `sink` until it ends, the client goes away or the
  // call passes its deadline.
  absl::Status RunGenerate(grpc::ServerContext* context, const v1::GenerateRequest& request,
                           const ChunkSink& sink);

  ServingCore* const core_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SERVICE_H_
