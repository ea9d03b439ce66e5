#pragma once
// tensorctl's output: aligned tables for people, JSON for scripts. Internal.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensord/client.h"

namespace tensord::cli {

// "f32[512, 256]"
std::string describe(DType dtype, const Shape& shape);

nlohmann::json toJson(const AttrValue& value);
nlohmann::json toJson(const DaemonInfo& info);
nlohmann::json toJson(const TensorInfo& info);
nlohmann::json toJson(const OpInfo& op);
nlohmann::json shapeJson(const Shape& shape);

// A Python-like one-line signature: inputs (`name?` optional, `name...`
// variadic, `name: index` / `mask` / `any` for non-data roles), then after
// `*` the attrs (`name=default`, `name: type` required, `name: type?`
// optional without default), then `-> (outputs)` unless it is just `out`:
//   add(input, other?, *, alpha=1, other: scalar?)
std::string signature(const OpInfo& op);

// "f32, f16, bf16"; "all" when it is every dtype this client knows.
std::string dtypeList(const std::vector<DType>& dtypes, const char* separator = ", ");

// Prints rows with columns padded to their widest cell; the first row is the header.
void printTable(const std::vector<std::vector<std::string>>& rows);

// Prints `value` indented, to stdout.
void printJson(const nlohmann::json& value);

}  // namespace tensord::cli
