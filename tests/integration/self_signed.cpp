#include "tests/integration/self_signed.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

namespace tensord::testing {
namespace {

template <auto Free>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509_free>>;
using Extension = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;

[[noreturn]] void fail(const std::string& step) {
  char reason[256] = "no OpenSSL error";
  if (unsigned long code = ERR_get_error(); code != 0) ERR_error_string_n(code, reason, sizeof reason);
  throw std::runtime_error("self-signed certificate: " + step + " failed: " + reason);
}

void addExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  Extension ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) fail(std::string("extension ") + value);
}

// What `write` puts into a memory BIO, as text.
template <typename Write>
std::string pem(Write write, const char* step) {
  std::unique_ptr<BIO, Deleter<BIO_free>> out(BIO_new(BIO_s_mem()));
  if (!out || write(out.get()) != 1) fail(step);
  char* text = nullptr;
  const long length = BIO_get_mem_data(out.get(), &text);
  return std::string(text, size_t(length));
}

void save(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("self-signed certificate: cannot write " + path.string());
}

}  // namespace

SelfSignedCertificate::SelfSignedCertificate() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tensord-bench-tls-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("self-signed certificate: mkdtemp failed");
  dir_ = tmpl;
  certFile_ = dir_ / "cert.pem";
  keyFile_ = dir_ / "key.pem";
  try {
    Key key(EVP_EC_gen("P-256"));
    if (!key) fail("EC key generation");
    Cert cert(X509_new());
    if (!cert || X509_set_version(cert.get(), 2) != 1 || ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1) != 1 ||
        X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
        X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600) == nullptr ||
        X509_set_pubkey(cert.get(), key.get()) != 1) {
      fail("certificate fields");
    }
    X509_NAME* name = X509_get_subject_name(cert.get());
    if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("localhost"), -1,
                                   -1, 0) != 1 ||
        X509_set_issuer_name(cert.get(), name) != 1) {
      fail("certificate name");
    }
    addExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE");
    addExtension(cert.get(), NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) fail("signing");
    keyPem_ =
        pem([&](BIO* out) { return PEM_write_bio_PrivateKey(out, key.get(), nullptr, nullptr, 0, nullptr, nullptr); },
            "writing the key");
    certPem_ = pem([&](BIO* out) { return PEM_write_bio_X509(out, cert.get()); }, "writing the certificate");
    save(keyFile_, keyPem_);
    save(certFile_, certPem_);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

SelfSignedCertificate::~SelfSignedCertificate() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace tensord::testing
