#include "server/collective.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "compute/collective_kernels.h"
#include "server/loop_completion.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// allreduce goes direct (one hop, every member reduces all contributions)
// while the f32 bucket is at most this; above it, the ring.
constexpr uint64_t kDirectMaxBytes = 256u << 10;

bool isReduction(const std::string& kind) { return kind == "allreduce" || kind == "reduce_scatter"; }

compute::TensorView view(const std::shared_ptr<compute::Buffer>& buffer, compute::DType dtype) {
  return {compute::TensorDesc{dtype, {int64_t(buffer->bytes() / compute::dtypeSize(dtype))}}, buffer};
}

std::string describeInputs(const std::vector<compute::TensorDesc>& inputs) {
  if (inputs.empty()) return "no inputs";
  if (inputs.size() == 1) return inputs[0].str();
  std::string out = std::to_string(inputs.size()) + " inputs (";
  for (size_t i = 0; i < inputs.size(); ++i) out += (i ? ", " : "") + inputs[i].str();
  return out + ")";
}

}  // namespace

CollectiveRun::CollectiveRun(Group& group, uint64_t seq, CollectiveRequest request, uint32_t chunkBytes)
    : group_(group),
      server_(group.server()),
      seq_(seq),
      request_(std::move(request)),
      chunkBytes_(chunkBytes),
      n_(group.size()),
      r_(group.rank),
      failed_(nullptr),
      whenPlanned_(nullptr) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  failure_ = kj::mv(paf.fulfiller);
  failed_ = paf.promise.fork();
  auto plan = kj::newPromiseAndFulfiller<void>();
  planned_ = kj::mv(plan.fulfiller);
  whenPlanned_ = plan.promise.fork();
  sendTail_.resize(n_);
  for (uint32_t r = 0; r < n_; ++r) stagedFrom_.add(kj::READY_NOW);
  expectedFrom_.assign(n_, 0);
  receivedFrom_.assign(n_, 0);
}

CollectiveRun::~CollectiveRun() {
  if (group_.current_ == this) group_.current_ = nullptr;
}

std::string CollectiveRun::what() const { return collectiveWhat(request_.kind, group_.name); }

void CollectiveRun::fail(kj::Exception error, bool fromPeer) {
  if (failure_->isWaiting() && fromPeer) fromPeer_ = true;
  if (planned_->isWaiting()) planned_->reject(kj::cp(error));
  if (failure_->isWaiting()) failure_->reject(kj::mv(error));
}

void CollectiveRun::taskFailed(kj::Exception&& exception) { fail(kj::mv(exception)); }

CollectiveHeader CollectiveRun::localHeader() const {
  CollectiveHeader h;
  h.seq = seq_;
  h.kind = request_.kind;
  h.op = request_.op;
  h.root = request_.root;
  for (const auto& input : request_.inputs) h.inputs.push_back(input.desc);
  return h;
}

kj::Promise<CollectiveOutputs> CollectiveRun::run() {
  auto work = kj::evalLater([this]() -> kj::Promise<void> {
                auto& aborts = group_.aborts_;
                if (auto it = aborts.find(seq_); it != aborts.end()) {
                  fromPeer_ = true;
                  return failed(what() + ": " + it->second);
                }
                return exchangeHeaders();
              })
                  .then([this]() {
                    checkHeaders();
                    moving_ = true;
                    return moveData();
                  })
                  .then([this]() { return finish(); });
  auto timeout = server_.timer.afterDelay(request_.timeoutMs * kj::MILLISECONDS).then([this]() -> CollectiveOutputs {
    timedOut_ = true;
    kj::throwFatalException(failed(timeoutMessage()));
  });
  auto failure = failed_.addBranch().then(
      []() -> CollectiveOutputs { kj::throwFatalException(failed("collective: internal error: failure fulfilled")); });
  return work.exclusiveJoin(kj::mv(failure))
      .exclusiveJoin(kj::mv(timeout))
      .then(
          [this](CollectiveOutputs out) {
            finished_ = true;
            return out;
          },
          [this](kj::Exception&& e) -> CollectiveOutputs {
            finished_ = true;
            const std::string reason = e.getDescription().cStr();
            if (!agreed_ && !fromPeer_) {
              // Tell the others at once rather than let them wait for the timeout.
              for (uint32_t r = 0; r < n_; ++r) {
                RemoteLink* link = r == r_ ? nullptr : group_.outLink(r);
                if (link == nullptr) continue;
                group_.tasks_.add(link->abort(seq_, reason));
              }
            }
            if (moving_ || timedOut_) group_.breakGroup(reason);
            server_.log.warn("{}", reason);
            kj::throwFatalException(kj::mv(e));
          });
}

