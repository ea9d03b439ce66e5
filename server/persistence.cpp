#include "server/persistence.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "server/confined_files.h"
#include "server/file_transfer.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "tensord-state-1";
constexpr const char* kTempFile = "tensors.safetensors.tmp";
constexpr const char* kCorruptFile = "tensors.safetensors.corrupt";
constexpr std::string_view kOwnerKey = "owner:";
constexpr std::string_view kAliasKey = "alias:";
// The earlier format: a directory with manifest.json and raw files.
constexpr const char* kLegacyManifest = "manifest.json";

// Registers a loaded tensor under its names; returns whether any name took.
bool nameLoaded(ServerState& state, const std::string& owner, const compute::TensorDesc& desc,
                std::shared_ptr<compute::Buffer> buffer, const std::vector<std::string>& names) {
  auto entry = state.registry.add(owner, 0, desc, std::move(buffer));
  bool any = false;
  for (const auto& name : names) {
    if (!tensorNameProblem(name).empty() || !state.registry.save(entry, name, false)) {
      state.log.warn("saved tensor name '{}' skipped (invalid or taken)", name);
    } else {
      any = true;
    }
  }
  return any;
}

std::string describe(const kj::Exception& e) { return e.getDescription().cStr(); }

// Waits for disk or device work; its failure as a std::runtime_error with
// the plain description (a kj exception's what() carries a stack trace).
void await(kj::Promise<void> promise, kj::WaitScope& waitScope) {
  try {
    promise.wait(waitScope);
  } catch (const kj::Exception& e) {
    throw std::runtime_error(describe(e));
  }
}

// A tensor the state file describes, ready to be read into its buffer.
struct Planned {
  std::vector<std::string> names;
  std::string owner;
  compute::TensorDesc desc;
};

void loadState(ServerState& state, const fs::path& stateDir, kj::WaitScope& waitScope) {
  const std::string display = (stateDir / kStateFile).string();
  struct Opened {
    safetensors::Header header;
    std::string formatError;  // the file is there but not a readable state file
  };
  auto file = std::make_shared<UniqueFd>();
  auto result = std::make_shared<Opened>();
  try {
    state.files
        .run([file, result, dir = stateDir, display] {
          *file = openForRead(ConfinedPath{dir, kStateFile});
          try {
            result->header = safetensors::readHeader(file->get(), display);
          } catch (const safetensors::FormatError& e) {
            result->formatError = e.what();
          }
        })
        .wait(waitScope);
  } catch (const kj::Exception& e) {
    state.log.warn("saved tensors not restored: {}", describe(e));
    return;
  }
  const Opened& opened = *result;
  if (!opened.formatError.empty()) {
    // Keep it out of the next save's way without losing it.
    std::error_code error;
    fs::rename(stateDir / kStateFile, stateDir / kCorruptFile, error);
    state.log.error("saved tensors not restored: {}; the file is kept as {}", opened.formatError,
                    (stateDir / kCorruptFile).string());
    return;
  }
  const safetensors::Header& header = opened.header;

  std::map<std::string, std::vector<std::string>> aliases;  // stored name -> further names
  for (const auto& [key, value] : header.metadata) {
    if (key.starts_with(kAliasKey)) aliases[value].push_back(key.substr(kAliasKey.size()));
  }
  std::vector<Planned> planned;
  std::vector<FileRange> ranges;
  for (const auto& t : header.tensors) {
    Planned p;
    if (tensorNameProblem(t.name).empty()) p.names.push_back(t.name);  // else stored under a stand-in key
    for (auto& alias : aliases[t.name]) p.names.push_back(alias);
    auto owner = header.metadata.find(std::string(kOwnerKey) + t.name);
    if (owner == header.metadata.end()) {
      state.log.warn("saved tensor '{}' not restored: {} names no owner for it", t.name, display);
      continue;
    }
    p.owner = owner->second;
    p.desc = {fromFileDType(t.dtype), t.shape};
    if (!state.engine.dtypeSupported(p.desc.dtype)) {
      state.log.warn("saved tensor '{}' not restored: this device has no {} tensors", t.name,
                     compute::dtypeName(p.desc.dtype));
      continue;
    }
    try {
      auto buffer = state.engine.allocate(t.bytes(), p.owner);
      ranges.push_back({header.dataOffset + t.begin, t.bytes(), std::move(buffer), nullptr});
      planned.push_back(std::move(p));
    } catch (const std::exception& e) {
      state.log.warn("saved tensor '{}' not restored: {}", t.name, e.what());
    }
  }
  try {
    readIntoBuffers(state, file, display, ranges, "tensord", nullptr).wait(waitScope);
  } catch (const kj::Exception& e) {
    state.log.error("saved tensors not restored: {}", describe(e));
    return;
  }
  uint64_t total = 0;
  size_t loaded = 0;
  for (size_t i = 0; i < planned.size(); ++i) {
    if (nameLoaded(state, planned[i].owner, planned[i].desc, ranges[i].buffer, planned[i].names)) {
      ++loaded;
      total += ranges[i].bytes;
    }
  }
  state.log.info("restored {} named tensor(s), {} bytes, from {}", loaded, total, display);
}

