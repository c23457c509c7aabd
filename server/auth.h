// API keys on tpserve.v1.Inference (--api-key-file).
//
// ApiKeys: the keys of a key file, one per line with surrounding whitespace trimmed;
// blank lines and lines starting with # are skipped. A file without a key is an error, and
// so is a key with a character outside visible ASCII (what gRPC metadata carries). Errors
// name the flag, the file and the line, never a key. Accepts compares in constant time.
//
// AuthenticatedInference: tpserve.v1.Inference in front of the real service. A call
// without metadata "authorization: Bearer KEY", KEY one of the keys, ends UNAUTHENTICATED
// before the real service sees it. grpc.health.v1 and reflection are other services and
// stay open for probes.
//
// Why a wrapping service rather than one of gRPC's hooks, as checked against Debian's
// gRPC 1.51: an AuthMetadataProcessor runs only behind secure credentials (setting one on
// InsecureServerCredentials() aborts the process), and a server interceptor
// (experimental::ServerInterceptorFactoryInterface) runs on both kinds of port but
// cannot end a call: server interceptors cannot Hijack, and the sync server runs the
// handler after its interceptors whatever they did (grpc/grpc#24017), so a refused
// Generate would still reach the engine. The wrapper refuses before any handler on
// either kind of port. A method added to the proto but not here answers UNIMPLEMENTED
// (closed, not open); auth_test walks the proto's methods to catch it.
//
// Threading: gRPC calls the handlers from its thread pool; both classes are immutable
// after construction.
#ifndef TPSERVE_SERVER_AUTH_H_
#define TPSERVE_SERVER_AUTH_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {

class ApiKeys {
 public:
  // Parses a key file's text; `flag` and `path` name it in errors.
  static absl::StatusOr<ApiKeys> Parse(absl::string_view text, absl::string_view flag,
                                       absl::string_view path);
  // Reads `path` (a regular file of at most 1 MiB) and parses it.
  static absl::StatusOr<ApiKeys> Load(absl::string_view flag, const std::string& path);

  // Whether `key` is one of the keys. Its time depends on key.size() and the number of
  // keys, not on which bytes match.
  bool Accepts(absl::string_view key) const;
  // Whether `metadata` (a call's client metadata) has an "authorization: Bearer KEY"
  // entry, the scheme in any case, that Accepts.
  bool AcceptsMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  // The file's first key: the one a client sends.
  const std::string& first() const { return keys_.front(); }
  size_t size() const { return keys_.size(); }

 private:
  explicit ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}

  std::vector<std::string> keys_;  // at least one, none empty
};

class AuthenticatedInference final : public v1::Inference::Service {
 public:
  // `inner` outlives this service.
  AuthenticatedInference(v1::Inference::Service* inner, ApiKeys keys)
      : inner_(inner), keys_(std::move(keys)) {}

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                             v1::GenerateResponse* response) override;
  grpc::Status Chat(grpc::ServerContext* context, const v1::ChatRequest* request,
                    grpc::ServerWriter<v1::ChatResponse>* writer) override;
  grpc::Status ChatUnary(grpc::ServerContext* context, const v1::ChatRequest* request,
                         v1::ChatResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;
  grpc::Status ResetPrefixCache(grpc::ServerContext* context,
                                const v1::ResetPrefixCacheRequest* request,
                                v1::ResetPrefixCacheResponse* response) override;

 private:
  // inner_->*method(context, args...) when the call carries an accepted key, else
  // UNAUTHENTICATED.
  template <typename Method, typename... Args>
  grpc::Status Forward(Method method, grpc::ServerContext* context, Args... args);

  v1::Inference::Service* const inner_;
  const ApiKeys keys_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_AUTH_H_