std::string CollectiveRun::timeoutMessage() const {
  std::string waiting;
  auto& headers = group_.headers_[seq_];
  for (uint32_t r = 0; r < n_; ++r) {
    if (!headers.count(r)) waiting += (waiting.empty() ? "" : ", ") + peerName(r);
  }
  const std::string after = what() + ": timed out after " + std::to_string(request_.timeoutMs) + " ms ";
  if (!waiting.empty())
    return after + "waiting for " + waiting + " to issue it (collective #" + std::to_string(seq_) + ")";
  for (uint32_t r = 0; r < n_; ++r) {
    if (receivedFrom_[r] < expectedFrom_[r]) waiting += (waiting.empty() ? "" : ", ") + peerName(r);
  }
  if (!waiting.empty()) return after + "waiting for data from " + waiting;
  return after + "waiting for the device or for sends to complete";
}

// ------------------------------------------------------------------ headers

kj::Promise<void> CollectiveRun::exchangeHeaders() {
  CollectiveHeader mine = localHeader();
  auto answered = kj::heapArrayBuilder<kj::Promise<void>>(n_ - 1);
  for (uint32_t r = 0; r < n_; ++r) {
    if (r == r_) continue;
    RemoteLink* link = group_.outLink(r);
    if (link == nullptr) return failed(what() + ": no link to " + peerName(r));
    // Its answer also releases the buffers earlier collectives sent from.
    auto sent = linkTo(r, link->header(mine)).fork();
    tasks_.add(sent.addBranch());  // a failure fails the run at once
    answered.add(sent.addBranch());
  }
  group_.headers_[seq_][r_] = std::move(mine);
  // A small allreduce is bound by its round trips: its own contribution
  // goes to host memory while the headers cross, which it does not depend
  // on. A failure here, or of that device work, is the run's once the
  // headers agree, as it would have been without this.
  if (preparesEarly()) {
    try {
      prepareReduction();
      prepared_ = true;
    } catch (kj::Exception& e) {
      earlyFailure_ = kj::mv(e);
    }
  }
  server_.log.debug("{}: collective #{} sent its header; {} of {} here", what(), seq_, group_.headers_[seq_].size(),
                    n_);
  kj::Promise<void> headers = kj::READY_NOW;
  if (group_.headers_[seq_].size() != n_) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    headersIn_ = kj::mv(paf.fulfiller);
    headers = kj::mv(paf.promise);
  }
  return kj::joinPromises(answered.finish()).then([headers = kj::mv(headers)]() mutable { return kj::mv(headers); });
}

void CollectiveRun::headerArrived() {
  if (headersIn_ && headersIn_->isWaiting() && group_.headers_[seq_].size() == n_) headersIn_->fulfill();
}

void CollectiveRun::checkHeaders() {
  auto& headers = group_.headers_[seq_];
  const CollectiveHeader& first = headers.at(0);
  for (uint32_t j = 1; j < n_; ++j) {
    const CollectiveHeader& other = headers.at(j);
    std::string problem;
    if (other.kind != first.kind) {
      agreed_ = true;
      kj::throwFatalException(failed("collective #" + std::to_string(seq_) + " on group " + group_.name + ": rank " +
                                     std::to_string(j) + " issued " + other.kind + ", rank 0 issued " + first.kind));
    }
    if (other.op != first.op) {
      problem = "rank " + std::to_string(j) + " has op " + other.op + ", rank 0 has op " + first.op;
    } else if (other.root != first.root) {
      problem = "rank " + std::to_string(j) + " has root " + std::to_string(other.root) + ", rank 0 has root " +
                std::to_string(first.root);
    } else if (other.inputs != first.inputs) {
      problem = "rank " + std::to_string(j) + " has " + describeInputs(other.inputs) + ", rank 0 has " +
                describeInputs(first.inputs);
    }
    if (!problem.empty()) {
      agreed_ = true;
      kj::throwFatalException(failed(what() + ": " + problem));
    }
  }
  // Every member checks the same agreed request the same way from here on.
  agreed_ = true;
  const auto& inputs = request_.inputs;
  if (isReduction(request_.kind)) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!compute::isFloating(inputs[i].desc.dtype)) {
        kj::throwFatalException(unimplemented(what() + ": input " + std::to_string(i) + " is " + inputs[i].desc.str() +
                                              "; reductions take f32, f16 or bf16"));
      }
    }
  }
  if (request_.kind == "reduce_scatter") {
    const auto& desc = inputs[0].desc;
    if (desc.rank() == 0 || desc.shape[0] % n_ != 0) {
      kj::throwFatalException(failed(what() + ": the input is " + desc.str() +
                                     "; expected a leading dimension divisible by the group size " +
                                     std::to_string(n_)));
    }
  }
  if (request_.kind == "broadcast" && request_.root >= n_) {
    kj::throwFatalException(failed(what() + ": root " + std::to_string(request_.root) +
                                   " is not a member; expected 0 to " + std::to_string(n_ - 1)));
  }
  agreed_ = false;  // failures from here on are this member's own
}

