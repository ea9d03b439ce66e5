// The in-process fake tensord used by the client tests.

#include "fake_daemon.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "protocol/tensord.capnp.h"

namespace tensord::testing {

namespace {

constexpr size_t kDownloadChunk = 256 << 10;

struct Buf {
  uint64_t id = 0;
  proto::DType dtype = proto::DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
  std::string name;
  std::string owner;

  size_t numel() const { return data.size() / (dtype == proto::DType::F32 ? 4 : 1); }
  float at(size_t i) const {
    float v;
    std::memcpy(&v, data.data() + 4 * i, 4);
    return v;
  }
};

struct Counters {
  std::shared_ptr<std::atomic<uint64_t>> calls;
  std::shared_ptr<std::atomic<uint64_t>> largestChunk;
  void chunk(uint64_t bytes) {
    uint64_t seen = largestChunk->load();
    while (bytes > seen && !largestChunk->compare_exchange_weak(seen, bytes)) {
    }
  }
};

struct State {
  Counters counters;
  std::map<std::string, std::shared_ptr<Buf>> named;
  uint64_t nextId = 1;
  uint64_t opsExecuted = 0;
  capnp::CapabilityServerSet<proto::Tensor> tensors;
};

std::string shapeStr(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::shared_ptr<Buf> newBuf(State& state, proto::DType dtype, std::vector<int64_t> shape, std::string owner) {
  auto buf = std::make_shared<Buf>();
  buf->id = state.nextId++;
  buf->dtype = dtype;
  buf->shape = std::move(shape);
  buf->owner = std::move(owner);
  return buf;
}

std::shared_ptr<Buf> floatBuf(State& state, const Buf& like, const std::vector<float>& values) {
  auto buf = newBuf(state, proto::DType::F32, like.shape, like.owner);
  buf->data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(buf->data.data(), values.data(), buf->data.size());
  return buf;
}

class TensorImpl final : public proto::Tensor::Server {
 public:
  TensorImpl(State& state, std::shared_ptr<Buf> buf) : state_(state), buf_(std::move(buf)) {}
  const std::shared_ptr<Buf>& buf() const { return buf_; }

 protected:
  kj::Promise<void> info(InfoContext context) override {
    auto info = context.getResults().initInfo();
    info.setId(buf_->id);
    info.setName(buf_->name);
    info.setOwner(buf_->owner);
    info.getDesc().setDtype(buf_->dtype);
    auto shape = info.getDesc().initShape(uint32_t(buf_->shape.size()));
    for (size_t i = 0; i < buf_->shape.size(); ++i) shape.set(uint32_t(i), buf_->shape[i]);
    info.setBytes(buf_->data.size());
    return kj::READY_NOW;
  }

  kj::Promise<void> download(DownloadContext context) override {
    auto params = context.getParams();
    uint64_t offset = params.getOffset();
    uint64_t end = params.getLength() == 0 ? buf_->data.size() : offset + params.getLength();
    KJ_REQUIRE(offset <= end && end <= buf_->data.size(), "download: range past the end");
    return stream(params.getSink(), buf_, offset, end);
  }

  kj::Promise<void> save(SaveContext context) override {
    std::string name = context.getParams().getName();
    if (state_.named.count(name) && !context.getParams().getOverwrite()) {
      KJ_FAIL_REQUIRE("save: a tensor named '" + name + "' already exists");
    }
    buf_->name = name;
    state_.named[name] = buf_;
    return kj::READY_NOW;
  }

 private:
  static kj::Promise<void> stream(proto::ByteSink::Client sink, std::shared_ptr<Buf> buf, uint64_t offset,
                                  uint64_t end) {
    if (offset >= end) return sink.doneRequest().send().ignoreResult();
    size_t length = std::min<uint64_t>(kDownloadChunk, end - offset);
    auto request = sink.writeRequest();
    request.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(buf->data.data() + offset), length));
    return request.send().then([sink = kj::mv(sink), buf, offset, length, end]() mutable {
      return stream(kj::mv(sink), buf, offset + length, end);
    });
  }

  State& state_;
  std::shared_ptr<Buf> buf_;
};

class WriterImpl final : public proto::TensorWriter::Server {
 public:
  WriterImpl(State& state, std::shared_ptr<Buf> buf, uint64_t expected)
      : state_(state), buf_(std::move(buf)), expected_(expected) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto data = context.getParams().getData();
    state_.counters.chunk(data.size());
    KJ_REQUIRE(buf_->data.size() + data.size() <= expected_, "upload: more bytes than the shape needs");
    auto* begin = reinterpret_cast<const std::byte*>(data.begin());
    buf_->data.insert(buf_->data.end(), begin, begin + data.size());
    return kj::READY_NOW;
  }

