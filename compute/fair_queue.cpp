#include "compute/fair_queue.h"

#include <algorithm>

namespace tensord::compute {
namespace {

// What an owner may spend per turn. Small against a batch's budget, large
// against a tiny op: a light client's whole backlog of small ops fits in one
// turn.
constexpr uint64_t kQuantum = 4ull << 20;
// Every job costs at least a dispatch.
constexpr uint64_t kDispatchCost = 4096;

}  // namespace

uint64_t FairQueue::costOf(const Job& job) {
  if (job.cost != 0) return job.cost + kDispatchCost;
  uint64_t bytes = 0;
  for (const auto& [name, buffer] : job.reads) bytes += buffer->bytes();
  for (const auto& buffer : job.writes) bytes += buffer->bytes();
  return bytes + kDispatchCost;
}

std::vector<const Block*> FairQueue::blocksOf(const Job& job, bool writes) {
  std::vector<const Block*> out;
  if (writes) {
    for (const auto& buffer : job.writes) out.push_back(&buffer->block());
  } else {
    for (const auto& [name, buffer] : job.reads) out.push_back(&buffer->block());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void FairQueue::push(Job job) {
  if (!job.owner.empty()) {
    lastPushAt_ = now_();
    if (job.owner != lastOwner_) {
      lastOwner_ = job.owner;
      lastOwnerSince_ = lastPushAt_;
    }
  }
  Entry entry{.seq = nextSeq_++,
              .cost = costOf(job),
              .after = {},
              .reads = blocksOf(job, false),
              .writes = blocksOf(job, true),
              .job = std::move(job)};
  const auto& reads = entry.reads;
  const auto& writes = entry.writes;
  // Conflicts with queued jobs first, then this job's own accesses (a job
  // that reads and writes one buffer must not wait on itself).
  for (const Block* b : reads) {
    auto it = pending_.find(b);
    if (it != pending_.end() && it->second.lastWrite != kNone) entry.after.push_back(it->second.lastWrite);
  }
  for (const Block* b : writes) {
    auto it = pending_.find(b);
    if (it == pending_.end()) continue;
    if (it->second.lastWrite != kNone) entry.after.push_back(it->second.lastWrite);
    entry.after.insert(entry.after.end(), it->second.readsSinceWrite.begin(), it->second.readsSinceWrite.end());
  }
  std::sort(entry.after.begin(), entry.after.end());
  entry.after.erase(std::unique(entry.after.begin(), entry.after.end()), entry.after.end());
  for (const Block* b : reads) pending_[b].readsSinceWrite.add(entry.seq);
  for (const Block* b : writes) {
    Pending& p = pending_[b];
    p.lastWrite = entry.seq;
    p.readsSinceWrite.clear();  // a later writer waits for this job, which waits for them
  }

  waiting_.insert(entry.seq);
  auto [it, added] = owners_.try_emplace(entry.job.owner);
  if (added) turn_.push_back(entry.job.owner);
  it->second.jobs.push_back(std::move(entry));
}

bool FairQueue::ready(Entry& entry) const {
  if (entry.job.barrier) return *waiting_.begin() == entry.seq;
  while (entry.afterTaken < entry.after.size() && waiting_.count(entry.after[entry.afterTaken]) == 0) {
    ++entry.afterTaken;  // a taken job stays taken
  }
  return entry.afterTaken == entry.after.size();
}

void FairQueue::forget(const Block* block, uint64_t seq) {
  auto it = pending_.find(block);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.lastWrite == seq) p.lastWrite = kNone;
  p.readsSinceWrite.dropTaken(waiting_);  // take() removed `seq` from waiting_ first
  if (p.lastWrite == kNone && p.readsSinceWrite.empty()) pending_.erase(it);
}

void FairQueue::ReadList::dropTaken(const std::set<uint64_t>& waiting) {
  while (first_ < seqs_.size() && !waiting.contains(seqs_[first_])) ++first_;
  if (empty()) {
    clear();
  } else if (first_ >= 64 && 2 * first_ >= seqs_.size()) {  // the taken ones go, in amortized constant time
    seqs_.erase(seqs_.begin(), seqs_.begin() + ptrdiff_t(first_));
    first_ = 0;
  }
}

void FairQueue::take(Entry& entry, std::deque<Job>& out) {
  waiting_.erase(entry.seq);
  for (const Block* b : entry.reads) forget(b, entry.seq);
  for (const Block* b : entry.writes) forget(b, entry.seq);
  entry.job.readBlocks = std::move(entry.reads);
  entry.job.writeBlocks = std::move(entry.writes);
  out.push_back(std::move(entry.job));
}

void FairQueue::takeBatch(std::deque<Job>& out) {
  uint64_t budget = turn_.size() > 1 ? limits_.sharedCost : limits_.soloCost;
  if (turn_.size() == 1 && !turn_.front().empty()) {
    // When did an owner other than the one waiting last queue a job?
    const auto others = turn_.front() == lastOwner_ ? lastOwnerSince_ : lastPushAt_;
    if (now_() - others >= limits_.aloneAfter) budget = limits_.aloneCost;
  }
  uint64_t spent = 0;
  size_t idleVisits = 0;  // owners visited in a row that took nothing
  while (!turn_.empty() && out.size() < limits_.maxJobs) {
    if (idleVisits == turn_.size()) {
      // A whole round took nothing: each head waits on another owner's job
      // or costs more than its owner's deficit. Grant the rounds of quantum
      // the nearest ready head needs at once instead of looping through
      // them. (The oldest waiting job is always ready.)
      uint64_t need = UINT64_MAX;
      for (const auto& name : turn_) {
        Owner& o = owners_.at(name);
        Entry& head = o.jobs.front();
        if (ready(head)) need = std::min(need, head.cost - std::min(head.cost, o.deficit));
      }
      const uint64_t rounds = need == UINT64_MAX ? 1 : (need + kQuantum - 1) / kQuantum;
      for (const auto& name : turn_) owners_.at(name).deficit += rounds * kQuantum;
      idleVisits = 0;
    }
    Owner& owner = owners_.at(turn_.front());
    owner.deficit += kQuantum;
    bool took = false;
    while (!owner.jobs.empty() && out.size() < limits_.maxJobs) {
      Entry& head = owner.jobs.front();
      if (!ready(head) || head.cost > owner.deficit) break;
      // The batch is full: this owner keeps its turn (and deficit) for the next one.
      if (!out.empty() && spent + head.cost > budget) return;
      owner.deficit -= head.cost;
      spent += head.cost;
      take(head, out);
      owner.jobs.pop_front();
      took = true;
    }
    std::string visited = std::move(turn_.front());
    turn_.pop_front();
    if (owner.jobs.empty()) {
      owners_.erase(visited);  // an idle owner keeps no credit (DRR)
    } else {
      turn_.push_back(std::move(visited));
    }
    idleVisits = took ? 0 : idleVisits + 1;
  }
}

}  // namespace tensord::compute
