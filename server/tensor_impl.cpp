#include "server/tensor_impl.h"

#include <spdlog/spdlog.h>

#include "server/download.h"
#include "server/wire.h"

namespace tensord::server {

void fillTensorInfo(proto::TensorInfo::Builder out, const TensorEntry& entry, const std::string& name) {
  out.setId(entry.id);
  out.setName(name);
  out.setOwner(entry.owner);
  fillDesc(out.initDesc(), entry.desc);
  out.setBytes(entry.bytes());
}

void checkNotFailed(const TensorEntry& entry) {
  KJ_IF_MAYBE (failure, entry.failure) {
    kj::Exception copy = *failure;
    kj::throwFatalException(kj::mv(copy));
  }
}

proto::Tensor::Client TensorImpl::makeCap(const std::shared_ptr<SessionState>& session,
                                          std::shared_ptr<TensorEntry> entry, std::string via) {
  return session->server().tensorCaps.add(kj::heap<TensorImpl>(session, std::move(entry), std::move(via)));
}

kj::Promise<void> TensorImpl::info(InfoContext context) {
  auto guard = session_->enterCall("info");
  session_->authorize(acl::Action::kReadTensor, resource());
  const std::string name = entry_->names.empty() ? std::string() : *entry_->names.begin();
  fillTensorInfo(context.getResults().initInfo(), *entry_, name);
  return kj::READY_NOW;
}

kj::Promise<void> TensorImpl::download(DownloadContext context) {
  auto guard = session_->enterCall("download");
  session_->server().quotas.chargeCall(session_->principal.name, "download");
  session_->authorize(acl::Action::kReadTensor, resource());
  // After the session's earlier in-place calls, so the bytes include their writes.
  return session_->afterInPlaceCalls().then([this, context, guard = kj::mv(guard)]() mutable {
    return streamDownload(context).attach(kj::mv(guard));
  });
}

kj::Promise<void> TensorImpl::streamDownload(DownloadContext context) {
  checkNotFailed(*entry_);
  auto params = context.getParams();
  const uint64_t size = entry_->bytes();
  const uint64_t offset = params.getOffset();
  uint64_t length = params.getLength();
  if (offset > size) {
    kj::throwFatalException(failed("download: offset " + std::to_string(offset) + " is past the end of " +
                                   entry_->label() + " (" + entry_->desc.str() + ", " + std::to_string(size) +
                                   " bytes)"));
  }
  if (length == 0) length = size - offset;
  if (length > size - offset) {
    kj::throwFatalException(failed("download: range [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                                   std::to_string(length) + ") is past the end of " + entry_->label() + " (" +
                                   std::to_string(size) + " bytes)"));
  }
  return streamToSink(session_->server(), session_->principal.name, entry_, params.getSink(), offset, length);
}

kj::Promise<void> TensorImpl::save(SaveContext context) {
  auto guard = session_->enterCall("save");
  session_->server().quotas.chargeCall(session_->principal.name, "save");
  auto params = context.getParams();
  const std::string name = params.getName();
  if (auto problem = tensorNameProblem(name); !problem.empty()) kj::throwFatalException(failed("save: " + problem));
  session_->authorize(acl::Action::kSaveTensor, name);
  checkNotFailed(*entry_);
  ServerState& server = session_->server();
  // Replacing a name (overwrite) needs no more than saving under it: w.
  if (!server.registry.save(entry_, name, params.getOverwrite())) {
    kj::throwFatalException(
        failed("save: a tensor named '" + name + "' already exists; pass overwrite to replace it or delete it first"));
  }
  server.log.debug("{} saved #{} ({}) as '{}'", session_->principal.name, entry_->id, entry_->desc.str(), name);
  return kj::READY_NOW;
}

}  // namespace tensord::server