// ------------------------------------------------------------ device helpers

kj::Promise<void> CollectiveRun::enqueueDevice(const std::function<void(compute::Completion)>& start) {
  auto done = makeLoopCompletion();
  mapComputeErrors(what(), [&] { start(std::move(done.completion)); });
  return kj::mv(done.promise);
}

std::shared_ptr<compute::Buffer> CollectiveRun::allocate(uint64_t bytes) {
  return mapComputeErrors(what(),
                          [&] { return server_.engine.allocate(std::max<uint64_t>(bytes, 4), request_.owner); });
}

std::shared_ptr<compute::Buffer> CollectiveRun::allocateHost(uint64_t bytes) {
  return mapComputeErrors(what(), [&] { return server_.engine.allocateHost(bytes, request_.owner); });
}

kj::Promise<void> CollectiveRun::convert(const compute::TensorView& src, uint64_t srcOffset,
                                         const compute::TensorView& dst, uint64_t dstOffset, uint64_t count,
                                         double scale) {
  return enqueueDevice([&](compute::Completion done) {
    server_.engine.enqueueOp(request_.owner, compute::collectiveConvertSpec(), {src}, {dst},
                             compute::collectiveKernelAttrs(srcOffset, dstOffset, count, "", scale), std::move(done));
  });
}

kj::Promise<void> CollectiveRun::reduce(uint64_t srcOffset, uint64_t dstOffset, uint64_t count,
                                        const std::shared_ptr<compute::Buffer>& src) {
  return enqueueDevice([&](compute::Completion done) {
    server_.engine.enqueueOp(request_.owner, compute::collectiveReduceSpec(), {view(src, compute::DType::F32)},
                             {view(scratch_, compute::DType::F32)},
                             compute::collectiveKernelAttrs(srcOffset, dstOffset, count, reduceOp_), std::move(done));
  });
}

kj::Promise<void> CollectiveRun::reduceReceived(uint64_t offset, uint64_t count) {
  return enqueueDevice([&](compute::Completion done) {
    server_.engine.enqueueOp(request_.owner, compute::collectiveReduceCopySpec(),
                             {view(recvHost_, compute::DType::F32)},
                             {view(scratch_, compute::DType::F32), view(wire_, compute::DType::F32)},
                             compute::collectiveKernelAttrs(offset, offset, count, reduceOp_), std::move(done));
  });
}

kj::Promise<void> CollectiveRun::upload(const StagingLease& lease, uint64_t bytes,
                                        const std::shared_ptr<compute::Buffer>& dst, uint64_t offset) {
  return mapComputeErrors(what(), [&] {
    return server_.staging.transfer(lease, [&](compute::Completion done) {
      server_.engine.enqueueUpload(request_.owner, lease.slot(), bytes, dst, offset, std::move(done));
    });
  });
}

kj::Promise<void> CollectiveRun::download(const StagingLease& lease, const std::shared_ptr<compute::Buffer>& src,
                                          uint64_t offset, uint64_t bytes) {
  return mapComputeErrors(what(), [&] {
    return server_.staging.transfer(lease, [&](compute::Completion done) {
      server_.engine.enqueueDownload(request_.owner, src, offset, bytes, lease.slot(), std::move(done));
    });
  });
}

// -------------------------------------------------------------------- sends

kj::Promise<void> CollectiveRun::linkTo(uint32_t to, kj::Promise<void> sending) {
  return sending.catch_([this, to](kj::Exception&& e) -> kj::Promise<void> {
    std::string reason = e.getDescription().cStr();
    if (size_t at = reason.find("remote exception: "); at != std::string::npos) reason = reason.substr(at + 18);
    return kj::Exception(
        e.getType(), __FILE__, __LINE__,
        kj::str(what().c_str(), " failed: sending to ", peerName(to).c_str(), " failed: ", reason.c_str()));
  });
}

void CollectiveRun::queueSend(uint32_t to, uint32_t step, uint32_t chunk, kj::ArrayPtr<const kj::byte> bytes,
                              const std::shared_ptr<compute::Buffer>& from) {
  RemoteLink* link = group_.outLink(to);
  if (link == nullptr) kj::throwFatalException(failed(what() + ": no link to " + peerName(to)));
  if (server_.log.should_log(spdlog::level::trace)) {
    server_.log.trace("{} #{}: sending step {} chunk {} ({} bytes{}) to {}", what(), seq_, step, chunk, bytes.size(),
                      from ? ", no copy" : "", peerName(to));
  }
  // The link sends in the order queued, each once the one before was taken.
  auto sent = linkTo(to, link->data(seq_, step, chunk, bytes, from)).fork();
  tasks_.add(sent.addBranch());  // a failed send fails the run at once
  sendTail_[to] = kj::heap(kj::mv(sent));
}

