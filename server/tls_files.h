// The PEM files of TLS flags (tpserve's --tls-cert-file, --tls-key-file,
// --tls-client-ca-file; tpserve-cli's --tls-ca-file and its own pair), read once at
// start and parsed with OpenSSL, so that a wrong file fails the start with the flag and
// the file named rather than later as gRPC's "cannot listen" or a failed handshake.
//
// Files are regular files of at most 1 MiB. Errors are InvalidArgument, worded
// "--FLAG PATH: what is wrong"; they never quote a key. Encrypted private keys are
// refused (gRPC cannot use them). Pure functions; any thread.
#ifndef TPSERVE_SERVER_TLS_FILES_H_
#define TPSERVE_SERVER_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// A certificate chain (leaf first) and its private key, as PEM text.
struct TlsIdentity {
  std::string cert_chain;
  std::string private_key;
};

// The PEM text of `path` after checking that it holds one or more certificates and
// nothing malformed.
absl::StatusOr<std::string> ReadPemCertificates(absl::string_view flag, const std::string& path);

// --cert_flag's certificate chain and --key_flag's private key, checked to be a pair:
// the key must be the private key of the chain's first certificate.
absl::StatusOr<TlsIdentity> ReadTlsIdentity(absl::string_view cert_flag,
                                            const std::string& cert_path,
                                            absl::string_view key_flag,
                                            const std::string& key_path);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TLS_FILES_H_
