// The bytes HttpServer sends: responses, stream heads and chunks, serialized by
// Boost.Beast (which only http_wire.cc includes, so that its users compile fast).
//
// Threading: pure functions.
#ifndef TPSERVE_SERVER_HTTP_HTTP_WIRE_H_
#define TPSERVE_SERVER_HTTP_HTTP_WIRE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "server/http/http_message.h"

namespace tpserve {

// How the request that is being answered frames its response.
struct WireFraming {
  int version = 11;         // 10 or 11, the request's
  bool head = false;        // a HEAD request: headers only
  bool keep_alive = true;   // else "Connection: close" (or no keep-alive, on 1.0)
};

// A whole response. An invalid one (see HttpResponse) becomes a 500; an error status
// with no body gets ErrorText's.
std::string WireResponse(HttpResponse response, const WireFraming& framing);
// The status line and headers of a streamed response: chunked when `chunked`.
std::string WireStreamHead(int status, std::string content_type, HttpHeaders headers,
                           const WireFraming& framing, bool chunked);
// One chunk of a chunked body ("1a\r\n...\r\n"); empty data gives nothing.
std::string WireChunk(absl::string_view data);
inline constexpr absl::string_view kWireLastChunk = "0\r\n\r\n";
// A one-line text body for an error status: "not found\n".
std::string ErrorText(int status);
// An error response of the server's own: `status`, ErrorText, and `allow` when set.
HttpResponse ErrorResponse(int status, std::string allow = "");

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_WIRE_H_
