#pragma once
// Shape helpers the kernel templates share: dims, broadcasting, strides.

#include <optional>
#include <string>
#include <vector>

#include "compute/dtype.h"

namespace tensord::compute {

// `dim` in [-rank, rank) (a 0-d tensor counts as rank 1, as in PyTorch)
// normalized to [0, rank); throws naming `op` and the attribute `attr`.
int64_t normalizeDim(const std::string& op, int64_t dim, size_t rank, const std::string& attr = "dim");

// A set of dims (attribute `attr`, [] = all when `emptyMeansAll`) as a mask
// over `rank` dims; throws on out-of-range or repeated dims.
std::vector<bool> dimMask(const std::string& op, const std::vector<int64_t>& dims, size_t rank,
                          bool emptyMeansAll = true, const std::string& attr = "dim");

// NumPy broadcasting of two shapes; nullopt if incompatible.
std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b);

// Contiguous (row-major) element strides of `shape`.
std::vector<int64_t> contiguousStrides(const Shape& shape);

// Element strides of `shape` broadcast to `out` (0 where broadcast).
std::vector<int64_t> broadcastStrides(const Shape& shape, const Shape& out);

// `shape` with one stride vector per operand, size-1 dims dropped and
// neighbouring dims merged where every operand is contiguous across them.
struct Coalesced {
  Shape shape;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]
};
Coalesced coalesce(const Shape& shape, std::vector<std::vector<int64_t>> strides);

// The layout words of an elementwise kernel (elementwise.comp,
// fused_elementwise.comp) for an output of `shape` and `operands`
// broadcast to it: the coalesced shape, then one stride row per operand,
// `rows` rows in all (those past the operands are zeros).
struct ElementwiseLayout {
  std::vector<uint32_t> meta;
  uint32_t rank = 0;   // of the coalesced shape
  bool dense = false;  // every operand is contiguous with the output
};
ElementwiseLayout elementwiseLayout(const Shape& shape, const std::vector<TensorDesc>& operands, size_t rows);

}  // namespace tensord::compute
