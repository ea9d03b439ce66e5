#include "compute/dtype.h"

#include <array>

namespace tensord::compute {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  uint32_t size;
};

constexpr std::array<DTypeRow, 7> kDTypes = {{
    {DType::F32, "f32", 4},
    {DType::F16, "f16", 2},
    {DType::BF16, "bf16", 2},
    {DType::I32, "i32", 4},
    {DType::I64, "i64", 8},
    {DType::U8, "u8", 1},
    {DType::Bool, "bool", 1},
}};

}  // namespace

std::string_view dtypeName(DType dtype) { return kDTypes[size_t(dtype)].name; }

uint32_t dtypeSize(DType dtype) { return kDTypes[size_t(dtype)].size; }

std::optional<DType> parseDType(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeStr(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorDesc::str() const { return std::string(dtypeName(dtype)) + shapeStr(shape); }

}  // namespace tensord::compute
