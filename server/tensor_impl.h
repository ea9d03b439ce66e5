#pragma once
// TensorImpl: one Tensor capability. It holds its TensorEntry, so an unnamed
// tensor lives exactly as long as capabilities to it exist (the RPC system
// drops them when the client releases them or disconnects).
//
// Threads: the event-loop thread only.

#include <memory>
#include <string>

#include "protocol/tensord.capnp.h"
#include "server/registry.h"
#include "server/server_state.h"

namespace tensord::server {

class TensorImpl final : public proto::Tensor::Server {
 public:
  TensorImpl(std::shared_ptr<SessionState> session, std::shared_ptr<TensorEntry> entry, std::string via = {})
      : session_(std::move(session)), entry_(std::move(entry)), via_(std::move(via)) {}

  // A new capability for `entry`, made through the daemon's capability set.
  // `via`: the name the session restored it by ("" when the session made it).
  static proto::Tensor::Client makeCap(const std::shared_ptr<SessionState>& session,
                                       std::shared_ptr<TensorEntry> entry, std::string via = {});

  const std::shared_ptr<TensorEntry>& entry() const { return entry_; }

  // What access checks name: the name this capability was reached through,
  // else "#<id>" (a tensor the session made itself).
  std::string resource() const { return via_.empty() ? "#" + std::to_string(entry_->id) : via_; }

 protected:
  kj::Promise<void> info(InfoContext context) override;
  kj::Promise<void> download(DownloadContext context) override;
  kj::Promise<void> save(SaveContext context) override;

 private:
  kj::Promise<void> streamDownload(DownloadContext context);  // download, once it may start

  std::shared_ptr<SessionState> session_;
  std::shared_ptr<TensorEntry> entry_;
  std::string via_;
};

// Fills one TensorInfo row; `name` overrides the entry's label for listings.
void fillTensorInfo(proto::TensorInfo::Builder out, const TensorEntry& entry, const std::string& name);

// Throws the entry's failure (the device work that produced it failed), if any.
void checkNotFailed(const TensorEntry& entry);

}  // namespace tensord::server
