// SessionImpl::loadFile and SessionImpl::saveFile: safetensors files on the
// daemon's own disk, confined to files.dirs (confined_files.h), moved
// through the staging pool with the disk work on the FileWorker
// (file_transfer.h).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "server/confined_files.h"
#include "server/download.h"
#include "server/file_transfer.h"
#include "server/session_impl.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

[[noreturn]] void fail(std::string_view method, const std::string& problem) {
  kj::throwFatalException(failed(std::string(method) + ": " + problem));
}

// Worker-side errors carry no method name; the loop adds it.
template <typename T>
kj::Promise<T> prefixed(std::string_view method, kj::Promise<T> promise) {
  return promise.catch_([method = std::string(method)](kj::Exception&& e) -> kj::Promise<T> {
    if (e.getType() != kj::Exception::Type::FAILED) return kj::mv(e);
    return failed(method + ": " + e.getDescription().cStr());
  });
}

ConfinedPath confine(std::string_view method, const Config& config, const std::string& requested) {
  try {
    return confinePath(config.files.dirs, requested);
  } catch (const std::exception& e) {
    fail(method, e.what());
  }
}

// Progress.update calls for one operation. Updates are `-> stream` calls;
// while one waits for flow control, newer values replace each other, so a
// slow receiver gets fewer updates and never holds the operation back.
class ProgressReporter final : private kj::TaskSet::ErrorHandler {
 public:
  ProgressReporter(kj::Maybe<proto::Progress::Client> client, uint64_t total)
      : client_(kj::mv(client)), total_(total) {}

  void report(uint64_t done) {
    if (broken_ || client_ == nullptr) return;
    if (busy_) {
      pending_ = done;
      return;
    }
    KJ_IF_MAYBE (client, client_) {
      auto request = client->updateRequest();
      request.setDone(done);
      request.setTotal(total_);
      busy_ = true;
      tasks_.add(request.send().then(
          [this]() {
            busy_ = false;
            if (auto next = std::exchange(pending_, std::nullopt)) report(*next);
          },
          [this](kj::Exception&&) {
            broken_ = true;  // the receiver's problem; the operation goes on
            busy_ = false;
          }));
    }
  }

  // Sends the final update (done == total) and waits, at most as long as a
  // download waits for a stalled receiver, until it has gone out.
  kj::Promise<void> finish(kj::Timer& timer) {
    report(total_);
    return timer.timeoutAfter(kStallTimeoutSeconds * kj::SECONDS, tasks_.onEmpty()).catch_([](kj::Exception&&) {});
  }

 private:
  void taskFailed(kj::Exception&&) override {}

  kj::Maybe<proto::Progress::Client> client_;
  const uint64_t total_;
  bool busy_ = false;
  bool broken_ = false;
  std::optional<uint64_t> pending_;
  kj::TaskSet tasks_{*this};
};

kj::Maybe<proto::Progress::Client> progressOf(bool has, proto::Progress::Client client) {
  if (!has) return nullptr;
  return kj::mv(client);
}

// One loadFile call, from open to named tensors.
class LoadFileJob {
 public:
  LoadFileJob(std::shared_ptr<SessionState> session, ConfinedPath path, std::string prefix, bool overwrite,
              kj::Maybe<proto::Progress::Client> progress)
      : session_(std::move(session)),
        server_(session_->server()),
        path_(std::move(path)),
        display_(path_.full().string()),
        prefix_(std::move(prefix)),
        overwrite_(overwrite),
        progressClient_(kj::mv(progress)) {}
  ~LoadFileJob() { releaseOnWorker(server_, file_); }

  kj::Promise<void> run() {
    file_ = std::make_shared<UniqueFd>();
    auto header = std::make_shared<safetensors::Header>();
    auto opened = server_.files.run([file = file_, header, path = path_, display = display_] {
      *file = openForRead(path);
      *header = safetensors::readHeader(file->get(), display);
    });
    return prefixed("loadFile", kj::mv(opened)).then([this, header]() {
      header_ = std::move(*header);
      plan();
      reporter_.emplace(kj::mv(progressClient_), header_.dataBytes);
      auto moved = readIntoBuffers(server_, file_, display_, ranges_, session_->principal.name,
                                   [this](uint64_t done) { reporter_->report(done); });
      return prefixed("loadFile", kj::mv(moved)).then([this]() {
        name();
        return reporter_->finish(server_.timer);
      });
    });
  }

  void fill(proto::Session::LoadFileResults::Builder results) const {
    results.setPath(display_);
    auto list = results.initTensors(capnp::uint(entries_.size()));
    for (size_t i = 0; i < entries_.size(); ++i) fillTensorInfo(list[capnp::uint(i)], *entries_[i], names_[i]);
  }

 private:
  [[noreturn]] void failTensor(const safetensors::TensorEntry& t, const std::string& problem) const {
    fail("loadFile", display_ + ": tensor '" + t.name + "': " + problem);
  }

