// The one place where absl::Status becomes grpc::Status (and back, for clients), for every gRPC service of the
// process: the public API's handlers (server/grpc/inference_service.cc) and the control plane's
// (server/pool/worker_connection.cc).
//
// The canonical codes are the same numbers in both. The message is kept up to
// kMaxGrpcMessageBytes (1 KiB, as TensorFlow Serving caps it): a longer one is cut at a
// UTF-8 character boundary and ends with "...TRUNCATED", so a message built from a
// client's or a file's contents cannot grow a status (or a log line) without bound.
// Pure; safe from any thread.
#ifndef TPSERVE_BASE_GRPC_STATUS_H_
#define TPSERVE_BASE_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tpserve {

inline constexpr size_t kMaxGrpcMessageBytes = 1024;

grpc::Status ToGrpcStatus(const absl::Status& status);
// A client's view of a call's status, code and message unchanged.
absl::Status ToAbslStatus(const grpc::Status& status);

}  // namespace tpserve

#endif  // TPSERVE_BASE_GRPC_STATUS_H_
