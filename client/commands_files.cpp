// tensorctl load and save (safetensors files on the daemon's disk), and put
// and get of local .safetensors files (several tensors at once).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "client/commands.h"
#include "client/output.h"
#include "client/progress_bar.h"
#include "format/safetensors.h"

namespace tensord::cli {
namespace {

DType fromFile(safetensors::DType dtype) {
  switch (dtype) {
    case safetensors::DType::F32:
      return DType::F32;
    case safetensors::DType::F16:
      return DType::F16;
    case safetensors::DType::BF16:
      return DType::BF16;
    case safetensors::DType::I32:
      return DType::I32;
    case safetensors::DType::I64:
      return DType::I64;
    case safetensors::DType::U8:
      return DType::U8;
    case safetensors::DType::Bool:
      return DType::Bool;
  }
  throw std::logic_error("unknown safetensors dtype");
}

safetensors::DType toFile(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return safetensors::DType::F32;
    case DType::F16:
      return safetensors::DType::F16;
    case DType::BF16:
      return safetensors::DType::BF16;
    case DType::I32:
      return safetensors::DType::I32;
    case DType::I64:
      return safetensors::DType::I64;
    case DType::U8:
      return safetensors::DType::U8;
    case DType::Bool:
      return safetensors::DType::Bool;
  }
  throw std::logic_error("unknown dtype");
}

[[noreturn]] void fileError(const std::string& path, const std::string& problem) {
  throw safetensors::FormatError(path + ": " + problem + ": " + std::strerror(errno));
}

// One line per tensor, then where they went; or one JSON object.
void report(const Options& options, const std::string& verb, const std::string& path,
            const std::vector<TensorInfo>& tensors, uint64_t bytes) {
  if (options.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : tensors) {
      list.push_back({{"name", t.name},
                      {"dtype", std::string(dtypeName(t.dtype))},
                      {"shape", shapeJson(t.shape)},
                      {"bytes", t.bytes}});
    }
    printJson({{"path", path}, {"tensors", list}, {"bytes", bytes}});
    return;
  }
  for (const auto& t : tensors) {
    std::printf("%s: %s (%s)\n", t.name.c_str(), describe(t.dtype, t.shape).c_str(), humanBytes(t.bytes).c_str());
  }
  std::printf("%s %zu tensor%s, %s, %s %s\n", verb.c_str(), tensors.size(), tensors.size() == 1 ? "" : "s",
              humanBytes(bytes).c_str(), verb == "loaded" || verb == "uploaded" ? "from" : "to", path.c_str());
}

// A local file mapped read-only, with its validated header.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fileError(path, "cannot open");
    header_ = safetensors::readHeader(fd_, path);  // closes nothing on failure: the destructor does
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fileError(path, "cannot stat");
    size_ = size_t(st.st_size);
    if (size_ > 0) {
      void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (map == MAP_FAILED) fileError(path, "cannot map");
      data_ = static_cast<const std::byte*>(map);
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const safetensors::Header& header() const { return header_; }
  std::span<const std::byte> bytesOf(const safetensors::TensorEntry& t) const {
    return {data_ + header_.dataOffset + t.begin, size_t(t.bytes())};
  }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  const std::byte* data_ = nullptr;
  safetensors::Header header_;
};

// Writes a local file through a temporary one renamed into place, so an
// interrupted get never leaves half a file under the name.
class LocalWriter {
 public:
  explicit LocalWriter(std::string path) : path_(std::move(path)), temp_(path_ + ".tmp") {
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fileError(temp_, "cannot create");
  }
  ~LocalWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }
  void write(std::span<const std::byte> bytes, uint64_t offset) {
    while (!bytes.empty()) {
      const ssize_t put = ::pwrite(fd_, bytes.data(), bytes.size(), off_t(offset));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) fileError(temp_, "cannot write");
      bytes = bytes.subspan(size_t(put));
      offset += uint64_t(put);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0 || ::close(std::exchange(fd_, -1)) != 0) fileError(temp_, "cannot write");
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fileError(path_, "cannot rename " + temp_ + " to it");
    committed_ = true;
  }

 private:
  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