// The earlier format, read once for migration.
void loadLegacy(ServerState& state, fs::path dir, kj::WaitScope& waitScope) {
  std::ifstream manifestFile(dir / kLegacyManifest);
  json manifest;
  try {
    manifest = json::parse(manifestFile);
    if (!manifest.is_array()) throw std::runtime_error("expected a list");
  } catch (const std::exception& e) {
    state.log.warn("ignoring saved tensors: {} is unreadable: {}", (dir / kLegacyManifest).string(), e.what());
    return;
  }
  size_t loaded = 0;
  uint64_t total = 0;
  for (const json& item : manifest) {
    const std::string label = item.contains("names") ? item["names"].dump() : std::string("?");
    try {
      compute::TensorDesc desc;
      auto dtype = compute::parseDType(item.at("dtype").get<std::string>());
      if (!dtype) throw std::runtime_error("unknown dtype " + item.at("dtype").dump());
      desc.dtype = *dtype;
      desc.shape = item.at("shape").get<compute::Shape>();
      const auto names = item.at("names").get<std::vector<std::string>>();
      const auto owner = item.at("owner").get<std::string>();
      const auto file = item.at("file").get<std::string>();
      if (desc.rank() > compute::kMaxRank ||
          std::any_of(desc.shape.begin(), desc.shape.end(), [](int64_t d) { return d < 0; }) ||
          desc.bytes() != item.at("bytes").get<uint64_t>()) {
        throw std::runtime_error("its shape and byte count disagree");
      }
      if (file.find('/') != std::string::npos) throw std::runtime_error("bad file name");
      const ConfinedPath path{dir, file};
      auto fd = std::make_shared<UniqueFd>();
      state.files
          .run([fd, path, bytes = desc.bytes()] {
            *fd = openForRead(path);
            struct stat st {};
            if (::fstat(fd->get(), &st) != 0 || uint64_t(st.st_size) != bytes) {
              throw std::runtime_error(path.full().string() + " does not hold the " + std::to_string(bytes) +
                                       " bytes the manifest says");
            }
          })
          .wait(waitScope);
      auto buffer = state.engine.allocate(desc.bytes(), owner);
      readIntoBuffers(state, fd, path.full().string(), {{0, desc.bytes(), buffer, nullptr}}, "tensord", nullptr)
          .wait(waitScope);
      if (nameLoaded(state, owner, desc, std::move(buffer), names)) {
        ++loaded;
        total += desc.bytes();
      }
    } catch (const std::exception& e) {
      state.log.warn("saved tensor {} not restored: {}", label, e.what());
    } catch (const kj::Exception& e) {
      state.log.warn("saved tensor {} not restored: {}", label, describe(e));
    }
  }
  state.log.info("restored {} named tensor(s), {} bytes, from {} (the earlier format; the next stop writes {})", loaded,
                 total, dir.string(), kStateFile);
}

}  // namespace

void saveNamedTensors(ServerState& state, const fs::path& stateDir, kj::WaitScope& waitScope) {
  // One entry per tensor, however many names it has; named() is sorted, so
  // each tensor's first name is its smallest.
  std::map<uint64_t, std::pair<std::shared_ptr<TensorEntry>, std::vector<std::string>>> byId;
  for (auto& [name, entry] : state.registry.named()) {
    auto& slot = byId[entry->id];
    slot.first = entry;
    slot.second.push_back(name);
  }
  std::map<std::string, std::string> metadata{{"format", kFormat}};
  std::vector<safetensors::TensorEntry> layout;
  std::map<std::string, std::shared_ptr<TensorEntry>> byKey;
  for (auto& [id, item] : byId) {
    const auto& [entry, names] = item;
    if (entry->failure != nullptr) {
      state.log.warn("not saving '{}': the device work producing it failed", entry->label());
      continue;
    }
    // "__metadata__" is a valid tensor name but the format's reserved key:
    // such a tensor is stored under "#<id>", which no name can be.
    std::string key = names.front() == "__metadata__" ? "#" + std::to_string(id) : names.front();
    for (const auto& name : names) {
      if (name != key) metadata[std::string(kAliasKey) + name] = key;
    }
    metadata[std::string(kOwnerKey) + key] = entry->owner;
    layout.push_back({key, toFileDType(entry->desc.dtype), entry->desc.shape});
    byKey[key] = entry;
  }
  safetensors::sortForWriting(layout);
  std::string prefix = safetensors::encodeHeader(layout, metadata);
  std::vector<FileRange> ranges;
  uint64_t total = 0;
  for (const auto& t : layout) {
    ranges.push_back({prefix.size() + t.begin, t.bytes(), byKey[t.name]->buffer, byKey[t.name]});
    total += t.bytes();
  }

  auto file = std::make_shared<PendingFile>(stateDir, kStateFile, kTempFile);
  await(state.files.run([file, prefix = std::move(prefix)] {
    file->create();
    file->writeAt(prefix.data(), prefix.size(), 0);
  }),
        waitScope);
  await(writeFromBuffers(state, file, std::move(ranges), "tensord", nullptr), waitScope);
  await(state.files.run([file] { file->commit(/*overwrite=*/true); }), waitScope);
  // The new set is durable: the earlier format's directories can go.
  for (const char* legacy : {"tensors", "tensors.old", "tensors.new"}) fs::remove_all(stateDir / legacy);
  state.log.info("saved {} named tensor(s), {} bytes, to {}", layout.size(), total, (stateDir / kStateFile).string());
}

void loadNamedTensors(ServerState& state, const fs::path& stateDir, kj::WaitScope& waitScope) {
  if (fs::exists(stateDir / kStateFile)) return loadState(state, stateDir, waitScope);
  // The earlier format. A stop cut off between its two renames left the
  // previous complete set in "tensors.old".
  for (const char* legacy : {"tensors", "tensors.old"}) {
    if (fs::exists(stateDir / legacy / kLegacyManifest)) return loadLegacy(state, stateDir / legacy, waitScope);
  }
}

}  // namespace tensord::server
