// The control plane's addresses: "unix:PATH" (local ranks) or HOST:PORT (ranks on any
// host), as WorkerPoolOptions::Validate checks them and the pool dials them. Pure.
#ifndef TPSERVE_SERVER_POOL_CONTROL_ADDRESS_H_
#define TPSERVE_SERVER_POOL_CONTROL_ADDRESS_H_

#include <optional>
#include <string>

namespace tpserve {

// The socket path of "unix:PATH" / "unix://PATH", nullopt for HOST:PORT.
std::optional<std::string> UnixSocketPath(const std::string& address);

// What a local worker dials for a server bound to `address`: the Unix address as is, or
// HOST:bound_port (a wildcard host becomes 127.0.0.1).
std::string DialAddress(const std::string& address, int bound_port);

// Where a pool's rendezvous store listens, and the host its Assignments name, for ranks
// that dial `address`: loopback for a Unix socket or a loopback host (no rank elsewhere
// can reach those either); the control host itself for one specific interface; every
// interface for a wildcard host, advertised as "" (each rank then uses the host it
// dialled the frontend at).
struct StoreAddress {
  std::string bind_host;
  std::string advertised_host;
};
StoreAddress StoreAddressFor(const std::string& address);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_CONTROL_ADDRESS_H_
