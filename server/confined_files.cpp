#include "server/confined_files.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>

namespace tensord::server {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error(message); }

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// A configured directory without a trailing separator ("/srv/ckpt/" -> "/srv/ckpt").
fs::path cleanDir(const fs::path& dir) {
  fs::path out = dir.lexically_normal();
  if (!out.has_filename() && out.has_relative_path()) out = out.parent_path();
  return out;
}

std::string dirList(const std::vector<fs::path>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ", ") + cleanDir(d).string();
  return out;
}

bool leavesByDotDot(const fs::path& relative) { return !relative.empty() && *relative.begin() == ".."; }

UniqueFd openDirectory(const fs::path& dir, int flags) {
  const int fd = ::open(dir.c_str(), flags | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open the directory " + quoted(dir) + ": " + std::strerror(errno));
  return UniqueFd(fd);
}

}  // namespace

UniqueFd openNoSymlinks(const ConfinedPath& path, int flags) {
  UniqueFd current = openDirectory(path.dir, O_PATH);
  std::vector<fs::path> parts(path.relative.begin(), path.relative.end());
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const int fd = last ? ::openat(current.get(), parts[i].c_str(), flags | O_NOFOLLOW | O_CLOEXEC)
                        : ::openat(current.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      struct stat st {};
      const bool link = error == ELOOP || (error == ENOTDIR &&
                                           ::fstatat(current.get(), parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                                           S_ISLNK(st.st_mode));
      if (link) {
        fail(quoted(path.full()) +
             " goes through a symbolic link; without openat2 (an older kernel) symbolic "
             "links inside files.dirs are not followed");
      }
      fail("cannot open " + quoted(path.full()) + ": " + std::strerror(error));
    }
    current = UniqueFd(fd);
  }
  return current;
}

