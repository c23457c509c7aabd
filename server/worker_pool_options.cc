// WorkerPoolOptions::Validate and the address helpers the pool shares with it.
#include "server/worker_pool_options.h"

#include <sys/un.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/worker_pool.h"

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

absl::Status WorkerPoolOptions::Validate() const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (model_dir.empty()) return bad("worker pool: model_dir is empty");
  if (tp < 1 || tp > 512) return bad(absl::StrCat("worker pool: tp=", tp, " is outside [1, 512]"));
  if (device != "cpu" && device != "cuda") {
    return bad(absl::StrCat("worker pool: device \"", device, "\": expected cpu or cuda"));
  }
  if (dtype != "float32" && (device == "cpu" || dtype != "bfloat16")) {
    return bad(absl::StrCat("worker pool: dtype \"", dtype, "\" is not supported on ", device));
  }
  if (spawn_workers && worker_binary.empty()) return bad("worker pool: worker_binary is empty");
  if (control_address.empty()) return bad("worker pool: control_address is empty");
  if (std::optional<std::string> path = UnixSocketPath(control_address)) {
    if (path->empty() || path->size() >= sizeof(sockaddr_un::sun_path)) {
      return bad(absl::StrCat("worker pool: control_address \"", control_address,
                              "\": a Unix socket path must have 1 to ",
                              sizeof(sockaddr_un::sun_path) - 1, " characters"));
    }
  } else {
    const size_t colon = control_address.rfind(':');
    int port = -1;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(control_address.substr(colon + 1), &port) || port < 0 || port > 65535) {
      return bad(absl::StrCat("worker pool: control_address \"", control_address,
                              "\" is neither unix:PATH nor HOST:PORT"));
    }
    if (port == 0 && !spawn_workers) {
      return bad("worker pool: external workers need a fixed control port, not 0");
    }
  }
  if (kv_block_size < 1) return bad("worker pool: kv_block_size must be ≥ 1");
  if (kv_num_blocks < 0) return bad("worker pool: kv_num_blocks must be ≥ 0");
  const bool by_fraction = device == "cuda" && kv_memory_fraction > 0 && kv_memory_fraction <= 1;
  if (kv_num_blocks == 0 && kv_memory_bytes <= 0 && !by_fraction) {
    return bad("worker pool: set kv_num_blocks, a positive kv_memory_bytes or (cuda) a "
               "kv_memory_fraction in (0, 1]");
  }
  if (max_context < 0 || max_batch_tokens < 0 || max_sequences < 0) {
    return bad("worker pool: max_context, max_batch_tokens, max_sequences must be ≥ 0");
  }
  if (generation < 0) return bad("worker pool: generation must be ≥ 0");
  if (start_timeout <= absl::ZeroDuration() || step_timeout <= absl::ZeroDuration() ||
      comm_timeout < absl::ZeroDuration() || stop_grace < absl::ZeroDuration()) {
    return bad("worker pool: timeouts must be positive");
  }
  return absl::OkStatus();
}

}  // namespace tpserve
