#include "server/pool/control_address.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve {

std::optional<std::string> UnixSocketPath(const std::string& address) {
  if (absl::StartsWith(address, "unix://")) return address.substr(7);
  if (absl::StartsWith(address, "unix:")) return address.substr(5);
  return std::nullopt;
}

std::string DialAddress(const std::string& address, int bound_port) {
  if (UnixSocketPath(address)) return address;
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", bound_port);
}

}  // namespace tpserve
