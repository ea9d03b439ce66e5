#include "server/group.h"

#include <spdlog/spdlog.h>

#include <random>
#include <set>

#include "server/collective.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// Pause between attempts to dial a member that is not up yet.
constexpr auto kRedialDelay = 200 * kj::MILLISECONDS;
// Headers further ahead than this are refused (a member cannot be more
// than one collective ahead; this only bounds a misbehaving peer).
constexpr uint64_t kMaxHeadersAhead = 64;
// How long a broken group's links stay open, so aborts sent go out first.
constexpr auto kLinkLinger = 100 * kj::MILLISECONDS;
// How long a broken static group waits before it forms again.
constexpr auto kReformDelay = 500 * kj::MILLISECONDS;

uint64_t randomNonce() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device();
}

std::string memberList(const std::vector<std::string>& members) {
  std::string out = "[";
  for (size_t i = 0; i < members.size(); ++i) out += (i ? ", " : "") + members[i];
  return out + "]";
}

std::vector<std::string> texts(const std::vector<MemberAddress>& members) {
  std::vector<std::string> out;
  for (const auto& m : members) out.push_back(m.text);
  return out;
}

}  // namespace

std::string collectiveWhat(const std::string& kind, const std::string& group) { return kind + " on group " + group; }

Group::Group(ServerState& server, LinkThread& links, std::string name, std::vector<MemberAddress> members,
             uint32_t rank, std::string origin)
    : name(std::move(name)),
      members(std::move(members)),
      rank(rank),
      origin(std::move(origin)),
      nonce(randomNonce()),
      server_(server),
      links_(links),
      out_(this->members.size()),
      in_(this->members.size(), nullptr),
      dialErrors_(this->members.size()),
      formedFrom_(this->members.size(), false),
      tail_(kj::Promise<void>(kj::READY_NOW).fork()) {}

Group::~Group() {
  for (auto*& impl : in_) {
    if (impl != nullptr) impl->detach();
    impl = nullptr;
  }
  if (current_ != nullptr) current_->fail(failed(name + ": the group was dropped"));
}

std::string Group::stateText() const {
  switch (state_) {
    case State::kForming:
      return "forming";
    case State::kReady:
      return "ready";
    case State::kBroken:
      return "broken: " + broken_;
  }
  return "";
}

std::string Group::memberName(uint32_t r) const {
  return "rank " + std::to_string(r) + " (" + (r < members.size() ? members[r].text : "?") + ")";
}

void Group::startForming(std::optional<kj::TimePoint> deadline) {
  for (uint32_t r = 0; r < size(); ++r) {
    if (r != rank) dialLoop(r, deadline);
  }
  checkReady();
}

void Group::dialLoop(uint32_t r, std::optional<kj::TimePoint> deadline) {
  tasks_.add(links_.dial(members[r], name, texts(members), rank, nonce)
                 .then(
                     [this, r](kj::Own<RemoteLink> link) -> kj::Promise<void> {
                       if (state_ != State::kForming) return kj::READY_NOW;  // dropped: the group broke meanwhile
                       server_.log.debug("group {}: linked to {}", name, memberName(r));
                       RemoteLink& l = *link;
                       out_[r] = kj::mv(link);
                       tasks_.add(l.onDisconnect().then([this, r]() {
                         breakGroup("the link to " + memberName(r) + " closed (the member stopped or left)");
                       }));
                       checkReady();
                       return kj::READY_NOW;
                     },
                     [this, r, deadline](kj::Exception&& e) -> kj::Promise<void> {
                       dialErrors_[r] = e.getDescription().cStr();
                       if (state_ != State::kForming) return kj::READY_NOW;
                       if (deadline && server_.timer.now() + kRedialDelay >= *deadline) return kj::READY_NOW;
                       return server_.timer.afterDelay(kRedialDelay).then([this, r, deadline]() {
                         if (state_ == State::kForming) dialLoop(r, deadline);
                       });
                     }));
}

