// Tables and JSON for tensorctl.

#include "client/output.h"

#include "client/attr_parse.h"

#include <algorithm>
#include <cstdio>
#include <type_traits>

namespace tensord::cli {

std::string describe(DType dtype, const Shape& shape) {
  std::string out(dtypeName(dtype));
  out += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

nlohmann::json shapeJson(const Shape& shape) {
  auto out = nlohmann::json::array();
  for (int64_t d : shape) out.push_back(d);
  return out;
}

nlohmann::json toJson(const AttrValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

namespace {

nlohmann::json dtypesJson(const std::vector<DType>& dtypes) {
  auto out = nlohmann::json::array();
  for (DType d : dtypes) out.push_back(std::string(dtypeName(d)));
  return out;
}

}  // namespace

std::string signature(const OpInfo& op) {
  std::vector<std::string> parts;
  for (const auto& in : op.inputSpecs) {
    std::string p = in.name + (in.variadic ? "..." : in.optional ? "?" : "");
    if (in.role != "data") p += ": " + in.role;
    parts.push_back(std::move(p));
  }
  if (!op.attrs.empty()) parts.emplace_back("*");
  for (const auto& a : op.attrs) {
    if (a.hasDefault) {
      parts.push_back(a.name + "=" + formatAttrValue(a.defaultValue));
    } else {
      parts.push_back(a.name + ": " + a.type + (a.required ? "" : "?"));
    }
  }
  std::string out = op.name + "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  out += ")";
  if (op.outputs.size() != 1 || op.outputs[0] != "out") {
    out += " -> ";
    if (op.outputs.size() == 1) {
      out += op.outputs[0];
    } else {
      out += "(";
      for (size_t i = 0; i < op.outputs.size(); ++i) out += (i ? ", " : "") + op.outputs[i];
      out += ")";
    }
  }
  return out;
}

std::string dtypeList(const std::vector<DType>& dtypes, const char* separator) {
  bool all = true;
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    if (std::find(dtypes.begin(), dtypes.end(), d) == dtypes.end()) all = false;
  }
  if (all) return "all";
  std::string out;
  for (DType d : dtypes) out += (out.empty() ? "" : separator) + std::string(dtypeName(d));
  return out.empty() ? "-" : out;
}

nlohmann::json toJson(const DaemonInfo& info) {
  return {
      {"version", info.version},
      {"protocol_version", info.protocolVersion},
      {"device",
       {{"name", info.device.name},
        {"kind", info.device.kind},
        {"vendor_id", info.device.vendorId},
        {"device_id", info.device.deviceId},
        {"driver", info.device.driver},
        {"api_version", info.device.apiVersion},
        {"memory_bytes", info.device.memoryBytes},
        {"dtypes", dtypesJson(info.device.dtypes)}}},
      {"memory",
       {{"live_bytes", info.memory.liveBytes},
        {"reserved_bytes", info.memory.reservedBytes},
        {"cached_bytes", info.memory.cachedBytes},
        {"limit_bytes", info.memory.limitBytes},
        {"tensor_count", info.memory.tensorCount},
        {"named_count", info.memory.namedCount}}},
      {"ops_executed", info.opsExecuted},
      {"max_tensor_bytes", info.maxTensorBytes},
      {"chunk_bytes", info.chunkBytes},
  };
}

nlohmann::json toJson(const TensorInfo& info) {
  return {
      {"name", info.name},
      {"id", info.id},
      {"dtype", std::string(dtypeName(info.dtype))},
      {"shape", shapeJson(info.shape)},
      {"bytes", info.bytes},
      {"owner", info.owner},
  };
}

nlohmann::json toJson(const OpInfo& op) {
  auto attrs = nlohmann::json::array();
  for (const auto& a : op.attrs) {
    nlohmann::json attr = {{"name", a.name}, {"type", a.type}, {"required", a.required}, {"doc", a.doc}};
    attr["optional"] = !a.required && !a.hasDefault;  // may be left out, and has no default
    if (a.hasDefault) attr["default"] = toJson(a.defaultValue);
    attrs.push_back(std::move(attr));
  }
  auto inputSpecs = nlohmann::json::array();
  for (const auto& in : op.inputSpecs) {
    inputSpecs.push_back(
        {{"name", in.name}, {"role", in.role}, {"optional", in.optional}, {"variadic", in.variadic}});
  }
  return {
      {"name", op.name},
      {"category", op.category},
      {"signature", signature(op)},
      {"inputs", op.inputs},
      {"input_specs", inputSpecs},
      {"outputs", op.outputs},
      {"attrs", attrs},
      {"dtypes", dtypesJson(op.dtypes)},
      {"view", op.view},
      {"mutates", op.mutates},
      {"differentiable", op.differentiable},
      {"doc", op.doc},
      {"backward", op.backward},
  };
}

void printTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }
}

void printJson(const nlohmann::json& value) { std::printf("%s\n", value.dump(2).c_str()); }

}  // namespace tensord::cli
