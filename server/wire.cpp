#include "server/wire.h"

#include <kj/string.h>

namespace tensord::server {
namespace {

kj::Exception make(kj::Exception::Type type, std::string message) {
  return kj::Exception(type, "tensord", 0, kj::heapString(message.data(), message.size()));
}

}  // namespace

kj::Exception failed(std::string message) { return make(kj::Exception::Type::FAILED, std::move(message)); }
kj::Exception overloaded(std::string message) { return make(kj::Exception::Type::OVERLOADED, std::move(message)); }
kj::Exception unimplemented(std::string message) {
  return make(kj::Exception::Type::UNIMPLEMENTED, std::move(message));
}
kj::Exception disconnected(std::string message) { return make(kj::Exception::Type::DISCONNECTED, std::move(message)); }

kj::Exception fromComputeError(const compute::ComputeError& error) {
  using Kind = compute::ComputeError::Kind;
  switch (error.kind()) {
    case Kind::kUnsupported:
      return unimplemented(error.what());
    case Kind::kOutOfMemory:
      return overloaded(error.what());
    case Kind::kInvalid:
    case Kind::kDevice:
      break;
  }
  return failed(error.what());
}

kj::Exception fromExceptionPtr(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const kj::Exception& e) {
    return e;
  } catch (const compute::ComputeError& e) {
    return fromComputeError(e);
  } catch (const std::exception& e) {
    return failed(e.what());
  } catch (...) {
    return failed("unknown error");
  }
}

compute::DType dtypeFromWire(proto::DType dtype, std::string_view context) {
  switch (dtype) {
    case proto::DType::F32:
      return compute::DType::F32;
    case proto::DType::F16:
      return compute::DType::F16;
    case proto::DType::BF16:
      return compute::DType::BF16;
    case proto::DType::I32:
      return compute::DType::I32;
    case proto::DType::I64:
      return compute::DType::I64;
    case proto::DType::U8:
      return compute::DType::U8;
    case proto::DType::BOOL:
      return compute::DType::Bool;
  }
  kj::throwFatalException(unimplemented(std::string(context) + ": unknown dtype " +
                                        std::to_string(static_cast<uint16_t>(dtype)) + " (a newer protocol?)"));
}

proto::DType dtypeToWire(compute::DType dtype) {
  switch (dtype) {
    case compute::DType::F32:
      return proto::DType::F32;
    case compute::DType::F16:
      return proto::DType::F16;
    case compute::DType::BF16:
      return proto::DType::BF16;
    case compute::DType::I32:
      return proto::DType::I32;
    case compute::DType::I64:
      return proto::DType::I64;
    case compute::DType::U8:
      return proto::DType::U8;
    case compute::DType::Bool:
      return proto::DType::BOOL;
  }
  KJ_UNREACHABLE;
}

compute::TensorDesc descFromWire(proto::TensorDesc::Reader desc, std::string_view context) {
  compute::TensorDesc out;
  out.dtype = dtypeFromWire(desc.getDtype(), context);
  auto shape = desc.getShape();
  for (int64_t d : shape) out.shape.push_back(d);
  const std::string prefix = std::string(context) + ": ";
  if (out.shape.size() > compute::kMaxRank) {
    kj::throwFatalException(failed(prefix + "shape " + compute::shapeStr(out.shape) + " has rank " +
                                   std::to_string(out.shape.size()) +
                                   "; expected rank <= " + std::to_string(compute::kMaxRank)));
  }
  uint64_t bytes = compute::dtypeSize(out.dtype);
  for (size_t i = 0; i < out.shape.size(); ++i) {
    if (out.shape[i] < 0) {
      kj::throwFatalException(failed(prefix + "shape " + compute::shapeStr(out.shape) + " has dim " +
                                     std::to_string(i) + " = " + std::to_string(out.shape[i]) +
                                     "; expected dims >= 0"));
    }
  }
  for (int64_t d : out.shape) {
    if (d != 0 && __builtin_mul_overflow(bytes, uint64_t(d), &bytes)) {
      kj::throwFatalException(failed(prefix + "shape " + compute::shapeStr(out.shape) +
                                     " is too large: its byte size does not fit in 64 bits"));
    }
  }
  return out;
}

