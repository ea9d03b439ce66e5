#pragma once
// The edge between the wire contract (protocol/tensord.capnp) and compute/:
// conversions both ways, and compute errors turned into Cap'n Proto
// exceptions of the kind the contract promises (unknown op or dtype ->
// UNIMPLEMENTED, out of memory or quota -> OVERLOADED, else FAILED).

#include <capnp/list.h>
#include <kj/exception.h>

#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/attrs.h"
#include "compute/dtype.h"
#include "compute/engine.h"
#include "compute/error.h"
#include "compute/op_spec.h"
#include "protocol/tensord.capnp.h"

namespace tensord::server {

kj::Exception failed(std::string message);
kj::Exception overloaded(std::string message);
kj::Exception unimplemented(std::string message);
kj::Exception disconnected(std::string message);

kj::Exception fromComputeError(const compute::ComputeError& error);
// Any exception (kj, ComputeError, std) as a wire exception.
kj::Exception fromExceptionPtr(std::exception_ptr error);

// Runs `body`, turning a ComputeError it throws into the matching kj exception.
template <typename F>
auto mapComputeErrors(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const compute::ComputeError& e) {
    kj::throwFatalException(fromComputeError(e));
  }
}

// Like mapComputeErrors, with `context` ("add: output 'c'") put before the
// message, for errors that would not otherwise say which request they are about.
template <typename F>
auto mapComputeErrors(const std::string& context, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const compute::ComputeError& e) {
    const std::string message = e.what();
    if (message.rfind(context, 0) == 0) kj::throwFatalException(fromComputeError(e));  // already says it
    kj::throwFatalException(fromComputeError(compute::ComputeError(e.kind(), context + ": " + message)));
  }
}

compute::DType dtypeFromWire(proto::DType dtype, std::string_view context);
proto::DType dtypeToWire(compute::DType dtype);

// Reads a descriptor and checks rank <= 8, dims >= 0 and that its byte size
// fits in 64 bits. Errors start with `context` ("upload").
compute::TensorDesc descFromWire(proto::TensorDesc::Reader desc, std::string_view context);
void fillDesc(proto::TensorDesc::Builder out, const compute::TensorDesc& desc);

// Wire attributes of a call to `op`; rejects duplicates and unknown kinds.
std::vector<std::pair<std::string, compute::AttrValue>> attrsFromWire(capnp::List<proto::Attr>::Reader attrs,
                                                                      std::string_view op);
void fillAttrValue(proto::AttrValue::Builder out, const compute::AttrValue& value);
void fillOpSpec(proto::OpSpec::Builder out, const compute::OpSpec& spec);
// The device and the dtypes its tensors can have (Engine::dtypeSupported).
void fillDeviceInfo(proto::DeviceInfo::Builder out, const compute::Engine& engine);

}  // namespace tensord::server
