// Conversions between wire and public client types.

#include "client/wire.h"

#include <type_traits>

namespace tensord::wire {

proto::DType toWire(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return proto::DType::F32;
    case DType::F16:
      return proto::DType::F16;
    case DType::BF16:
      return proto::DType::BF16;
    case DType::I32:
      return proto::DType::I32;
    case DType::I64:
      return proto::DType::I64;
    case DType::U8:
      return proto::DType::U8;
    case DType::Bool:
      return proto::DType::BOOL;
  }
  throw Error(Error::Kind::kFailed, "unknown dtype value " + std::to_string(int(dtype)));
}

DType fromWire(proto::DType dtype) {
  switch (dtype) {
    case proto::DType::F32:
      return DType::F32;
    case proto::DType::F16:
      return DType::F16;
    case proto::DType::BF16:
      return DType::BF16;
    case proto::DType::I32:
      return DType::I32;
    case proto::DType::I64:
      return DType::I64;
    case proto::DType::U8:
      return DType::U8;
    case proto::DType::BOOL:
      return DType::Bool;
  }
  throw Error(Error::Kind::kUnimplemented,
              "the daemon sent dtype number " + std::to_string(int(dtype)) + ", which this client does not know");
}

void setAttrValue(proto::AttrValue::Builder out, const AttrValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out.setInt(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out.setFloat(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out.setBool(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.setText(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto list = out.initInts(uint32_t(v.size()));
          for (size_t i = 0; i < v.size(); ++i) list.set(uint32_t(i), v[i]);
        } else {
          auto list = out.initFloats(uint32_t(v.size()));
          for (size_t i = 0; i < v.size(); ++i) list.set(uint32_t(i), v[i]);
        }
      },
      value);
}

AttrValue fromWire(proto::AttrValue::Reader value) {
  switch (value.which()) {
    case proto::AttrValue::INT:
      return value.getInt();
    case proto::AttrValue::FLOAT:
      return value.getFloat();
    case proto::AttrValue::BOOL:
      return value.getBool();
    case proto::AttrValue::TEXT:
      return std::string(value.getText().cStr());
    case proto::AttrValue::INTS: {
      std::vector<int64_t> out;
      for (int64_t v : value.getInts()) out.push_back(v);
      return out;
    }
    case proto::AttrValue::FLOATS: {
      std::vector<double> out;
      for (double v : value.getFloats()) out.push_back(v);
      return out;
    }
  }
  return int64_t(0);
}

std::string attrTypeName(proto::AttrType type) {
  switch (type) {
    case proto::AttrType::INT:
      return "int";
    case proto::AttrType::FLOAT:
      return "float";
    case proto::AttrType::BOOL:
      return "bool";
    case proto::AttrType::TEXT:
      return "text";
    case proto::AttrType::INTS:
      return "ints";
    case proto::AttrType::FLOATS:
      return "floats";
    case proto::AttrType::SCALAR:
      return "scalar";
  }
  return "type#" + std::to_string(int(type));
}

namespace {

Shape shapeFromWire(capnp::List<int64_t>::Reader shape) {
  Shape out;
  out.reserve(shape.size());
  for (int64_t d : shape) out.push_back(d);
  return out;
}

std::vector<std::string> textList(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  out.reserve(list.size());
  for (auto t : list) out.emplace_back(t.cStr());
  return out;
}

}  // namespace

TensorInfo fromWire(proto::TensorInfo::Reader info) {
  TensorInfo out;
  out.id = info.getId();
  out.name = info.getName();
  out.owner = info.getOwner();
  out.dtype = fromWire(info.getDesc().getDtype());
  out.shape = shapeFromWire(info.getDesc().getShape());
  out.bytes = info.getBytes();
  return out;
}

DeviceInfo fromWire(proto::DeviceInfo::Reader d) {
  DeviceInfo out;
  out.name = d.getName();
  out.kind = d.getKind();
  out.driver = d.getDriver();
  out.apiVersion = d.getApiVersion();
  out.vendorId = d.getVendorId();
  out.deviceId = d.getDeviceId();
  out.memoryBytes = d.getMemoryBytes();
  for (auto dtype : d.getDtypes()) {
    try {
      out.dtypes.push_back(fromWire(dtype));
    } catch (const Error&) {  // newer than this client
    }
  }
  return out;
}

MemoryStats fromWire(proto::MemoryStats::Reader m) {
  MemoryStats out;
  out.liveBytes = m.getLiveBytes();
  out.reservedBytes = m.getReservedBytes();
  out.cachedBytes = m.getCachedBytes();
  out.limitBytes = m.getLimitBytes();
  out.tensorCount = m.getTensorCount();
  out.namedCount = m.getNamedCount();
  return out;
}

DaemonInfo fromWire(proto::DaemonInfo::Reader info) {
  DaemonInfo out;
  out.version = info.getVersion();
  out.protocolVersion = info.getProtocolVersion();
  out.device = fromWire(info.getDevice());
  out.memory = fromWire(info.getMemory());
  out.opsExecuted = info.getOpsExecuted();
  out.maxTensorBytes = info.getMaxTensorBytes();
  out.chunkBytes = info.getChunkBytes();
  return out;
}

DaemonStats fromWire(proto::DaemonStats::Reader stats) {
  DaemonStats out;
  out.version = stats.getVersion();
  out.uptimeSeconds = stats.getUptimeSeconds();
  out.device = fromWire(stats.getDevice());
  out.memory = fromWire(stats.getMemory());
  out.connections = stats.getConnections();
  out.connectionsAccepted = stats.getConnectionsAccepted();
  out.sessions = stats.getSessions();
  out.inflightCalls = stats.getInflightCalls();
  out.queuedJobs = stats.getQueuedJobs();
  out.bytesIn = stats.getBytesIn();
  out.bytesOut = stats.getBytesOut();
  out.opsExecuted = stats.getOpsExecuted();
  out.deviceTimestamps = stats.getDeviceTimestamps();
  out.metricsAddress = stats.getMetricsAddress();
  for (auto p : stats.getPrincipals()) {
    out.principals.push_back({.principal = p.getPrincipal(),
                              .deviceBytes = p.getDeviceBytes(),
                              .tensors = p.getTensors(),
                              .sessions = p.getSessions(),
                              .calls = p.getCalls(),
                              .ops = p.getOps(),
                              .bytesIn = p.getBytesIn(),
                              .bytesOut = p.getBytesOut()});
  }
  for (auto op : stats.getOps()) {
    out.ops.push_back({.op = op.getOp(),
                       .completed = op.getCompleted(),
                       .failed = op.getFailed(),
                       .latencyP50 = op.getLatencyP50(),
                       .latencyP90 = op.getLatencyP90(),
                       .latencyP99 = op.getLatencyP99(),
                       .latencyMax = op.getLatencyMax(),
                       .deviceSeconds = op.getDeviceSeconds(),
                       .deviceP50 = op.getDeviceP50(),
                       .deviceP99 = op.getDeviceP99()});
  }
  return out;
}

OpInfo fromWire(proto::OpSpec::Reader spec) {
  OpInfo out;
  out.name = spec.getName();
  out.category = spec.getCategory();
  out.doc = spec.getDoc();
  out.backward = spec.getBackward();
  out.inputs = textList(spec.getInputs());
  out.outputs = textList(spec.getOutputs());
  for (auto a : spec.getAttrs()) {
    AttrSpec attr;
    attr.name = a.getName();
    attr.type = attrTypeName(a.getType());
    attr.required = a.getRequired();
    attr.doc = a.getDoc();
    attr.hasDefault = !attr.required && a.hasDefault();
    if (attr.hasDefault) attr.defaultValue = fromWire(a.getDefault());
    out.attrs.push_back(std::move(attr));
  }
  if (spec.hasInputSpecs()) {
    for (auto in : spec.getInputSpecs()) {
      InputInfo info;
      info.name = in.getName();
      info.role = in.getRole();
      info.optional = in.getOptional();
      info.variadic = in.getVariadic();
      out.inputSpecs.push_back(std::move(info));
    }
  } else {
    for (const auto& name : out.inputs) out.inputSpecs.push_back(InputInfo{.name = name});
  }
  out.view = spec.getView();
  out.mutates = textList(spec.getMutates());
  out.differentiable = spec.getDifferentiable();
  for (auto d : spec.getDtypes()) {
    // An op may list dtypes newer than this client; show only the ones it knows.
    try {
      out.dtypes.push_back(fromWire(d));
    } catch (const Error&) {
    }
  }
  return out;
}

GroupInfo fromWire(proto::GroupInfo::Reader group) {
  GroupInfo out;
  out.name = group.getName();
  out.rank = group.getRank();
  out.size = group.getSize();
  out.members = textList(group.getMembers());
  out.state = group.getState();
  out.origin = group.getOrigin();
  out.collectives = group.getCollectives();
  return out;
}

std::string shapeStr(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace tensord::wire