  // Every check against the whole header before anything is allocated;
  // then every buffer, so a file that does not fit loads nothing.
  void plan() {
    const std::string& who = session_->principal.name;
    std::vector<uint64_t> sizes;
    for (const auto& t : header_.tensors) {
      const std::string name = prefix_ + t.name;
      if (std::string problem = tensorNameProblem(name); !problem.empty()) failTensor(t, problem);
      compute::TensorDesc desc{fromFileDType(t.dtype), t.shape};
      if (!server_.engine.dtypeSupported(desc.dtype)) {
        kj::throwFatalException(unimplemented("loadFile: " + display_ + ": tensor '" + t.name +
                                              "': this device has no " + std::string(compute::dtypeName(desc.dtype)) +
                                              " tensors"));
      }
      if (desc.rank() > compute::kMaxRank) {
        failTensor(t,
                   "rank " + std::to_string(desc.rank()) + "; expected rank <= " + std::to_string(compute::kMaxRank));
      }
      if (desc.bytes() > server_.config.limits.maxTensorBytes) {
        failTensor(t, desc.str() + " is " + std::to_string(desc.bytes()) + " bytes; expected at most " +
                          std::to_string(server_.config.limits.maxTensorBytes) + " (limits.max_tensor_bytes)");
      }
      session_->authorize(acl::Action::kSaveTensor, name);
      if (!overwrite_ && server_.registry.findNamed(name)) {
        failTensor(t, "a tensor named '" + name + "' exists (overwrite was not asked for)");
      }
      names_.push_back(name);
      descs_.push_back(std::move(desc));
      sizes.push_back(t.bytes());
    }
    server_.quotas.checkAllocation(who, "loadFile", sizes);
    for (size_t i = 0; i < header_.tensors.size(); ++i) {
      const auto& t = header_.tensors[i];
      auto buffer = mapComputeErrors("loadFile: " + names_[i], [&] { return server_.engine.allocate(t.bytes(), who); });
      ranges_.push_back({header_.dataOffset + t.begin, t.bytes(), std::move(buffer), nullptr});
    }
  }

  // All bytes are on the device: the names appear together.
  void name() {
    Registry& registry = server_.registry;
    if (!overwrite_) {
      for (const auto& name : names_) {
        if (registry.findNamed(name))
          fail("loadFile", "a tensor named '" + name + "' appeared while " + display_ + " was loading");
      }
    }
    uint64_t total = 0;
    for (size_t i = 0; i < names_.size(); ++i) {
      auto entry = registry.add(session_->principal.name, session_->id, descs_[i], ranges_[i].buffer);
      registry.save(entry, names_[i], /*overwrite=*/true);
      entries_.push_back(std::move(entry));
      total += ranges_[i].bytes;
    }
    server_.log.info("'{}' loaded {} tensor(s), {} bytes, from {}", session_->principal.name, names_.size(), total,
                     display_);
  }

  std::shared_ptr<SessionState> session_;
  ServerState& server_;
  const ConfinedPath path_;
  const std::string display_;
  const std::string prefix_;
  const bool overwrite_;
  kj::Maybe<proto::Progress::Client> progressClient_;
  std::optional<ProgressReporter> reporter_;
  std::shared_ptr<UniqueFd> file_;
  safetensors::Header header_;
  std::vector<std::string> names_;  // per header tensor, in file order
  std::vector<compute::TensorDesc> descs_;
  std::vector<FileRange> ranges_;
  std::vector<std::shared_ptr<TensorEntry>> entries_;
};

// One saveFile call, from the names to the renamed file.
class SaveFileJob {
 public:
  SaveFileJob(std::shared_ptr<SessionState> session, ConfinedPath path, bool overwrite,
              kj::Maybe<proto::Progress::Client> progress)
      : session_(std::move(session)),
        server_(session_->server()),
        path_(std::move(path)),
        display_(path_.full().string()),
        overwrite_(overwrite),
        progressClient_(kj::mv(progress)) {}
  ~SaveFileJob() { releaseOnWorker(server_, file_); }

  // The tensors `prefix` + NAME, or with no names every readable one whose
  // name starts with `prefix`; in the file without the prefix.
  void select(const std::string& prefix, capnp::List<capnp::Text>::Reader names) {
    auto add = [&](const std::string& full, std::shared_ptr<TensorEntry> entry) {
      if (full.size() == prefix.size())
        fail("saveFile", "tensor '" + full + "' would have an empty name in the file (it equals the prefix)");
      KJ_IF_MAYBE (failure, entry->failure) {
        fail("saveFile",
             "tensor '" + full + "': the device work producing it failed: " + failure->getDescription().cStr());
      }
      selected_.push_back({full, full.substr(prefix.size()), std::move(entry)});
    };
    if (names.size() > 0) {
      for (auto text : names) {
        const std::string full = prefix + text.cStr();
        // A name the caller may not read looks exactly like one that does not exist.
        auto entry =
            session_->authorizeHidden(acl::Action::kRestoreTensor, full) ? server_.registry.findNamed(full) : nullptr;
        if (!entry) fail("saveFile", "no tensor named '" + full + "'");
        add(full, std::move(entry));
      }
    } else {
      server_.registry.forEachNamedFrom(prefix, [&](std::string_view name, const auto& entry) {
        if (!name.starts_with(prefix)) return false;
        if (session_->permits(acl::Action::kRestoreTensor, name)) add(std::string(name), entry);
        return true;
      });
      if (selected_.empty()) {
        fail("saveFile", prefix.empty() ? std::string("no named tensor to save (none the caller may read)")
                                        : "no named tensor starts with '" + prefix + "' (none the caller may read)");
      }
    }
  }

