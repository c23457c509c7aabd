#include "server/pool/control_address.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tpserve {

std::optional<std::string> UnixSocketPath(const std::string& address) {
  if (absl::StartsWith(address, "unix://")) return address.substr(7);
  if (absl::StartsWith(address, "unix:")) return address.substr(5);
  return std::nullopt;
}

namespace {

// HOST of HOST:PORT, without the brackets of "[v6]:PORT".
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace

StoreAddress StoreAddressFor(const std::string& address) {
  if (UnixSocketPath(address)) return {"127.0.0.1", "127.0.0.1"};
  const std::string host = HostOf(address);
  if (IsLoopback(host)) return {host, host};
  if (IsWildcard(host)) return {host == "::" ? "::" : "0.0.0.0", ""};
  return {host, host};
}

std::string DialAddress(const std::string& address, int bound_port) {
  if (UnixSocketPath(address)) return address;
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", bound_port);
}

}  // namespace tpserve
