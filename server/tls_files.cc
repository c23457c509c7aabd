#include "server/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/regular_file.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

constexpr uint64_t kMaxPemFileBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

absl::Status Bad(absl::string_view flag, absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": ", problem));
}

absl::StatusOr<std::string> ReadPemFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxPemFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", text.status().message()));
  }
  return text;
}

Bio MemoryBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// OpenSSL's reason for the last failure, for an error message; clears its queue.
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  const char* reason = ERR_reason_error_string(code);
  ERR_clear_error();
  return reason != nullptr ? reason : "unknown OpenSSL error";
}

// The PEM certificates of `text`, leaf first; none when there is none or one is malformed.
std::vector<Cert> ParseCertificates(const std::string& text, std::string* problem) {
  ERR_clear_error();
  Bio bio = MemoryBio(text);
  std::vector<Cert> certs;
  while (Cert cert{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    certs.push_back(std::move(cert));
  }
  // The loop ends at the end of the text (no further BEGIN line) or at a broken block.
  const unsigned long last = ERR_peek_last_error();
  if (ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
    if (certs.empty()) *problem = "no PEM certificate in it (-----BEGIN CERTIFICATE-----)";
    return certs;
  }
  *problem = absl::StrCat("a malformed PEM certificate: ", OpenSslReason());
  return {};
}

// A password callback that gives none: an encrypted key fails instead of prompting.
int NoPassword(char*, int, int, void*) { return 0; }

}  // namespace

absl::StatusOr<std::string> ReadPemCertificates(absl::string_view flag, const std::string& path) {
  TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadPemFile(flag, path));
  std::string problem;
  if (ParseCertificates(text, &problem).empty()) return Bad(flag, path, problem);
  return text;
}

absl::StatusOr<TlsIdentity> ReadTlsIdentity(absl::string_view cert_flag,
                                            const std::string& cert_path,
                                            absl::string_view key_flag,
                                            const std::string& key_path) {
  TlsIdentity identity;
  TPSERVE_ASSIGN_OR_RETURN(identity.cert_chain, ReadPemFile(cert_flag, cert_path));
  std::string problem;
  const std::vector<Cert> certs = ParseCertificates(identity.cert_chain, &problem);
  if (certs.empty()) return Bad(cert_flag, cert_path, problem);
  TPSERVE_ASSIGN_OR_RETURN(identity.private_key, ReadPemFile(key_flag, key_path));
  ERR_clear_error();
  Bio bio = MemoryBio(identity.private_key);
  const Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr));
  if (key == nullptr) {
    return Bad(key_flag, key_path,
               absl::StrCat("no unencrypted PEM private key in it (", OpenSslReason(), ")"));
  }
  if (X509_check_private_key(certs.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return Bad(key_flag, key_path,
               absl::StrCat("not the private key of the first certificate of --", cert_flag, " ",
                            cert_path));
  }
  return identity;
}

}  // namespace tpserve