void fillDesc(proto::TensorDesc::Builder out, const compute::TensorDesc& desc) {
  out.setDtype(dtypeToWire(desc.dtype));
  auto shape = out.initShape(capnp::uint(desc.shape.size()));
  for (size_t i = 0; i < desc.shape.size(); ++i) shape.set(capnp::uint(i), desc.shape[i]);
}

std::vector<std::pair<std::string, compute::AttrValue>> attrsFromWire(capnp::List<proto::Attr>::Reader attrs,
                                                                      std::string_view op) {
  std::vector<std::pair<std::string, compute::AttrValue>> out;
  out.reserve(attrs.size());
  for (auto attr : attrs) {
    std::string name = attr.getName();
    for (const auto& [seen, value] : out) {
      if (seen == name) {
        kj::throwFatalException(failed(std::string(op) + ": attribute '" + name + "' is given more than once"));
      }
    }
    auto value = attr.getValue();
    switch (value.which()) {
      case proto::AttrValue::INT:
        out.emplace_back(name, int64_t(value.getInt()));
        break;
      case proto::AttrValue::FLOAT:
        out.emplace_back(name, double(value.getFloat()));
        break;
      case proto::AttrValue::BOOL:
        out.emplace_back(name, bool(value.getBool()));
        break;
      case proto::AttrValue::TEXT:
        out.emplace_back(name, std::string(value.getText().cStr()));
        break;
      case proto::AttrValue::INTS: {
        std::vector<int64_t> ints;
        for (int64_t v : value.getInts()) ints.push_back(v);
        out.emplace_back(name, std::move(ints));
        break;
      }
      case proto::AttrValue::FLOATS: {
        std::vector<double> floats;
        for (double v : value.getFloats()) floats.push_back(v);
        out.emplace_back(name, std::move(floats));
        break;
      }
      default:
        kj::throwFatalException(unimplemented(std::string(op) + ": attribute '" + name +
                                              "' has a value kind this daemon does not know (a newer protocol?)"));
    }
  }
  return out;
}

void fillAttrValue(proto::AttrValue::Builder out, const compute::AttrValue& value) {
  if (auto* v = std::get_if<int64_t>(&value)) {
    out.setInt(*v);
  } else if (auto* v = std::get_if<double>(&value)) {
    out.setFloat(*v);
  } else if (auto* v = std::get_if<bool>(&value)) {
    out.setBool(*v);
  } else if (auto* v = std::get_if<std::string>(&value)) {
    out.setText(kj::StringPtr(v->c_str(), v->size()));
  } else if (auto* v = std::get_if<std::vector<int64_t>>(&value)) {
    auto list = out.initInts(capnp::uint(v->size()));
    for (size_t i = 0; i < v->size(); ++i) list.set(capnp::uint(i), (*v)[i]);
  } else if (auto* v = std::get_if<std::vector<double>>(&value)) {
    auto list = out.initFloats(capnp::uint(v->size()));
    for (size_t i = 0; i < v->size(); ++i) list.set(capnp::uint(i), (*v)[i]);
  }
}

