// Data-parallel helpers over the collectives: forming a group from one
// program, a member's ProcessGroup, and DDP-style bucketed gradient averaging.

#include "tensord/distributed.h"

#include <algorithm>
#include <optional>

#include "client/groups.h"
#include "client/wire.h"

namespace tensord {

std::vector<GroupInfo> formGroup(const std::vector<Client*>& clients, std::string_view name,
                                 const std::vector<std::string>& members, uint32_t timeoutMs) {
  if (clients.empty()) throw Error(Error::Kind::kFailed, "formGroup '" + std::string(name) + "': no clients");
  if (clients.size() != members.size()) {
    throw Error(Error::Kind::kFailed, "formGroup '" + std::string(name) + "': " + std::to_string(clients.size()) +
                                          " clients for " + std::to_string(members.size()) +
                                          " members; expected one client per member, by rank");
  }
  std::vector<detail::Connection*> conns;
  for (Client* client : clients) {
    auto& conn = *client->impl().conn;
    if (!conns.empty() && &conn.waitScope() != &conns.front()->waitScope()) {
      throw Error(Error::Kind::kFailed, "formGroup: the clients belong to different threads");
    }
    conns.push_back(&conn);
  }
  using Response = capnp::Response<proto::Session::GroupCreateResults>;
  std::vector<std::optional<kj::Promise<Response>>> pending;
  for (size_t rank = 0; rank < conns.size(); ++rank) {
    pending.emplace_back(conns[rank]->guard([&] {
      auto request = conns[rank]->session().groupCreateRequest();
      request.setName(std::string(name));
      auto list = request.initMembers(uint32_t(members.size()));
      for (size_t i = 0; i < members.size(); ++i) list.set(uint32_t(i), members[i]);
      request.setRank(uint32_t(rank));
      request.setTimeoutMs(timeoutMs);
      return kj::Promise<Response>(request.send());
    }));
  }
  std::vector<GroupInfo> out;
  for (size_t rank = 0; rank < conns.size(); ++rank) {
    try {
      out.push_back(conns[rank]->blocking([&] { return wire::fromWire(pending[rank]->wait(conns[rank]->waitScope()).getGroup()); }));
    } catch (const Error& e) {
      throw Error(e.kind(), "groupCreate '" + std::string(name) + "' on member " + std::to_string(rank) + " (" +
                                conns[rank]->address() + "): " + e.what());
    }
  }
  return out;
}

std::vector<MemberCollective> collectiveOnAll(const std::vector<Client*>& clients, std::string_view group,
                                              std::string_view kind, const std::vector<std::vector<Tensor>>& inputs,
                                              const Attrs& attrs) {
  if (inputs.size() != clients.size()) {
    throw Error(Error::Kind::kFailed, "collectiveOnAll: " + std::to_string(inputs.size()) + " input lists for " +
                                          std::to_string(clients.size()) + " members");
  }
  std::vector<detail::Collective> runs;
  for (size_t i = 0; i < clients.size(); ++i) {
    runs.push_back(detail::collectiveOp(clients[i]->impl().conn, group, kind, inputs[i], attrs));
  }
  std::vector<MemberCollective> out(clients.size());
  for (size_t i = 0; i < clients.size(); ++i) {
    auto& conn = clients[i]->impl().conn;
    try {
      conn->blocking([&] { runs[i].done->done.addBranch().wait(conn->waitScope()); });
      out[i].outputs = std::move(runs[i].outputs);
    } catch (const Error& e) {
      out[i].error = e.what();
    }
  }
  return out;
}

ProcessGroup::ProcessGroup(Client& client, std::string name) : client_(&client), name_(std::move(name)) {
  std::string known;
  for (GroupInfo& group : client.groupList()) {
    if (group.name == name_) {
      info_ = std::move(group);
      return;
    }
    known += (known.empty() ? "" : ", ") + group.name;
  }
  throw Error(Error::Kind::kFailed, "ProcessGroup: the daemon at " + client.impl().conn->address() +
                                        " has no group '" + name_ + "' (its groups: " +
                                        (known.empty() ? "none" : known) +
                                        "); form it first (Client::groupCreate, tensorctl group create)");
}

Attrs ProcessGroup::attrs(Attrs more) const {
  if (timeoutMs_ != 0) more.emplace_back("timeout_ms", int64_t(timeoutMs_));
  return more;
}

std::vector<Tensor> ProcessGroup::allreduce(std::vector<Tensor> tensors, std::string_view op, bool inPlace) {
  return client_->collective(name_, "allreduce", std::move(tensors),
                             attrs({{"op", std::string(op)}, {"in_place", inPlace}}));
}

Tensor ProcessGroup::allreduce(const Tensor& tensor, std::string_view op, bool inPlace) {
  return allreduce(std::vector<Tensor>{tensor}, op, inPlace).front();
}

std::vector<Tensor> ProcessGroup::broadcast(std::vector<Tensor> tensors, uint32_t root, bool inPlace) {
  return client_->collective(name_, "broadcast", std::move(tensors),
                             attrs({{"root", int64_t(root)}, {"in_place", inPlace}}));
}

Tensor ProcessGroup::allgather(const Tensor& tensor) {
  return client_->collective(name_, "allgather", {tensor}, attrs({})).front();
}

Tensor ProcessGroup::reduceScatter(const Tensor& tensor, std::string_view op) {
  return client_->collective(name_, "reduce_scatter", {tensor}, attrs({{"op", std::string(op)}})).front();
}

void ProcessGroup::barrier() {
  auto& conn = client_->impl().conn;
  detail::Collective run = detail::collectiveOp(conn, name_, "barrier", {}, attrs({}));
  conn->blocking([&] { run.done->done.addBranch().wait(conn->waitScope()); });
}

DistributedDataParallel::DistributedDataParallel(ProcessGroup& group, std::vector<Tensor> params,
                                                 DdpOptions options)
    : group_(group), params_(std::move(params)), options_(options), bucketOf_(params_.size()) {
  if (params_.empty()) throw Error(Error::Kind::kFailed, "DistributedDataParallel: no parameters");
  std::vector<TensorInfo> infos;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i]) {
      throw Error(Error::Kind::kFailed, "DistributedDataParallel: parameter " + std::to_string(i) + " is a null Tensor");
    }
    if (!params_[i].requiresGrad()) {
      throw Error(Error::Kind::kFailed, "DistributedDataParallel: parameter " + std::to_string(i) +
                                            " is not marked setRequiresGrad()");
    }
    infos.push_back(params_[i].info());
  }
  // Buckets in reverse parameter order, one open bucket per dtype.
  std::vector<std::pair<DType, size_t>> open;  // dtype -> bucket index
  std::vector<uint64_t> bytes;
  for (size_t k = params_.size(); k-- > 0;) {
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == infos[k].dtype; });
    if (it == open.end()) {
      buckets_.emplace_back();
      bytes.push_back(0);
      it = open.insert(open.end(), {infos[k].dtype, buckets_.size() - 1});
    }
    size_t b = it->second;
    buckets_[b].push_back(k);
    bucketOf_[k] = b;
    bytes[b] += infos[k].bytes;
    if (bytes[b] >= options_.bucketBytes) open.erase(it);
  }
  readyCount_.assign(buckets_.size(), 0);
  launched_.assign(buckets_.size(), false);
  paramReady_.assign(params_.size(), false);

  if (options_.broadcastParameters) {
    // In place, so the daemon runs later calls on the parameters after it;
    // not waited for, so one thread can set up every member's replica.
    NoGrad noGrad;
    for (const auto& bucket : buckets_) {
      std::vector<Tensor> tensors;
      for (size_t k : bucket) tensors.push_back(params_[k].detach());
      group_.broadcast(std::move(tensors), 0, true);
    }
  }
  setOverlap(options_.overlap);
}

