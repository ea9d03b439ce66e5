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

bool isFloating(DType dtype);  // f32, f16, bf16
bool isIntegral(DType dtype);  // i32, i64, u8 (not bool)

// PyTorch's type promotion (torch.promote_types): the smallest dtype both
// convert to without losing their category. f16 with bf16 gives f32.
DType promoteTypes(DType a, DType b);

// torch.result_type over the operands of one call. Operands come in three
// priorities: tensors with dims, 0-d tensors, and Python scalars given as
// attributes. A lower priority only counts when its category (bool <
// integral < floating) is higher than everything above it; a floating scalar
// then promotes to f32 (the default dtype), an integral one to i64.
struct PromotionInput {
  enum class Kind { kTensor, kZeroDim, kScalar };
  Kind kind;
  DType dtype;  // for scalars: F32 (a float), I64 (an int) or Bool
};
DType resultType(const std::vector<PromotionInput>& operands);

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
