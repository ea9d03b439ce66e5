#pragma once
// CollectiveRun: one collective on one member of a group, from the header
// exchange to the outputs.
//
// 1. Every member sends its header (kind, op, root, input dtypes and shapes)
//    to every other member and waits for theirs; any difference fails the
//    collective on every member alike, naming both sides, before data moves.
// 2. Data moves in chunks (groups.chunk_bytes) as GroupPeer `data` calls on
//    each link, paced by the sending link's window (the links this member
//    sends through run on the LinkThread, group_link.h):
//    - allreduce: ring reduce-scatter then allgather over 2(n-1) steps.
//      Chunks go out of and come into host memory that the device reads
//      and writes (Engine::allocateHost), with no staging slots and no copy
//      into messages: a chunk received is copied off its message (on a
//      worker thread from 1 MiB), reduced by one dispatch that writes the
//      sum to the f32 scratch and to the wire buffer, and sent on from
//      there, while later chunks are in flight. Small
//      tensors go direct instead: every member sends its whole tensor to
//      every other and each reduces all of them in rank order (one network
//      hop instead of 2(n-1)); a member's own contribution is converted
//      and copied to host memory while the headers cross, and sent from
//      there.
//    - reduce_scatter: the ring's first half, ending on this rank's slice.
//    - broadcast: a pipelined chain from the root.
//    - allgather: each member sends its tensor to every other.
//    - barrier: the header exchange alone.
//    Reductions keep f32 partial results (f16/bf16 inputs are converted on
//    the device first and back at the end; mean scales at the end).
// 3. Outputs are written only once every chunk arrived: inputs are left as
//    they were on any failure; in_place copies the results over them last.
//
// A failure anywhere (a mismatch, a member's abort, a lost link, the
// timeout) fails the run at once; every promise of it is then dropped and
// its device buffers go back when the device is done with them.
//
// Threads: the event-loop thread only; sends are handed to the group's
// RemoteLinks, which write them on the link thread. The Group outlives its
// runs.

#include <kj/async.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/group.h"
#include "server/staging_pool.h"

namespace tensord::server {

class CollectiveRun final : private kj::TaskSet::ErrorHandler {
 public:
  CollectiveRun(Group& group, uint64_t seq, CollectiveRequest request, uint32_t chunkBytes);
  ~CollectiveRun();

  // Runs to the end; rejects with a message naming the collective.
  kj::Promise<CollectiveOutputs> run();

  uint64_t seq() const { return seq_; }
  const std::string& kind() const { return request_.kind; }

  // A header from member `from` arrived (its seq is ours).
  void headerArrived();
  // Chunk data from member `from`; resolves once it is copied off the
  // message (the device work and any forwarding go on in the background).
  kj::Promise<void> onData(uint32_t from, uint32_t step, uint32_t chunk, capnp::Data::Reader data);
  // Fails the run (a lost link, the group broke); `fromPeer`: another
  // member's abort, which the others got too (no abort is sent on).
  void fail(kj::Exception error, bool fromPeer = false);

 private:
  struct Region {  // a stretch of a device buffer, in bytes
    std::shared_ptr<compute::Buffer> buffer;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };

  CollectiveHeader localHeader() const;
  kj::Promise<void> exchangeHeaders();
  void checkHeaders();  // throws a mismatch naming both sides
  kj::Promise<void> moveData();
  kj::Promise<CollectiveOutputs> finish();
  std::string timeoutMessage() const;

  // The plan of each kind.
  void prepareReduction();
  void startRing();
  void startDirectReduce();
  void startBroadcast();
  void startAllgather();
  kj::Promise<void> receive(uint32_t from, uint32_t step, uint32_t chunk, capnp::Data::Reader data);