void CollectiveRun::sendWire(uint32_t to, uint32_t step, uint32_t chunk, uint64_t offset, uint64_t bytes) {
  const auto* base = reinterpret_cast<const kj::byte*>(wire_->hostData());
  queueSend(to, step, chunk, kj::arrayPtr(base + offset, bytes), wire_);
}

kj::Promise<void> CollectiveRun::transfer(const std::shared_ptr<compute::Buffer>& src,
                                          const std::shared_ptr<compute::Buffer>& dst, uint64_t offset,
                                          uint64_t bytes) {
  return transfer(src, offset, dst, offset, bytes);
}

kj::Promise<void> CollectiveRun::transfer(const std::shared_ptr<compute::Buffer>& src, uint64_t srcOffset,
                                          const std::shared_ptr<compute::Buffer>& dst, uint64_t dstOffset,
                                          uint64_t bytes) {
  return enqueueDevice([&](compute::Completion done) {
    server_.engine.enqueueTransfer(request_.owner, src, srcOffset, dst, dstOffset, bytes, std::move(done));
  });
}

kj::Promise<void> CollectiveRun::sendRegion(std::vector<uint32_t> to, uint32_t step, uint32_t chunk, Region from,
                                            kj::Maybe<Region> alsoUpload) {
  return server_.staging.acquire().then([this, to = std::move(to), step, chunk, from, alsoUpload](StagingLease lease) {
    return download(lease, from.buffer, from.offset, from.bytes)
        .then([this, lease, to, step, chunk, from, alsoUpload]() -> kj::Promise<void> {
          auto bytes = kj::arrayPtr(reinterpret_cast<const kj::byte*>(lease.data()), from.bytes);
          for (uint32_t r : to) queueSend(r, step, chunk, bytes);
          KJ_IF_MAYBE (region, alsoUpload) {
            return upload(lease, from.bytes, region->buffer, region->offset);
          }
          return kj::READY_NOW;
        });
  });
}

void CollectiveRun::trackSend(kj::Promise<void> sending) {
  auto forked = kj::heap(sending.fork());
  tasks_.add(forked->addBranch());  // a failure fails the run at once
  regionSends_.push_back(kj::mv(forked));
}

void CollectiveRun::receivedOne(uint32_t from) {
  if (server_.log.should_log(spdlog::level::trace)) {
    server_.log.trace("{} #{}: chunk {} of {} handled", what(), seq_, received_ + 1, expected_);
  }
  ++received_;
  ++receivedFrom_[from];
  if (received_ == expected_ && allIn_ && allIn_->isWaiting()) allIn_->fulfill();
}

// --------------------------------------------------------------------- plan

// allreduce's segment boundaries fall on 16 elements (64 bytes), so every
// chunk can be sent straight out of the wire buffer (Cap'n Proto needs them
// word-aligned); reduce_scatter's are the output slices themselves.
uint64_t CollectiveRun::segmentBegin(uint32_t k) const {
  const uint64_t exact = total_ * k / n_;
  if (k >= n_ || request_.kind == "reduce_scatter") return exact;
  return exact / 16 * 16;
}

uint64_t CollectiveRun::segmentChunks(uint32_t k) const {
  return chunkCount((segmentBegin(k + 1) - segmentBegin(k)) * 4);
}

kj::Promise<void> CollectiveRun::moveData() {
  const std::string& kind = request_.kind;
  if (kind == "barrier") return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  allIn_ = kj::mv(paf.fulfiller);
  if (isReduction(kind)) {
    KJ_IF_MAYBE (e, earlyFailure_) kj::throwFatalException(kj::mv(*e));
    for (auto& early : earlyWork_) tasks_.add(kj::mv(early));
    earlyWork_.clear();
    if (!prepared_) prepareReduction();
    if (algo_ == Algo::kRing) startRing();
    if (algo_ == Algo::kDirect) startDirectReduce();
  } else if (kind == "broadcast") {
    startBroadcast();
  } else {
    startAllgather();
  }
  planReady_ = true;
  planned_->fulfill();
  if (received_ == expected_ && allIn_->isWaiting()) allIn_->fulfill();
  return paf.promise
      .then([this]() {
        // Every chunk is in; wait until this member's own chunks were queued
        // to the links (their device copies may still be running) ...
        auto started = kj::heapArrayBuilder<kj::Promise<void>>(regionSends_.size());
        for (auto& send : regionSends_) started.add(send->addBranch());
        return kj::joinPromises(started.finish());
      })
      .then([this]() {
        // ... and until every send was taken by its link.
        auto sends = kj::heapArrayBuilder<kj::Promise<void>>(n_);
        for (auto& tail : sendTail_) sends.add(tail ? tail->addBranch() : kj::Promise<void>(kj::READY_NOW));
        return kj::joinPromises(sends.finish());
      });
}

