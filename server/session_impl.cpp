#include "server/session_impl.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <vector>

#include "compute/op_table.h"
#include "server/tensor_impl.h"
#include "server/tensor_writer_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// listTensors page sizes: a request's limit 0 means the default; larger
// requests are capped so one reply stays a bounded message.
constexpr uint32_t kDefaultListLimit = 1000;
constexpr uint32_t kMaxListLimit = 10000;

// Where a listTensors page resumes: after a name (every name sorts after
// ""), or among the session's unnamed tensors after an id ("#<id>", which
// no tensor name can be: '#' is not a name character).
struct ListCursor {
  std::string name;
  bool unnamed = false;
  uint64_t id = 0;
};

ListCursor parseListCursor(std::string_view after) {
  ListCursor cursor;
  if (after.starts_with('#')) {
    const std::string_view digits = after.substr(1);
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), cursor.id);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) {
      kj::throwFatalException(failed("listTensors: after '" + std::string(after) +
                                     "' is neither a tensor name nor '#<id>' (pass a previous page's next)"));
    }
    cursor.unnamed = true;
    return cursor;
  }
  if (!after.empty()) {
    if (std::string problem = tensorNameProblem(after); !problem.empty()) {
      kj::throwFatalException(failed("listTensors: after: " + problem));
    }
  }
  cursor.name = after;
  return cursor;
}

}  // namespace

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
  auto user = session_->server().kernels.all();  // user kernels follow the built-in ops
  auto ops = context.getResults().initOps(capnp::uint(all.size() + user.size()));
  for (size_t i = 0; i < all.size(); ++i) fillOpSpec(ops[capnp::uint(i)], all[i]);
  for (size_t i = 0; i < user.size(); ++i) fillOpSpec(ops[capnp::uint(all.size() + i)], user[i]->kernel->spec());
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
  auto params = context.getParams();
  const std::string prefix = params.getPrefix();
  if (!prefix.empty()) {
    if (std::string problem = tensorNameProblem(prefix); !problem.empty()) {
      kj::throwFatalException(failed("listTensors: prefix: " + problem));
    }
  }
  const ListCursor cursor = parseListCursor(params.getAfter().cStr());
  const uint32_t limit = params.getLimit() == 0 ? kDefaultListLimit : std::min(params.getLimit(), kMaxListLimit);

  // The listing is the readable names in order, then this session's unnamed
  // tensors by id. Names the caller may not read are dropped before paging,
  // so they never take room on a page, end up as `next`, or make `next`
  // non-empty: the reply is the same as if they did not exist.
  const Registry& registry = session_->server().registry;
  std::vector<std::pair<std::string_view, const TensorEntry*>> page;
  bool more = false;
  auto add = [&](std::string_view name, const TensorEntry& entry) {
    if (page.size() == limit) {
      more = true;  // one visible entry past the page: a next page exists
      return false;
    }
    page.emplace_back(name, &entry);
    return true;
  };
  if (!cursor.unnamed) {
    registry.forEachNamedFrom(std::max<std::string_view>(cursor.name, prefix), [&](std::string_view name, auto& entry) {
      if (!name.starts_with(prefix)) return false;  // sorted: no later name has the prefix either
      if (name == cursor.name || !session_->permits(acl::Action::kRestoreTensor, name)) return true;
      return add(name, *entry);
    });
  }
  // Unnamed tensors have no name to match a prefix against.
  const auto unnamed =
      prefix.empty() && !more ? registry.unnamedOfSession(session_->id) : std::vector<std::shared_ptr<TensorEntry>>{};
  for (const auto& entry : unnamed) {
    if (cursor.unnamed && entry->id <= cursor.id) continue;
    if (!add("", *entry)) break;
  }

  auto results = context.getResults();
  auto list = results.initTensors(capnp::uint(page.size()));
  for (size_t i = 0; i < page.size(); ++i) {
    fillTensorInfo(list[capnp::uint(i)], *page[i].second, std::string(page[i].first));
  }
  if (more) {
    const auto& [name, entry] = page.back();
    results.setNext(name.empty() ? "#" + std::to_string(entry->id) : std::string(name));
  }
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
