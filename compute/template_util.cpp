#include "compute/template_util.h"

#include <algorithm>

#include "compute/error.h"

namespace tensord::compute {

int64_t normalizeDim(const std::string& op, int64_t dim, size_t rank, const std::string& attr) {
  int64_t r = std::max<int64_t>(int64_t(rank), 1);
  if (dim < -r || dim >= r) {
    throwInvalid(op + ": attribute '" + attr + "' is " + std::to_string(dim) + "; expected a dim in [" +
                 std::to_string(-r) + ", " + std::to_string(r - 1) + "] for a rank-" + std::to_string(rank) +
                 " input");
  }
  return dim < 0 ? dim + r : dim;
}

std::vector<bool> dimMask(const std::string& op, const std::vector<int64_t>& dims, size_t rank, bool emptyMeansAll,
                          const std::string& attr) {
  std::vector<bool> mask(rank, dims.empty() && emptyMeansAll);
  for (int64_t dim : dims) {
    int64_t d = normalizeDim(op, dim, rank, attr);
    if (rank == 0) continue;  // a 0-d tensor's only "dim" is itself
    if (mask[size_t(d)]) throwInvalid(op + ": attribute '" + attr + "' names dim " + std::to_string(dim) + " twice");
    mask[size_t(d)] = true;
  }
  return mask;
}

std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> contiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::vector<int64_t> broadcastStrides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t d = shape.size() - 1 - i, o = out.size() - 1 - i;
    strides[o] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

Coalesced coalesce(const Shape& shape, std::vector<std::vector<int64_t>> strides) {
  Coalesced c;
  c.strides.resize(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !c.shape.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k) merge = c.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      c.shape.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) c.strides[k].back() = strides[k][d];
      continue;
    }
    c.shape.push_back(shape[d]);
    for (size_t k = 0; k < strides.size(); ++k) c.strides[k].push_back(strides[k][d]);
  }
  return c;
}

ElementwiseLayout elementwiseLayout(const Shape& shape, const std::vector<TensorDesc>& operands, size_t rows) {
  std::vector<std::vector<int64_t>> strides;
  for (const auto& d : operands) strides.push_back(broadcastStrides(d.shape, shape));
  Coalesced c = coalesce(shape, strides);
  ElementwiseLayout out{.rank = uint32_t(c.shape.size()), .dense = c.shape.size() <= 1};
  for (const auto& s : c.strides) out.dense = out.dense && (s.empty() || s[0] == 1);
  for (int64_t d : c.shape) out.meta.push_back(uint32_t(d));
  for (size_t k = 0; k < rows; ++k) {
    for (size_t d = 0; d < c.shape.size(); ++d) out.meta.push_back(k < c.strides.size() ? uint32_t(c.strides[k][d]) : 0);
  }
  return out;
}

}  // namespace tensord::compute