bool CollectiveRun::preparesEarly() const {
  if (request_.kind != "allreduce" || n_ == 1) return false;
  uint64_t elements = 0;
  for (const auto& input : request_.inputs) {
    if (!compute::isFloating(input.desc.dtype)) return false;  // refused once the headers agree
    elements += uint64_t(input.desc.numel());
  }
  return elements * 4 <= kDirectMaxBytes;
}

void CollectiveRun::prepareReduction() {
  reduceOp_ = request_.op == "mean" ? "sum" : request_.op;
  total_ = 0;
  for (const auto& input : request_.inputs) {
    inputOffsets_.push_back(total_);
    total_ += uint64_t(input.desc.numel());
  }
  const bool direct = n_ > 1 && request_.kind == "allreduce" && total_ * 4 <= kDirectMaxBytes;
  algo_ = n_ == 1 ? Algo::kNone : direct ? Algo::kDirect : Algo::kRing;
  // Direct keeps every member's contribution: member j's at j * total.
  base_ = algo_ == Algo::kDirect ? r_ * total_ : 0;
  scratch_ = allocate((algo_ == Algo::kDirect ? n_ : 1) * total_ * 4);
  if (algo_ == Algo::kRing) {
    // The ring's bytes cross the network through host memory the device
    // reads and writes (no staging slots): chunks are sent straight out of
    // the wire buffer and received straight into it or into recvHost_, which
    // the reduction reads in place.
    // Cap'n Proto may read up to 7 bytes past a chunk (word padding): 8 more
    // bytes keep that inside.
    wire_ = allocateHost(total_ * 4 + 8);
    recvHost_ = allocateHost(total_ * 4);
  }
  // Direct: this member's contribution goes out of host memory too.
  if (algo_ == Algo::kDirect) wire_ = allocateHost(total_ * 4 + 8);
  // A failure of this device work fails the run, but only once the headers
  // agree (moveData): before, it would fail this member alone.
  auto work = [this](kj::Promise<void> promise) {
    if (moving_)
      tasks_.add(kj::mv(promise));
    else
      earlyWork_.add(kj::mv(promise));
  };
  for (size_t i = 0; i < request_.inputs.size(); ++i) {
    const auto& input = request_.inputs[i];
    work(convert(input, 0, view(scratch_, compute::DType::F32), base_ + inputOffsets_[i], uint64_t(input.desc.numel()),
                 1.0));
  }
  if (algo_ == Algo::kDirect) {
    auto ready = transfer(scratch_, base_ * 4, wire_, 0, total_ * 4).fork();
    work(ready.addBranch());
    wireReady_ = kj::heap(kj::mv(ready));
  }
}

void CollectiveRun::startRing() {
  shift_ = request_.kind == "reduce_scatter" ? 1 : 0;
  ringSteps_ = request_.kind == "reduce_scatter" ? n_ - 1 : 2 * (n_ - 1);
  const uint32_t left = (r_ + n_ - 1) % n_, right = (r_ + 1) % n_;
  for (uint32_t t = 0; t < ringSteps_; ++t) expected_ += segmentChunks(recvSegment(t));
  expectedFrom_[left] = expected_;
  // This member's own segment goes out of the wire buffer once the device
  // copied it there, chunk by chunk.
  const uint32_t seg = sendSegment(0);
  const uint64_t chunkElems = chunkBytes_ / 4;
  for (uint64_t c = 0; c < segmentChunks(seg); ++c) {
    const uint64_t begin = segmentBegin(seg) + c * chunkElems;
    const uint64_t count = std::min(chunkElems, segmentBegin(seg + 1) - begin);
    trackSend(transfer(scratch_, wire_, begin * 4, count * 4).then([this, right, c, begin, count]() {
      sendWire(right, 0, uint32_t(c), begin * 4, count * 4);
    }));
  }
}

uint32_t CollectiveRun::sendSegment(uint32_t step) const { return (r_ + 2 * n_ - step % n_ - shift_) % n_; }
uint32_t CollectiveRun::recvSegment(uint32_t step) const { return (r_ + 3 * n_ - step % n_ - 1 - shift_) % n_; }