DistributedDataParallel::~DistributedDataParallel() {
  try {
    setOverlap(false);
  } catch (const Error&) {
  }
}

void DistributedDataParallel::setOverlap(bool on) {
  options_.overlap = on;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (on) {
      params_[k].setGradReadyHook([this, k](Tensor&) { gradReady(k); });
    } else {
      params_[k].setGradReadyHook({});
    }
  }
}

void DistributedDataParallel::gradReady(size_t param) {
  if (paramReady_[param]) {
    throw Error(Error::Kind::kFailed, "DistributedDataParallel: parameter " + std::to_string(param) +
                                          " got a second gradient before finishGradients(); call finishGradients() "
                                          "after every backward() (or accumulate with overlap off)");
  }
  paramReady_[param] = true;
  size_t b = bucketOf_[param];
  if (++readyCount_[b] == buckets_[b].size()) launch(b);
}

void DistributedDataParallel::launch(size_t bucket) {
  NoGrad noGrad;
  std::vector<Tensor> grads;
  for (size_t k : buckets_[bucket]) {
    Tensor g = params_[k].grad();
    grads.push_back(g ? g : group_.client().call1("zeros_like", {params_[k].detach()}));
  }
  std::vector<Tensor> mean = group_.allreduce(std::move(grads), "mean", false);
  for (size_t j = 0; j < buckets_[bucket].size(); ++j) params_[buckets_[bucket][j]].setGrad(mean[j]);
  launched_[bucket] = true;
}

void DistributedDataParallel::finishGradients() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!launched_[b]) launch(b);
  }
  readyCount_.assign(buckets_.size(), 0);
  launched_.assign(buckets_.size(), false);
  paramReady_.assign(params_.size(), false);
}

void DistributedDataParallel::syncGradients() {
  if (options_.overlap && std::find(launched_.begin(), launched_.end(), true) != launched_.end()) {
    throw Error(Error::Kind::kFailed,
                "DistributedDataParallel::syncGradients: backward() already started buckets (overlap is on); "
                "use finishGradients(), or construct with overlap = false");
  }
  finishGradients();
}

}  // namespace tensord
