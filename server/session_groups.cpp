// Session.groupCreate / groupList / groupDelete / groupConnect / collective:
// the client's view of groups (server/group.h) and of collectives
// (server/collective.h). Every request passes the session's authorization
// first: &group:create to form or leave a group, @collective for a
// collective's kind (plus r, and w for in_place, on named inputs) and for a
// node's groupConnect.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/group.h"
#include "server/op_results_impl.h"
#include "server/session_impl.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

constexpr std::string_view kKinds[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};

GroupRegistry& groupsOf(ServerState& server, std::string_view method) {
  if (server.groups == nullptr) {
    kj::throwFatalException(unimplemented(std::string(method) + ": this daemon runs without groups"));
  }
  return *server.groups;
}

void fillGroupInfo(proto::GroupInfo::Builder out, const Group& group) {
  out.setName(group.name);
  out.setRank(group.rank);
  out.setSize(group.size());
  auto members = out.initMembers(group.size());
  for (uint32_t i = 0; i < group.size(); ++i) members.set(i, group.members[i].text);
  out.setState(group.stateText());
  out.setOrigin(group.origin);
  out.setCollectives(group.collectivesDone());
}

// The validated attributes of one collective.
struct CollectiveAttrs {
  std::string op;
  uint32_t root = 0;
  bool inPlace = false;
  uint32_t timeoutMs = 0;
};

CollectiveAttrs parseAttrs(const std::string& kind, capnp::List<proto::Attr>::Reader wire, uint32_t size,
                           uint32_t defaultTimeoutMs) {
  const bool reduction = kind == "allreduce" || kind == "reduce_scatter";
  CollectiveAttrs out;
  out.op = reduction ? "sum" : "";
  out.timeoutMs = defaultTimeoutMs;
  const std::string takes = reduction             ? "op, in_place, timeout_ms"
                            : kind == "broadcast" ? "root, in_place, timeout_ms"
                            : kind == "allgather" ? "in_place, timeout_ms"
                                                  : "timeout_ms";
  for (const auto& [name, value] : attrsFromWire(wire, kind)) {
    const std::string at = kind + ": attribute '" + name + "' ";
    if (name == "op" && reduction) {
      const auto* text = std::get_if<std::string>(&value);
      if (text == nullptr || (*text != "sum" && *text != "mean" && *text != "max" && *text != "min")) {
        kj::throwFatalException(failed(at + "expected one of sum, mean, max, min (text), got " +
                                       (text != nullptr ? "'" + *text + "'" : std::string("a value of another type"))));
      }
      out.op = *text;
    } else if (name == "root" && kind == "broadcast") {
      const auto* v = std::get_if<int64_t>(&value);
      if (v == nullptr || *v < 0 || uint64_t(*v) >= size) {
        kj::throwFatalException(failed(at + "expected a member's rank, 0 to " + std::to_string(size - 1) + " (int)"));
      }
      out.root = uint32_t(*v);
    } else if (name == "in_place" && kind != "barrier") {
      const auto* v = std::get_if<bool>(&value);
      if (v == nullptr) kj::throwFatalException(failed(at + "expected true or false (bool)"));
      out.inPlace = *v;
    } else if (name == "timeout_ms") {
      const auto* v = std::get_if<int64_t>(&value);
      if (v == nullptr || *v < 1 || *v > 3600000) kj::throwFatalException(failed(at + "expected 1 to 3600000 (int)"));
      out.timeoutMs = uint32_t(*v);
    } else {
      kj::throwFatalException(failed(kind + ": unknown attribute '" + name + "' (it takes " + takes + ")"));
    }
  }
  if (out.inPlace && (kind == "allgather" || kind == "reduce_scatter")) {
    kj::throwFatalException(failed(kind + ": in_place is not possible: the output's shape differs from the input's"));
  }
  return out;
}

