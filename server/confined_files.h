#pragma once
// Files a client names for Session.loadFile/saveFile: confined to the
// config's files.dirs, opened so that neither `..` nor a symlink leads out.
//
// Confinement has two steps. confinePath() is lexical (no I/O, on the loop):
// it picks the allowed directory and the normalized path below it, refusing
// paths that leave it by `..` or lie elsewhere. The open functions (blocking:
// worker threads only) then resolve that path beneath a descriptor of the
// directory with openat2(RESOLVE_BENEATH): symlinks are followed only while
// they stay inside. Where the kernel lacks openat2, each component is opened
// with O_NOFOLLOW instead, so no symlink is followed at all.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tensord::server {

// A file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

struct ConfinedPath {
  std::filesystem::path dir;       // the files.dirs entry it lies in
  std::filesystem::path relative;  // normalized, below `dir`, never "..", never empty

  std::filesystem::path full() const { return dir / relative; }
};

// Where `requested` points: a relative path is taken relative to dirs[0]; an
// absolute one must lie inside one of `dirs`. Throws std::runtime_error
// naming the path, the problem and the files.dirs key (no dirs configured,
// outside every dir, leaving by "..", no file name).
ConfinedPath confinePath(const std::vector<std::filesystem::path>& dirs, std::string_view requested);

// What the open functions fall back to where the kernel lacks openat2:
// each component opened with O_NOFOLLOW, so no symlink is followed at all.
// `flags` as for open(2). Throws std::runtime_error naming the path.
UniqueFd openNoSymlinks(const ConfinedPath& path, int flags);

// Opens the regular file for reading (blocking). Throws std::runtime_error
// naming the path: missing, not a regular file, or reached through a
// symlink that leads outside its directory.
UniqueFd openForRead(const ConfinedPath& path);

// A file being written next to its final name: created as a hidden
// temporary file in the same directory, renamed over the target by
// commit(). Constructing does no I/O (the loop may do it); everything else
// blocks: worker threads only.
class PendingFile {
 public:
  // A user's file: the parent directory (which must exist) is opened
  // beneath path.dir, the temporary file gets a fresh random name.
  explicit PendingFile(const ConfinedPath& path);
  // The daemon's own file (the state directory): no confinement, and a
  // fixed temporary name, written over when an interrupted save left it.
  PendingFile(const std::filesystem::path& dir, std::string name, std::string tempName);

  // Opens the directory and creates the temporary file; throws
  // std::runtime_error naming the path.
  void create();

  ~PendingFile();  // removes the temporary file unless committed
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;

  const std::filesystem::path& display() const { return display_; }

  // Writes all of `bytes` at `offset`; throws std::runtime_error naming the file.
  void writeAt(const void* bytes, uint64_t size, uint64_t offset);

  // fsync, rename over the target (refused when it exists and !overwrite),
  // fsync of the directory: after a crash the target is either the old file
  // or the complete new one.
  void commit(bool overwrite);

 private:
  void discard();

  std::optional<ConfinedPath> confined_;  // set for a user's file
  UniqueFd parent_;
  UniqueFd file_;
  std::string name_;
  std::string tempName_;
  std::filesystem::path display_;
  bool committed_ = false;
};

}  // namespace tensord::server
