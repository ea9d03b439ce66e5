#pragma once
// FairQueue: the device work waiting for the submit thread, shared fairly
// between the principals that queued it.
//
// One FIFO per owner keeps each owner's work in the order it was queued.
// Batches are filled by deficit round robin over the owners (Shreedhar and
// Varghese, 1995), with a job's cost estimated from the bytes it touches: a
// client that queues thousands of large matmuls gets its turn like anyone
// else, and the tiny op of another client waits for at most one batch, not
// for the whole backlog. While more than one owner waits, batches are cut at
// a cost budget so that a batch of heavy work cannot hold a light client's
// completion back for long.
//
// Jobs of different owners may share buffers (named tensors, views): a job
// is taken only after every earlier job it conflicts with (a write before
// its read, any access before its write) has been taken. Conflicts are
// found by memory (Block), not by Buffer object: a block freed while queued
// work still uses it may already serve a new Buffer (see buffer.h), whose
// work must then wait for the old Buffer's. Taken jobs are
// recorded in order with a barrier before each one that conflicts with a job
// recorded before it (by the same rule), so that is all the ordering the
// device needs. The oldest waiting job never waits on anything,
// so the queue always makes progress.
//
// Not thread-safe: only the CommandStream's submit thread uses it.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compute/buffer.h"
#include "compute/engine.h"

namespace tensord::compute {

class BatchRecorder;

// A unit of device work. `reads` and `writes` name the buffers it uses, so a
// failure travels: when a job fails, the buffers it writes carry the failure,
// and a later job that reads one of them fails too, naming the original error
// (its own result was computed from garbage, never from memory outside a
// buffer, and is never handed out as valid).
struct Job {
  std::function<void(BatchRecorder&)> record;
  Completion done;
  std::string what;  // names the job in propagated errors ("mul")
  std::vector<std::pair<std::string, std::shared_ptr<Buffer>>> reads;  // (input name, buffer)
  std::vector<std::shared_ptr<Buffer>> writes;
  std::string owner;     // whose share of the device this job uses
  uint64_t cost = 0;     // estimated bytes it moves; 0 = the sizes of reads and writes
  bool barrier = false;  // taken only after every job queued before it
  // It runs a user kernel (alone or in a graph): its batch gets timed and
  // every job of it waits for the one before (docs/design.md, "Submission").
  bool userKernel = false;
  // The memory of `reads` and `writes` (FairQueue::blocksOf), set when the
  // job is taken into a batch, for the recorder's barriers.
  std::vector<const Block*> readBlocks, writeBlocks;
};

class FairQueue {
 public:
  struct BatchLimits {
    size_t maxJobs = 256;
    // Cost (bytes touched) after which a batch is closed while more than one
    // owner has work waiting; a batch always takes at least one job.
    uint64_t sharedCost = 64ull << 20;
    // The same bound when only one owner has work waiting: a batch cannot be
    // preempted, so this bounds what an owner arriving next waits for.
    uint64_t soloCost = 512ull << 20;
    // The bound for the only owner waiting once no other owner has queued
    // a job for `aloneAfter`. Each batch is a submit, and the device idles
    // a few microseconds between submits: on an H100, streams of 64 MiB
    // elementwise ops or 256 MiB reductions ran 2-5% faster in batches four
    // times as large. An owner arriving after such a stretch waits once for
    // up to a few of them (about 2 ms at an H100's bandwidth); while owners
    // take turns, batches stay at the bounds above. Jobs without an owner
    // (every job when the device is shared in arrival order, and barriers)
    // never get it: such an owner may stand for many clients.
    uint64_t aloneCost = 2ull << 30;
    std::chrono::milliseconds aloneAfter{20};
  };
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  explicit FairQueue(BatchLimits limits, Clock now = [] { return std::chrono::steady_clock::now(); })
      : limits_(limits), now_(std::move(now)) {}

  void push(Job job);
  bool empty() const { return waiting_.empty(); }
  size_t size() const { return waiting_.size(); }

  // Moves the next batch into `out` (which must be empty): at least one job
  // when any is waiting.
  void takeBatch(std::deque<Job>& out);

  // Estimated device cost of a job: job.cost or the bytes of the buffers it
  // reads and writes, plus a fixed amount for the dispatch itself.
  static uint64_t costOf(const Job& job);

 private:
  struct Entry {
    uint64_t seq;
    uint64_t cost;
    std::vector<uint64_t> after;  // seqs of the jobs to be taken first, ascending
    size_t afterTaken = 0;        // after's first ones already found taken (ready())
    std::vector<const Block*> reads, writes;  // the memory of the job's buffers, each once
    Job job;
  };
  struct Owner {
    std::deque<Entry> jobs;
    uint64_t deficit = 0;
  };
  // The queued jobs that read a block since its last queued write, in the
  // order queued (ascending seq), but for those already taken at its front:
  // thousands of queued ops may read one tensor (a weight, a constant).
  // Jobs are mostly taken in queue order, so dropping the taken front costs
  // amortized constant time. A read taken ahead of an earlier one (another
  // owner's) stays until the front reaches it; a write queued meanwhile
  // lists it among the jobs it waits for, and ready() finds it taken. An
  // empty list allocates nothing.
  class ReadList {
   public:
    void add(uint64_t seq) { seqs_.push_back(seq); }
    // Drops the reads at the front that are no longer `waiting`.
    void dropTaken(const std::set<uint64_t>& waiting);
    void clear() {
      seqs_.clear();
      first_ = 0;
    }
    bool empty() const { return first_ == seqs_.size(); }
    std::vector<uint64_t>::const_iterator begin() const { return seqs_.begin() + ptrdiff_t(first_); }
    std::vector<uint64_t>::const_iterator end() const { return seqs_.end(); }

   private:
    std::vector<uint64_t> seqs_;
    size_t first_ = 0;  // seqs_ before it were taken
  };
  // The queued, not yet taken accesses to one block of memory.
  struct Pending {
    uint64_t lastWrite = kNone;
    ReadList readsSinceWrite;
  };
  static constexpr uint64_t kNone = UINT64_MAX;

  // Whether every job `entry` waits for was taken. Jobs are mostly taken in
  // queue order, so the ones found taken at the front of `after` are skipped
  // for good: a job waiting on thousands of others (a write after many
  // queued reads), checked again on every visit while it waits, looks at
  // each of them once, and at the first one still waiting.
  bool ready(Entry& entry) const;
  void take(Entry& entry, std::deque<Job>& out);
  void forget(const Block* block, uint64_t seq);
  // The memory a job reads (or writes): its buffers' blocks, sorted, each once.
  static std::vector<const Block*> blocksOf(const Job& job, bool writes);

  BatchLimits limits_;
  Clock now_;
  // The owner of the last job queued with one ("": none yet), since when
  // every job with an owner came from it, and when it queued last.
  std::string lastOwner_;
  std::chrono::steady_clock::time_point lastOwnerSince_, lastPushAt_;
  uint64_t nextSeq_ = 0;
  std::set<uint64_t> waiting_;          // seqs queued and not yet taken
  std::map<std::string, Owner> owners_;  // owners with jobs waiting
  std::deque<std::string> turn_;        // round-robin order of owners_
  std::unordered_map<const Block*, Pending> pending_;
};

}  // namespace tensord::compute
