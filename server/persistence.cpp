#include "server/persistence.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "server/wire.h"

namespace tensord::server {
namespace {

using nlohmann::json;

constexpr const char* kManifest = "manifest.json";

std::runtime_error ioError(const std::string& what, const std::filesystem::path& path) {
  return std::runtime_error(what + " " + path.string() + ": " + std::strerror(errno));
}

// Copies the tensor's bytes to `out`, one staging slot at a time.
void writeTensor(ServerState& state, const TensorEntry& entry, std::ofstream& out, kj::WaitScope& waitScope) {
  for (uint64_t pos = 0; pos < entry.bytes();) {
    StagingLease lease = state.staging.acquire().wait(waitScope);
    const uint64_t n = std::min(lease.capacity(), entry.bytes() - pos);
    state.staging
        .transfer(lease,
                  [&](compute::Completion done) {
                    state.engine.enqueueDownload(entry.buffer->owner(), entry.buffer, pos, n, lease.slot(), std::move(done));
                  })
        .wait(waitScope);
    out.write(reinterpret_cast<const char*>(lease.data()), std::streamsize(n));
    pos += n;
  }
}

// Fills `buffer` from `in`, one staging slot at a time.
void readTensor(ServerState& state, const std::shared_ptr<compute::Buffer>& buffer, uint64_t bytes, std::ifstream& in,
                kj::WaitScope& waitScope) {
  for (uint64_t pos = 0; pos < bytes;) {
    StagingLease lease = state.staging.acquire().wait(waitScope);
    const uint64_t n = std::min(lease.capacity(), bytes - pos);
    if (!in.read(reinterpret_cast<char*>(lease.data()), std::streamsize(n))) {
      throw std::runtime_error("the data file is shorter than the manifest says");
    }
    state.staging
        .transfer(lease,
                  [&](compute::Completion done) {
                    state.engine.enqueueUpload(buffer->owner(), lease.slot(), n, buffer, pos, std::move(done));
                  })
        .wait(waitScope);
    pos += n;
  }
}

}  // namespace

void saveNamedTensors(ServerState& state, const std::filesystem::path& stateDir, kj::WaitScope& waitScope) {
  const auto dir = stateDir / "tensors";
  const auto fresh = stateDir / "tensors.new";
  std::filesystem::remove_all(fresh);
  // Group the names by tensor: one file per tensor, however many names it has.
  std::map<uint64_t, std::pair<std::shared_ptr<TensorEntry>, std::vector<std::string>>> byId;
  for (auto& [name, entry] : state.registry.named()) {
    auto& slot = byId[entry->id];
    slot.first = entry;
    slot.second.push_back(name);
  }
  if (byId.empty()) {
    std::filesystem::remove_all(dir);
    return;
  }
  std::filesystem::create_directories(fresh);
  json manifest = json::array();
  uint64_t total = 0;
  for (auto& [id, item] : byId) {
    const TensorEntry& entry = *item.first;
    if (entry.failure != nullptr) {
      state.log.warn("not saving '{}': the device work producing it failed", entry.label());
      continue;
    }
    const std::string file = std::to_string(id) + ".bin";
    std::ofstream out(fresh / file, std::ios::binary);
    if (!out) throw ioError("cannot create", fresh / file);
    writeTensor(state, entry, out, waitScope);
    out.close();
    if (!out) throw ioError("cannot write", fresh / file);
    manifest.push_back({{"names", item.second},
                        {"owner", entry.owner},
                        {"dtype", std::string(compute::dtypeName(entry.desc.dtype))},
                        {"shape", entry.desc.shape},
                        {"bytes", entry.bytes()},
                        {"file", file}});
    total += entry.bytes();
  }
  {
    std::ofstream out(fresh / kManifest);
    out << manifest.dump(2) << "\n";
    out.close();
    if (!out) throw ioError("cannot write", fresh / kManifest);
  }
  // Swap in the new set so that some complete set exists at every moment: a
  // crash between the renames leaves "tensors.old", which the next start reads.
  const auto old = stateDir / "tensors.old";
  std::filesystem::remove_all(old);
  if (std::filesystem::exists(dir)) std::filesystem::rename(dir, old);
  std::filesystem::rename(fresh, dir);
  std::filesystem::remove_all(old);
  state.log.info("saved {} named tensor(s), {} bytes, to {}", manifest.size(), total, dir.string());
}

void loadNamedTensors(ServerState& state, const std::filesystem::path& stateDir, kj::WaitScope& waitScope) {
  auto dir = stateDir / "tensors";
  // A stop cut off between the two renames of saveNamedTensors() left the
  // previous complete set here.
  if (!std::filesystem::exists(dir / kManifest) && std::filesystem::exists(stateDir / "tensors.old" / kManifest)) {
    dir = stateDir / "tensors.old";
  }
  std::ifstream manifestFile(dir / kManifest);
  if (!manifestFile) return;
  json manifest;
  try {
    manifest = json::parse(manifestFile);
    if (!manifest.is_array()) throw std::runtime_error("expected a list");
  } catch (const std::exception& e) {
    state.log.warn("ignoring saved tensors: {} is unreadable: {}", (dir / kManifest).string(), e.what());
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
      std::ifstream in(dir / file, std::ios::binary);
      if (!in) throw ioError("cannot open", dir / file);
      auto buffer = state.engine.allocate(desc.bytes(), owner);
      readTensor(state, buffer, desc.bytes(), in, waitScope);
      auto entry = state.registry.add(owner, 0, desc, std::move(buffer));
      for (const auto& name : names) {
        if (!tensorNameProblem(name).empty() || !state.registry.save(entry, name, false)) {
          state.log.warn("saved tensor name '{}' skipped (invalid or taken)", name);
        }
      }
      ++loaded;
      total += desc.bytes();
    } catch (const std::exception& e) {
      state.log.warn("saved tensor {} not restored: {}", label, e.what());
    } catch (const kj::Exception& e) {
      state.log.warn("saved tensor {} not restored: {}", label, e.getDescription().cStr());
    }
  }
  state.log.info("restored {} named tensor(s), {} bytes, from {}", loaded, total, dir.string());
}

}  // namespace tensord::server
