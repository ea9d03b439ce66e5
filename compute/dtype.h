#pragma once
// Element types and tensor descriptors shared by every part of tensord.
// The server converts to and from the wire enum at its edge.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tensord::compute {

enum class DType : uint8_t { F32, F16, BF16, I32, I64, U8, Bool };

std::string_view dtypeName(DType dtype);          // "f32", "f16", ...
std::optional<DType> parseDType(std::string_view name);
uint32_t dtypeSize(DType dtype);                  // bytes per element

using Shape = std::vector<int64_t>;

// Largest rank a tensor may have.
constexpr size_t kMaxRank = 8;

struct TensorDesc {
  DType dtype = DType::F32;
  Shape shape;

  int64_t numel() const;
  uint64_t bytes() const { return uint64_t(numel()) * dtypeSize(dtype); }
  size_t rank() const { return shape.size(); }
  std::string str() const;  // "f32[2, 3]"
  bool operator==(const TensorDesc&) const = default;
};

std::string shapeStr(const Shape& shape);  // "[2, 3]"

}  // namespace tensord::compute
