#pragma once
// The handle registry: every live tensor of the daemon, by id, and the names
// that keep persistent tensors alive.
//
// Lifetimes: a TensorEntry is shared by the Tensor capabilities that point at
// it and, while it has at least one name, by the registry. An unnamed entry
// dies with its last capability (and so on client disconnect); its device
// buffer goes back to the allocator once the device work still using it is
// done. Entries must not outlive the Registry.
//
// Threads: the event-loop thread only.

#include <kj/exception.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/buffer.h"
#include "compute/dtype.h"

namespace tensord::server {

struct TensorEntry {
  uint64_t id = 0;
  std::string owner;       // principal that created it; its memory is charged to them
  uint64_t sessionId = 0;  // session that created it
  compute::TensorDesc desc;
  std::shared_ptr<compute::Buffer> buffer;
  std::set<std::string> names;       // names it is saved under
  kj::Maybe<kj::Exception> failure;  // set when the device work producing it failed
  // Entries made by view ops (reshape ...) that share this entry's buffer: a
  // failure of this entry's device work is theirs too (markFailed).
  std::vector<std::weak_ptr<TensorEntry>> views;

  uint64_t bytes() const { return desc.bytes(); }
  // How requests and messages refer to it: its first name, else "#<id>".
  std::string label() const;
};

// Records that the device work producing `entry` failed, on it and on every
// live view of it (and views of those).
void markFailed(TensorEntry& entry, const kj::Exception& error);

// Checks a name given to save/restore/delete; returns a problem or "".
std::string tensorNameProblem(std::string_view name);

class Registry {
 public:
  Registry() = default;
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  std::shared_ptr<TensorEntry> add(std::string owner, uint64_t sessionId, compute::TensorDesc desc,
                                   std::shared_ptr<compute::Buffer> buffer);

  std::shared_ptr<TensorEntry> findNamed(std::string_view name) const;  // nullptr if unknown

  // Gives `entry` the name `name`. When another entry holds that name, it is
  // moved over only if `overwrite`; otherwise nothing changes and false is
  // returned. The entry that lost its name lives on only while capabilities
  // to it exist.
  bool save(const std::shared_ptr<TensorEntry>& entry, const std::string& name, bool overwrite);

  // Drops the name; false if no tensor has it.
  bool remove(std::string_view name);

  // Every (name, entry), sorted by name.
  std::vector<std::pair<std::string, std::shared_ptr<TensorEntry>>> named() const;
  // Calls visit(name, entry) for each name >= `from`, in order, until it
  // returns false (a page of a listing without copying every name).
  template <typename Visit>
  void forEachNamedFrom(std::string_view from, Visit&& visit) const {
    for (auto it = named_.lower_bound(from); it != named_.end(); ++it) {
      if (!visit(it->first, it->second)) return;
    }
  }
  // The live unnamed entries created by one session, by id.
  std::vector<std::shared_ptr<TensorEntry>> unnamedOfSession(uint64_t sessionId) const;

  uint64_t liveCount() const { return live_.size(); }
  // Live entries (named or not) whose owner is `owner`.
  uint64_t ownedCount(std::string_view owner) const;
  // Live entries per owner, in one pass (stats).
  std::map<std::string, uint64_t, std::less<>> countsByOwner() const;
  uint64_t namedCount() const { return named_.size(); }

 private:
  std::map<uint64_t, std::weak_ptr<TensorEntry>> live_;                     // every live entry
  std::map<std::string, std::shared_ptr<TensorEntry>, std::less<>> named_;  // keeps named entries alive
  uint64_t nextId_ = 1;
};

}  // namespace tensord::server
