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

}  // namespace detail

TensorInfo Tensor::info() const {
  auto& impl = detail::implOf(*this, "Tensor::info");
  return impl.conn->blocking([&] {
    auto response = impl.conn->wait(impl.cap.infoRequest().send());
    return wire::fromWire(response.getInfo());
  });
}

std::vector<std::byte> Tensor::bytes(const Progress& progress) const {
  auto& impl = detail::implOf(*this, "Tensor::bytes");
  return detail::download(impl, progress).second;
}

std::vector<float> Tensor::toHost() const {
  auto& impl = detail::implOf(*this, "Tensor::toHost");
  auto [info, data] = detail::download(impl, {});
  if (info.dtype != DType::F32) {
    throw Error(Error::Kind::kFailed, "toHost: the tensor is " + std::string(dtypeName(info.dtype)) +
                                          "; toHost() reads f32 tensors only (use bytes())");
  }
  std::vector<float> out(data.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * sizeof(float));
  return out;
}

void Tensor::wait() const {
  auto& impl = detail::implOf(*this, "Tensor::wait");
  impl.conn->blocking([&] {
    if (impl.origin) impl.conn->wait(impl.origin->done.addBranch());
    impl.conn->wait(impl.cap.whenResolved());
  });
}

void Tensor::save(std::string_view name, bool overwrite) const {
  auto& impl = detail::implOf(*this, "Tensor::save");
  impl.conn->blocking([&] {
    auto request = impl.cap.saveRequest();
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
