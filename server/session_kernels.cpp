// Session.kernelAdd/kernelList/kernelRemove/kernelShow: user kernels
// (docs/kernels.md). A kernel is compiled and checked off the event loop
// (FileWorker), registered only once everything about it passed, and written
// to the state directory before the call returns.

#include <spdlog/spdlog.h>

#include "server/kernel_registry.h"
#include "server/session_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

constexpr size_t kMaxSourceBytes = 1u << 20;
constexpr size_t kMaxDescriptionBytes = 64u << 10;
constexpr std::string_view kPrefix = "user.";

// "" if `name` is a valid user kernel name, else the problem.
std::string kernelNameProblem(std::string_view name) {
  if (!name.starts_with(kPrefix)) {
    return "name '" + std::string(name) + "' must start with 'user.' (user kernels are ops named user.NAME)";
  }
  std::string_view rest = name.substr(kPrefix.size());
  bool ok = !rest.empty() && rest.size() <= 64;
  for (char c : rest)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
  if (!ok) {
    return "name '" + std::string(name) + "': NAME in user.NAME must be 1 to 64 letters, digits or '_'";
  }
  return {};
}

void fillKernelInfo(proto::KernelInfo::Builder out, const RegisteredKernel& k) {
  const compute::UserKernelSource& src = k.kernel->source();
  out.setName(src.name);
  out.setOwner(k.owner);
  out.setLanguage(src.language);
  out.setDescription(src.description);
  out.setSourceSha256(k.sourceSha256);
  fillOpSpec(out.initSpec(), k.kernel->spec());
}

}  // namespace

kj::Promise<void> SessionImpl::kernelAdd(KernelAddContext context) {
  auto guard = session_->enterCall("kernelAdd");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "kernelAdd");
  auto params = context.getParams();
  const std::string name = params.getName();
  if (std::string problem = kernelNameProblem(name); !problem.empty()) {
    kj::throwFatalException(failed("kernelAdd: " + problem));
  }
  session_->authorize(acl::Action::kManageKernel, name);
  compute::UserKernelSource src;
  src.name = name;
  src.language = params.getLanguage();
  auto data = params.getSource();
  src.source.assign(reinterpret_cast<const char*>(data.begin()), data.size());
  src.description = params.getDescription();
  if (src.language != "glsl" && src.language != "spirv") {
    kj::throwFatalException(failed("kernelAdd: " + name + ": language '" + src.language +
                                   "' is not known (expected \"glsl\" or \"spirv\")"));
  }
  if (src.source.empty() || src.source.size() > kMaxSourceBytes) {
    kj::throwFatalException(failed("kernelAdd: " + name + ": source is " + std::to_string(src.source.size()) +
                                   " bytes; expected 1 to " + std::to_string(kMaxSourceBytes)));
  }
  if (src.description.size() > kMaxDescriptionBytes) {
    kj::throwFatalException(failed("kernelAdd: " + name + ": description is " + std::to_string(src.description.size()) +
                                   " bytes; expected at most " + std::to_string(kMaxDescriptionBytes)));
  }
  const bool replace = params.getReplace();
  auto exists = [name](ServerState& server) {
    if (server.kernels.find(name)) {
      kj::throwFatalException(failed("kernelAdd: kernel '" + name + "' exists (owner '" +
                                     server.kernels.find(name)->owner + "'); pass replace to replace it"));
    }
  };
  if (!replace) exists(server);

  const std::string sha = sha256Hex(src.source);
  auto built = std::make_shared<std::shared_ptr<const compute::UserKernel>>();
  compute::Engine& engine = server.engine;
  auto building = server.files.run(
      [&engine, src = std::move(src), built]() mutable { *built = engine.buildUserKernel(std::move(src)); });
  return building
      .then([session = session_, context, built, replace, exists, sha]() mutable {
        ServerState& server = session->server();
        if (!replace) exists(server);  // someone registered it while this one compiled
        server.kernels.put({*built, session->principal.name, sha});
        server.log.info("{} registered kernel {} ({})", session->principal.name, (*built)->spec().name,
                        (*built)->source().language);
        fillKernelInfo(context.getResults().initKernel(), *server.kernels.find((*built)->spec().name));
        return server.kernels.persist(server.files, server.config.stateDir)
            .catch_([name = (*built)->spec().name](kj::Exception&& e) {
              kj::throwFatalException(failed(
                  "kernelAdd: " + name +
                  " is registered but could not be written to the state directory: " + e.getDescription().cStr()));
            });
      })
      .attach(kj::mv(guard));
}

kj::Promise<void> SessionImpl::kernelList(KernelListContext context) {
  auto guard = session_->enterCall("kernelList");
  session_->server().quotas.chargeCall(session_->principal.name, "kernelList");
  auto all = session_->server().kernels.all();
  auto list = context.getResults().initKernels(capnp::uint(all.size()));
  for (size_t i = 0; i < all.size(); ++i) fillKernelInfo(list[capnp::uint(i)], *all[i]);
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::kernelRemove(KernelRemoveContext context) {
  auto guard = session_->enterCall("kernelRemove");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "kernelRemove");
  const std::string name = context.getParams().getName();
  const RegisteredKernel* k = server.kernels.find(name);
  if (k == nullptr) kj::throwFatalException(failed("kernelRemove: no kernel named '" + name + "'"));
  // The owner may always remove its kernel; anyone else needs @kernel.
  if (k->owner != session_->principal.name) session_->authorize(acl::Action::kManageKernel, name);
  server.kernels.remove(name);  // calls in flight hold the kernel until they completed
  server.log.info("{} removed kernel {}", session_->principal.name, name);
  return server.kernels.persist(server.files, server.config.stateDir)
      .catch_([name](kj::Exception&& e) {
        kj::throwFatalException(
            failed("kernelRemove: " + name +
                   " is removed but the state directory could not be updated: " + e.getDescription().cStr()));
      })
      .attach(kj::mv(guard));
}

kj::Promise<void> SessionImpl::kernelShow(KernelShowContext context) {
  auto guard = session_->enterCall("kernelShow");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "kernelShow");
  const std::string name = context.getParams().getName();
  const RegisteredKernel* k = server.kernels.find(name);
  if (k == nullptr) kj::throwFatalException(failed("kernelShow: no kernel named '" + name + "'"));
  // Its source is shown to its owner and to whoever may call it.
  if (k->owner != session_->principal.name) session_->authorize(acl::Action::kCallOp, name, "user");
  auto results = context.getResults();
  fillKernelInfo(results.initKernel(), *k);
  const std::string& source = k->kernel->source().source;
  results.setSource(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(source.data()), source.size()));
  return kj::READY_NOW;
}

}  // namespace tensord::server
