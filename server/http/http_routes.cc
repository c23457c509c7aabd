#include "server/http/http_routes.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

HttpAsyncHandler Asynchronous(HttpHandler handler) {
  if (!handler) return nullptr;
  return [handler = std::move(handler)](HttpRequest request,
                                        std::shared_ptr<HttpResponder> responder) {
    responder->Respond(handler(request));
  };
}

}  // namespace

HttpRoutes& HttpRoutes::Add(absl::string_view method, absl::string_view path,
                            HttpHandler handler) {
  return Add(method, path, Asynchronous(std::move(handler)));
}

HttpRoutes& HttpRoutes::Add(absl::string_view method, absl::string_view path,
                            HttpAsyncHandler handler) {
  const std::string route = absl::StrCat(method, " ", path);
  if (!IsHttpToken(method) || !absl::StartsWith(path, "/") || !handler) {
    Record(absl::InvalidArgumentError(absl::StrCat("bad HTTP route \"", route, "\"")));
    return *this;
  }
  auto& by_method = routes_[std::string(path)];
  if (!by_method.emplace(std::string(method), std::move(handler)).second) {
    Record(absl::InvalidArgumentError(absl::StrCat("HTTP route \"", route, "\" added twice")));
  }
  return *this;
}

HttpRoutes& HttpRoutes::SetFallback(HttpHandler handler) {
  return SetFallback(Asynchronous(std::move(handler)));
}

HttpRoutes& HttpRoutes::SetFallback(HttpAsyncHandler handler) {
  if (!handler) Record(absl::InvalidArgumentError("empty HTTP fallback handler"));
  fallback_ = std::move(handler);
  return *this;
}

void HttpRoutes::Record(absl::Status error) {
  if (error_.ok()) error_ = std::move(error);
}

absl::Status HttpRoutes::Validate() const {
  if (!error_.ok()) return error_;
  if (routes_.empty() && !fallback_) return absl::InvalidArgumentError("HttpServer needs a route");
  return absl::OkStatus();
}

HttpRoutes::Match HttpRoutes::Find(absl::string_view method, absl::string_view path) const {
  Match match;
  const auto route = routes_.find(path);
  if (route == routes_.end()) {
    if (fallback_) {
      match.handler = &fallback_;
    } else {
      match.status = 404;
    }
    return match;
  }
  const auto& by_method = route->second;
  auto handler = by_method.find(method);
  if (handler == by_method.end() && method == "HEAD") handler = by_method.find("GET");
  if (handler != by_method.end()) {
    match.handler = &handler->second;
    return match;
  }
  std::vector<std::string> allow;
  for (const auto& [name, unused] : by_method) {
    allow.push_back(name);
    if (name == "GET" && by_method.count("HEAD") == 0) allow.push_back("HEAD");
  }
  std::sort(allow.begin(), allow.end());
  match.status = 405;
  match.allow = absl::StrJoin(allow, ", ");
  return match;
}

}  // namespace tpserve