namespace {

proto::AttrType attrTypeToWire(compute::AttrType type) {
  switch (type) {
    case compute::AttrType::kInt:
      return proto::AttrType::INT;
    case compute::AttrType::kFloat:
      return proto::AttrType::FLOAT;
    case compute::AttrType::kBool:
      return proto::AttrType::BOOL;
    case compute::AttrType::kText:
      return proto::AttrType::TEXT;
    case compute::AttrType::kInts:
      return proto::AttrType::INTS;
    case compute::AttrType::kFloats:
      return proto::AttrType::FLOATS;
    case compute::AttrType::kScalar:
      return proto::AttrType::SCALAR;
  }
  KJ_UNREACHABLE;
}

kj::StringPtr text(const std::string& s) { return kj::StringPtr(s.c_str(), s.size()); }

kj::StringPtr roleToWire(compute::InputRole role) {
  switch (role) {
    case compute::InputRole::kData:
      return "data";
    case compute::InputRole::kIndex:
      return "index";
    case compute::InputRole::kMask:
      return "mask";
    case compute::InputRole::kAny:
      return "any";
  }
  KJ_UNREACHABLE;
}

}  // namespace

void fillOpSpec(proto::OpSpec::Builder out, const compute::OpSpec& spec) {
  out.setName(text(spec.name));
  out.setCategory(text(spec.category));
  auto inputs = out.initInputs(capnp::uint(spec.inputs.size()));
  for (size_t i = 0; i < spec.inputs.size(); ++i) inputs.set(capnp::uint(i), text(spec.inputs[i].name));
  auto outputs = out.initOutputs(capnp::uint(spec.outputs.size()));
  for (size_t i = 0; i < spec.outputs.size(); ++i) outputs.set(capnp::uint(i), text(spec.outputs[i]));
  auto attrs = out.initAttrs(capnp::uint(spec.attrs.size()));
  for (size_t i = 0; i < spec.attrs.size(); ++i) {
    const compute::AttrSpec& attr = spec.attrs[i];
    auto a = attrs[capnp::uint(i)];
    a.setName(text(attr.name));
    a.setType(attrTypeToWire(attr.type));
    a.setRequired(!attr.defaultValue.has_value() && !attr.optional);
    if (attr.defaultValue) fillAttrValue(a.initDefault(), *attr.defaultValue);
    a.setDoc(text(attr.doc));
  }
  auto dtypes = out.initDtypes(capnp::uint(spec.dtypes.size()));
  for (size_t i = 0; i < spec.dtypes.size(); ++i) dtypes.set(capnp::uint(i), dtypeToWire(spec.dtypes[i]));
  out.setDoc(text(spec.doc));
  out.setBackward(text(spec.backward));
  auto inputSpecs = out.initInputSpecs(capnp::uint(spec.inputs.size()));
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const compute::InputSpec& in = spec.inputs[i];
    auto w = inputSpecs[capnp::uint(i)];
    w.setName(text(in.name));
    w.setRole(roleToWire(in.role));
    w.setOptional(in.optional);
    w.setVariadic(in.variadic);
  }
  out.setView(spec.view);
  auto mutates = out.initMutates(capnp::uint(spec.mutates.size()));
  for (size_t i = 0; i < spec.mutates.size(); ++i) mutates.set(capnp::uint(i), text(spec.mutates[i]));
  out.setDifferentiable(spec.differentiable);
}

void fillDeviceInfo(proto::DeviceInfo::Builder out, const compute::Engine& engine) {
  const compute::DeviceInfo& device = engine.device();
  out.setName(text(device.name));
  out.setKind(text(device.kind));
  out.setVendorId(device.vendorId);
  out.setDeviceId(device.deviceId);
  out.setDriver(text(device.driver));
  out.setApiVersion(text(device.apiVersion));
  out.setMemoryBytes(device.memoryBytes);
  constexpr compute::DType kAll[] = {compute::DType::F32, compute::DType::F16, compute::DType::BF16,
                                     compute::DType::I32, compute::DType::I64, compute::DType::U8,
                                     compute::DType::Bool};
  std::vector<compute::DType> held;
  for (compute::DType d : kAll) {
    if (engine.dtypeSupported(d)) held.push_back(d);
  }
  auto dtypes = out.initDtypes(capnp::uint(held.size()));
  for (size_t i = 0; i < held.size(); ++i) dtypes.set(capnp::uint(i), dtypeToWire(held[i]));
}

}  // namespace tensord::server
