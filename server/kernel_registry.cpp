#include "server/kernel_registry.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "compute/engine.h"
#include "server/file_worker.h"

namespace tensord::server {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()));
  out.resize(size_t(n));
  return out;
}

std::string unbase64(const std::string& text) {
  if (text.size() % 4 != 0) throw std::runtime_error("bad base64 length");
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), int(text.size()));
  if (n < 0) throw std::runtime_error("bad base64");
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') ++padding;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++padding;
  out.resize(size_t(n) - padding);
  return out;
}

[[noreturn]] void throwErrno(const std::string& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }

// tmp file, fsync, rename over `path`, fsync the directory.
void writeAtomically(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throwErrno("cannot write " + tmp.string());
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      throwErrno("cannot write " + tmp.string());
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    throwErrno("cannot fsync " + tmp.string());
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throwErrno("cannot rename " + tmp.string());
  int dir = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace

std::string sha256Hex(std::string_view bytes) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : digest) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

const RegisteredKernel* KernelRegistry::find(std::string_view name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<const RegisteredKernel*> KernelRegistry::all() const {
  std::vector<const RegisteredKernel*> out;
  for (const auto& [name, k] : kernels_) out.push_back(&k);
  return out;
}

void KernelRegistry::put(RegisteredKernel kernel) {
  std::string name = kernel.kernel->spec().name;
  kernels_[name] = std::move(kernel);
}

bool KernelRegistry::remove(std::string_view name) {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) return false;
  kernels_.erase(it);
  return true;
}

std::string KernelRegistry::serialize() const {
  json list = json::array();
  for (const auto& [name, k] : kernels_) {
    const compute::UserKernelSource& src = k.kernel->source();
    json entry = {{"name", name}, {"owner", k.owner}, {"language", src.language}, {"description", src.description}};
    if (src.language == "glsl") {
      entry["source"] = src.source;
    } else {
      entry["source_base64"] = base64(src.source);
    }
    list.push_back(std::move(entry));
  }
  return json{{"format", "tensord-kernels-1"}, {"kernels", std::move(list)}}.dump(2) + "\n";
}

kj::Promise<void> KernelRegistry::persist(FileWorker& files, const fs::path& stateDir) {
  auto forked = lastWrite_
                    .then([this, &files, path = stateDir / kStateFile]() {
                      // The set as it is now: a later change writes again after this.
                      return files.run([text = serialize(), path]() { writeAtomically(path, text); });
                    })
                    .fork();
  lastWrite_ = forked.addBranch().catch_([](kj::Exception&&) {});
  return forked.addBranch();
}

void KernelRegistry::load(compute::Engine& engine, const fs::path& stateDir, spdlog::logger& log) {
  const fs::path path = stateDir / kStateFile;
  std::ifstream in(path, std::ios::binary);
  if (!in) return;  // none registered yet
  std::stringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
    if (!root.is_object() || root.value("format", "") != "tensord-kernels-1" || !root["kernels"].is_array()) {
      throw std::runtime_error("not a tensord-kernels-1 file");
    }
  } catch (const std::exception& e) {
    fs::path corrupt = path;
    corrupt += ".corrupt";
    std::error_code ec;
    fs::rename(path, corrupt, ec);
    log.error("{}: {}; moved it to {} and loaded no kernels", path.string(), e.what(), corrupt.string());
    return;
  }
  size_t loaded = 0;
  for (const json& entry : root["kernels"]) {
    std::string name = entry.is_object() ? entry.value("name", "") : "";
    try {
      compute::UserKernelSource src;
      src.name = name;
      src.language = entry.at("language").get<std::string>();
      src.description = entry.at("description").get<std::string>();
      src.source = entry.contains("source") ? entry.at("source").get<std::string>()
                                            : unbase64(entry.at("source_base64").get<std::string>());
      RegisteredKernel k;
      k.owner = entry.at("owner").get<std::string>();
      k.sourceSha256 = sha256Hex(src.source);
      k.kernel = engine.buildUserKernel(std::move(src));
      put(std::move(k));
      ++loaded;
    } catch (const std::exception& e) {
      log.error("kernel '{}' from {} no longer builds and is dropped: {}", name, path.string(), e.what());
    }
  }
  if (loaded > 0) log.info("loaded {} user kernel(s) from {}", loaded, path.string());
}

}  // namespace tensord::server
