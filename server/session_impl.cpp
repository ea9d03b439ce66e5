#include "server/session_impl.h"

#include <spdlog/spdlog.h>

#include "compute/op_table.h"
#include "server/tensor_impl.h"
#include "server/tensor_writer_impl.h"
#include "server/wire.h"

namespace tensord::server {

SessionImpl::SessionImpl(std::shared_ptr<SessionState> session) : session_(std::move(session)) {}

SessionImpl::~SessionImpl() {
  session_->server().log.debug("session {} of '{}' closed", session_->id, session_->principal.name);
}

kj::Promise<void> SessionImpl::whoami(WhoamiContext context) {
  auto guard = session_->enterCall("whoami");
  context.getResults().setPrincipal(session_->principal.name);
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::info(InfoContext context) {
  auto guard = session_->enterCall("info");
  session_->server().fillInfo(context.getResults().initInfo());
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::listOps(ListOpsContext context) {
  auto guard = session_->enterCall("listOps");
  auto all = session_->server().engine.ops().all();
  auto ops = context.getResults().initOps(capnp::uint(all.size()));
  for (size_t i = 0; i < all.size(); ++i) fillOpSpec(ops[capnp::uint(i)], all[i]);
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::upload(UploadContext context) {
  auto guard = session_->enterCall("upload");
  session_->server().quotas.chargeCall(session_->principal.name, "upload");
  session_->authorize(acl::Action::kWriteTensor, "");
  ServerState& server = session_->server();
  compute::TensorDesc desc = descFromWire(context.getParams().getDesc(), "upload");
  const uint64_t limit = server.config.limits.maxTensorBytes;
  if (desc.bytes() > limit) {
    kj::throwFatalException(failed("upload: " + desc.str() + " is " + std::to_string(desc.bytes()) +
                                   " bytes; expected at most " + std::to_string(limit) +
                                   " bytes (limits.max_tensor_bytes)"));
  }
  const uint64_t uploadBytes[] = {desc.bytes()};
  server.quotas.checkAllocation(session_->principal.name, "upload", uploadBytes);
  auto buffer = mapComputeErrors("upload: " + desc.str(),
                                 [&] { return server.engine.allocate(desc.bytes(), session_->principal.name); });
  context.getResults().setWriter(kj::heap<TensorWriterImpl>(session_, std::move(desc), std::move(buffer)));
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::restore(RestoreContext context) {
  auto guard = session_->enterCall("restore");
  session_->server().quotas.chargeCall(session_->principal.name, "restore");
  const std::string name = context.getParams().getName();
  // A name the caller may not read looks exactly like one that does not exist.
  auto entry = session_->authorizeHidden(acl::Action::kRestoreTensor, name)
                   ? session_->server().registry.findNamed(name)
                   : nullptr;
  if (!entry) kj::throwFatalException(failed("restore: no tensor named '" + name + "'"));
  context.getResults().setTensor(TensorImpl::makeCap(session_, std::move(entry), name));
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::listTensors(ListTensorsContext context) {
  auto guard = session_->enterCall("listTensors");
  session_->server().quotas.chargeCall(session_->principal.name, "listTensors");
  session_->authorize(acl::Action::kListTensors, "");
  const Registry& registry = session_->server().registry;
  const auto named = registry.named();
  const auto unnamed = registry.unnamedOfSession(session_->id);
  // Only names the caller may read (restore) show.
  std::vector<bool> shown(named.size());
  size_t count = unnamed.size();
  for (size_t k = 0; k < named.size(); ++k) {
    shown[k] = session_->permits(acl::Action::kRestoreTensor, named[k].first);
    count += shown[k] ? 1 : 0;
  }
  auto list = context.getResults().initTensors(capnp::uint(count));
  capnp::uint i = 0;
  for (size_t k = 0; k < named.size(); ++k) {
    if (shown[k]) fillTensorInfo(list[i++], *named[k].second, named[k].first);
  }
  for (const auto& entry : unnamed) fillTensorInfo(list[i++], *entry, "");
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::deleteTensor(DeleteTensorContext context) {
  auto guard = session_->enterCall("deleteTensor");
  session_->server().quotas.chargeCall(session_->principal.name, "deleteTensor");
  const std::string name = context.getParams().getName();
  if (!session_->authorizeHidden(acl::Action::kDeleteTensor, name) || !session_->server().registry.remove(name)) {
    kj::throwFatalException(failed("delete: no tensor named '" + name + "'"));
  }
  session_->server().log.debug("{} deleted '{}'", session_->principal.name, name);
  return kj::READY_NOW;
}

}  // namespace tensord::server