void CollectiveRun::startDirectReduce() {
  const uint64_t chunks = chunkCount(total_ * 4);
  std::vector<uint32_t> others;
  for (uint32_t r = 0; r < n_; ++r) {
    if (r == r_) continue;
    others.push_back(r);
    expectedFrom_[r] = chunks;
    expected_ += chunks;
  }
  const uint64_t chunkElems = chunkBytes_ / 4;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t begin = c * chunkElems;
    const uint64_t count = std::min(chunkElems, total_ - begin);
    trackSend(wireReady_->addBranch().then([this, others, c, begin, count]() {
      for (uint32_t r : others) sendWire(r, 0, uint32_t(c), begin * 4, count * 4);
    }));
  }
}

void CollectiveRun::startBroadcast() {
  algo_ = Algo::kChain;
  const uint32_t root = request_.root;
  const uint32_t right = (r_ + 1) % n_;
  uint64_t id = 0;
  for (const auto& input : request_.inputs) {
    chunkBase_.push_back(id);
    id += chunkCount(input.desc.bytes());
    if (r_ != root) outBuffers_.push_back(allocate(input.desc.bytes()));
  }
  chunkBase_.push_back(id);
  if (n_ == 1) return;
  if (r_ != root) {
    expected_ = id;
    expectedFrom_[(r_ + n_ - 1) % n_] = id;
    return;
  }
  for (size_t i = 0; i < request_.inputs.size(); ++i) {
    const auto& input = request_.inputs[i];
    const uint64_t bytes = input.desc.bytes();
    for (uint64_t c = 0; c < chunkCount(bytes); ++c) {
      const uint64_t at = c * chunkBytes_;
      trackSend(sendRegion({right}, 0, uint32_t(chunkBase_[i] + c),
                           Region{input.buffer, at, std::min<uint64_t>(chunkBytes_, bytes - at)}, nullptr));
    }
  }
}

void CollectiveRun::startAllgather() {
  algo_ = Algo::kGather;
  const auto& input = request_.inputs[0];
  const uint64_t bytes = input.desc.bytes();
  total_ = bytes;
  outBuffers_.push_back(allocate(bytes * n_));
  const uint64_t chunks = chunkCount(bytes);
  std::vector<uint32_t> others;
  for (uint32_t r = 0; r < n_; ++r) {
    if (r == r_) continue;
    others.push_back(r);
    expectedFrom_[r] = chunks;
    expected_ += chunks;
  }
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t at = c * chunkBytes_;
    const uint64_t size = std::min<uint64_t>(chunkBytes_, bytes - at);
    trackSend(sendRegion(others, 0, uint32_t(c), Region{input.buffer, at, size},
                         Region{outBuffers_[0], r_ * bytes + at, size}));
  }
}

// ------------------------------------------------------------------ receive

kj::Promise<void> CollectiveRun::onData(uint32_t from, uint32_t step, uint32_t chunk, capnp::Data::Reader data) {
  if (server_.log.should_log(spdlog::level::trace)) {
    server_.log.trace("{} #{}: data step {} chunk {} ({} bytes) from {}{}", what(), seq_, step, chunk, data.size(),
                      peerName(from), planReady_ ? "" : ", before the plan");
  }
  if (finished_) return failed(what() + ": " + peerName(from) + " sent data after the collective ended here");
  // A member may start sending as soon as it has every header, which can be
  // before this member has them all: its data waits here (and, once its
  // window is full, the sender with it) until this member's plan is set up.
  if (!planReady_) {
    return whenPlanned_.addBranch().then(
        [this, from, step, chunk, data]() { return receive(from, step, chunk, data); });
  }
  return receive(from, step, chunk, data);
}

