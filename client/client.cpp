// The Client facade: session-level requests over one Connection.

#include <iterator>

#include "client/connection.h"
#include "client/transfer.h"
#include "client/wire.h"

namespace tensord {

Client::Client(ConnectOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->conn = std::make_shared<detail::Connection>(options);
  impl_->conn->owner = this;
}

Client::~Client() {
  // Tensors may outlive the facade; they keep the connection, not the Client.
  if (impl_ && impl_->conn) impl_->conn->owner = nullptr;
}

DaemonInfo Client::info() {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto response = conn.session().infoRequest().send().wait(conn.waitScope());
    return wire::fromWire(response.getInfo());
  });
}

std::string Client::whoami() {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto response = conn.session().whoamiRequest().send().wait(conn.waitScope());
    return std::string(response.getPrincipal().cStr());
  });
}

SessionStatus Client::status() {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto response = conn.session().statusRequest().send().wait(conn.waitScope());
    SessionStatus out;
    out.principal = response.getPrincipal().cStr();
    for (auto role : response.getRoles()) out.roles.emplace_back(role.cStr());
    for (auto q : response.getQuotas()) out.quotas.push_back({q.getName().cStr(), q.getLimit(), q.getUsed()});
    return out;
  });
}

void Client::adminReload() {
  auto& conn = *impl_->conn;
  conn.blocking([&] { conn.session().adminReloadRequest().send().wait(conn.waitScope()); });
}

std::vector<OpInfo> Client::ops() { return impl_->conn->ops(); }

CallStats Client::stats() const { return impl_->conn->stats; }

DaemonStats Client::daemonStats() {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto response = conn.session().statsRequest().send().wait(conn.waitScope());
    return wire::fromWire(response.getStats());
  });
}

Tensor Client::upload(DType dtype, Shape shape, std::span<const std::byte> data, const Progress& progress) {
  return detail::upload(impl_->conn, dtype, shape, data, progress);
}

Tensor Client::upload(Shape shape, std::span<const float> data) {
  return detail::upload(impl_->conn, DType::F32, shape, std::as_bytes(data), {});
}

std::vector<Tensor> Client::call(std::string_view op, std::vector<Tensor> inputs, Attrs attrs) {
  size_t count = impl_->conn->outputCount(op);
  return detail::callOp(impl_->conn, op, inputs, attrs, count);
}

Tensor Client::call1(std::string_view op, std::vector<Tensor> inputs, Attrs attrs) {
  return detail::callOp(impl_->conn, op, inputs, attrs, 1).front();
}

Tensor Client::restore(std::string_view name) {
  auto& conn = impl_->conn;
  return conn->guard([&] {
    auto request = conn->session().restoreRequest();
    request.setName(std::string(name));
    auto restored = request.send();
    proto::Tensor::Client cap = restored.getTensor();
    auto origin =
        std::make_shared<detail::PendingCall>(restored.then([](capnp::Response<proto::Session::RestoreResults>&&) {}));
    Tensor tensor = detail::makeTensor(conn, std::move(origin), std::move(cap));
    conn->flush();
    return tensor;
  });
}

TensorPage Client::listPage(std::string_view prefix, std::string_view after, uint32_t limit) {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto request = conn.session().listTensorsRequest();
    request.setPrefix(std::string(prefix));
    request.setAfter(std::string(after));
    request.setLimit(limit);
    auto response = request.send().wait(conn.waitScope());
    TensorPage page;
    for (auto info : response.getTensors()) {
      // A daemon before protocol 5 ignores the prefix.
      TensorInfo tensor = wire::fromWire(info);
      if (tensor.name.starts_with(prefix)) page.tensors.push_back(std::move(tensor));
    }
    page.next = response.getNext().cStr();
    return page;
  });
}

std::vector<TensorInfo> Client::list(std::string_view prefix) {
  std::vector<TensorInfo> out;
  std::string after;
  for (;;) {
    TensorPage page = listPage(prefix, after);
    out.insert(out.end(), std::make_move_iterator(page.tensors.begin()), std::make_move_iterator(page.tensors.end()));
    if (page.next.empty()) return out;
    if (page.next == after) {  // a daemon that does not advance would loop forever
      throw Error(Error::Kind::kFailed, "listTensors: the daemon returned the same page cursor '" + after + "' twice");
    }
    after = std::move(page.next);
  }
}

void Client::remove(std::string_view name) {
  auto& conn = *impl_->conn;
  conn.blocking([&] {
    auto request = conn.session().deleteTensorRequest();
    request.setName(std::string(name));
    request.send().wait(conn.waitScope());
  });
}

Batch::Batch(Client& client) : conn_(client.impl().conn) { conn_->openBatch(); }

Batch::~Batch() { conn_->closeBatch(); }

void Batch::send() { conn_->sendHeld(); }

}  // namespace tensord
