#pragma once
// Groups of daemons that run collectives together.
//
// A Group is one formation of a named group on this daemon: its members
// (by rank), this daemon's rank, and two links per fellow member: the one
// this daemon dialed (a RemoteLink on the LinkThread; this daemon sends
// through it) and the one
// the member dialed here (a GroupPeerImpl; the member sends through it). So
// every byte a daemon receives comes over a connection it authenticated and
// authorized (`@collective`) itself. The group is ready once all links are
// up and every other member said its links are up too (GroupPeer.formed),
// so none is still forming when one starts using or deletes the group;
// groupCreate waits for that. A lost link, a failed or stalled
// collective breaks the group ("broken: why") until groupCreate re-forms it.
//
// Collectives run one at a time per group, in the order they were issued
// (the Nth on one member meets the Nth on the others); see collective.h.
//
// Threads: the event-loop thread only. GroupRegistry must outlive its
// groups' promises; groups are shared with the GroupPeer capabilities
// handed out (weakly: a replaced group's capabilities fail their calls).

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/dtype.h"
#include "compute/engine.h"
#include "protocol/tensord.capnp.h"
#include "server/group_link.h"
#include "server/server_state.h"

namespace tensord::server {

class CollectiveRun;
class GroupPeerImpl;

// A collective as asked for, its inputs resolved (see session_groups.cpp).
struct CollectiveRequest {
  std::string kind;   // allreduce, broadcast, allgather, reduce_scatter, barrier
  std::string op;     // sum, mean, max, min (allreduce, reduce_scatter); "" otherwise
  uint32_t root = 0;  // broadcast
  bool inPlace = false;
  uint32_t timeoutMs = 0;
  std::string owner;  // principal: its device queue and memory
  std::vector<compute::TensorView> inputs;
};

// What a collective produced: new buffers (in_place false), or the inputs
// themselves, already written (in_place true).
struct CollectiveOutputs {
  std::vector<compute::TensorView> outputs;
  bool inPlace = false;
};

class Group final : public std::enable_shared_from_this<Group>, private kj::TaskSet::ErrorHandler {
 public:
  enum class State { kForming, kReady, kBroken };

  Group(ServerState& server, LinkThread& links, std::string name, std::vector<MemberAddress> members, uint32_t rank,
        std::string origin);
  ~Group();

  const std::string name;
  const std::vector<MemberAddress> members;
  const uint32_t rank;
  const std::string origin;
  const uint64_t nonce;  // this formation

  uint32_t size() const { return uint32_t(members.size()); }
  State state() const { return state_; }
  std::string stateText() const;  // "ready", "forming", "broken: why"
  uint64_t collectivesDone() const { return collectivesDone_; }
  // "rank 1 (127.0.0.1:7451)"
  std::string memberName(uint32_t r) const;

  // Starts dialing the other members. `deadline`: give up then (nullopt:
  // keep retrying, for the config's static groups).
  void startForming(std::optional<kj::TimePoint> deadline);
  // Resolves once ready; rejects when formation fails or the group breaks
  // before that, naming the members that did not connect.
  kj::Promise<void> whenReady();

  // A member dialed in (Session.groupConnect): checks and registers it.
  proto::GroupPeer::Client acceptPeer(const std::vector<std::string>& members, uint32_t from, uint64_t fromNonce);

  // The members not linked yet, both ways, and why.
  std::string formationProblems() const;
  // Breaks the group: fails the collective in flight, drops every link,
  // then calls onBroken (once) if set.
  void breakGroup(const std::string& why);
  std::function<void()> onBroken;

  // Runs the Nth collective (N = `seq`, taken with takeSeq() when the call
  // arrived) once the N-1th is over and `request` resolved.
  uint64_t takeSeq() { return nextSeq_++; }
  kj::Promise<CollectiveOutputs> runCollective(uint64_t seq, kj::Promise<CollectiveRequest> request);

