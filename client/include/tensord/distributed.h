#pragma once
// Data-parallel training over a group of daemons: each daemon holds a replica
// of the model and a shard of the data; gradients are averaged by collectives
// that run between the daemons, never through the client.
//
//   tensord::ProcessGroup group(client, "g");           // formed by tensorctl group create
//   tensord::DistributedDataParallel ddp(group, params);  // replicas start from rank 0's values
//   tensord::optim::AdamW opt(params);
//   for (...) {
//     opt.zeroGrad();
//     loss(...).backward();     // buckets of gradients start their all-reduce as they are produced
//     ddp.finishGradients();    // the rest; grad() is now the mean over the group
//     opt.step();
//   }
//
// Everything here is pipelined like Client::call unless it says it blocks.
// The rules of Client hold: objects belong to the thread that made the Client.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/client.h"

namespace tensord {

// Forms group `name` on every daemon in `clients` at once: client i joins as
// rank i of `members` (HOST:PORT of each daemon's listener as the others
// reach it). All requests are sent before any is awaited, so the members
// meet; blocks until every one answered. The clients must belong to this
// thread. Throws the first member's Error, naming the member.
std::vector<GroupInfo> formGroup(const std::vector<Client*>& clients, std::string_view name,
                                 const std::vector<std::string>& members, uint32_t timeoutMs = 0);

// One member's part in collectiveOnAll: its outputs, or why it failed.
struct MemberCollective {
  std::vector<Tensor> outputs;
  std::string error;  // "" when the collective succeeded on this member
};

// Issues the same collective on every member at once (clients[i] with
// inputs[i]; the clients belong to this thread; inputs may be empty for a
// barrier), then waits until every member finished. Failures are reported
// per member, not thrown.
std::vector<MemberCollective> collectiveOnAll(const std::vector<Client*>& clients, std::string_view group,
                                              std::string_view kind, const std::vector<std::vector<Tensor>>& inputs,
                                              const Attrs& attrs = {});

// One member's view of a group: the Client connected to that member and the
// group's name. Every member of the group must issue the same collectives in
// the same order.
class ProcessGroup {
 public:
  // Asks the daemon for the group's rank and size (blocks); throws Error when
  // the daemon has no group of that name. `client` must outlive this.
  ProcessGroup(Client& client, std::string name);

  Client& client() const { return *client_; }
  const std::string& name() const { return name_; }
  uint32_t rank() const { return info_.rank; }
  uint32_t size() const { return info_.size; }
  const GroupInfo& info() const { return info_; }  // as of construction

  // Timeout of each collective in milliseconds; 0 (the default) leaves it to
  // the daemon's groups.timeout_ms.
  void setTimeoutMs(uint32_t ms) { timeoutMs_ = ms; }

  // op: "sum", "mean", "max" or "min". The tensors form one bucket; one
  // output per input. inPlace: the inputs are overwritten (once the whole
  // collective succeeded) and the outputs are the inputs.
  std::vector<Tensor> allreduce(std::vector<Tensor> tensors, std::string_view op = "sum", bool inPlace = false);
  Tensor allreduce(const Tensor& tensor, std::string_view op = "sum", bool inPlace = false);
  // Every member gets `root`'s values.
  std::vector<Tensor> broadcast(std::vector<Tensor> tensors, uint32_t root = 0, bool inPlace = false);
  // The members' tensors stacked along a new leading dimension of size size().
  Tensor allgather(const Tensor& tensor);
  // This rank's slice (leading dimension / size()) of the reduction.
  Tensor reduceScatter(const Tensor& tensor, std::string_view op = "sum");
  // Blocks until every member reached the barrier; throws Error.
  void barrier();

 private:
  Attrs attrs(Attrs more) const;
  Client* client_;
  std::string name_;
  GroupInfo info_;
  uint32_t timeoutMs_ = 0;
};

struct DdpOptions {
  // Gradients are all-reduced in buckets of about this many bytes, filled in
  // reverse parameter order (the order backward() produces them), one
  // bucket per dtype at a time (PyTorch's DDP default: 25 MiB).
  uint64_t bucketBytes = uint64_t(25) << 20;
  // Start a bucket's all-reduce from backward() as soon as all its gradients
  // are issued, while the backward of earlier layers is still to run.
  bool overlap = true;
  // At construction, copy rank 0's parameter values to every member, so the
  // replicas start bit-identical: an in-place broadcast, pipelined (the
  // daemon runs later calls on the parameters after it; an error surfaces at
  // the next blocking read).
  bool broadcastParameters = true;
};

// Keeps the gradients of `params` (leaves marked setRequiresGrad(), on the
// group's daemon) averaged over the group's members. Installs a
// gradient-ready hook on each parameter while it lives; it must outlive
// every backward() over them and be destroyed on their thread.
class DistributedDataParallel {
 public:
  DistributedDataParallel(ProcessGroup& group, std::vector<Tensor> params, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // After backward(): issues the all-reduce (mean) of every bucket that
  // backward() did not start, and leaves each parameter's grad() the mean of
  // the members' gradients. A parameter without a gradient takes part with
  // zeros. Pipelined: the optimizer step can follow at once.
  void finishGradients();
  // The same without overlap (construct with overlap = false, or
  // setOverlap(false)): every bucket issued now, after the backward.
  void syncGradients();
  // Turns starting buckets from backward() on or off.
  void setOverlap(bool on);

  // Parameter indices per bucket, in the order they fill.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  const std::vector<Tensor>& params() const { return params_; }

 private:
  void gradReady(size_t param);
  void launch(size_t bucket);
  ProcessGroup& group_;
  std::vector<Tensor> params_;
  DdpOptions options_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<size_t> bucketOf_;     // per parameter
  std::vector<size_t> readyCount_;   // per bucket: gradients ready this pass
  std::vector<bool> launched_;       // per bucket, this pass
  std::vector<bool> paramReady_;     // per parameter, this pass
};

}  // namespace tensord
