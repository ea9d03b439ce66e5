#include "server/tls.h"

#include <kj/compat/tls.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "protocol/tls_stream.h"

namespace tensord::server {
namespace {

[[noreturn]] void fail(std::string_view key, const std::string& problem) {
  throw ConfigError(std::string(key) + ": " + problem);
}

std::string readFile(const std::filesystem::path& path, std::string_view key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(key, "cannot open " + path.string() + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string kjMessage(const kj::Exception& e) {
  std::string text = e.getDescription().cStr();
  // KJ's "OpenSSL error; message = error:...:reason" -> the reason.
  if (size_t at = text.find("message = "); at != std::string::npos) text = text.substr(at + 10);
  return text;
}

// One TlsCertificate per PEM block: KJ trusts only the first certificate of each.
std::vector<kj::TlsCertificate> readCertificates(const std::filesystem::path& path, std::string_view key) {
  const std::string text = readFile(path, key);
  constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  std::vector<kj::TlsCertificate> out;
  size_t pos = 0;
  for (;;) {
    size_t begin = text.find("-----BEGIN CERTIFICATE-----", pos);
    if (begin == std::string::npos) break;
    size_t end = text.find(kEnd, begin);
    if (end == std::string::npos) break;
    end += kEnd.size();
    std::string block = text.substr(begin, end - begin) + "\n";
    try {
      out.emplace_back(kj::StringPtr(block.c_str(), block.size()));
    } catch (const kj::Exception& e) {
      fail(key, path.string() + ": not a valid PEM certificate: " + kjMessage(e));
    }
    pos = end;
  }
  if (out.empty()) fail(key, path.string() + " holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  return out;
}

// The first certificate of a PEM chain as "subject '...', expires ...".
std::string describeLeaf(const std::string& chain) {
  BIO* in = BIO_new_mem_buf(chain.data(), int(chain.size()));
  X509* cert = in == nullptr ? nullptr : PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  if (cert == nullptr) return "an unreadable certificate";
  char subject[256] = {};
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
  std::string expires = "?";
  if (BIO* out = BIO_new(BIO_s_mem())) {
    if (ASN1_TIME_print(out, X509_get0_notAfter(cert)) == 1) {
      char* text = nullptr;
      const long length = BIO_get_mem_data(out, &text);
      expires.assign(text, size_t(length));
    }
    BIO_free(out);
  }
  X509_free(cert);
  return "subject '" + std::string(subject) + "', expires " + expires;
}

}  // namespace

struct ServerTls::Impl {
  std::optional<kj::TlsKeypair> keypair;
  std::vector<kj::TlsCertificate> clientCas;
  kj::Own<kj::TlsContext> context;
  std::string description;  // describeCertificate()
};

ServerTls::ServerTls(const TlsConfig& config) : impl_(load(config)) {}

ServerTls::~ServerTls() = default;

void ServerTls::reload(const TlsConfig& config) { impl_ = load(config); }

std::string ServerTls::describeCertificate() const { return impl_->description; }

std::shared_ptr<ServerTls::Impl> ServerTls::load(const TlsConfig& config) {
  auto impl = std::make_shared<Impl>();
  const std::string chain = readFile(config.certFile, "tls.cert_file");
  const std::string key = readFile(config.keyFile, "tls.key_file");
  std::optional<kj::TlsCertificate> certificate;
  try {
    certificate.emplace(kj::StringPtr(chain.c_str(), chain.size()));
  } catch (const kj::Exception& e) {
    fail("tls.cert_file", config.certFile.string() + ": not a PEM certificate chain: " + kjMessage(e));
  }
  std::optional<kj::TlsPrivateKey> privateKey;
  try {
    privateKey.emplace(kj::StringPtr(key.c_str(), key.size()));
  } catch (const kj::Exception& e) {
    fail("tls.key_file", config.keyFile.string() + ": not an unencrypted PEM private key: " + kjMessage(e));
  }
  impl->keypair.emplace(kj::TlsKeypair{*privateKey, *certificate});
  if (config.clientAuth != ClientAuth::kNone) {
    impl->clientCas = readCertificates(config.clientCaFile, "tls.client_ca_file");
  }
  impl->description = describeLeaf(chain);

  kj::TlsContext::Options options;
  options.useSystemTrustStore = false;  // clients are trusted only through tls.client_ca_file
  options.minVersion = kj::TlsVersion::TLS_1_2;
  options.defaultKeypair = *impl->keypair;
  options.trustedCertificates = kj::ArrayPtr<const kj::TlsCertificate>(impl->clientCas.data(), impl->clientCas.size());
  options.verifyClients = config.clientAuth == ClientAuth::kRequired;
  try {
    impl->context = kj::heap<kj::TlsContext>(kj::mv(options));
  } catch (const kj::Exception& e) {
    // Most likely the key does not belong to the certificate.
    fail("tls.key_file",
         "cannot use " + config.keyFile.string() + " with " + config.certFile.string() + ": " + kjMessage(e));
  }
  // "optional" client_auth asks for a certificate and verifies one that is
  // sent (KJ's options offer only "required").
  SSL_CTX* ctx = protocol::sslContext(*impl->context);
  if (config.clientAuth == ClientAuth::kOptional) SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  // Without a session id context OpenSSL refuses to resume sessions of verified clients.
  static const unsigned char kSessionContext[] = "tensord";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  return impl;
}

kj::Promise<TlsAccepted> ServerTls::accept(kj::Own<kj::AsyncIoStream> stream) {
  // The handshake and the connection it yields keep the context they started
  // with alive, so a reload meanwhile leaves them untouched.
  std::shared_ptr<Impl> impl = impl_;
  return protocol::TlsStream::accept(*impl->context, kj::mv(stream))
      .then([impl](kj::Own<protocol::TlsStream> secured) mutable {
        TlsAccepted out;
        out.certificateNames = certificateNames(secured->peerCertificate());
        out.stream = secured.attach(kj::mv(impl));
        return out;
      });
}

std::vector<std::string> certificateNames(X509* cert) {
  if (cert == nullptr) return {};
  std::vector<std::string> names;
  auto add = [&names](const unsigned char* data, int length) {
    if (data == nullptr || length <= 0) return;
    std::string name(reinterpret_cast<const char*>(data), size_t(length));
    if (name.find('\0') != std::string::npos) return;  // never match a name with an embedded NUL
    names.push_back(std::move(name));
  };
  X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) {
    unsigned char* utf8 = nullptr;
    int length = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
    if (length >= 0) add(utf8, length);
    OPENSSL_free(utf8);
  }
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans, i);
      if (san->type == GEN_DNS || san->type == GEN_EMAIL) {
        const ASN1_IA5STRING* text = san->type == GEN_DNS ? san->d.dNSName : san->d.rfc822Name;
        add(ASN1_STRING_get0_data(text), ASN1_STRING_length(text));
      }
    }
    GENERAL_NAMES_free(sans);
  }
  return names;
}

}  // namespace tensord::server