  // --- used by GroupPeerImpl and CollectiveRun
  void onHeader(uint32_t from, CollectiveHeader header);
  kj::Promise<void> onData(uint32_t from, uint64_t seq, uint32_t step, uint32_t chunk, capnp::Data::Reader data);
  void onAbort(uint32_t from, uint64_t seq, std::string reason);
  void incomingLost(uint32_t from, GroupPeerImpl* impl);
  void onFormed(uint32_t from);  // member `from` has all its links up
  // The link this daemon sends to member `r` through (null until dialed).
  RemoteLink* outLink(uint32_t r) { return out_[r].get(); }
  // Headers of `seq` received so far, by rank (taken by the run).
  std::map<uint32_t, CollectiveHeader>& headers(uint64_t seq) { return headers_[seq]; }
  ServerState& server() { return server_; }

 private:
  void dialLoop(uint32_t r, std::optional<kj::TimePoint> deadline);
  void checkReady();
  void taskFailed(kj::Exception&& exception) override;

  ServerState& server_;
  LinkThread& links_;
  State state_ = State::kForming;
  std::string broken_;
  uint64_t collectivesDone_ = 0;
  uint64_t nextSeq_ = 0;
  std::vector<kj::Own<RemoteLink>> out_;  // by rank; null for self and until dialed
  std::vector<GroupPeerImpl*> in_;       // by rank; registered by acceptPeer
  std::vector<std::string> dialErrors_;  // by rank: the last dial failure
  // Formation: whether this member's links are all up and it told the
  // others (formed), how many answered, and which members told it.
  bool formedSent_ = false;
  uint32_t formedAnswers_ = 0;
  std::vector<bool> formedFrom_;  // by rank
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> readyWaiters_;
  std::map<uint64_t, std::map<uint32_t, CollectiveHeader>> headers_;  // by seq, by rank
  std::map<uint64_t, std::string> aborts_;                            // by seq: the first abort's message
  CollectiveRun* current_ = nullptr;                                  // the collective in flight
  kj::ForkedPromise<void> tail_;                                      // the last collective issued, done or failed
  kj::TaskSet tasks_{*this};  // dial loops, link watchers (last: cancelled first)

  friend class CollectiveRun;
};

// The GroupPeer capability one member holds on this daemon.
class GroupPeerImpl final : public proto::GroupPeer::Server {
 public:
  GroupPeerImpl(std::weak_ptr<Group> group, uint32_t from) : group_(std::move(group)), from_(from) {}
  ~GroupPeerImpl();

  void detach() { group_.reset(); }  // replaced by a newer link of the same member

 protected:
  kj::Promise<void> header(HeaderContext context) override;
  kj::Promise<void> data(DataContext context) override;
  kj::Promise<void> abort(AbortContext context) override;
  kj::Promise<void> formed(FormedContext context) override;

 private:
  std::shared_ptr<Group> group(const char* method);
  std::weak_ptr<Group> group_;
  uint32_t from_;
};

// Every group of this daemon, by name.
class GroupRegistry final : private kj::TaskSet::ErrorHandler {
 public:
  // Starts the link thread; throws ConfigError for bad groups.node_credentials.
  explicit GroupRegistry(ServerState& server);
  ~GroupRegistry();

  // Forms group `name` (replacing one of that name); throws ConfigError-like
  // FAILED for bad members. The promise resolves once it is ready.
  kj::Promise<std::shared_ptr<Group>> create(const std::string& name, const std::vector<std::string>& members,
                                             uint32_t rank, const std::string& origin, uint32_t timeoutMs);
  // The config's groups.static, formed in the background; each forms again
  // on its own after a fault breaks it.
  void formStatic();
  std::shared_ptr<Group> find(std::string_view name) const;
  bool remove(std::string_view name);
  std::vector<std::shared_ptr<Group>> all() const;
  // Breaks every group (shutdown).
  void closeAll(const std::string& why);

 private:
  void formStatic(size_t index);  // groups.static[index], again after a break
  void taskFailed(kj::Exception&& exception) override;

  ServerState& server_;
  LinkThread links_;
  std::map<std::string, std::shared_ptr<Group>, std::less<>> groups_;
  bool closing_ = false;     // closeAll: no group forms again
  kj::TaskSet tasks_{*this};  // static groups forming again (cancelled first)
};

// "allreduce on group g" style prefix for messages.
std::string collectiveWhat(const std::string& kind, const std::string& group);

}  // namespace tensord::server
