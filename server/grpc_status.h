// The one place where absl::Status becomes grpc::Status, at the RPC edge.
//
// The canonical codes are the same numbers in both; the message is kept. Pure; safe
// from any thread.
#ifndef TPSERVE_SERVER_GRPC_STATUS_H_
#define TPSERVE_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tpserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_GRPC_STATUS_H_