void Group::checkReady() {
  if (state_ != State::kForming) return;
  for (uint32_t r = 0; r < size(); ++r) {
    if (r != rank && (!out_[r] || in_[r] == nullptr)) return;
  }
  if (!formedSent_) {
    // Every link is up, both ways: say so to every member. (A link lost
    // from here on breaks the group, so each is told exactly once.)
    formedSent_ = true;
    for (uint32_t r = 0; r < size(); ++r) {
      if (r == rank) continue;
      tasks_.add(out_[r]->formed().then([this]() {
        ++formedAnswers_;
        checkReady();
      }));
    }
  }
  if (formedAnswers_ + 1 < size()) return;
  for (uint32_t r = 0; r < size(); ++r) {
    if (r != rank && !formedFrom_[r]) return;
  }
  state_ = State::kReady;
  server_.log.info("group {} ready: rank {} of {} ({})", name, rank, size(), memberList(texts(members)));
  auto waiters = kj::mv(readyWaiters_);
  for (auto& waiter : waiters) waiter->fulfill();
}

std::string Group::formationProblems() const {
  std::string out;
  for (uint32_t r = 0; r < size(); ++r) {
    if (r == rank) continue;
    if (!out_[r]) {
      out += (out.empty() ? "" : "; ") + memberName(r) +
             ": cannot link to it: " + (dialErrors_[r].empty() ? std::string("no answer yet") : dialErrors_[r]);
    }
    if (in_[r] == nullptr) {
      out += (out.empty() ? "" : "; ") + memberName(r) +
             " has not linked to this daemon (is groupCreate running there, with these members, and may its "
             "node principal use @collective here?)";
    } else if (out_[r] && !formedFrom_[r]) {
      out += (out.empty() ? "" : "; ") + memberName(r) + " is linked both ways but still waits for its other links";
    }
  }
  return out;
}

