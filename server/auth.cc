#include "server/auth.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/regular_file.h"

namespace tpserve {
namespace {

constexpr uint64_t kMaxKeyFileBytes = 1 << 20;
constexpr absl::string_view kBearer = "Bearer ";

// Whether `presented` equals `key` (not empty). Every byte of `presented` is compared,
// against `key`'s bytes in turn, and the differences are OR-ed, so the time depends on
// presented.size() only: nothing branches on the bytes, and volatile keeps the compiler
// from ending the loop early.
bool ConstantTimeEquals(absl::string_view presented, absl::string_view key) {
  volatile unsigned char diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff = diff | static_cast<unsigned char>(presented[i] ^ key[i % key.size()]);
  }
  return diff == 0;
}

bool IsVisibleAscii(absl::string_view key) {
  for (char c : key) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Parse(absl::string_view text, absl::string_view flag,
                                       absl::string_view path) {
  std::vector<std::string> keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    if (!IsVisibleAscii(line)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " ", path, " line ", line_number,
          ": a key must be visible ASCII without spaces (what gRPC metadata carries)"));
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " ", path, " holds no key (one per line; blank and # lines are skipped)"));
  }
  return ApiKeys(std::move(keys));
}

absl::StatusOr<ApiKeys> ApiKeys::Load(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxKeyFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", text.status().message()));
  }
  return Parse(*text, flag, path);
}

bool ApiKeys::Accepts(absl::string_view key) const {
  bool accepted = false;
  for (const std::string& known : keys_) accepted |= ConstantTimeEquals(key, known);
  return accepted;
}

bool ApiKeys::AcceptsMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  const auto [begin, end] = metadata.equal_range("authorization");
  for (auto it = begin; it != end; ++it) {
    const absl::string_view value(it->second.data(), it->second.size());
    if (!absl::StartsWithIgnoreCase(value, kBearer)) continue;
    if (Accepts(absl::StripAsciiWhitespace(value.substr(kBearer.size())))) return true;
  }
  return false;
}

template <typename Method, typename... Args>
grpc::Status AuthenticatedInference::Forward(Method method, grpc::ServerContext* context,
                                             Args... args) {
  if (!keys_.AcceptsMetadata(context->client_metadata())) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "tpserve.v1.Inference needs metadata \"authorization: Bearer KEY\" "
                        "with a key of the server's --api-key-file");
  }
  return (inner_->*method)(context, args...);
}

grpc::Status AuthenticatedInference::Generate(grpc::ServerContext* context,
                                              const v1::GenerateRequest* request,
                                              grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return Forward(&v1::Inference::Service::Generate, context, request, writer);
}

grpc::Status AuthenticatedInference::GenerateUnary(grpc::ServerContext* context,
                                                   const v1::GenerateRequest* request,
                                                   v1::GenerateResponse* response) {
  return Forward(&v1::Inference::Service::GenerateUnary, context, request, response);
}

grpc::Status AuthenticatedInference::Chat(grpc::ServerContext* context,
                                          const v1::ChatRequest* request,
                                          grpc::ServerWriter<v1::ChatResponse>* writer) {
  return Forward(&v1::Inference::Service::Chat, context, request, writer);
}

grpc::Status AuthenticatedInference::ChatUnary(grpc::ServerContext* context,
                                               const v1::ChatRequest* request,
                                               v1::ChatResponse* response) {
  return Forward(&v1::Inference::Service::ChatUnary, context, request, response);
}

grpc::Status AuthenticatedInference::Tokenize(grpc::ServerContext* context,
                                              const v1::TokenizeRequest* request,
                                              v1::TokenizeResponse* response) {
  return Forward(&v1::Inference::Service::Tokenize, context, request, response);
}

grpc::Status AuthenticatedInference::Detokenize(grpc::ServerContext* context,
                                                const v1::DetokenizeRequest* request,
                                                v1::DetokenizeResponse* response) {
  return Forward(&v1::Inference::Service::Detokenize, context, request, response);
}

grpc::Status AuthenticatedInference::GetModelInfo(grpc::ServerContext* context,
                                                  const v1::GetModelInfoRequest* request,
                                                  v1::ModelInfo* response) {
  return Forward(&v1::Inference::Service::GetModelInfo, context, request, response);
}

grpc::Status AuthenticatedInference::ResetPrefixCache(grpc::ServerContext* context,
                                                      const v1::ResetPrefixCacheRequest* request,
                                                      v1::ResetPrefixCacheResponse* response) {
  return Forward(&v1::Inference::Service::ResetPrefixCache, context, request, response);
}

}  // namespace tpserve