void checkInputCount(const std::string& kind, size_t count) {
  const bool ok = kind == "barrier"                                 ? count == 0
                  : kind == "allgather" || kind == "reduce_scatter" ? count == 1
                                                                    : count >= 1;
  if (ok) return;
  const std::string expected = kind == "barrier"                                 ? "no inputs"
                               : kind == "allgather" || kind == "reduce_scatter" ? "exactly one input"
                                                                                 : "one or more inputs";
  kj::throwFatalException(failed(kind + ": expected " + expected + ", got " + std::to_string(count)));
}

}  // namespace

kj::Promise<void> SessionImpl::groupCreate(GroupCreateContext context) {
  auto guard = session_->enterCall("groupCreate");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "groupCreate");
  auto params = context.getParams();
  const std::string name = params.getName();
  session_->authorize(acl::Action::kGroupCreate, name);
  std::vector<std::string> members;
  for (auto member : params.getMembers()) members.emplace_back(member.cStr());
  const uint32_t timeoutMs = params.getTimeoutMs() == 0 ? server.config.groups.timeoutMs : params.getTimeoutMs();
  server.log.info("{} forms group {} as rank {} of {}", session_->principal.name, name, params.getRank(),
                  members.size());
  return groupsOf(server, "groupCreate")
      .create(name, members, params.getRank(), session_->principal.name, timeoutMs)
      .then(
          [context](std::shared_ptr<Group> group) mutable { fillGroupInfo(context.getResults().initGroup(), *group); })
      .attach(kj::mv(guard));
}

