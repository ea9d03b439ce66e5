// User kernels: Session.kernelAdd/kernelList/kernelRemove/kernelShow.

#include "client/connection.h"
#include "client/wire.h"

namespace tensord {
namespace {

// The daemon names user kernels user.NAME; a bare NAME means that.
std::string opName(std::string_view name) {
  return name.starts_with("user.") ? std::string(name) : "user." + std::string(name);
}

KernelInfo kernelFromWire(proto::KernelInfo::Reader k) {
  KernelInfo out;
  out.name = k.getName();
  out.owner = k.getOwner();
  out.language = k.getLanguage();
  out.description = k.getDescription();
  out.sourceSha256 = k.getSourceSha256();
  out.spec = wire::fromWire(k.getSpec());
  return out;
}

}  // namespace

KernelInfo Client::kernelAdd(std::string_view name, std::string_view language, std::span<const std::byte> source,
                             std::string_view description, bool replace) {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto request = conn.session().kernelAddRequest();
    request.setName(opName(name));
    request.setLanguage(std::string(language));
    request.setSource(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(source.data()), source.size()));
    request.setDescription(std::string(description));
    request.setReplace(replace);
    auto response = request.send().wait(conn.waitScope());
    conn.forgetOps();
    return kernelFromWire(response.getKernel());
  });
}

KernelInfo Client::kernelAdd(std::string_view name, std::string_view glsl, std::string_view description, bool replace) {
  return kernelAdd(name, "glsl", std::as_bytes(std::span(glsl.data(), glsl.size())), description, replace);
}

std::vector<KernelInfo> Client::kernelList() {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto response = conn.session().kernelListRequest().send().wait(conn.waitScope());
    std::vector<KernelInfo> out;
    for (auto k : response.getKernels()) out.push_back(kernelFromWire(k));
    return out;
  });
}

void Client::kernelRemove(std::string_view name) {
  auto& conn = *impl_->conn;
  conn.blocking([&] {
    auto request = conn.session().kernelRemoveRequest();
    request.setName(opName(name));
    request.send().wait(conn.waitScope());
    conn.forgetOps();
  });
}

KernelInfo Client::kernelShow(std::string_view name) {
  auto& conn = *impl_->conn;
  return conn.blocking([&] {
    auto request = conn.session().kernelShowRequest();
    request.setName(opName(name));
    auto response = request.send().wait(conn.waitScope());
    KernelInfo out = kernelFromWire(response.getKernel());
    auto source = response.getSource();
    out.source.assign(reinterpret_cast<const char*>(source.begin()), source.size());
    return out;
  });
}

}  // namespace tensord
