#include "server/tls_files.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string text(data, static_cast<size_t>(n));
  BIO_free(bio);
  return text;
}

// A fresh P-256 key and a self-signed certificate for it, as PEM; `passphrase`
// non-empty encrypts the key.
TlsIdentity SelfSigned(const std::string& passphrase = "") {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("tls_files_test"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509_sign(cert, key, EVP_sha256());
  BIO* cert_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_bio, cert);
  BIO* key_bio = BIO_new(BIO_s_mem());
  if (passphrase.empty()) {
    PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  } else {
    PEM_write_bio_PrivateKey(key_bio, key, EVP_aes_256_cbc(),
                             reinterpret_cast<const unsigned char*>(passphrase.data()),
                             static_cast<int>(passphrase.size()), nullptr, nullptr);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return {BioText(cert_bio), BioText(key_bio)};
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

void ExpectError(const absl::Status& status, const std::string& message) {
  ASSERT_FALSE(status.ok()) << message;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(message), std::string::npos) << status;
  EXPECT_EQ(status.message().find("PRIVATE KEY-----"), std::string::npos) << status;
}

TEST(TlsFilesTest, ReadsAMatchingPair) {
  const TlsIdentity made = SelfSigned();
  absl::StatusOr<TlsIdentity> read = ReadTlsIdentity(
      "tls-cert-file", Write("cert.pem", made.cert_chain), "tls-key-file",
      Write("key.pem", made.private_key));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->cert_chain, made.cert_chain);
  EXPECT_EQ(read->private_key, made.private_key);
}

TEST(TlsFilesTest, ReadsACertificateBundle) {
  const std::string bundle = SelfSigned().cert_chain + SelfSigned().cert_chain;
  absl::StatusOr<std::string> read =
      ReadPemCertificates("tls-client-ca-file", Write("bundle.pem", bundle));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bundle);
}

TEST(TlsFilesTest, BadFilesNameTheFlagAndTheFile) {
  const TlsIdentity made = SelfSigned();
  const std::string cert = Write("good_cert.pem", made.cert_chain);
  const std::string key = Write("good_key.pem", made.private_key);
  ExpectError(ReadPemCertificates("tls-client-ca-file", "/no/such/ca.pem").status(),
              "--tls-client-ca-file /no/such/ca.pem: cannot open");
  const std::string garbage = Write("garbage.pem", "not a certificate\n");
  ExpectError(ReadPemCertificates("tls-client-ca-file", garbage).status(),
              "--tls-client-ca-file " + garbage + ": no PEM certificate in it");
  // A key where the certificate belongs.
  ExpectError(ReadTlsIdentity("tls-cert-file", key, "tls-key-file", key).status(),
              "--tls-cert-file " + key + ": no PEM certificate in it");
  const std::string truncated = Write("truncated.pem", made.cert_chain.substr(0, 200));
  ExpectError(ReadTlsIdentity("tls-cert-file", truncated, "tls-key-file", key).status(),
              "--tls-cert-file " + truncated + ": a malformed PEM certificate");
  ExpectError(ReadTlsIdentity("tls-cert-file", cert, "tls-key-file", "/no/such/key.pem").status(),
              "--tls-key-file /no/such/key.pem: cannot open");
  ExpectError(ReadTlsIdentity("tls-cert-file", cert, "tls-key-file", cert).status(),
              "--tls-key-file " + cert + ": no unencrypted PEM private key in it");
  const std::string encrypted = Write("encrypted.pem", SelfSigned("secret").private_key);
  ExpectError(ReadTlsIdentity("tls-cert-file", cert, "tls-key-file", encrypted).status(),
              "--tls-key-file " + encrypted + ": no unencrypted PEM private key in it");
  const std::string other = Write("other_key.pem", SelfSigned().private_key);
  ExpectError(ReadTlsIdentity("tls-cert-file", cert, "tls-key-file", other).status(),
              "--tls-key-file " + other + ": not the private key of the first certificate of "
              "--tls-cert-file " + cert);
}

}  // namespace
}  // namespace tpserve
