// The channel tpserve-cli talks over: plaintext by default; TLS when any --tls-* flag is
// given (--tls-ca-file: the CAs that must have signed the server's certificate, else the
// system's roots; --tls-cert-file with --tls-key-file: this client's certificate, for a
// server that requires one); with --api-key-file, every call carries
// "authorization: Bearer KEY", KEY the file's first key (the file format of tpserve's
// --api-key-file, server/auth.h).
//
// Files are read and checked here, once, before any call; errors are InvalidArgument
// naming the flag and the file (the CLI exits 2). Called from main only.
#ifndef TPSERVE_CLIENT_CHANNEL_H_
#define TPSERVE_CLIENT_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

struct ChannelFlags {
  std::string target;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string api_key_file;
  // gRPC's load-balancing policy over the addresses `target` resolves to: "pick_first"
  // (gRPC's default: one connection, every call on it) or "round_robin" (a connection
  // to each address, calls spread over them: replicas behind a headless Service,
  // dns:///NAME:PORT). Empty: gRPC's default.
  std::string load_balancing;
};

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ChannelFlags& flags);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_CHANNEL_H_