  kj::Promise<void> commit(CommitContext context) override {
    KJ_REQUIRE(buf_->data.size() == expected_, "upload: commit after fewer bytes than the shape needs");
    context.getResults().setTensor(state_.tensors.add(kj::heap<TensorImpl>(state_, buf_)));
    return kj::READY_NOW;
  }

 private:
  State& state_;
  std::shared_ptr<Buf> buf_;
  uint64_t expected_;
};

class ResultsImpl final : public proto::OpResults::Server {
 public:
  explicit ResultsImpl(std::vector<proto::Tensor::Client> outputs) : outputs_(std::move(outputs)) {}

 protected:
  kj::Promise<void> get(GetContext context) override {
    uint32_t index = context.getParams().getIndex();
    KJ_REQUIRE(index < outputs_.size(), "results.get: no output", index);
    context.getResults().setTensor(outputs_[index]);
    return kj::READY_NOW;
  }

 private:
  std::vector<proto::Tensor::Client> outputs_;
};

struct CallAttrs {
  double factor = 1, bias = 0;
};

std::vector<std::shared_ptr<Buf>> compute(State& state, const std::string& op,
                                          const std::vector<std::shared_ptr<Buf>>& in, const CallAttrs& attrs) {
  auto arity = [&](size_t n) {
    if (in.size() != n) {
      KJ_FAIL_REQUIRE(op + ": expects " + std::to_string(n) + " inputs; got " + std::to_string(in.size()));
    }
    for (size_t i = 0; i < n; ++i) {
      if (in[i]->dtype != proto::DType::F32) KJ_FAIL_REQUIRE(op + ": input " + std::to_string(i) + " is not f32");
    }
  };
  std::vector<float> out;
  if (op == "add") {
    arity(2);
    if (in[0]->shape != in[1]->shape) {
      KJ_FAIL_REQUIRE("add: input 'b' has shape " + shapeStr(in[1]->shape) + "; expected " + shapeStr(in[0]->shape) +
                      " (a's shape)");
    }
    for (size_t i = 0; i < in[0]->numel(); ++i) out.push_back(in[0]->at(i) + in[1]->at(i));
    return {floatBuf(state, *in[0], out)};
  }
  if (op == "neg" || op == "split2") {
    arity(1);
    for (size_t i = 0; i < in[0]->numel(); ++i) out.push_back(-in[0]->at(i));
    if (op == "neg") return {floatBuf(state, *in[0], out)};
    std::vector<float> same;
    for (size_t i = 0; i < in[0]->numel(); ++i) same.push_back(in[0]->at(i));
    return {floatBuf(state, *in[0], same), floatBuf(state, *in[0], out)};
  }
  if (op == "scale") {
    arity(1);
    for (size_t i = 0; i < in[0]->numel(); ++i) out.push_back(float(in[0]->at(i) * attrs.factor + attrs.bias));
    return {floatBuf(state, *in[0], out)};
  }
  if (op == "oom") {
    kj::throwFatalException(KJ_EXCEPTION(OVERLOADED, "oom: out of device memory (needs 1 GiB, 0 B free)"));
  }
  kj::throwFatalException(KJ_EXCEPTION(UNIMPLEMENTED, "unknown op '" + op + "'"));
}

class SessionImpl final : public proto::Session::Server {
 public:
  SessionImpl(State& state, std::string principal) : state_(state), principal_(std::move(principal)) {}

 protected:
  kj::Promise<void> whoami(WhoamiContext context) override {
    context.getResults().setPrincipal(principal_);
    return kj::READY_NOW;
  }

  kj::Promise<void> info(InfoContext context) override {
    auto info = context.getResults().initInfo();
    info.setVersion("fake-1");
    info.setProtocolVersion(proto::PROTOCOL_VERSION);
    info.getDevice().setName("fake device");
    info.getDevice().setKind("cpu");
    info.getMemory().setTensorCount(state_.named.size());
    info.getMemory().setNamedCount(state_.named.size());
    info.setOpsExecuted(state_.opsExecuted);
    info.setChunkBytes(1 << 20);
    return kj::READY_NOW;
  }

