// Tensor handles: blocking reads of a (possibly still pipelined) tensor.

#include <cstring>

#include "client/connection.h"
#include "client/transfer.h"
#include "client/wire.h"

namespace tensord {

namespace detail {

Tensor makeTensor(const std::shared_ptr<Connection>& conn, std::shared_ptr<PendingCall> origin,
                  proto::Tensor::Client cap) {
  auto impl = std::make_shared<Tensor::Impl>();
  impl->conn = conn;
  impl->origin = std::move(origin);
  impl->cap = std::move(cap);
  return Client::Impl::wrap(std::move(impl));
}

Tensor::Impl& implOf(const Tensor& tensor, std::string_view what) {
  const auto& impl = Client::Impl::unwrap(tensor);
  if (!impl) throw Error(Error::Kind::kFailed, std::string(what) + ": the Tensor is null (default-constructed)");
  return *impl;
}

proto::Tensor::Client& capOf(Tensor::Impl& impl) {
  if (impl.held) {
    if (!impl.held->sent && impl.conn->capturing()) {
      throw Error(Error::Kind::kFailed,
                  "capture: a tensor made inside a capture (or one of its inputs) cannot be read, waited for or "
                  "sent in a request while the capture runs; only calls can use it");
    }
    if (!impl.held->sent) impl.conn->sendHeld();
    impl.cap = impl.held->cap;
    impl.origin = impl.held->origin;
    impl.held.reset();
  }
  return impl.cap;
}

std::shared_ptr<Tensor::Impl> shareHandle(Tensor::Impl& impl) {
  auto copy = std::make_shared<Tensor::Impl>();
  copy->conn = impl.conn;
  copy->origin = impl.origin;
  copy->cap = impl.cap;
  copy->held = impl.held;
  return copy;
}

}  // namespace detail

TensorInfo Tensor::info() const {
  auto& impl = detail::implOf(*this, "Tensor::info");
  return impl.conn->blocking([&] {
    auto response = impl.conn->wait(detail::capOf(impl).infoRequest().send());
    return wire::fromWire(response.getInfo());
  });
}

namespace {

// What the tensor is, for an error message: "f32[2, 3] (24 bytes)".
std::string describe(const TensorInfo& info) {
  return std::string(dtypeName(info.dtype)) + wire::shapeStr(info.shape) + " (" + std::to_string(info.bytes) +
         " bytes)";
}

// `call` reads f32 tensors only; `instead` reads the others.
void requireF32(const TensorInfo& info, std::string_view what, std::string_view call, std::string_view instead) {
  if (info.dtype != DType::F32) {
    throw Error(Error::Kind::kFailed, std::string(what) + ": the tensor is " + std::string(dtypeName(info.dtype)) +
                                          "; " + std::string(call) + " reads f32 tensors only (use " +
                                          std::string(instead) + ")");
  }
}

}  // namespace

std::vector<std::byte> Tensor::bytes(const Progress& progress) const {
  auto& impl = detail::implOf(*this, "Tensor::bytes");
  return detail::download(impl, progress).second;
}

void Tensor::bytesInto(std::span<std::byte> out, const Progress& progress) const {
  auto& impl = detail::implOf(*this, "Tensor::bytesInto");
  detail::SpanLanding landing(out);
  detail::download(
      impl, landing,
      [&](const TensorInfo& info) {
        if (info.bytes != out.size()) {
          throw Error(Error::Kind::kFailed, "Tensor::bytesInto: the tensor is " + describe(info) +
                                                "; the destination holds " + std::to_string(out.size()) +
                                                " bytes (expected " + std::to_string(info.bytes) + ")");
        }
      },
      progress);
}

std::vector<float> Tensor::toHost() const {
  auto& impl = detail::implOf(*this, "Tensor::toHost");
  std::vector<float> out;
  detail::VectorLanding<float> landing(out);
  detail::download(impl, landing,
                   [&](const TensorInfo& info) {
                     requireF32(info, "toHost", "toHost()", "bytes()");
                     landing.reserve(info.bytes);
                   },
                   {});
  return out;
}

void Tensor::toHostInto(std::span<float> out) const {
  auto& impl = detail::implOf(*this, "Tensor::toHostInto");
  detail::SpanLanding landing(std::as_writable_bytes(out));
  detail::download(impl, landing,
                   [&](const TensorInfo& info) {
                     requireF32(info, "Tensor::toHostInto", "toHostInto()", "bytesInto()");
                     if (info.bytes != out.size_bytes()) {
                       throw Error(Error::Kind::kFailed, "Tensor::toHostInto: the tensor is " + describe(info) +
                                                             "; the destination holds " + std::to_string(out.size()) +
                                                             " floats (expected " +
                                                             std::to_string(info.bytes / sizeof(float)) + ")");
                     }
                   },
                   {});
}

void Tensor::wait() const {
  auto& impl = detail::implOf(*this, "Tensor::wait");
  impl.conn->blocking([&] {
    proto::Tensor::Client& cap = detail::capOf(impl);
    if (impl.origin) impl.conn->wait(impl.origin->done.addBranch());
    impl.conn->wait(cap.whenResolved());
  });
}

void Tensor::save(std::string_view name, bool overwrite) const {
  auto& impl = detail::implOf(*this, "Tensor::save");
  impl.conn->blocking([&] {
    auto request = detail::capOf(impl).saveRequest();
    request.setName(std::string(name));
    request.setOverwrite(overwrite);
    impl.conn->wait(request.send());
  });
}

Client& Tensor::client() const {
  auto& impl = detail::implOf(*this, "Tensor::client");
  if (impl.conn->owner == nullptr) {
    throw Error(Error::Kind::kFailed, "Tensor::client: the Client that made this tensor was destroyed");
  }
  return *impl.conn->owner;
}

}  // namespace tensord
