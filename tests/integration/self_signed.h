#pragma once
// A throwaway TLS identity for tests and benchmarks: an EC P-256 key and a
// self-signed certificate for 127.0.0.1 and localhost, valid for a day,
// written as PEM files into a fresh temporary directory that goes with it.
// The certificate is its own CA: a client trusts it with `caFile`.

#include <filesystem>
#include <string>

namespace tensord::testing {

class SelfSignedCertificate {
 public:
  SelfSignedCertificate();  // throws std::runtime_error naming the OpenSSL step that failed
  ~SelfSignedCertificate();
  SelfSignedCertificate(const SelfSignedCertificate&) = delete;
  SelfSignedCertificate& operator=(const SelfSignedCertificate&) = delete;

  const std::filesystem::path& certFile() const { return certFile_; }
  const std::filesystem::path& keyFile() const { return keyFile_; }
  // The same, as PEM text.
  const std::string& certPem() const { return certPem_; }
  const std::string& keyPem() const { return keyPem_; }

 private:
  std::filesystem::path dir_, certFile_, keyFile_;
  std::string certPem_, keyPem_;
};

}  // namespace tensord::testing