kj::Promise<void> CollectiveRun::receive(uint32_t from, uint32_t step, uint32_t chunk, capnp::Data::Reader data) {
  auto bad = [&](const std::string& why) -> kj::Promise<void> {
    auto e = failed(what() + ": " + peerName(from) + " sent step " + std::to_string(step) + " chunk " +
                    std::to_string(chunk) + " (" + std::to_string(data.size()) + " bytes): " + why);
    fail(e);
    return kj::mv(e);
  };
  // Where the chunk goes, and whether it is reduced, forwarded or stored.
  std::shared_ptr<compute::Buffer> target;
  uint64_t offset = 0, size = 0;
  bool reduceIt = false;
  int64_t forwardTo = -1;  // the member this chunk goes on to, if any
  uint32_t forwardStep = step;
  const uint64_t chunkElems = chunkBytes_ / 4;
  switch (algo_) {
    case Algo::kRing: {
      if (from != (r_ + n_ - 1) % n_) return bad("expected data only from " + peerName((r_ + n_ - 1) % n_));
      if (step >= ringSteps_) return bad("the ring has " + std::to_string(ringSteps_) + " steps");
      const uint32_t seg = recvSegment(step);
      if (chunk >= segmentChunks(seg)) return bad("segment " + std::to_string(seg) + " has fewer chunks");
      const uint64_t begin = segmentBegin(seg) + chunk * chunkElems;
      size = std::min(chunkElems, segmentBegin(seg + 1) - begin) * 4;
      offset = begin * 4;
      reduceIt = step < n_ - 1;  // the ring lands its chunks in host memory (below), not at `target`
      if (step + 1 < ringSteps_) {
        forwardTo = (r_ + 1) % n_;
        forwardStep = step + 1;
      }
      break;
    }
    case Algo::kDirect: {
      if (step != 0 || chunk >= chunkCount(total_ * 4)) return bad("expected step 0 and a chunk of the bucket");
      const uint64_t begin = chunk * chunkElems;
      size = std::min(chunkElems, total_ - begin) * 4;
      offset = (from * total_ + begin) * 4;
      target = scratch_;
      break;
    }
    case Algo::kChain: {
      if (from != (r_ + n_ - 1) % n_ || r_ == request_.root) return bad("this member expects no data from it");
      if (step != 0 || chunk >= chunkBase_.back()) return bad("expected step 0 and a chunk of the inputs");
      const size_t i = size_t(std::upper_bound(chunkBase_.begin(), chunkBase_.end(), chunk) - chunkBase_.begin()) - 1;
      const uint64_t bytes = request_.inputs[i].desc.bytes();
      offset = (chunk - chunkBase_[i]) * chunkBytes_;
      size = std::min<uint64_t>(chunkBytes_, bytes - offset);
      target = outBuffers_[i];
      if ((r_ + 1) % n_ != request_.root) forwardTo = (r_ + 1) % n_;
      break;
    }
    case Algo::kGather: {
      if (step != 0 || chunk >= chunkCount(total_)) return bad("expected step 0 and a chunk of its tensor");
      const uint64_t at = uint64_t(chunk) * chunkBytes_;
      size = std::min<uint64_t>(chunkBytes_, total_ - at);
      offset = from * total_ + at;
      target = outBuffers_[0];
      break;
    }
    case Algo::kNone:
      return bad("this collective moves no data");
  }
  if (data.size() != size) return bad("expected " + std::to_string(size) + " bytes");
  if (algo_ == Algo::kRing) {
    // Straight off the message into host memory the device reads; no device
    // work or send touches these bytes of it meanwhile. A large chunk is
    // copied on a worker thread while the loop reads the next ones: the
    // copy was the loop's largest cost after the socket itself, and the
    // ring's pace is the loop's. The call, and with it the message, ends
    // once the bytes are off it.
    std::byte* to = (reduceIt ? recvHost_ : wire_)->hostData() + offset;
    const PendingReduce got{from, chunk, forwardStep, forwardTo, offset, size};
    if (size < kWorkerCopyBytes) {
      std::memcpy(to, data.begin(), size);
      landed(got, reduceIt);
      return kj::READY_NOW;
    }
    return receiving_.wrap(
        server_.chunkCopies.copy(to, data.begin(), size).then([this, got, reduceIt]() { landed(got, reduceIt); }));
  }
  // Stored data goes on at once (chains): the next member need not wait
  // for this one's device.
  if (forwardTo >= 0) queueSend(uint32_t(forwardTo), forwardStep, chunk, data);
  // Copy it into a staging slot: then the sender may go on. A sender's
  // chunks take slots one at a time, as when they came as a stream: the
  // pool is shared with clients' transfers.
  auto staged =
      kj::mv(stagedFrom_[from])
          .then([this, data, from, target, offset, size]() {
            return server_.staging.acquire().then([this, data, from, target, offset, size](StagingLease lease) {
              std::memcpy(lease.data(), data.begin(), size);
              tasks_.add(upload(lease, size, target, offset));
              receivedOne(from);
            });
          })
          .fork();
  stagedFrom_[from] = staged.addBranch();
  return receiving_.wrap(staged.addBranch());
}

// A ring chunk is in host memory: in the allgather phase the final values
// go on at once, and to the device; in the reduce phase to the device's
// reduction (flushReduces).
void CollectiveRun::landed(const PendingReduce& chunk, bool reduceIt) {
  if (!reduceIt) {
    if (chunk.forwardTo >= 0) {
      sendWire(uint32_t(chunk.forwardTo), chunk.forwardStep, chunk.chunk, chunk.offset, chunk.size);
    }
    tasks_.add(transfer(wire_, scratch_, chunk.offset, chunk.size));
    receivedOne(chunk.from);
    return;
  }
  pendingReduce_.push_back(chunk);
  if (reducesInFlight_ < kMaxReducesInFlight) flushReduces();
}