kj::Promise<void> SessionImpl::groupList(GroupListContext context) {
  auto guard = session_->enterCall("groupList");
  session_->server().quotas.chargeCall(session_->principal.name, "groupList");
  auto all = groupsOf(session_->server(), "groupList").all();
  auto list = context.getResults().initGroups(capnp::uint(all.size()));
  for (size_t i = 0; i < all.size(); ++i) fillGroupInfo(list[capnp::uint(i)], *all[i]);
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::groupDelete(GroupDeleteContext context) {
  auto guard = session_->enterCall("groupDelete");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "groupDelete");
  const std::string name = context.getParams().getName();
  session_->authorize(acl::Action::kGroupCreate, name);
  if (!groupsOf(server, "groupDelete").remove(name)) {
    kj::throwFatalException(failed("groupDelete: no group named '" + name + "' on this daemon"));
  }
  server.log.info("{} deleted group {}", session_->principal.name, name);
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::groupConnect(GroupConnectContext context) {
  auto guard = session_->enterCall("groupConnect");
  ServerState& server = session_->server();
  // A node taking part in groups is a principal with @collective.
  session_->authorize(acl::Action::kCallOp, "groupConnect", "collective");
  auto params = context.getParams();
  const std::string name = params.getGroup();
  auto group = groupsOf(server, "groupConnect").find(name);
  if (!group) {
    kj::throwFatalException(failed("groupConnect: no group named '" + name +
                                   "' on this daemon (yet): groupCreate forms it on every member"));
  }
  std::vector<std::string> members;
  for (auto member : params.getMembers()) members.emplace_back(member.cStr());
  auto results = context.getResults();
  results.setPeer(group->acceptPeer(members, params.getRank(), params.getNonce()));
  results.setNonce(group->nonce);
  server.log.debug("'{}' from {} linked as {} of group {}", session_->principal.name, session_->connection->peer,
                   group->memberName(params.getRank()), name);
  return kj::READY_NOW;
}

kj::Promise<void> SessionImpl::collective(CollectiveContext context) {
  auto guard = session_->enterCall("collective");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "collective");
  ++session_->usage.ops;
  auto params = context.getParams();
  const std::string kind = params.getKind();
  if (std::find(std::begin(kKinds), std::end(kKinds), kind) == std::end(kKinds)) {
    kj::throwFatalException(unimplemented("collective: unknown kind '" + kind +
                                          "' (expected allreduce, broadcast, allgather, reduce_scatter or barrier)"));
  }
  session_->authorize(acl::Action::kCallOp, kind, "collective");
  const std::string name = params.getGroup();
  auto group = groupsOf(server, kind).find(name);
  if (!group) kj::throwFatalException(failed(kind + ": no group named '" + name + "' on this daemon"));

  // From here on this is the group's next collective: whatever fails below
  // fails it on the other members too.
  const uint64_t seq = group->takeSeq();
  auto inputs = params.getInputs();
  auto caps = kj::heapArrayBuilder<proto::Tensor::Client>(inputs.size());
  for (auto cap : inputs) caps.add(cap);
  auto capArray = caps.finish();
  // Bad attributes fail the collective here and, through it, everywhere.
  auto attrs = std::make_shared<CollectiveAttrs>();
  kj::Promise<void> checked = kj::READY_NOW;
  KJ_IF_MAYBE (problem, kj::runCatchingExceptions([&]() {
                 checkInputCount(kind, capArray.size());
                 *attrs = parseAttrs(kind, params.getAttrs(), group->size(), server.config.groups.timeoutMs);
               })) {
    checked = kj::mv(*problem);
  }
  auto resolving = kj::heapArrayBuilder<kj::Promise<kj::Maybe<proto::Tensor::Server&>>>(capArray.size());
  for (auto& cap : capArray) resolving.add(server.tensorCaps.getLocalServer(cap));

  auto request = checked
                     .then([before = session_->afterInPlaceCalls(), resolving = resolving.finish()]() mutable {
                       return before.then(
                           [resolving = kj::mv(resolving)]() mutable { return kj::joinPromises(kj::mv(resolving)); });
                     })
                     .then([session = session_, kind, attrs](kj::Array<kj::Maybe<proto::Tensor::Server&>> local) {
                       CollectiveRequest request;
                       request.kind = kind;
                       request.op = attrs->op;
                       request.root = attrs->root;
                       request.inPlace = attrs->inPlace;
                       request.timeoutMs = attrs->timeoutMs;
                       request.owner = session->principal.name;
                       for (size_t i = 0; i < local.size(); ++i) {
                         KJ_IF_MAYBE (server, local[i]) {
                           auto& impl = kj::downcast<TensorImpl>(*server);
                           const std::string resource = impl.resource();
                           session->authorize(acl::Action::kReadTensor, resource);
                           if (attrs->inPlace) session->authorize(acl::Action::kWriteTensor, resource);
                           checkNotFailed(*impl.entry());
                           request.inputs.push_back({impl.entry()->desc, impl.entry()->buffer});
                         } else {
                           kj::throwFatalException(
                               failed(kind + ": input " + std::to_string(i) + " is not a tensor of this daemon"));
                         }
                       }
                       return request;
                     });

  auto outputs = group->runCollective(seq, kj::mv(request)).attach(kj::cp(group));
  auto finished =
      outputs.then([session = session_, context, capArray = kj::mv(capArray), kind](CollectiveOutputs out) mutable {
        ServerState& server = session->server();
        auto results = context.getResults();
        auto list = results.initOutputs(capnp::uint(out.outputs.size()));
        auto held = kj::heapArrayBuilder<proto::Tensor::Client>(out.outputs.size());
        for (size_t i = 0; i < out.outputs.size(); ++i) {
          proto::Tensor::Client cap = nullptr;
          if (out.inPlace) {
            cap = capArray[i];
          } else {
            auto entry = server.registry.add(session->principal.name, session->id, out.outputs[i].desc,
                                             std::move(out.outputs[i].buffer));
            cap = TensorImpl::makeCap(session, std::move(entry));
          }
          list.set(capnp::uint(i), cap);
          held.add(kj::mv(cap));
        }
        if (out.outputs.size() > 0) results.setOutput(list[0]);
        ++server.opsExecuted;
        results.setResults(kj::heap<OpResultsImpl>(kind, held.finish()));
      });
  if (!attrs->inPlace) return finished.attach(kj::mv(guard));
  // Later calls of this session that read an input see the result written
  // in place (as for ops that write an input in place).
  auto forked = finished.fork();
  session_->addInPlaceCall(forked.addBranch().catch_([](kj::Exception&&) {}));
  return forked.addBranch().attach(kj::mv(guard));
}

}  // namespace tensord::server
