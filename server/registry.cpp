#include "server/registry.h"

namespace tensord::server {

std::string TensorEntry::label() const { return names.empty() ? "#" + std::to_string(id) : *names.begin(); }

void markFailed(TensorEntry& entry, const kj::Exception& error) {
  if (entry.failure == nullptr) entry.failure = error;
  for (const auto& weak : entry.views) {
    if (auto view = weak.lock()) markFailed(*view, error);
  }
}

std::string tensorNameProblem(std::string_view name) {
  if (name.empty()) return "a tensor name must not be empty";
  if (name.size() > 256) return "a tensor name has at most 256 characters, got " + std::to_string(name.size());
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == ':' || c == '/' || c == '@' || c == '+';
    if (!ok) {
      return "tensor name '" + std::string(name) + "' has a character outside letters, digits and . _ - : / @ +";
    }
  }
  return {};
}

Registry::~Registry() {
  // Named entries die here; their deleters still need live_.
  named_.clear();
}

std::shared_ptr<TensorEntry> Registry::add(std::string owner, uint64_t sessionId, compute::TensorDesc desc,
                                           std::shared_ptr<compute::Buffer> buffer) {
  auto* raw = new TensorEntry;
  raw->id = nextId_++;
  raw->owner = std::move(owner);
  raw->sessionId = sessionId;
  raw->desc = std::move(desc);
  raw->buffer = std::move(buffer);
  std::shared_ptr<TensorEntry> entry(raw, [this](TensorEntry* e) {
    live_.erase(e->id);
    delete e;
  });
  live_.emplace(entry->id, entry);
  return entry;
}

std::shared_ptr<TensorEntry> Registry::findNamed(std::string_view name) const {
  auto it = named_.find(name);
  return it == named_.end() ? nullptr : it->second;
}

bool Registry::save(const std::shared_ptr<TensorEntry>& entry, const std::string& name, bool overwrite) {
  auto it = named_.find(name);
  if (it != named_.end()) {
    if (it->second == entry) return true;
    if (!overwrite) return false;
    std::shared_ptr<TensorEntry> previous = std::move(it->second);
    previous->names.erase(name);
    it->second = entry;
  } else {
    named_.emplace(name, entry);
  }
  entry->names.insert(name);
  return true;
}

bool Registry::remove(std::string_view name) {
  auto it = named_.find(name);
  if (it == named_.end()) return false;
  std::shared_ptr<TensorEntry> entry = std::move(it->second);
  named_.erase(it);
  entry->names.erase(std::string(name));
  return true;
}

std::vector<std::pair<std::string, std::shared_ptr<TensorEntry>>> Registry::named() const {
  return {named_.begin(), named_.end()};
}

std::vector<std::shared_ptr<TensorEntry>> Registry::unnamedOfSession(uint64_t sessionId) const {
  std::vector<std::shared_ptr<TensorEntry>> out;
  for (const auto& [id, weak] : live_) {
    auto entry = weak.lock();
    if (entry && entry->sessionId == sessionId && entry->names.empty()) out.push_back(std::move(entry));
  }
  return out;
}

std::map<std::string, uint64_t, std::less<>> Registry::countsByOwner() const {
  std::map<std::string, uint64_t, std::less<>> counts;
  for (const auto& [id, weak] : live_) {
    if (auto entry = weak.lock()) ++counts[entry->owner];
  }
  return counts;
}

uint64_t Registry::ownedCount(std::string_view owner) const {
  uint64_t n = 0;
  for (const auto& [id, weak] : live_) {
    auto entry = weak.lock();
    if (entry && entry->owner == owner) ++n;
  }
  return n;
}

}  // namespace tensord::server
