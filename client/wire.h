#pragma once
// Conversions between the wire types (protocol/tensord.capnp) and the public
// client types (tensord/client.h). Internal to the client library.

#include <string>
#include <vector>

#include "protocol/tensord.capnp.h"
#include "tensord/client.h"

namespace tensord::wire {

proto::DType toWire(DType dtype);
DType fromWire(proto::DType dtype);  // throws Error for a value this client does not know

// Writes `value` into the union `out`.
void setAttrValue(proto::AttrValue::Builder out, const AttrValue& value);

// Fills the `inputs` and `attrs` of a request shaped like Session.call
// (call, collective).
template <typename Builder>
void setAttrs(Builder& builder, const Attrs& attrs) {
  auto at = builder.initAttrs(uint32_t(attrs.size()));
  for (size_t i = 0; i < attrs.size(); ++i) {
    at[uint32_t(i)].setName(attrs[i].first);
    setAttrValue(at[uint32_t(i)].initValue(), attrs[i].second);
  }
}
template <typename Request>
void setInputsAndAttrs(Request& request, std::vector<proto::Tensor::Client>& caps, const Attrs& attrs) {
  auto in = request.initInputs(uint32_t(caps.size()));
  for (size_t i = 0; i < caps.size(); ++i) in.set(uint32_t(i), caps[i]);
  setAttrs(request, attrs);
}
AttrValue fromWire(proto::AttrValue::Reader value);
std::string attrTypeName(proto::AttrType type);  // "int", "float", ...

TensorInfo fromWire(proto::TensorInfo::Reader info);
DeviceInfo fromWire(proto::DeviceInfo::Reader device);
MemoryStats fromWire(proto::MemoryStats::Reader memory);
DaemonInfo fromWire(proto::DaemonInfo::Reader info);
DaemonStats fromWire(proto::DaemonStats::Reader stats);
OpInfo fromWire(proto::OpSpec::Reader spec);
GroupInfo fromWire(proto::GroupInfo::Reader group);

// "[2, 3]"
std::string shapeStr(const Shape& shape);

}  // namespace tensord::wire
