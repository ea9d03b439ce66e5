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

// Prints rows with columns padded to their widest cell; the first row is the header.
void printTable(const std::vector<std::vector<std::string>>& rows);

// Prints `value` indented, to stdout.
void printJson(const nlohmann::json& value);

}  // namespace tensord::cli