  kj::Promise<void> run() {
    std::vector<safetensors::TensorEntry> layout;
    for (const auto& s : selected_) {
      layout.push_back({s.fileName, toFileDType(s.entry->desc.dtype), s.entry->desc.shape});
    }
    safetensors::sortForWriting(layout);
    std::string prefixBytes;
    try {
      prefixBytes = safetensors::encodeHeader(layout, {});
    } catch (const safetensors::FormatError& e) {
      fail("saveFile", display_ + ": " + e.what());
    }
    uint64_t dataBytes = 0;
    for (const auto& t : layout) {
      const Selected& s =
          *std::find_if(selected_.begin(), selected_.end(), [&](const Selected& x) { return x.fileName == t.name; });
      ranges_.push_back({prefixBytes.size() + t.begin, t.bytes(), s.entry->buffer, s.entry});
      order_.push_back(&s);
      dataBytes += t.bytes();
    }
    fileBytes_ = prefixBytes.size() + dataBytes;

    file_ = std::make_shared<PendingFile>(path_);
    auto created = server_.files.run([file = file_, prefixBytes = std::move(prefixBytes)] {
      file->create();
      file->writeAt(prefixBytes.data(), prefixBytes.size(), 0);
    });
    return prefixed("saveFile", kj::mv(created)).then([this, dataBytes]() {
      reporter_.emplace(kj::mv(progressClient_), dataBytes);
      auto moved = writeFromBuffers(server_, file_, ranges_, session_->principal.name,
                                    [this](uint64_t done) { reporter_->report(done); });
      return prefixed("saveFile", kj::mv(moved))
          .then([this]() {
            return prefixed("saveFile",
                            server_.files.run([file = file_, overwrite = overwrite_] { file->commit(overwrite); }));
          })
          .then([this]() {
            server_.log.info("'{}' saved {} tensor(s), {} bytes, to {}", session_->principal.name, selected_.size(),
                             fileBytes_, display_);
            return reporter_->finish(server_.timer);
          });
    });
  }

  void fill(proto::Session::SaveFileResults::Builder results) const {
    results.setPath(display_);
    results.setBytes(fileBytes_);
    auto list = results.initTensors(capnp::uint(order_.size()));
    for (size_t i = 0; i < order_.size(); ++i) fillTensorInfo(list[capnp::uint(i)], *order_[i]->entry, order_[i]->name);
  }

 private:
  struct Selected {
    std::string name;      // in the daemon
    std::string fileName;  // in the file
    std::shared_ptr<TensorEntry> entry;
  };

  std::shared_ptr<SessionState> session_;
  ServerState& server_;
  const ConfinedPath path_;
  const std::string display_;
  const bool overwrite_;
  kj::Maybe<proto::Progress::Client> progressClient_;
  std::optional<ProgressReporter> reporter_;
  std::vector<Selected> selected_;
  std::vector<const Selected*> order_;  // in file order
  std::vector<FileRange> ranges_;
  std::shared_ptr<PendingFile> file_;
  uint64_t fileBytes_ = 0;
};

}  // namespace

kj::Promise<void> SessionImpl::loadFile(LoadFileContext context) {
  auto guard = session_->enterCall("loadFile");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "loadFile");
  auto params = context.getParams();
  const std::string requested = params.getPath();
  session_->authorize(acl::Action::kLoadFile, requested);
  auto job = kj::heap<LoadFileJob>(session_, confine("loadFile", server.config, requested), params.getPrefix(),
                                   params.getOverwrite(), progressOf(params.hasProgress(), params.getProgress()));
  auto done = job->run();
  return done.then([context, &job = *job]() mutable { job.fill(context.getResults()); })
      .attach(kj::mv(job), kj::mv(guard));
}

kj::Promise<void> SessionImpl::saveFile(SaveFileContext context) {
  auto guard = session_->enterCall("saveFile");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "saveFile");
  auto params = context.getParams();
  const std::string requested = params.getPath();
  session_->authorize(acl::Action::kSaveFile, requested);
  auto job = kj::heap<SaveFileJob>(session_, confine("saveFile", server.config, requested), params.getOverwrite(),
                                   progressOf(params.hasProgress(), params.getProgress()));
  job->select(params.getPrefix(), params.getNames());
  auto done = job->run();
  return done.then([context, &job = *job]() mutable { job.fill(context.getResults()); })
      .attach(kj::mv(job), kj::mv(guard));
}

}  // namespace tensord::server