namespace {

// Opens path.relative beneath path.dir: `..` and symlinks may move around
// inside the directory but never out of it.
UniqueFd openBeneath(const ConfinedPath& path, int flags) {
  UniqueFd dir = openDirectory(path.dir, O_PATH);
  if (path.relative.empty() || path.relative == ".") {
    return openDirectory(path.dir, flags & ~O_DIRECTORY);
  }
  open_how how{};
  how.flags = uint64_t(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = -1;
  // EAGAIN: a rename elsewhere in the directory raced with the resolution;
  // the kernel asks for another try.
  for (int attempt = 0; attempt < 4; ++attempt) {
    fd = ::syscall(SYS_openat2, dir.get(), path.relative.c_str(), &how, sizeof how);
    if (fd >= 0) return UniqueFd(int(fd));
    if (errno != EAGAIN) break;
  }
  switch (errno) {
    case ENOSYS:
    case EPERM:  // a seccomp filter that does not know openat2
      return openNoSymlinks(path, flags);
    case EXDEV:
      fail(quoted(path.full()) + " leads outside " + quoted(path.dir) + " (files.dirs) through a symbolic link");
    case EAGAIN:
      fail("cannot open " + quoted(path.full()) + ": the directory kept changing while it was resolved");
    default:
      fail("cannot open " + quoted(path.full()) + ": " + std::strerror(errno));
  }
}

std::string randomSuffix() {
  std::random_device device;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", unsigned(device()), unsigned(device()));
  return buf;
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

ConfinedPath confinePath(const std::vector<fs::path>& dirs, std::string_view requested) {
  if (dirs.empty()) {
    fail("server-side files are off: the daemon's config lists no directories under files.dirs");
  }
  if (requested.empty()) fail("expected a file path, got an empty one");
  if (requested.find('\0') != std::string_view::npos) fail("the path contains a NUL byte");
  const fs::path path(requested);
  ConfinedPath out;
  if (path.is_relative()) {
    out.dir = cleanDir(dirs.front());
    out.relative = path.lexically_normal();
    if (leavesByDotDot(out.relative)) {
      fail("path " + quoted(path) + " leads out of " + quoted(out.dir) + " (files.dirs) through '..'");
    }
  } else {
    const fs::path normal = path.lexically_normal();
    for (const auto& dir : dirs) {
      const fs::path clean = cleanDir(dir);
      fs::path relative = normal.lexically_relative(clean);
      if (relative.empty() || leavesByDotDot(relative)) continue;
      out.dir = clean;
      out.relative = std::move(relative);
      break;
    }
    if (out.dir.empty()) {
      fail("path " + quoted(path) + " is outside the directories the daemon may use (files.dirs: " + dirList(dirs) +
           ")");
    }
  }
  if (out.relative == "." || !out.relative.has_filename())
    fail("path " + quoted(path) + " names a directory, not a file");
  return out;
}

UniqueFd openForRead(const ConfinedPath& path) {
  // O_NONBLOCK: a FIFO planted in the directory must not hang the open.
  UniqueFd fd = openBeneath(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat " + quoted(path.full()) + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(quoted(path.full()) + " is not a regular file");
  return fd;
}

PendingFile::PendingFile(const ConfinedPath& path)
    : confined_(path), name_(path.relative.filename().string()), display_(path.full()) {}

PendingFile::PendingFile(const fs::path& dir, std::string name, std::string tempName)
    : name_(std::move(name)), tempName_(std::move(tempName)), display_(dir / name_) {}

void PendingFile::create() {
  if (!confined_) {
    parent_ = openDirectory(display_.parent_path(), O_RDONLY);
    // A temporary file left by an interrupted save is simply written over.
    const int fd =
        ::openat(parent_.get(), tempName_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) fail("cannot create " + quoted(display_.parent_path() / tempName_) + ": " + std::strerror(errno));
    file_ = UniqueFd(fd);
    return;
  }
  parent_ = openBeneath(ConfinedPath{confined_->dir, confined_->relative.parent_path()}, O_RDONLY | O_DIRECTORY);
  // A fresh hidden name per save: two saves to one target never share a
  // temporary file, and the one renamed last wins whole.
  for (int attempt = 0;; ++attempt) {
    tempName_ = "." + name_ + ".tmp-" + randomSuffix();
    const int fd =
        ::openat(parent_.get(), tempName_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      file_ = UniqueFd(fd);
      return;
    }
    if (errno != EEXIST || attempt == 8) {
      const int error = errno;
      tempName_.clear();
      fail("cannot create a file in " + quoted(display_.parent_path()) + ": " + std::strerror(error));
    }
  }
}

PendingFile::~PendingFile() { discard(); }

void PendingFile::writeAt(const void* bytes, uint64_t size, uint64_t offset) {
  const auto* data = static_cast<const std::byte*>(bytes);
  while (size > 0) {
    const ssize_t put = ::pwrite(file_.get(), data, size, off_t(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("cannot write " + quoted(display_) + ": " + std::strerror(errno));
    data += put;
    size -= uint64_t(put);
    offset += uint64_t(put);
  }
}

void PendingFile::commit(bool overwrite) {
  if (::fsync(file_.get()) != 0) fail("cannot write " + quoted(display_) + ": fsync: " + std::strerror(errno));
  file_ = UniqueFd();  // closed before the rename: its data is on disk
  int renamed =
      ::renameat2(parent_.get(), tempName_.c_str(), parent_.get(), name_.c_str(), overwrite ? 0 : RENAME_NOREPLACE);
  if (renamed != 0 && errno == EINVAL && !overwrite) {
    // A file system without RENAME_NOREPLACE: check, then rename.
    struct stat st {};
    if (::fstatat(parent_.get(), name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      errno = EEXIST;
    } else {
      renamed = ::renameat(parent_.get(), tempName_.c_str(), parent_.get(), name_.c_str());
    }
  }
  if (renamed != 0) {
    const int error = errno;
    discard();
    if (error == EEXIST) fail(quoted(display_) + " exists (overwrite was not asked for)");
    fail("cannot rename the new file to " + quoted(display_) + ": " + std::strerror(error));
  }
  committed_ = true;
  // The rename is durable only once the directory is.
  if (::fsync(parent_.get()) != 0)
    fail("cannot sync the directory of " + quoted(display_) + ": " + std::strerror(errno));
}

void PendingFile::discard() {
  if (committed_ || parent_.get() < 0 || tempName_.empty()) return;
  ::unlinkat(parent_.get(), tempName_.c_str(), 0);
  tempName_.clear();
}

}  // namespace tensord::server