  // Device work, all in the requesting principal's queue.
  kj::Promise<void> enqueueDevice(const std::function<void(compute::Completion)>& start);
  std::shared_ptr<compute::Buffer> allocate(uint64_t bytes);
  std::shared_ptr<compute::Buffer> allocateHost(uint64_t bytes);  // Engine::allocateHost
  kj::Promise<void> convert(const compute::TensorView& src, uint64_t srcOffset, const compute::TensorView& dst,
                            uint64_t dstOffset, uint64_t count, double scale);
  // scratch[dstOffset..] = op(scratch[dstOffset..], src[srcOffset..]), f32 elements
  kj::Promise<void> reduce(uint64_t srcOffset, uint64_t dstOffset, uint64_t count,
                           const std::shared_ptr<compute::Buffer>& src);
  // Ring: elements [offset, offset + count) of recvHost_ reduced into the
  // scratch, the results also written to the wire buffer: one dispatch.
  kj::Promise<void> reduceReceived(uint64_t offset, uint64_t count);
  kj::Promise<void> upload(const StagingLease& lease, uint64_t bytes, const std::shared_ptr<compute::Buffer>& dst,
                           uint64_t offset);
  kj::Promise<void> download(const StagingLease& lease, const std::shared_ptr<compute::Buffer>& src, uint64_t offset,
                             uint64_t bytes);

  // Network: a region downloaded and sent to members `to` (and uploaded
  // elsewhere on this device too); one data message queued to a member.
  kj::Promise<void> sendRegion(std::vector<uint32_t> to, uint32_t step, uint32_t chunk, Region from,
                               kj::Maybe<Region> alsoUpload);
  // `from`: the host buffer `bytes` lie in, which outlives the run; then
  // the message points into it instead of copying (see PeerLink::sentFrom).
  void queueSend(uint32_t to, uint32_t step, uint32_t chunk, kj::ArrayPtr<const kj::byte> bytes,
                 const std::shared_ptr<compute::Buffer>& from = nullptr);
  // Ring, direct: `bytes` of the wire buffer at byte `offset`, without a copy.
  void sendWire(uint32_t to, uint32_t step, uint32_t chunk, uint64_t offset, uint64_t bytes);
  // The device copies `bytes` at byte `offset` from `src` to `dst` (or from
  // `srcOffset` to `dstOffset`).
  kj::Promise<void> transfer(const std::shared_ptr<compute::Buffer>& src, const std::shared_ptr<compute::Buffer>& dst,
                             uint64_t offset, uint64_t bytes);
  kj::Promise<void> transfer(const std::shared_ptr<compute::Buffer>& src, uint64_t srcOffset,
                             const std::shared_ptr<compute::Buffer>& dst, uint64_t dstOffset, uint64_t bytes);
  // A small allreduce (the direct algorithm) whose inputs can be prepared
  // before the headers are agreed (see exchangeHeaders).
  bool preparesEarly() const;
  // `sending`, its failure naming the member it went to.
  kj::Promise<void> linkTo(uint32_t to, kj::Promise<void> sending);
  void receivedOne(uint32_t from);
  // Ring: puts the chunks waiting for reduction on the device.
  void flushReduces();
  // Keeps a sendRegion to wait for before the run may end.
  void trackSend(kj::Promise<void> sending);
  void taskFailed(kj::Exception&& exception) override;

  uint64_t chunkCount(uint64_t bytes) const { return (bytes + chunkBytes_ - 1) / chunkBytes_; }
  // Ring: segment k is elements [segmentBegin(k), segmentBegin(k + 1)).
  uint64_t segmentBegin(uint32_t k) const;
  uint64_t segmentChunks(uint32_t k) const;
  uint32_t sendSegment(uint32_t step) const;
  uint32_t recvSegment(uint32_t step) const;
  std::string what() const;
  std::string peerName(uint32_t r) const { return group_.memberName(r); }