  kj::Promise<void> listOps(ListOpsContext context) override {
    struct Spec {
      const char* name;
      std::vector<const char*> inputs, outputs;
    };
    std::vector<Spec> specs = {{"add", {"a", "b"}, {"out"}},
                               {"neg", {"x"}, {"out"}},
                               {"scale", {"x"}, {"out"}},
                               {"split2", {"x"}, {"same", "negated"}},
                               {"oom", {"x"}, {"out"}}};
    auto ops = context.getResults().initOps(uint32_t(specs.size()));
    for (size_t i = 0; i < specs.size(); ++i) {
      auto op = ops[uint32_t(i)];
      op.setName(specs[i].name);
      op.setCategory("test");
      auto inputs = op.initInputs(uint32_t(specs[i].inputs.size()));
      for (size_t j = 0; j < specs[i].inputs.size(); ++j) inputs.set(uint32_t(j), specs[i].inputs[j]);
      auto outputs = op.initOutputs(uint32_t(specs[i].outputs.size()));
      for (size_t j = 0; j < specs[i].outputs.size(); ++j) outputs.set(uint32_t(j), specs[i].outputs[j]);
      op.initDtypes(1).set(0, proto::DType::F32);
      // Protocol 2 fields on some ops; the others look like a protocol 1 daemon's.
      if (std::string(specs[i].name) == "add") {
        auto in = op.initInputSpecs(2);
        in[0].setName("a");
        in[0].setRole("data");
        in[1].setName("b");
        in[1].setRole("data");
        in[1].setOptional(true);
        auto attrs = op.initAttrs(1);
        attrs[0].setName("other");
        attrs[0].setType(proto::AttrType::SCALAR);
        attrs[0].setDoc("the other operand as a number");
        op.setDifferentiable(true);
        op.setDoc("a + b");
      }
      if (std::string(specs[i].name) == "neg") {
        auto in = op.initInputSpecs(1);
        in[0].setName("x");
        in[0].setRole("any");
        op.setView(true);
      }
      if (std::string(specs[i].name) == "split2") {
        auto in = op.initInputSpecs(1);
        in[0].setName("x");
        in[0].setRole("data");
        in[0].setVariadic(true);
        op.initMutates(1).set(0, "x");
      }
      if (std::string(specs[i].name) == "scale") {
        auto attrs = op.initAttrs(5);
        attrs[0].setName("factor");
        attrs[0].setType(proto::AttrType::FLOAT);
        attrs[0].getDefault().setFloat(1);
        attrs[1].setName("bias");
        attrs[1].setType(proto::AttrType::FLOAT);
        attrs[1].getDefault().setFloat(0);
        attrs[2].setName("tag");
        attrs[2].setType(proto::AttrType::TEXT);
        attrs[2].getDefault().setText("");
        attrs[3].setName("axes");
        attrs[3].setType(proto::AttrType::INTS);
        attrs[3].getDefault().initInts(0);
        attrs[4].setName("flip");
        attrs[4].setType(proto::AttrType::BOOL);
        attrs[4].getDefault().setBool(false);
      }
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> call(CallContext context) override {
    state_.counters.calls->fetch_add(1);
    auto params = context.getParams();
    std::string op = params.getOp();
    CallAttrs attrs;
    for (auto attr : params.getAttrs()) {
      std::string name = attr.getName();
      if (name == "factor" || name == "bias") {
        KJ_REQUIRE(attr.getValue().isFloat(), op + ": attr '" + name + "' must be a float");
        (name == "factor" ? attrs.factor : attrs.bias) = attr.getValue().getFloat();
      }
    }
    kj::Vector<kj::Promise<kj::Maybe<proto::Tensor::Server&>>> lookups;
    for (auto input : params.getInputs()) {
      proto::Tensor::Client cap = input;
      lookups.add(state_.tensors.getLocalServer(cap));
    }
    ++state_.opsExecuted;
    return kj::joinPromises(lookups.releaseAsArray())
        .then([this, context, op, attrs](kj::Array<kj::Maybe<proto::Tensor::Server&>> servers) mutable {
          std::vector<std::shared_ptr<Buf>> inputs;
          for (auto& server : servers) {
            KJ_IF_MAYBE (s, server) {
              inputs.push_back(static_cast<TensorImpl&>(*s).buf());
            } else {
              KJ_FAIL_REQUIRE(op + ": an input is not a tensor of this daemon");
            }
          }
          auto outs = compute(state_, op, inputs, attrs);
          std::vector<proto::Tensor::Client> caps;
          for (auto& buf : outs) caps.push_back(state_.tensors.add(kj::heap<TensorImpl>(state_, buf)));
          auto results = context.getResults();
          results.setOutput(caps[0]);
          auto list = results.initOutputs(uint32_t(caps.size()));
          for (size_t i = 0; i < caps.size(); ++i) list.set(uint32_t(i), caps[i]);
          results.setResults(kj::heap<ResultsImpl>(std::move(caps)));
        });
  }

  kj::Promise<void> upload(UploadContext context) override {
    auto desc = context.getParams().getDesc();
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (int64_t d : desc.getShape()) {
      shape.push_back(d);
      numel *= uint64_t(d);
    }
    uint64_t size = desc.getDtype() == proto::DType::F32 ? 4 : 1;
    KJ_REQUIRE(numel * size <= (uint64_t(1) << 30), "upload: tensor larger than the 1 GiB limit");
    auto buf = newBuf(state_, desc.getDtype(), std::move(shape), principal_);
    context.getResults().setWriter(kj::heap<WriterImpl>(state_, std::move(buf), numel * size));
    return kj::READY_NOW;
  }

  kj::Promise<void> restore(RestoreContext context) override {
    std::string name = context.getParams().getName();
    auto it = state_.named.find(name);
    if (it == state_.named.end()) KJ_FAIL_REQUIRE("restore: no tensor named '" + name + "'");
    context.getResults().setTensor(state_.tensors.add(kj::heap<TensorImpl>(state_, it->second)));
    return kj::READY_NOW;
  }

  kj::Promise<void> listTensors(ListTensorsContext context) override {
    auto list = context.getResults().initTensors(uint32_t(state_.named.size()));
    uint32_t i = 0;
    for (auto& [name, buf] : state_.named) {
      auto info = list[i++];
      info.setId(buf->id);
      info.setName(name);
      info.setOwner(buf->owner);
      info.getDesc().setDtype(buf->dtype);
      auto shape = info.getDesc().initShape(uint32_t(buf->shape.size()));
      for (size_t j = 0; j < buf->shape.size(); ++j) shape.set(uint32_t(j), buf->shape[j]);
      info.setBytes(buf->data.size());
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> deleteTensor(DeleteTensorContext context) override {
    std::string name = context.getParams().getName();
    if (state_.named.erase(name) == 0) KJ_FAIL_REQUIRE("delete: no tensor named '" + name + "'");
    return kj::READY_NOW;
  }

 private:
  State& state_;
  std::string principal_;
};

class DaemonImpl final : public proto::Daemon::Server {
 public:
  explicit DaemonImpl(State& state) : state_(state) {}

 protected:
  kj::Promise<void> authenticate(AuthenticateContext context) override {
    if (context.getParams().getToken() != FakeDaemon::kToken) KJ_FAIL_REQUIRE("invalid token");
    context.getResults().setSession(kj::heap<SessionImpl>(state_, "tester"));
    context.getResults().setPrincipal("tester");
    return kj::READY_NOW;
  }

 private:
  State& state_;
};

struct Connection {
  Connection(kj::Own<kj::AsyncIoStream> s, State& state)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, options()),
        rpc(capnp::makeRpcServer(network, kj::heap<DaemonImpl>(state))) {}
  static capnp::ReaderOptions options() {
    capnp::ReaderOptions o;
    o.traversalLimitInWords = uint64_t(1) << 28;
    return o;
  }
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

class ErrorIgnorer final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& exception) override {}
};

kj::Promise<void> acceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks, State& state) {
  return listener.accept().then([&](kj::Own<kj::AsyncIoStream>&& stream) {
    auto connection = kj::heap<Connection>(kj::mv(stream), state);
    auto closed = connection->network.onDisconnect();
    tasks.add(closed.attach(kj::mv(connection)));
    return acceptLoop(listener, tasks, state);
  });
}

}  // namespace

