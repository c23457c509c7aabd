#include "server/http/http_wire.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http.hpp>
#include <exception>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

namespace http = boost::beast::http;

// What every response carries when even Beast's serializer fails (it throws only on
// values it cannot frame, which IsValid rules out).
constexpr absl::string_view kLastResort =
    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

bool IsFieldValue(absl::string_view s) {
  return s.find_first_of(absl::string_view("\r\n\0", 3)) == absl::string_view::npos;
}

bool IsValid(int status, absl::string_view content_type, const HttpHeaders& headers) {
  if (status < 200 || status > 599 || !IsFieldValue(content_type)) return false;
  for (const auto& [name, value] : headers) {
    if (!IsHttpToken(name) || !IsFieldValue(value)) return false;
  }
  return true;
}

// Framing headers, which the server sets.
bool IsServers(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return lower == "content-length" || lower == "transfer-encoding" || lower == "connection" ||
         lower == "keep-alive";
}

template <class Body>
void SetHead(int status, std::string content_type, HttpHeaders headers,
             const WireFraming& framing, http::response<Body>& out) {
  out.version(framing.version);
  out.result(static_cast<unsigned>(status));
  if (out.result() == http::status::unknown) out.reason("Unknown");
  for (auto& [name, value] : headers) {
    if (!IsServers(name)) out.insert(name, value);
  }
  if (!content_type.empty()) out.set(http::field::content_type, content_type);
  out.keep_alive(framing.keep_alive);
}

HttpResponse Invalid() {
  return {500, "text/plain; charset=utf-8", "the handler's response is invalid\n", {}};
}

}  // namespace

std::string WireResponse(HttpResponse response, const WireFraming& framing) {
  if (!IsValid(response.status, response.content_type, response.headers)) response = Invalid();
  if (response.status >= 400 && response.body.empty()) response.body = ErrorText(response.status);
  try {
    http::response<http::string_body> out;
    SetHead(response.status, std::move(response.content_type), std::move(response.headers),
            framing, out);
    if (response.status != 204 && response.status != 304) {
      out.body() = std::move(response.body);
      out.prepare_payload();  // Content-Length, also for HEAD: the GET's length
    }
    std::ostringstream bytes;
    if (framing.head) {
      bytes << out.base();
    } else {
      bytes << out;
    }
    return bytes.str();
  } catch (const std::exception&) {
    return std::string(kLastResort);
  }
}

std::string WireStreamHead(int status, std::string content_type, HttpHeaders headers,
                           const WireFraming& framing, bool chunked) {
  if (!IsValid(status, content_type, headers)) return WireResponse(Invalid(), framing);
  try {
    http::response<http::empty_body> out;
    SetHead(status, std::move(content_type), std::move(headers), framing, out);
    if (chunked) out.chunked(true);
    std::ostringstream bytes;
    bytes << out.base();
    return bytes.str();
  } catch (const std::exception&) {
    return std::string(kLastResort);
  }
}

std::string WireChunk(absl::string_view data) {
  if (data.empty()) return "";  // An empty chunk would end the body.
  return boost::beast::buffers_to_string(
      http::make_chunk(boost::asio::const_buffer(data.data(), data.size())));
}

std::string ErrorText(int status) {
  switch (status) {
    case 400:
      return "bad request\n";
    case 404:
      return "not found\n";
    case 405:
      return "method not allowed\n";
    case 408:
      return "request timeout: the request did not arrive in time\n";
    case 413:
      return "request body too large\n";
    case 431:
      return "request header fields too large\n";
    case 500:
      return "internal server error\n";
    case 503:
      return "service unavailable\n";
    default:
      return absl::StrCat("HTTP status ", status, "\n");
  }
}

HttpResponse ErrorResponse(int status, std::string allow) {
  HttpResponse response{status, "text/plain; charset=utf-8", ErrorText(status), {}};
  if (!allow.empty()) response.headers.emplace_back("Allow", std::move(allow));
  return response;
}

}  // namespace tpserve
