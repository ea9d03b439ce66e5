#pragma once
// TensorImpl: one Tensor capability. It holds its TensorEntry, so an unnamed
// tensor lives exactly as long as capabilities to it exist (the RPC system
// drops them when the client releases them or disconnects).
//
// Threads: the event-loop thread only.

#include <memory>

#include "protocol/tensord.capnp.h"
#include "server/registry.h"
#include "server/server_state.h"

namespace tensord::server {

class TensorImpl final : public proto::Tensor::Server {
 public:
  TensorImpl(std::shared_ptr<SessionState> session, std::shared_ptr<TensorEntry> entry)
      : session_(std::move(session)), entry_(std::move(entry)) {}

  // A new capability for `entry`, made through the daemon's capability set.
  static proto::Tensor::Client makeCap(const std::shared_ptr<SessionState>& session,
                                       std::shared_ptr<TensorEntry> entry);

  const std::shared_ptr<TensorEntry>& entry() const { return entry_; }

 protected:
  kj::Promise<void> info(InfoContext context) override;
  kj::Promise<void> download(DownloadContext context) override;
  kj::Promise<void> save(SaveContext context) override;

 private:
  std::shared_ptr<SessionState> session_;
  std::shared_ptr<TensorEntry> entry_;
};

// Fills one TensorInfo row; `name` overrides the entry's label for listings.
void fillTensorInfo(proto::TensorInfo::Builder out, const TensorEntry& entry, const std::string& name);

// Throws the entry's failure (the device work that produced it failed), if any.
void checkNotFailed(const TensorEntry& entry);

}  // namespace tensord::server
