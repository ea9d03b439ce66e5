// Tables and JSON for tensorctl.

#include "client/output.h"

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
        {"memory_bytes", info.device.memoryBytes}}},
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
    if (!a.required) attr["default"] = toJson(a.defaultValue);
    attrs.push_back(std::move(attr));
  }
  auto dtypes = nlohmann::json::array();
  for (DType d : op.dtypes) dtypes.push_back(std::string(dtypeName(d)));
  return {
      {"name", op.name}, {"category", op.category}, {"inputs", op.inputs}, {"outputs", op.outputs},
      {"attrs", attrs},  {"dtypes", dtypes},        {"doc", op.doc},       {"backward", op.backward},
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
