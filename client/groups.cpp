// Groups of daemons and the collectives they run: Session.groupCreate,
// groupList, groupDelete and collective (pipelined like Session.call).

#include "client/groups.h"

#include "client/wire.h"

namespace tensord {

namespace detail {

size_t collectiveOutputCount(std::string_view kind, size_t inputs) {
  if (kind == "barrier") return 0;
  if (kind == "allgather" || kind == "reduce_scatter") return 1;
  // allreduce and broadcast give one output per input; so does a kind this
  // client does not know (the daemon names the problem).
  return inputs;
}

Collective collectiveOp(const std::shared_ptr<Connection>& conn, std::string_view group, std::string_view kind,
                        const std::vector<Tensor>& inputs, const Attrs& attrs) {
  const std::string what = "collective " + std::string(kind) + " on group '" + std::string(group) + "'";
  std::vector<proto::Tensor::Client> caps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    proto::Tensor::Client cap = capOf(implOf(inputs[i], what + ": input " + std::to_string(i)));
    caps.push_back(kj::mv(cap));
  }
  const size_t count = collectiveOutputCount(kind, inputs.size());
  return conn->guard([&] {
    auto request = conn->session().collectiveRequest();
    request.setGroup(std::string(group));
    request.setKind(std::string(kind));
    wire::setInputsAndAttrs(request, caps, attrs);
    auto call = request.send();
    ++conn->stats.calls;
    // As for Session.call: the first output pipelines through `output`, the
    // others through `results.get(i)`, all before the daemon answers.
    std::vector<proto::Tensor::Client> outputs;
    if (count > 0) outputs.push_back(call.getOutput());
    if (count > 1) {
      auto results = call.getResults();
      for (size_t i = 1; i < count; ++i) {
        auto get = results.getRequest();
        get.setIndex(uint32_t(i));
        outputs.push_back(get.send().getTensor());
      }
    }
    Collective out;
    out.done =
        std::make_shared<PendingCall>(call.then([](capnp::Response<proto::Session::CollectiveResults>&&) {}));
    for (auto& cap : outputs) out.outputs.push_back(makeTensor(conn, out.done, std::move(cap)));
    conn->flush();
    return out;
  });
}

}  // namespace detail

GroupInfo Client::groupCreate(std::string_view name, const std::vector<std::string>& members, uint32_t rank,
                              uint32_t timeoutMs) {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto request = conn.session().groupCreateRequest();
    request.setName(std::string(name));
    auto list = request.initMembers(uint32_t(members.size()));
    for (size_t i = 0; i < members.size(); ++i) list.set(uint32_t(i), members[i]);
    request.setRank(rank);
    request.setTimeoutMs(timeoutMs);
    auto response = request.send().wait(conn.waitScope());
    return wire::fromWire(response.getGroup());
  });
}

std::vector<GroupInfo> Client::groupList() {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto response = conn.session().groupListRequest().send().wait(conn.waitScope());
    std::vector<GroupInfo> out;
    for (auto group : response.getGroups()) out.push_back(wire::fromWire(group));
    return out;
  });
}

void Client::groupDelete(std::string_view name) {
  auto& conn = *impl_->conn;
  conn.blocking([&] {
    auto request = conn.session().groupDeleteRequest();
    request.setName(std::string(name));
    request.send().wait(conn.waitScope());
  });
}

std::vector<Tensor> Client::collective(std::string_view group, std::string_view kind, std::vector<Tensor> inputs,
                                       Attrs attrs) {
  auto& conn = impl_->conn;
  detail::Collective run = detail::collectiveOp(conn, group, kind, inputs, attrs);
  if (run.outputs.empty()) {
    // Nothing to hand back (barrier): the collective runs on; an error is
    // thrown by the next blocking request.
    conn->guard([&] { conn->addTask(run.done->done.addBranch()); });
  }
  return std::move(run.outputs);
}

}  // namespace tensord