struct FakeDaemon::Shared {
  std::mutex mutex;
  std::condition_variable cv;
  bool ready = false;
  std::string address;
  std::string error;
  const kj::Executor* executor = nullptr;
  kj::Own<kj::PromiseFulfiller<void>> stopper;  // touched on the daemon thread only
};

FakeDaemon::FakeDaemon() : shared_(std::make_shared<Shared>()) {
  Counters counters{calls_, largestChunk_};
  thread_ = std::thread([shared = shared_, counters] {
    auto io = kj::setupAsyncIo();
    State state;
    state.counters = counters;
    ErrorIgnorer ignorer;
    kj::Own<kj::ConnectionReceiver> listener;
    {
      auto paf = kj::newPromiseAndFulfiller<void>();
      kj::Promise<void> stopped = kj::mv(paf.promise);
      std::unique_lock<std::mutex> lock(shared->mutex);
      try {
        auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
        listener = addr->listen();
        shared->address = "127.0.0.1:" + std::to_string(listener->getPort());
      } catch (const kj::Exception& e) {
        shared->error = e.getDescription().cStr();
      }
      shared->stopper = kj::mv(paf.fulfiller);
      shared->executor = &kj::getCurrentThreadExecutor();
      shared->ready = true;
      lock.unlock();
      shared->cv.notify_all();
      if (!listener) return;
      kj::TaskSet tasks(ignorer);
      stopped.exclusiveJoin(acceptLoop(*listener, tasks, state)).wait(io.waitScope);
      shared->stopper = nullptr;
    }
  });
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->cv.wait(lock, [&] { return shared_->ready; });
  if (!shared_->error.empty()) throw std::runtime_error("fake daemon: " + shared_->error);
  address_ = shared_->address;
}

FakeDaemon::~FakeDaemon() { stop(); }

void FakeDaemon::stop() {
  if (!thread_.joinable()) return;
  auto* shared = shared_.get();
  shared->executor->executeSync([shared] { shared->stopper->fulfill(); });
  thread_.join();
}

}  // namespace tensord::testing
