// Client::loadFile and Client::saveFile: safetensors files on the daemon's disk.

#include "client/connection.h"
#include "client/wire.h"

namespace tensord {
namespace {

// Receives the daemon's Progress.update calls. The daemon may hold the
// capability past the request (an abandoned wait, see WaitCheckScope), so the
// callback lives in a slot the request empties when it returns.
class ProgressServer final : public proto::Progress::Server {
 public:
  explicit ProgressServer(std::shared_ptr<Progress> progress) : progress_(std::move(progress)) {}

 protected:
  kj::Promise<void> update(UpdateContext context) override {
    auto params = context.getParams();
    if (*progress_) (*progress_)(params.getDone(), params.getTotal());
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<Progress> progress_;
};

template <typename Request>
void setProgress(Request& request, const std::shared_ptr<Progress>& progress) {
  if (*progress) request.setProgress(kj::heap<ProgressServer>(progress));
}

}  // namespace

FileTransfer Client::loadFile(std::string_view path, std::string_view prefix, bool overwrite,
                              const Progress& progress) {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto request = conn.session().loadFileRequest();
    request.setPath(std::string(path));
    request.setPrefix(std::string(prefix));
    request.setOverwrite(overwrite);
    auto slot = std::make_shared<Progress>(progress);
    KJ_DEFER(*slot = nullptr);
    setProgress(request, slot);
    auto response = conn.wait(request.send());
    FileTransfer out;
    out.path = response.getPath().cStr();
    for (auto info : response.getTensors()) out.tensors.push_back(wire::fromWire(info));
    for (const auto& t : out.tensors) out.bytes += t.bytes;
    return out;
  });
}

FileTransfer Client::saveFile(std::string_view path, const std::vector<std::string>& names, std::string_view prefix,
                              bool overwrite, const Progress& progress) {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto request = conn.session().saveFileRequest();
    request.setPath(std::string(path));
    auto list = request.initNames(capnp::uint(names.size()));
    for (size_t i = 0; i < names.size(); ++i) list.set(capnp::uint(i), names[i]);
    request.setPrefix(std::string(prefix));
    request.setOverwrite(overwrite);
    auto slot = std::make_shared<Progress>(progress);
    KJ_DEFER(*slot = nullptr);
    setProgress(request, slot);
    auto response = conn.wait(request.send());
    FileTransfer out;
    out.path = response.getPath().cStr();
    for (auto info : response.getTensors()) out.tensors.push_back(wire::fromWire(info));
    out.bytes = response.getBytes();
    return out;
  });
}

}  // namespace tensord
