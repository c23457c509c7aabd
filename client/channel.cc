#include "client/channel.h"

#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "grpcpp/support/client_interceptor.h"
#include "server/auth.h"
#include "server/tls_files.h"

namespace tpserve {
namespace {

using grpc::experimental::ClientInterceptorFactoryInterface;
using grpc::experimental::ClientRpcInfo;
using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::Interceptor;
using grpc::experimental::InterceptorBatchMethods;

// Adds "authorization: Bearer KEY" to every call's initial metadata. An interceptor
// rather than call credentials: gRPC sends call credentials over TLS only, and a
// server's API key may guard a plaintext port too.
class BearerInterceptor final : public Interceptor {
 public:
  explicit BearerInterceptor(const std::string* authorization) : authorization_(authorization) {}

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *authorization_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const authorization_;  // owned by the factory
};

class BearerInterceptorFactory final : public ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& key) : authorization_("Bearer " + key) {}

  Interceptor* CreateClientInterceptor(ClientRpcInfo*) override {
    return new BearerInterceptor(&authorization_);
  }

 private:
  const std::string authorization_;
};

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ChannelFlags& f) {
  if (f.tls_ca_file.empty() && f.tls_cert_file.empty() && f.tls_key_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  if (f.tls_cert_file.empty() != f.tls_key_file.empty()) {
    return absl::InvalidArgumentError("give --tls-cert-file and --tls-key-file together");
  }
  grpc::SslCredentialsOptions options;
  if (!f.tls_ca_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(options.pem_root_certs,
                             ReadPemCertificates("tls-ca-file", f.tls_ca_file));
  }
  if (!f.tls_cert_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(TlsIdentity identity,
                             ReadTlsIdentity("tls-cert-file", f.tls_cert_file, "tls-key-file",
                                             f.tls_key_file));
    options.pem_cert_chain = std::move(identity.cert_chain);
    options.pem_private_key = std::move(identity.private_key);
  }
  return grpc::SslCredentials(options);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ChannelFlags& flags) {
  TPSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                           Credentials(flags));
  grpc::ChannelArguments arguments;
  if (!flags.load_balancing.empty()) {
    if (flags.load_balancing != "pick_first" && flags.load_balancing != "round_robin") {
      return absl::InvalidArgumentError(
          "--load-balancing \"" + flags.load_balancing + "\": expected pick_first or round_robin");
    }
    arguments.SetLoadBalancingPolicyName(flags.load_balancing);
  }
  std::vector<std::unique_ptr<ClientInterceptorFactoryInterface>> interceptors;
  if (!flags.api_key_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(ApiKeys keys, ApiKeys::Load("api-key-file", flags.api_key_file));
    interceptors.push_back(std::make_unique<BearerInterceptorFactory>(keys.first()));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      flags.target, credentials, arguments, std::move(interceptors));
}

}  // namespace tpserve
