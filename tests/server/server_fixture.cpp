#include "tests/server/server_fixture.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "acl/token_authenticator.h"
#include "server/wire.h"

namespace tensord::server::testing {

kj::Promise<void> CollectingSink::write(WriteContext context) {
  auto data = context.getParams().getData();
  const auto* begin = reinterpret_cast<const std::byte*>(data.begin());
  out_.insert(out_.end(), begin, begin + data.size());
  return kj::READY_NOW;
}

kj::Promise<void> CollectingSink::done(DoneContext context) {
  done_ = true;
  return kj::READY_NOW;
}

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = std::byte(x >> 24);
  }
  return out;
}

ServerFixture::ServerFixture() : io_(kj::setupAsyncIo()) {
  log_ = std::make_shared<spdlog::logger>("tensord-test", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  log_->set_level(spdlog::level::warn);
}

ServerFixture::~ServerFixture() noexcept {
  clients_.clear();
  listener_.reset();
  state_.reset();
  engine_.reset();
}

Config ServerFixture::testConfig() {
  Config config;
  config.listen = HostPort{"127.0.0.1", 0};
  config.staging.slotBytes = 64 << 10;
  config.staging.slots = 2;
  config.limits.maxTensorBytes = 64 << 20;
  config.tokens = {{"tester", acl::sha256Hex(kToken)}, {"other", acl::sha256Hex("other-token")}};
  return config;
}

void ServerFixture::start(Config config) {
  config_ = std::move(config);
  engine_ = std::make_unique<compute::Engine>(compute::EngineOptions{
      .device = config_.device,
      .cacheDir = {},
      .memoryLimitBytes = config_.limits.memoryLimitBytes,
      .stagingSlotBytes = config_.staging.slotBytes,
      .stagingSlots = config_.staging.slots,
      .logger = log_,
  });
  state_ = std::make_unique<ServerState>(config_, *log_, *engine_, io_.provider->getTimer());
  auto address = io_.provider->getNetwork().parseAddress(config_.listen.str()).wait(io_.waitScope);
  auto receiver = address->listen();
  port_ = receiver->getPort();
  listener_ = std::make_unique<Listener>(*state_, kj::mv(receiver));
  listener_->start();
}

proto::Daemon::Client ServerFixture::connect() {
  auto address = io_.provider->getNetwork().parseAddress("127.0.0.1", port_).wait(io_.waitScope);
  auto stream = address->connect().wait(io_.waitScope);
  auto client = kj::heap<capnp::TwoPartyClient>(*stream);
  auto daemon = client->bootstrap().castAs<proto::Daemon>();
  clients_.push_back(client.attach(kj::mv(stream)));
  return daemon;
}

proto::Session::Client ServerFixture::authenticate(proto::Daemon::Client& daemon, const char* token) {
  auto request = daemon.authenticateRequest();
  request.setToken(token);
  return request.send().wait(io_.waitScope).getSession();
}

proto::Session::Client ServerFixture::session() {
  auto daemon = connect();
  return authenticate(daemon);
}

proto::Tensor::Client ServerFixture::upload(proto::Session::Client& session, compute::DType dtype,
                                            std::vector<int64_t> shape, const std::vector<std::byte>& data,
                                            size_t chunk) {
  auto request = session.uploadRequest();
  auto desc = request.initDesc();
  desc.setDtype(dtypeToWire(dtype));
  auto dims = desc.initShape(capnp::uint(shape.size()));
  for (size_t i = 0; i < shape.size(); ++i) dims.set(capnp::uint(i), shape[i]);
  auto writer = request.send().getWriter();
  for (size_t pos = 0; pos < data.size(); pos += chunk) {
    auto write = writer.writeRequest();
    const size_t n = std::min(chunk, data.size() - pos);
    write.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data() + pos), n));
    write.send().wait(io_.waitScope);
  }
  return writer.commitRequest().send().wait(io_.waitScope).getTensor();
}

proto::Tensor::Client ServerFixture::uploadFloats(proto::Session::Client& session, std::vector<int64_t> shape,
                                                  const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return upload(session, compute::DType::F32, std::move(shape), bytes);
}

std::vector<std::byte> ServerFixture::download(proto::Tensor::Client& tensor, uint64_t offset, uint64_t length) {
  std::vector<std::byte> out;
  bool done = false;
  auto request = tensor.downloadRequest();
  request.setSink(kj::heap<CollectingSink>(out, done));
  request.setOffset(offset);
  request.setLength(length);
  request.send().wait(io_.waitScope);
  EXPECT_TRUE(done) << "download returned before sink.done()";
  return out;
}

std::vector<float> ServerFixture::downloadFloats(proto::Tensor::Client& tensor) {
  auto bytes = download(tensor);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

ServerFixture::Info ServerFixture::info(proto::Session::Client& session) {
  auto response = session.infoRequest().send().wait(io_.waitScope);
  auto info = response.getInfo();
  return Info{info.getMemory().getTensorCount(), info.getMemory().getNamedCount(),
              info.getMemory().getLiveBytes(),   info.getOpsExecuted(),
              info.getMaxTensorBytes(),          info.getChunkBytes()};
}

}  // namespace tensord::server::testing
