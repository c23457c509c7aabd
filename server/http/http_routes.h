// HttpRoutes: which handler serves a request, by method and exact path. Built before
// HttpServer::Start, then read-only (read by every I/O thread at once).
//
// A GET route also serves HEAD (the server sends its headers without the body). A known
// path asked with a method it has no route for gets 405 with an Allow header; a path
// with no route goes to the fallback, which gets every method (404 when there is none).
#ifndef TPSERVE_SERVER_HTTP_HTTP_ROUTES_H_
#define TPSERVE_SERVER_HTTP_HTTP_ROUTES_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/http_message.h"

namespace tpserve {

class HttpRoutes {
 public:
  // `method` is an HTTP token ("GET", "POST"), `path` starts with '/' ("/v1/models").
  // A bad method or path, an empty handler or a second route for the same pair is
  // reported by Validate() (and so by HttpServer::Start).
  HttpRoutes& Add(absl::string_view method, absl::string_view path, HttpHandler handler);
  HttpRoutes& Add(absl::string_view method, absl::string_view path, HttpAsyncHandler handler);
  HttpRoutes& SetFallback(HttpHandler handler);
  HttpRoutes& SetFallback(HttpAsyncHandler handler);

  // The first mistake made by Add or SetFallback; an error too when there is no route
  // and no fallback at all.
  absl::Status Validate() const;

  // What serves `method` on `path`: a handler, or else the status to answer (404, or
  // 405 with `allow`, e.g. "GET, HEAD, POST").
  struct Match {
    const HttpAsyncHandler* handler = nullptr;
    int status = 0;
    std::string allow;
  };
  Match Find(absl::string_view method, absl::string_view path) const;

 private:
  void Record(absl::Status error);

  std::map<std::string, std::map<std::string, HttpAsyncHandler, std::less<>>, std::less<>> routes_;
  HttpAsyncHandler fallback_;
  absl::Status error_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_ROUTES_H_