  Group& group_;
  ServerState& server_;
  const uint64_t seq_;
  CollectiveRequest request_;
  const uint32_t chunkBytes_;
  const uint32_t n_, r_;
  bool moving_ = false;     // headers agreed, data may move
  bool planReady_ = false;  // the data plan is set up: chunks can be placed
  bool finished_ = false;
  bool agreed_ = false;    // the failure is one every member reaches alike (no abort needed)
  bool fromPeer_ = false;  // the failure is another member's abort
  bool timedOut_ = false;

  kj::Own<kj::PromiseFulfiller<void>> failure_;  // rejected by fail()
  kj::ForkedPromise<void> failed_;
  kj::Own<kj::PromiseFulfiller<void>> planned_;  // fulfilled once the data plan is set up
  kj::ForkedPromise<void> whenPlanned_;
  kj::Own<kj::PromiseFulfiller<void>> headersIn_;  // fulfilled when every header is here
  kj::Own<kj::PromiseFulfiller<void>> allIn_;      // fulfilled when every expected chunk was handled
  uint64_t expected_ = 0, received_ = 0;
  std::vector<uint64_t> expectedFrom_, receivedFrom_;  // by member

  // The data layout.
  enum class Algo { kNone, kRing, kDirect, kChain, kGather } algo_ = Algo::kNone;
  uint64_t total_ = 0;                                        // elements (reductions) or bytes of the input (allgather)
  uint64_t base_ = 0;                                         // direct: this member's place in the scratch, elements
  std::string reduceOp_;                                      // sum, max, min
  std::vector<uint64_t> inputOffsets_;                        // per input: elements into the scratch (reductions)
  std::vector<uint64_t> chunkBase_;                           // broadcast: first chunk id of each input, then the total
  std::shared_ptr<compute::Buffer> scratch_;                  // f32 partial results (reductions)
  std::shared_ptr<compute::Buffer> recvHost_;                 // ring: f32 chunks to reduce, as received (host memory)
  std::shared_ptr<compute::Buffer> wire_;  // ring, direct: f32 chunks going out (host memory)
  kj::Own<kj::ForkedPromise<void>> wireReady_;  // direct: this member's contribution is in wire_
  bool prepared_ = false;                       // prepareReduction() ran while the headers crossed
  kj::Maybe<kj::Exception> earlyFailure_;       // ... and failed: the run fails with it once they agree
  kj::Vector<kj::Promise<void>> earlyWork_;     // its device work, watched from then on
  std::vector<std::shared_ptr<compute::Buffer>> outBuffers_;  // broadcast, allgather: outputs being filled
  uint32_t shift_ = 0;                                        // ring: 0 allreduce, 1 reduce_scatter
  uint32_t ringSteps_ = 0;

  // Ring: chunks received for reduction, not yet on the device.
  struct PendingReduce {
    uint32_t from, chunk, forwardStep;
    int64_t forwardTo;
    uint64_t offset, size;  // bytes
  };
  void landed(const PendingReduce& chunk, bool reduceIt);  // a chunk is in host memory
  static constexpr uint32_t kMaxReducesInFlight = 2;
  // Ring chunks from this size up are copied off their messages on a worker
  // thread (ServerState::chunkCopies); smaller ones on the loop, where the
  // hand-off would cost more than the copy.
  static constexpr uint64_t kWorkerCopyBytes = 1u << 20;
  std::vector<PendingReduce> pendingReduce_;
  uint32_t reducesInFlight_ = 0;

  std::vector<kj::Own<kj::ForkedPromise<void>>> regionSends_;  // this member's own chunks going out
  std::vector<kj::Own<kj::ForkedPromise<void>>> sendTail_;     // per member: the last send queued to it
  kj::Vector<kj::Promise<void>> stagedFrom_;                   // per member: its last chunk into a staging slot
  // Chunks being landed: their promises belong to the link that delivered
  // them and may outlive the run; they are dropped with it.
  kj::Canceler receiving_;
  kj::TaskSet tasks_{*this};  // last: chunk work goes first
};

}  // namespace tensord::server