kj::Promise<void> Group::whenReady() {
  if (state_ == State::kReady) return kj::READY_NOW;
  if (state_ == State::kBroken) return failed("group " + name + " is broken: " + broken_);
  auto paf = kj::newPromiseAndFulfiller<void>();
  readyWaiters_.push_back(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

proto::GroupPeer::Client Group::acceptPeer(const std::vector<std::string>& given, uint32_t from, uint64_t fromNonce) {
  const auto mine = texts(members);
  if (given != mine) {
    kj::throwFatalException(failed("groupConnect: group " + name + " here has the members " + memberList(mine) +
                                   "; the dialing member has " + memberList(given)));
  }
  if (from >= size() || from == rank) {
    kj::throwFatalException(failed("groupConnect: rank " + std::to_string(from) + " is not another member of group " +
                                   name + " (this daemon is rank " + std::to_string(rank) + " of " +
                                   std::to_string(size()) + ")"));
  }
  if (state_ == State::kBroken) {
    kj::throwFatalException(failed("groupConnect: group " + name + " is broken here (" + broken_ +
                                   "); groupCreate on this member re-forms it"));
  }
  if (in_[from] != nullptr) {
    if (state_ == State::kReady) {
      kj::throwFatalException(failed("groupConnect: " + memberName(from) + " is already linked in group " + name +
                                     "; re-form the group with groupCreate on every member"));
    }
    in_[from]->detach();  // the member re-dialed while forming: the newer link wins
  }
  auto impl = kj::heap<GroupPeerImpl>(weak_from_this(), from);
  in_[from] = impl.get();
  server_.log.debug("group {}: {} linked here (formation {:x})", name, memberName(from), fromNonce);
  proto::GroupPeer::Client cap = kj::mv(impl);
  checkReady();
  return cap;
}

void Group::onFormed(uint32_t from) {
  if (from >= formedFrom_.size() || from == rank) return;
  formedFrom_[from] = true;
  checkReady();
}

void Group::incomingLost(uint32_t from, GroupPeerImpl* impl) {
  if (from >= in_.size() || in_[from] != impl) return;
  in_[from] = nullptr;
  // Once every link was up (formed sent), losing one is final: the member
  // left or died, and waiting for the formation timeout would only hide it.
  if (state_ == State::kReady || formedSent_) breakGroup(memberName(from) + " disconnected");
}

void Group::breakGroup(const std::string& why) {
  if (state_ == State::kBroken) return;
  state_ = State::kBroken;
  broken_ = why;
  server_.log.warn("group {} broken: {}", name, why);
  auto waiters = kj::mv(readyWaiters_);
  for (auto& waiter : waiters) waiter->reject(failed("group " + name + " broke while forming: " + why));
  if (current_ != nullptr) current_->fail(failed(collectiveWhat(current_->kind(), name) + " failed: " + why));
  for (auto*& impl : in_) {
    if (impl != nullptr) impl->detach();
    impl = nullptr;
  }
  // Closing the links tells the other members. Not from inside a callback
  // of one of them, and after a moment, so an abort just sent goes first.
  auto links = kj::heapArrayBuilder<kj::Own<RemoteLink>>(out_.size());
  for (auto& link : out_) links.add(kj::mv(link));
  server_.addTask(server_.timer.afterDelay(kLinkLinger).then([links = links.finish()]() {}));
  if (onBroken) {
    auto hook = std::move(onBroken);
    onBroken = nullptr;
    hook();
  }
}

kj::Promise<CollectiveOutputs> Group::runCollective(uint64_t seq, kj::Promise<CollectiveRequest> request) {
  auto previous = tail_.addBranch();
  auto work = previous.then([request = kj::mv(request)]() mutable { return kj::mv(request); })
                  .then(
                      [this, seq](CollectiveRequest req) -> kj::Promise<CollectiveOutputs> {
                        const std::string what = collectiveWhat(req.kind, name);
                        if (state_ == State::kBroken) {
                          return failed(what + ": the group is broken (" + broken_ + "); re-form it with groupCreate");
                        }
                        if (state_ == State::kForming) return failed(what + ": the group is still forming");
                        const uint32_t chunk =
                            std::min<uint64_t>(server_.config.groups.chunkBytes, server_.engine.stagingSlotBytes());
                        auto run = kj::heap<CollectiveRun>(*this, seq, kj::mv(req), chunk);
                        current_ = run.get();
                        return run->run()
                            .then([this](CollectiveOutputs out) {
                              ++collectivesDone_;
                              return out;
                            })
                            .attach(kj::mv(run));
                      },
                      [this, seq](kj::Exception&& e) -> kj::Promise<CollectiveOutputs> {
                        // The inputs did not resolve here: the other members fail it too.
                        for (uint32_t r = 0; r < size(); ++r) {
                          if (r == rank || !out_[r]) continue;
                          tasks_.add(out_[r]->abort(seq, e.getDescription().cStr()));
                        }
                        return kj::mv(e);
                      })
                  .then(
                      [this, seq](CollectiveOutputs out) {
                        headers_.erase(headers_.begin(), headers_.upper_bound(seq));
                        aborts_.erase(aborts_.begin(), aborts_.upper_bound(seq));
                        return out;
                      },
                      [this, seq](kj::Exception&& e) -> CollectiveOutputs {
                        headers_.erase(headers_.begin(), headers_.upper_bound(seq));
                        aborts_.erase(aborts_.begin(), aborts_.upper_bound(seq));
                        kj::throwFatalException(kj::mv(e));
                      });
  // The next collective waits for this one, even if its caller goes away.
  auto forked = work.fork();
  tail_ = forked.addBranch().then([](CollectiveOutputs) {}, [](kj::Exception&&) {}).fork();
  return forked.addBranch();
}

void Group::onHeader(uint32_t from, CollectiveHeader header) {
  if (header.seq > nextSeq_ + kMaxHeadersAhead) {
    kj::throwFatalException(failed("GroupPeer.header: collective #" + std::to_string(header.seq) +
                                   " is too far ahead of this member (#" + std::to_string(nextSeq_) + ")"));
  }
  const uint64_t seq = header.seq;
  server_.log.debug("group {}: header of collective #{} ({}) from {}", name, seq, header.kind, memberName(from));
  headers_[seq][from] = std::move(header);
  if (current_ != nullptr && current_->seq() == seq) current_->headerArrived();
}

kj::Promise<void> Group::onData(uint32_t from, uint64_t seq, uint32_t step, uint32_t chunk, capnp::Data::Reader data) {
  if (current_ == nullptr || current_->seq() != seq) {
    return failed("group " + name + ": data from " + memberName(from) + " for collective #" + std::to_string(seq) +
                  ", which is not running here");
  }
  return current_->onData(from, step, chunk, data);
}

void Group::onAbort(uint32_t from, uint64_t seq, std::string reason) {
  if (current_ != nullptr && current_->seq() == seq) {
    current_->fail(failed(collectiveWhat(current_->kind(), name) + ": " + memberName(from) + " failed it: " + reason),
                   /*fromPeer=*/true);
    return;
  }
  if (seq + kMaxHeadersAhead < nextSeq_ || seq > nextSeq_ + kMaxHeadersAhead) return;
  aborts_.emplace(seq, memberName(from) + " failed it: " + reason);
}

void Group::taskFailed(kj::Exception&& exception) {
  server_.log.debug("group {}: {}", name, exception.getDescription().cStr());
}

// ------------------------------------------------------------ GroupPeerImpl

GroupPeerImpl::~GroupPeerImpl() {
  if (auto group = group_.lock()) group->incomingLost(from_, this);
}

std::shared_ptr<Group> GroupPeerImpl::group(const char* method) {
  auto group = group_.lock();
  if (!group) {
    kj::throwFatalException(
        failed(std::string("GroupPeer.") + method + ": the group was re-formed, deleted or broken on this daemon"));
  }
  return group;
}

kj::Promise<void> GroupPeerImpl::header(HeaderContext context) {
  auto g = group("header");
  auto wire = context.getParams().getHeader();
  CollectiveHeader header;
  header.seq = wire.getSeq();
  header.kind = wire.getKind();
  header.op = wire.getOp();
  header.root = wire.getRoot();
  for (auto desc : wire.getInputs()) header.inputs.push_back(descFromWire(desc, "GroupPeer.header"));
  g->onHeader(from_, std::move(header));
  return kj::READY_NOW;
}

kj::Promise<void> GroupPeerImpl::data(DataContext context) {
  auto g = group("data");
  auto params = context.getParams();
  return g->onData(from_, params.getSeq(), params.getStep(), params.getChunk(), params.getData()).attach(kj::mv(g));
}

kj::Promise<void> GroupPeerImpl::formed(FormedContext context) {
  group("formed")->onFormed(from_);
  return kj::READY_NOW;
}

kj::Promise<void> GroupPeerImpl::abort(AbortContext context) {
  auto g = group("abort");
  auto params = context.getParams();
  g->onAbort(from_, params.getSeq(), params.getReason());
  return kj::READY_NOW;
}

// ------------------------------------------------------------ GroupRegistry

GroupRegistry::GroupRegistry(ServerState& server)
    : server_(server), links_(server.config.groups, server.config.limits.maxMessageBytes) {}

GroupRegistry::~GroupRegistry() { closeAll("the daemon is stopping"); }

void GroupRegistry::taskFailed(kj::Exception&& exception) {
  server_.log.warn("groups: {}", exception.getDescription().cStr());
}

kj::Promise<std::shared_ptr<Group>> GroupRegistry::create(const std::string& name,
                                                          const std::vector<std::string>& memberTexts, uint32_t rank,
                                                          const std::string& origin, uint32_t timeoutMs) {
  if (std::string problem = groupNameProblem(name); !problem.empty()) {
    kj::throwFatalException(failed("groupCreate: name: " + problem));
  }
  if (memberTexts.empty()) kj::throwFatalException(failed("groupCreate " + name + ": members is empty"));
  std::vector<MemberAddress> members;
  std::set<std::string> seen;
  for (size_t i = 0; i < memberTexts.size(); ++i) {
    const std::string key = "groupCreate " + name + ": members[" + std::to_string(i) + "]";
    try {
      members.push_back(parseMemberAddress(memberTexts[i], key));
    } catch (const ConfigError& e) {
      kj::throwFatalException(failed(e.what()));
    }
    if (!seen.insert(members.back().hostPort.str()).second) {
      kj::throwFatalException(failed(key + ": " + memberTexts[i] + " is listed twice"));
    }
  }
  if (rank >= members.size()) {
    kj::throwFatalException(failed("groupCreate " + name + ": rank " + std::to_string(rank) +
                                   " is not a member's place; expected 0 to " + std::to_string(members.size() - 1)));
  }
  if (auto it = groups_.find(name); it != groups_.end()) {
    it->second->onBroken = nullptr;  // a static group stays replaced
    it->second->breakGroup("replaced by a new groupCreate");
    groups_.erase(it);
  }
  auto group = std::make_shared<Group>(server_, links_, name, std::move(members), rank, origin);
  groups_[name] = group;
  const kj::TimePoint deadline = server_.timer.now() + timeoutMs * kj::MILLISECONDS;
  group->startForming(deadline);
  std::weak_ptr<Group> weak = group;
  return server_.timer.timeoutAt(deadline, group->whenReady())
      .then([group]() { return group; },
            [weak, name, timeoutMs](kj::Exception&& e) -> std::shared_ptr<Group> {
              auto g = weak.lock();
              if (g && g->state() == Group::State::kForming) {
                const std::string problems = g->formationProblems();
                g->breakGroup("formation timed out after " + std::to_string(timeoutMs) + " ms: " + problems);
                kj::throwFatalException(failed("groupCreate " + name + ": timed out after " +
                                               std::to_string(timeoutMs) + " ms: " + problems));
              }
              kj::throwFatalException(kj::mv(e));
            });
}

void GroupRegistry::formStatic() {
  for (size_t i = 0; i < server_.config.groups.staticGroups.size(); ++i) formStatic(i);
}

void GroupRegistry::formStatic(size_t index) {
  const StaticGroup& config = server_.config.groups.staticGroups[index];
  std::vector<MemberAddress> members;
  for (size_t i = 0; i < config.members.size(); ++i) {
    members.push_back(parseMemberAddress(config.members[i], "groups.static"));
  }
  auto group = std::make_shared<Group>(server_, links_, config.name, std::move(members), config.rank, "config");
  groups_[config.name] = group;
  server_.log.info("group {}: forming as rank {} of {} (groups.static)", config.name, config.rank,
                   config.members.size());
  // Broken by a fault (a member stopped, a link dropped, a collective
  // failed), it forms again on its own: the other members' copies broke
  // too, and a member that comes back forms it at its start. Not when it is
  // deleted, replaced by a groupCreate, or the daemon stops.
  std::weak_ptr<Group> weak = group;
  group->onBroken = [this, index, weak]() {
    if (closing_) return;
    tasks_.add(server_.timer.afterDelay(kReformDelay).then([this, index, weak]() {
      auto broken = weak.lock();
      auto it = groups_.find(server_.config.groups.staticGroups[index].name);
      if (closing_ || !broken || it == groups_.end() || it->second != broken) return;
      server_.log.info("group {}: forming again (groups.static) after it broke: {}", broken->name,
                       broken->stateText());
      formStatic(index);
    }));
  };
  group->startForming(std::nullopt);
}

std::shared_ptr<Group> GroupRegistry::find(std::string_view name) const {
  auto it = groups_.find(name);
  return it == groups_.end() ? nullptr : it->second;
}

bool GroupRegistry::remove(std::string_view name) {
  auto it = groups_.find(name);
  if (it == groups_.end()) return false;
  it->second->onBroken = nullptr;  // deleted on purpose: a static group stays deleted
  it->second->breakGroup("deleted by groupDelete on " + it->second->memberName(it->second->rank));
  groups_.erase(it);
  return true;
}

std::vector<std::shared_ptr<Group>> GroupRegistry::all() const {
  std::vector<std::shared_ptr<Group>> out;
  for (const auto& [name, group] : groups_) out.push_back(group);
  return out;
}

void GroupRegistry::closeAll(const std::string& why) {
  closing_ = true;
  for (auto& [name, group] : groups_) group->breakGroup(why);
  groups_.clear();
}

}  // namespace tensord::server
