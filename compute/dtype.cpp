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

bool isFloating(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
bool isIntegral(DType d) { return d == DType::I32 || d == DType::I64 || d == DType::U8; }

namespace {

int category(DType d) { return d == DType::Bool ? 0 : isIntegral(d) ? 1 : 2; }

}  // namespace

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (a == DType::Bool) return b;
  if (isFloating(a)) return DType::F32;  // f32 with anything, or f16 with bf16
  // Integral: u8 < i32 < i64 (u8 with a signed type gives the signed one).
  auto rank = [](DType d) { return d == DType::U8 ? 0 : d == DType::I32 ? 1 : 2; };
  return rank(a) > rank(b) ? a : b;
}

DType resultType(const std::vector<PromotionInput>& operands) {
  std::optional<DType> tiers[3];
  for (const auto& op : operands) {
    auto& t = tiers[int(op.kind)];
    t = t ? promoteTypes(*t, op.dtype) : op.dtype;
  }
  std::optional<DType> result;
  for (int tier = 0; tier < 3; ++tier) {
    if (!tiers[tier]) continue;
    DType d = *tiers[tier];
    if (!result) {
      result = d;
    } else if (category(d) > category(*result)) {
      // A 0-d tensor of a higher category brings its own dtype; a scalar its
      // category's default dtype.
      result = tier == 2 ? (category(d) == 2 ? DType::F32 : DType::I64) : d;
    }
  }
  return result.value_or(DType::F32);
}

int64_t TensorDesc::numel() const {
  // Saturates instead of overflowing: shapes that attributes ask for are
  // counted before any limit is checked, and a count above every limit is
  // all those checks need.
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
  }
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