// Chunks received in the ring's reduce phase are reduced on the device,
// which reads them where they were received (host memory) and writes the
// partial (or, at the last reduce step, final) sums both to the scratch and
// to the wire buffer, from where they go on. Device round trips are few and
// their latency grows when daemons share a device, so while
// kMaxReducesInFlight are out, arriving chunks wait and then go together,
// neighbours merged into one stretch: one dispatch for each.
void CollectiveRun::flushReduces() {
  if (pendingReduce_.empty()) return;
  std::vector<PendingReduce> batch = std::move(pendingReduce_);
  pendingReduce_.clear();
  std::sort(batch.begin(), batch.end(),
            [](const PendingReduce& a, const PendingReduce& b) { return a.offset < b.offset; });
  auto work = kj::heapArrayBuilder<kj::Promise<void>>(batch.size());
  for (size_t i = 0; i < batch.size();) {
    size_t j = i + 1;
    uint64_t end = batch[i].offset + batch[i].size;
    while (j < batch.size() && batch[j].offset == end) end += batch[j++].size;
    const uint64_t at = batch[i].offset, bytes = end - at;
    work.add(reduceReceived(at / 4, bytes / 4));
    i = j;
  }
  ++reducesInFlight_;
  tasks_.add(kj::joinPromises(work.finish()).then([this, batch = std::move(batch)]() {
    --reducesInFlight_;
    for (const PendingReduce& p : batch) {
      if (p.forwardTo >= 0) sendWire(uint32_t(p.forwardTo), p.forwardStep, p.chunk, p.offset, p.size);
      receivedOne(p.from);
    }
    flushReduces();
  }));
}

// ------------------------------------------------------------------ outputs

kj::Promise<CollectiveOutputs> CollectiveRun::finish() {
  CollectiveOutputs out;
  out.inPlace = request_.inPlace;
  const std::string& kind = request_.kind;
  auto work = kj::heapArrayBuilder<kj::Promise<void>>(request_.inputs.size() + n_ + 1);
  if (kind == "barrier") return out;
  auto newOutput = [&](const compute::TensorDesc& desc) {
    const uint64_t bytes[] = {desc.bytes()};
    server_.quotas.checkAllocation(request_.owner, request_.kind, bytes);
    return compute::TensorView{desc, allocate(desc.bytes())};
  };
  if (isReduction(kind)) {
    if (algo_ == Algo::kDirect) {
      // Every member adds the contributions in rank order into member 0's
      // place: identical results everywhere.
      for (uint32_t j = 1; j < n_; ++j) work.add(reduce(j * total_, 0, total_, scratch_));
    }
    const double scale = request_.op == "mean" ? 1.0 / n_ : 1.0;
    if (kind == "allreduce") {
      for (size_t i = 0; i < request_.inputs.size(); ++i) {
        const auto& input = request_.inputs[i];
        compute::TensorView dst = request_.inPlace ? input : newOutput(input.desc);
        work.add(convert(view(scratch_, compute::DType::F32), inputOffsets_[i], dst, 0, uint64_t(input.desc.numel()),
                         scale));
        out.outputs.push_back(dst);
      }
    } else {
      compute::TensorDesc desc = request_.inputs[0].desc;
      desc.shape[0] /= n_;
      compute::TensorView dst = newOutput(desc);
      work.add(convert(view(scratch_, compute::DType::F32), n_ == 1 ? 0 : segmentBegin(r_), dst, 0,
                       uint64_t(desc.numel()), scale));
      out.outputs.push_back(dst);
    }
  } else if (kind == "broadcast") {
    for (size_t i = 0; i < request_.inputs.size(); ++i) {
      const auto& input = request_.inputs[i];
      const uint64_t bytes = input.desc.bytes();
      if (r_ == request_.root || n_ == 1) {
        if (request_.inPlace) {
          out.outputs.push_back(input);
          continue;
        }
        compute::TensorView dst = newOutput(input.desc);
        work.add(enqueueDevice([&](compute::Completion done) {
          server_.engine.enqueueCopy(request_.owner, input.buffer, dst.buffer, bytes, std::move(done));
        }));
        out.outputs.push_back(dst);
      } else if (request_.inPlace) {
        work.add(enqueueDevice([&](compute::Completion done) {
          server_.engine.enqueueCopy(request_.owner, outBuffers_[i], input.buffer, bytes, std::move(done));
        }));
        out.outputs.push_back(input);
      } else {
        out.outputs.push_back(compute::TensorView{input.desc, outBuffers_[i]});
      }
    }
  } else {  // allgather
    compute::TensorDesc desc = request_.inputs[0].desc;
    desc.shape.insert(desc.shape.begin(), int64_t(n_));
    out.outputs.push_back(compute::TensorView{desc, outBuffers_[0]});
  }
  return kj::joinPromises(work.finish()).then([out = std::move(out)]() mutable { return std::move(out); });
}

}  // namespace tensord::server