int cmdLoad(const Options& options, Connector& connector) {
  const std::string& file = options.args[0];
  Client& client = connector.client();
  FileTransfer loaded;
  {
    ProgressBar bar("load " + file);
    loaded = client.loadFile(file, options.prefix, /*overwrite=*/true,
                             [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  report(options, "loaded", loaded.path, loaded.tensors, loaded.bytes);
  return 0;
}

int cmdSave(const Options& options, Connector& connector) {
  const std::string& file = options.args[0];
  const std::vector<std::string> names(options.args.begin() + 1, options.args.end());
  Client& client = connector.client();
  FileTransfer saved;
  {
    ProgressBar bar("save " + file);
    saved = client.saveFile(file, names, options.prefix, /*overwrite=*/true,
                            [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  report(options, "saved", saved.path, saved.tensors, saved.bytes);
  return 0;
}

int putSafetensors(const Options& options, Connector& connector) {
  const std::string& prefix = options.args[0];
  const std::string& file = options.args[1];
  const MappedFile mapped(file);  // before connecting: a bad file is exit code 4
  const auto& header = mapped.header();

  Client& client = connector.client();
  // Everything is uploaded before anything is named: a failed transfer
  // leaves no name behind.
  std::vector<Tensor> uploaded;
  {
    ProgressBar bar("put " + file);
    uint64_t before = 0;
    for (const auto& t : header.tensors) {
      uploaded.push_back(client.upload(fromFile(t.dtype), t.shape, mapped.bytesOf(t),
                                       [&](uint64_t done, uint64_t) { bar.update(before + done, header.dataBytes); }));
      before += t.bytes();
    }
  }
  std::vector<TensorInfo> infos;
  for (size_t i = 0; i < uploaded.size(); ++i) {
    const auto& t = header.tensors[i];
    const std::string name = prefix + "/" + t.name;
    uploaded[i].save(name, /*overwrite=*/true);
    infos.push_back({0, name, "", fromFile(t.dtype), t.shape, t.bytes()});
  }
  report(options, "uploaded", file, infos, header.dataBytes);
  return 0;
}

int getSafetensors(const Options& options, Connector& connector) {
  const std::string& file = options.args.back();
  Client& client = connector.client();
  // What goes into the file: a NAME that is a tensor under that name, else
  // the tensors under NAME/ without the prefix (the inverse of put).
  struct Selected {
    TensorInfo info;
    std::string fileName;
  };
  std::vector<Selected> selected;
  for (size_t i = 0; i + 1 < options.args.size(); ++i) {
    const std::string& name = options.args[i];
    const std::string group = name + "/";
    std::vector<Selected> under;
    bool exact = false;
    for (auto& info : client.list(name)) {
      if (info.name == name) {
        selected.push_back({info, name});
        exact = true;
      } else if (info.name.starts_with(group)) {
        under.push_back({info, info.name.substr(group.size())});
      }
    }
    if (exact) continue;
    if (under.empty())
      throw Error(Error::Kind::kFailed, "get: no tensor named '" + name + "' and none under '" + group + "'");
    selected.insert(selected.end(), under.begin(), under.end());
  }

  std::vector<safetensors::TensorEntry> layout;
  for (const auto& s : selected) layout.push_back({s.fileName, toFile(s.info.dtype), s.info.shape});
  safetensors::sortForWriting(layout);
  const std::string prefixBytes = safetensors::encodeHeader(layout, {});  // names twice: FormatError, exit code 4

  // One tensor in memory at a time, written at its offset as it arrives.
  LocalWriter out(file);
  out.write(std::as_bytes(std::span(prefixBytes)), 0);
  std::vector<TensorInfo> written;
  uint64_t total = 0;
  for (const auto& t : layout) total += t.bytes();
  {
    ProgressBar bar("get " + file);
    uint64_t before = 0;
    for (const auto& t : layout) {
      const Selected& s =
          *std::find_if(selected.begin(), selected.end(), [&](const Selected& x) { return x.fileName == t.name; });
      std::vector<std::byte> data =
          client.restore(s.info.name).bytes([&](uint64_t done, uint64_t) { bar.update(before + done, total); });
      if (data.size() != t.bytes()) {
        throw Error(Error::Kind::kFailed, "get: tensor '" + s.info.name + "' changed while it was read (" +
                                              std::to_string(data.size()) + " bytes; listed with " +
                                              std::to_string(t.bytes()) + ")");
      }
      out.write(data, prefixBytes.size() + t.begin);
      before += t.bytes();
      written.push_back(s.info);
    }
  }
  out.commit();
  report(options, "downloaded", file, written, prefixBytes.size() + total);
  return 0;
}

}  // namespace tensord::cli
