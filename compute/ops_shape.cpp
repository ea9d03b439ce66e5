// The shape ops: views (reshape, flatten, squeeze, unsqueeze) and the copies
// made by the one generic remap kernel (permute ... pad, cat, stack, split).

#include <algorithm>
#include <climits>

#include "compute/error.h"
#include "compute/op_families.h"
#include "compute/template_shape.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

std::string intsStr(const std::vector<int64_t>& v) { return shapeStr(v); }

void checkRank(const std::string& op, const Shape& out) {
  if (out.size() > kMaxRank) {
    throwInvalid(op + ": the output would have rank " + std::to_string(out.size()) + "; tensors have at most " +
                 std::to_string(kMaxRank) + " dims");
  }
}

AttrSpec intAttr(std::string name, int64_t value, std::string doc) {
  return {std::move(name), AttrType::kInt, AttrValue{value}, std::move(doc)};
}
AttrSpec intsAttr(std::string name, std::string doc) { return {std::move(name), AttrType::kInts, std::nullopt, std::move(doc)}; }
AttrSpec intsAttr(std::string name, std::vector<int64_t> value, std::string doc) {
  return {std::move(name), AttrType::kInts, AttrValue{std::move(value)}, std::move(doc)};
}
AttrSpec reqInt(std::string name, std::string doc) { return {std::move(name), AttrType::kInt, std::nullopt, std::move(doc)}; }

OpSpec shapeOp(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs,
               std::shared_ptr<const KernelTemplate> kernel, std::string doc, bool isView = false) {
  OpSpec op = singleOutputOp("shape", std::move(name), std::move(inputs), std::move(attrs), kAllDTypes,
                             std::move(kernel), std::move(doc));
  op.view = isView;
  return op;
}

// A copy iterating over `out` (the output's shape), reading input dim
// `source[d]` (-1: broadcast) at coordinate c for output dim d.
RemapCopy gatherCopy(const Shape& in, const Shape& out, const std::vector<int64_t>& source) {
  RemapCopy c;
  auto inStrides = contiguousStrides(in), outStrides = contiguousStrides(out);
  for (size_t d = 0; d < out.size(); ++d) {
    RemapDim m{.size = out[d], .outStride = outStrides[d]};
    if (source[d] >= 0) {
      m.inStride = inStrides[size_t(source[d])];
      m.inSize = in[size_t(source[d])];
    } else {
      m.inStride = 0;
    }
    c.dims.push_back(m);
  }
  return c;
}

std::vector<int64_t> identityDims(size_t rank) {
  std::vector<int64_t> v(rank);
  for (size_t d = 0; d < rank; ++d) v[d] = int64_t(d);
  return v;
}

RemapPlan single(const TensorDesc& in, Shape out, RemapCopy copy) {
  RemapPlan plan;
  plan.outputs.push_back(TensorDesc{in.dtype, std::move(out)});
  plan.copies.push_back(std::move(copy));
  return plan;
}

// out = in narrowed to [start, start + length) along dim (copy into `output`).
RemapCopy narrowCopy(const Shape& in, int64_t dim, int64_t start, int64_t length, size_t output, int64_t step = 1) {
  Shape out = in;
  out[size_t(dim)] = length;
  RemapCopy c = gatherCopy(in, out, identityDims(in.size()));
  c.dims[size_t(dim)].offset = start;
  c.dims[size_t(dim)].step = step;
  c.output = output;
  return c;
}

// ---------------------------------------------------------------- views

Shape reshapeShape(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) {
  Shape shape = attrs.getInts("shape");
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      if (infer >= 0) throwInvalid(op.name + ": attribute 'shape' is " + intsStr(shape) + "; only one dim may be -1");
      infer = int64_t(d);
    } else if (shape[d] < 0) {
      throwInvalid(op.name + ": attribute 'shape' is " + intsStr(shape) + "; expected sizes >= 0 (or one -1)");
    } else {
      known *= shape[d];
    }
  }
  if (infer >= 0) {
    if (known == 0 || in.numel() % known != 0) {
      throwInvalid(op.name + ": attribute 'shape' " + intsStr(shape) + " is invalid for an input of " +
                   std::to_string(in.numel()) + " elements (" + in.str() + ")");
    }
    shape[size_t(infer)] = in.numel() / known;
  } else if (known != in.numel()) {
    throwInvalid(op.name + ": attribute 'shape' " + intsStr(shape) + " has " + std::to_string(known) +
                 " elements; expected " + std::to_string(in.numel()) + " like the input " + in.str());
  }
  checkRank(op.name, shape);
  return shape;
}

Shape flattenShape(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) {
  if (in.rank() == 0) return {1};
  int64_t s = normalizeDim(op.name, attrs.getInt("start_dim"), in.rank(), "start_dim");
  int64_t e = normalizeDim(op.name, attrs.getInt("end_dim"), in.rank(), "end_dim");
  if (s > e) {
    throwInvalid(op.name + ": attribute 'start_dim' (" + std::to_string(s) + ") comes after 'end_dim' (" +
                 std::to_string(e) + ")");
  }
  Shape out(in.shape.begin(), in.shape.begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= in.shape[size_t(d)];
  out.push_back(n);
  out.insert(out.end(), in.shape.begin() + e + 1, in.shape.end());
  return out;
}

Shape squeezeShape(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) {
  auto mask = dimMask(op.name, attrs.getInts("dim"), in.rank(), true);
  Shape out;
  for (size_t d = 0; d < in.rank(); ++d) {
    if (!(mask[d] && in.shape[d] == 1)) out.push_back(in.shape[d]);
  }
  return out;
}

Shape unsqueezeShape(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) {
  int64_t d = normalizeDim(op.name, attrs.getInt("dim"), in.rank() + 1);
  Shape out = in.shape;
  out.insert(out.begin() + d, 1);
  checkRank(op.name, out);
  return out;
}

// ---------------------------------------------------------------- copies

RemapPlan permutePlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const auto& dims = attrs.getInts("dims");
  size_t rank = in[0].rank();
  if (dims.size() != rank) {
    throwInvalid(op.name + ": attribute 'dims' is " + intsStr(dims) + "; expected " + std::to_string(rank) +
                 " dims for a rank-" + std::to_string(rank) + " input");
  }
  dimMask(op.name, dims, rank, false, "dims");  // range and repeats
  std::vector<int64_t> source;
  Shape out;
  for (auto d : dims) {
    int64_t n = normalizeDim(op.name, d, rank, "dims");
    source.push_back(n);
    out.push_back(in[0].shape[size_t(n)]);
  }
  return single(in[0], out, gatherCopy(in[0].shape, out, source));
}

RemapPlan transposePlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  size_t rank = in[0].rank();
  int64_t a = normalizeDim(op.name, attrs.getInt("dim0"), rank, "dim0");
  int64_t b = normalizeDim(op.name, attrs.getInt("dim1"), rank, "dim1");
  auto source = identityDims(rank);
  Shape out = in[0].shape;
  if (rank > 0) {
    std::swap(source[size_t(a)], source[size_t(b)]);
    std::swap(out[size_t(a)], out[size_t(b)]);
  }
  return single(in[0], out, gatherCopy(in[0].shape, out, source));
}

RemapPlan expandPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const auto& size = attrs.getInts("size");
  const Shape& s = in[0].shape;
  if (size.size() < s.size()) {
    throwInvalid(op.name + ": attribute 'size' is " + intsStr(size) + "; expected at least " +
                 std::to_string(s.size()) + " sizes for the input " + in[0].str());
  }
  checkRank(op.name, size);
  size_t lead = size.size() - s.size();
  Shape out(size.size());
  std::vector<int64_t> source(size.size(), -1);
  for (size_t d = 0; d < size.size(); ++d) {
    if (d < lead) {
      if (size[d] < 0) {
        throwInvalid(op.name + ": attribute 'size' is " + intsStr(size) + "; a new leading dim (" +
                     std::to_string(d) + ") cannot be -1");
      }
      out[d] = size[d];
      continue;
    }
    int64_t have = s[d - lead];
    int64_t want = size[d] == -1 ? have : size[d];
    if (want < 0 || (have != want && have != 1)) {
      throwInvalid(op.name + ": attribute 'size' is " + intsStr(size) + "; dim " + std::to_string(d) + " is " +
                   std::to_string(size[d]) + " but the input " + in[0].str() + " has " + std::to_string(have) +
                   " there (only size-1 dims expand)");
    }
    out[d] = want;
    if (have == want) source[d] = int64_t(d - lead);
  }
  return single(in[0], out, gatherCopy(s, out, source));
}

RemapPlan repeatPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const auto& reps = attrs.getInts("repeats");
  const Shape& s = in[0].shape;
  if (reps.size() < s.size()) {
    throwInvalid(op.name + ": attribute 'repeats' is " + intsStr(reps) + "; expected at least " +
                 std::to_string(s.size()) + " values for the input " + in[0].str());
  }
  checkRank(op.name, reps);
  size_t lead = reps.size() - s.size();
  Shape padded(lead, 1);
  padded.insert(padded.end(), s.begin(), s.end());
  Shape out(reps.size());
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] < 0) throwInvalid(op.name + ": attribute 'repeats' is " + intsStr(reps) + "; expected values >= 0");
    if (__builtin_mul_overflow(padded[d], reps[d], &out[d])) {
      throwInvalid(op.name + ": attribute 'repeats' is " + intsStr(reps) + "; the output for the input " +
                   in[0].str() + " would have more elements than a tensor can hold");
    }
  }
  RemapCopy c = gatherCopy(padded, out, identityDims(out.size()));
  for (auto& d : c.dims) d.mode = RemapDim::kWrap;
  return single(in[0], out, c);
}

RemapPlan narrowPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  if (s.empty()) throwInvalid(op.name + ": the input is 0-d; expected at least 1 dim");
  int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), s.size());
  int64_t size = s[size_t(dim)];
  int64_t start = attrs.getInt("start"), length = attrs.getInt("length");
  if (start < -size || start > size) {
    throwInvalid(op.name + ": attribute 'start' is " + std::to_string(start) + "; expected a value in [" +
                 std::to_string(-size) + ", " + std::to_string(size) + "] for dim " + std::to_string(dim) +
                 " of size " + std::to_string(size));
  }
  if (start < 0) start += size;
  if (length < 0 || start + length > size) {
    throwInvalid(op.name + ": attribute 'length' is " + std::to_string(length) + "; expected a value in [0, " +
                 std::to_string(size - start) + "] (start " + std::to_string(start) + ", dim " +
                 std::to_string(dim) + " of size " + std::to_string(size) + ")");
  }
  Shape out = s;
  out[size_t(dim)] = length;
  return single(in[0], out, narrowCopy(s, dim, start, length, 0));
}

RemapPlan slicePlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  if (s.empty()) throwInvalid(op.name + ": the input is 0-d; expected at least 1 dim");
  int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), s.size());
  int64_t size = s[size_t(dim)];
  int64_t step = attrs.getInt("step");
  if (step <= 0) throwInvalid(op.name + ": attribute 'step' is " + std::to_string(step) + "; expected a value > 0");
  auto norm = [&](int64_t v) {
    if (v < 0) v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  int64_t start = norm(attrs.getInt("start")), end = norm(attrs.getInt("end"));
  int64_t length = end > start ? (end - start + step - 1) / step : 0;
  Shape out = s;
  out[size_t(dim)] = length;
  return single(in[0], out, narrowCopy(s, dim, start, length, 0, step));
}

RemapPlan flipPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  auto mask = dimMask(op.name, attrs.getInts("dims"), s.size(), false, "dims");
  RemapCopy c = gatherCopy(s, s, identityDims(s.size()));
  for (size_t d = 0; d < s.size(); ++d) {
    if (mask[d]) {
      c.dims[d].offset = s[d] - 1;
      c.dims[d].step = -1;
    }
  }
  return single(in[0], s, c);
}

RemapPlan rollPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  const auto& shifts = attrs.getInts("shifts");
  const auto& dims = attrs.getInts("dims");
  if (dims.empty()) {
    if (shifts.size() != 1) {
      throwInvalid(op.name + ": attribute 'shifts' is " + intsStr(shifts) +
                   "; expected one shift when 'dims' is [] (the flattened input)");
    }
    int64_t n = in[0].numel();
    RemapCopy c;
    c.dims.push_back({.size = n, .outStride = 1, .inStride = 1, .offset = n ? -(shifts[0] % n) : 0, .inSize = n,
                      .mode = RemapDim::kWrap});
    return single(in[0], s, c);
  }
  if (dims.size() != shifts.size()) {
    throwInvalid(op.name + ": attribute 'shifts' has " + std::to_string(shifts.size()) + " values and 'dims' has " +
                 std::to_string(dims.size()) + "; expected as many shifts as dims");
  }
  RemapCopy c = gatherCopy(s, s, identityDims(s.size()));
  for (size_t k = 0; k < dims.size(); ++k) {
    int64_t d = normalizeDim(op.name, dims[k], s.size(), "dims");
    if (s.empty()) continue;
    auto& m = c.dims[size_t(d)];
    m.mode = RemapDim::kWrap;
    if (m.inSize) m.offset = (m.offset - shifts[k] % m.inSize) % m.inSize;
  }
  return single(in[0], s, c);
}

RemapPlan padPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  const auto& pad = attrs.getInts("pad");
  const std::string& mode = attrs.getText("mode");
  RemapDim::Mode m;
  if (mode == "constant") m = RemapDim::kConstant;
  else if (mode == "reflect") m = RemapDim::kReflect;
  else if (mode == "replicate") m = RemapDim::kReplicate;
  else throwInvalid(op.name + ": attribute 'mode' is '" + mode + "'; expected 'constant', 'reflect' or 'replicate'");
  if (pad.size() % 2 != 0 || pad.size() > 2 * s.size()) {
    throwInvalid(op.name + ": attribute 'pad' is " + intsStr(pad) + "; expected an even number of values, at most " +
                 std::to_string(2 * s.size()) + " (two per dim of the input " + in[0].str() + ")");
  }
  Shape out = s;
  RemapCopy c = gatherCopy(s, s, identityDims(s.size()));
  c.fill = attrs.getFloat("value");
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    size_t d = s.size() - 1 - k;
    int64_t lo = pad[2 * k], hi = pad[2 * k + 1];
    if (m != RemapDim::kConstant) {
      bool ok = lo >= 0 && hi >= 0 && (m == RemapDim::kReflect ? lo < s[d] && hi < s[d] : s[d] > 0 || lo + hi == 0);
      if (!ok) {
        throwInvalid(op.name + ": attribute 'pad' is " + intsStr(pad) + "; " + mode + " padding of dim " +
                     std::to_string(d) + " (size " + std::to_string(s[d]) + ") needs pads >= 0" +
                     (m == RemapDim::kReflect ? " and < the dim's size" : " and a non-empty dim"));
      }
    }
    out[d] = s[d] + lo + hi;
    if (out[d] < 0) {
      throwInvalid(op.name + ": attribute 'pad' is " + intsStr(pad) + "; dim " + std::to_string(d) + " would have size " +
                   std::to_string(out[d]));
    }
    c.dims[d].size = out[d];
    c.dims[d].offset = -lo;
    c.dims[d].mode = m;
  }
  auto outStrides = contiguousStrides(out);
  for (size_t d = 0; d < s.size(); ++d) c.dims[d].outStride = outStrides[d];
  return single(in[0], out, c);
}

RemapPlan contiguousPlan(const OpSpec&, std::span<const TensorDesc> in, const Attrs&) {
  return single(in[0], in[0].shape, identityCopy(in[0].shape, in[0].shape));
}

RemapPlan trianglePlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs, int triangle) {
  if (in[0].rank() < 2) {
    throwInvalid(op.name + ": the input " + in[0].str() + " has rank " + std::to_string(in[0].rank()) +
                 "; expected at least 2 dims (a matrix or a batch of them)");
  }
  RemapCopy c = identityCopy(in[0].shape, in[0].shape);
  c.triangle = triangle;
  c.diagonal = attrs.getInt("diagonal");
  return single(in[0], in[0].shape, c);
}

RemapPlan catPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  // Legacy rule: 1-D empty tensors are skipped.
  const TensorDesc* ref = nullptr;
  for (const auto& t : in) {
    if (!(t.rank() == 1 && t.shape[0] == 0)) {
      ref = &t;
      break;
    }
  }
  RemapPlan plan;
  if (!ref) {
    normalizeDim(op.name, attrs.getInt("dim"), 1);
    plan.outputs.push_back(TensorDesc{in[0].dtype, {0}});
    return plan;
  }
  if (ref->rank() == 0) throwInvalid(op.name + ": input '" + op.name + "' 0 is 0-d; zero-dimensional tensors cannot be concatenated");
  int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), ref->rank());
  Shape out = ref->shape;
  out[size_t(dim)] = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const auto& t = in[k];
    if (t.rank() == 1 && t.shape[0] == 0) continue;
    bool ok = t.rank() == ref->rank();
    for (size_t d = 0; ok && d < t.rank(); ++d) ok = int64_t(d) == dim || t.shape[d] == ref->shape[d];
    if (!ok) {
      throwInvalid(op.name + ": input 'tensors' " + std::to_string(k) + " is " + t.str() + "; expected " +
                   shapeStr(ref->shape) + " in every dim but " + std::to_string(dim) + " (like input " +
                   std::to_string(ref - in.data()) + ")");
    }
    out[size_t(dim)] += t.shape[size_t(dim)];
  }
  auto outStrides = contiguousStrides(out);
  int64_t at = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const auto& t = in[k];
    if (t.rank() == 1 && t.shape[0] == 0) continue;
    plan.copies.push_back(identityCopy(t.shape, out, at * outStrides[size_t(dim)], k, 0));
    at += t.shape[size_t(dim)];
  }
  plan.outputs.push_back(TensorDesc{in[0].dtype, out});
  return plan;
}

RemapPlan stackPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), s.size() + 1);
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k].shape != s) {
      throwInvalid(op.name + ": input 'tensors' " + std::to_string(k) + " is " + in[k].str() + "; expected shape " +
                   shapeStr(s) + " like input 0 (stack needs equal shapes)");
    }
  }
  Shape one = s;
  one.insert(one.begin() + dim, 1);
  Shape out = s;
  out.insert(out.begin() + dim, int64_t(in.size()));
  checkRank(op.name, out);
  auto outStrides = contiguousStrides(out);
  RemapPlan plan;
  plan.outputs.push_back(TensorDesc{in[0].dtype, out});
  for (size_t k = 0; k < in.size(); ++k) {
    plan.copies.push_back(identityCopy(one, out, int64_t(k) * outStrides[size_t(dim)], k, 0));
  }
  return plan;
}

// Outputs of `sizes` along dim.
RemapPlan piecesPlan(const TensorDesc& in, int64_t dim, const std::vector<int64_t>& sizes) {
  RemapPlan plan;
  int64_t at = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Shape out = in.shape;
    out[size_t(dim)] = sizes[k];
    plan.outputs.push_back(TensorDesc{in.dtype, out});
    plan.copies.push_back(narrowCopy(in.shape, dim, at, sizes[k], k));
    at += sizes[k];
  }
  return plan;
}

// Each piece of a split is an output tensor the daemon tracks; this bounds
// the memory and work one call can ask for (chunks=10**15 of an empty dim).
constexpr int64_t kMaxPieces = 65536;

void checkPieceCount(const OpSpec& op, int64_t pieces) {
  if (pieces > kMaxPieces) {
    throwInvalid(op.name + ": the call would make " + std::to_string(pieces) + " outputs; expected at most " +
                 std::to_string(kMaxPieces));
  }
}

// Pieces of `chunk` (> 0) along a dim of `size` (> 0), the last one shorter.
std::vector<int64_t> evenPieces(const OpSpec& op, int64_t size, int64_t chunk) {
  const int64_t pieces = size / chunk + (size % chunk != 0);
  checkPieceCount(op, pieces);
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < pieces; ++i) sizes.push_back(std::min(chunk, size - i * chunk));
  return sizes;
}

RemapPlan splitPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  if (s.empty()) throwInvalid(op.name + ": the input is 0-d; expected at least 1 dim");
  int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), s.size());
  int64_t size = s[size_t(dim)];
  const auto& spec = attrs.getInts("split_size_or_sections");
  std::vector<int64_t> sizes;
  if (spec.size() == 1) {
    int64_t chunk = spec[0];
    if (chunk < 0 || (chunk == 0 && size != 0)) {
      throwInvalid(op.name + ": attribute 'split_size_or_sections' is " + std::to_string(chunk) +
                   "; expected a chunk size > 0 (0 only for an empty dim)");
    }
    if (chunk == 0 || size == 0) {
      sizes.push_back(0);
    } else {
      sizes = evenPieces(op, size, chunk);
    }
  } else {
    int64_t total = 0;
    for (auto v : spec) {
      if (v < 0) throwInvalid(op.name + ": attribute 'split_size_or_sections' is " + intsStr(spec) + "; expected sizes >= 0");
      if (__builtin_add_overflow(total, v, &total)) {
        throwInvalid(op.name + ": attribute 'split_size_or_sections' is " + intsStr(spec) + "; the sizes sum to more than dim " +
                     std::to_string(dim) + "'s size " + std::to_string(size));
      }
    }
    if (spec.empty() || total != size) {
      throwInvalid(op.name + ": attribute 'split_size_or_sections' is " + intsStr(spec) + "; the sizes sum to " +
                   std::to_string(total) + " but dim " + std::to_string(dim) + " has size " + std::to_string(size));
    }
    sizes = spec;
  }
  return piecesPlan(in[0], dim, sizes);
}

RemapPlan chunkPlan(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) {
  const Shape& s = in[0].shape;
  if (s.empty()) throwInvalid(op.name + ": the input is 0-d; expected at least 1 dim");
  int64_t dim = normalizeDim(op.name, attrs.getInt("dim"), s.size());
  int64_t chunks = attrs.getInt("chunks");
  if (chunks <= 0) throwInvalid(op.name + ": attribute 'chunks' is " + std::to_string(chunks) + "; expected a value > 0");
  int64_t size = s[size_t(dim)];
  std::vector<int64_t> sizes;
  if (size == 0) {
    checkPieceCount(op, chunks);
    sizes.assign(size_t(chunks), 0);
  } else {
    sizes = evenPieces(op, size, size / chunks + (size % chunks != 0));  // ceil, without overflow
  }
  return piecesPlan(in[0], dim, sizes);
}

}  // namespace

void addShapeOps(std::vector<OpSpec>& ops) {
  const std::vector<InputSpec> one = {{"input"}};
  const std::vector<InputSpec> many = {{"tensors", InputRole::kData, false, true}};
  // ------------------------------------------------------------ views
  ops.push_back(shapeOp("reshape", one, {intsAttr("shape", "the new shape; one dim may be -1 (inferred)")},
                        view(reshapeShape),
                        "The input with a new shape of the same number of elements. Always a view: tensord tensors "
                        "are contiguous, so the output shares the input's memory (PyTorch may copy).",
                        true));
  ops.push_back(shapeOp("flatten", one,
                        {intAttr("start_dim", 0, "first dim to flatten"), intAttr("end_dim", -1, "last dim to flatten")},
                        view(flattenShape),
                        "Dims start_dim..end_dim merged into one; a 0-d input gives shape [1]. A view of the input.",
                        true));
  ops.push_back(shapeOp("squeeze", one, {intsAttr("dim", {}, "dims to drop if they have size 1; [] = every size-1 dim")},
                        view(squeezeShape), "The input without the given size-1 dims. A view of the input.", true));
  ops.push_back(shapeOp("unsqueeze", one, {reqInt("dim", "where the new size-1 dim goes, in [-rank-1, rank]")},
                        view(unsqueezeShape), "The input with a size-1 dim inserted at dim. A view of the input.", true));
  // ------------------------------------------------------------ copies
  ops.push_back(shapeOp("permute", one, {intsAttr("dims", "the output's dims as input dims (a permutation)")},
                        remap(permutePlan),
                        "The input with its dims reordered: out dim i is input dim dims[i]. A copy (PyTorch returns a "
                        "strided view; tensord tensors are contiguous)."));
  ops.push_back(shapeOp("transpose", one, {reqInt("dim0", "first dim to swap"), reqInt("dim1", "second dim to swap")},
                        remap(transposePlan), "The input with dims dim0 and dim1 swapped. A copy (PyTorch: a view)."));
  ops.push_back(shapeOp("expand", one,
                        {intsAttr("size", "the output shape; -1 keeps a dim, new leading dims may be added")},
                        remap(expandPlan),
                        "The input broadcast to `size` (size-1 dims repeat). A copy (PyTorch: a view with stride 0)."));
  ops.push_back(shapeOp("repeat", one, {intsAttr("repeats", "times to repeat each dim; more values than dims add leading dims")},
                        remap(repeatPlan), "The input tiled `repeats` times along each dim (torch.Tensor.repeat)."));
  ops.push_back(shapeOp("narrow", one,
                        {reqInt("dim", "the dim to narrow"), reqInt("start", "first index (negative counts from the end)"),
                         reqInt("length", "number of indices")},
                        remap(narrowPlan), "Indices [start, start + length) of dim. A copy (PyTorch: a view)."));
  ops.push_back(shapeOp("slice", one,
                        {intAttr("dim", 0, "the dim to slice"),
                         intAttr("start", 0, "first index; negative counts from the end; clamped to the dim"),
                         intAttr("end", INT64_MAX, "one past the last index; negative counts from the end; clamped"),
                         intAttr("step", 1, "stride between indices, > 0")},
                        remap(slicePlan),
                        "input[..., start:end:step, ...] along dim, with Python's clamping of start and end. A copy "
                        "(PyTorch: a view)."));
  ops.push_back(shapeOp("flip", one, {intsAttr("dims", "dims to reverse")}, remap(flipPlan),
                        "The input with the order of elements along each of dims reversed."));
  ops.push_back(shapeOp("roll", one,
                        {intsAttr("shifts", "shift per dim (positive: towards higher indices)"),
                         intsAttr("dims", {}, "dims to roll; [] rolls the flattened input by the one shift")},
                        remap(rollPlan), "Elements shifted cyclically along dims (torch.roll)."));
  ops.push_back(shapeOp("pad", one,
                        {intsAttr("pad", "(left, right) pairs, last dim first (F.pad order); negative pads crop in "
                                         "constant mode"),
                         {"mode", AttrType::kText, AttrValue{std::string("constant")}, "'constant', 'reflect' or 'replicate'"},
                         {"value", AttrType::kFloat, AttrValue{0.0}, "fill value of mode 'constant'"}},
                        remap(padPlan),
                        "torch.nn.functional.pad. Unlike PyTorch, reflect and replicate pad any number of trailing "
                        "dims (up to all of them) without batch/channel requirements."));
  ops.push_back(shapeOp("contiguous", one, {}, remap(contiguousPlan),
                        "A copy of the input (tensord tensors are always contiguous; PyTorch returns the input itself "
                        "when it already is)."));
  ops.push_back(shapeOp("triu", one, {intAttr("diagonal", 0, "0: main diagonal, > 0 above it, < 0 below it")},
                        remap([](const OpSpec& op, std::span<const TensorDesc> in, const Attrs& a) {
                          return trianglePlan(op, in, a, 1);
                        }),
                        "The upper triangle of the last two dims (elements with col - row >= diagonal); the rest 0."));
  ops.push_back(shapeOp("tril", one, {intAttr("diagonal", 0, "0: main diagonal, > 0 above it, < 0 below it")},
                        remap([](const OpSpec& op, std::span<const TensorDesc> in, const Attrs& a) {
                          return trianglePlan(op, in, a, 2);
                        }),
                        "The lower triangle of the last two dims (elements with col - row <= diagonal); the rest 0."));
  // ------------------------------------------------------------ several tensors
  ops.push_back(shapeOp("cat", many, {intAttr("dim", 0, "the dim to join along")}, remap(catPlan),
                        "The inputs joined along dim; every other dim must match. 1-D empty inputs are skipped (as in "
                        "PyTorch). Unlike PyTorch, the inputs must share a dtype (no type promotion)."));
  ops.push_back(shapeOp("stack", many, {intAttr("dim", 0, "where the new dim goes, in [-rank-1, rank]")},
                        remap(stackPlan),
                        "The inputs (all of one shape) joined along a new dim. Unlike PyTorch, the inputs must share a "
                        "dtype."));
  ops.push_back(shapeOp("split", one,
                        {intsAttr("split_size_or_sections", "one value: the chunk size (the last chunk may be smaller); "
                                                            "several: the size of each piece"),
                         intAttr("dim", 0, "the dim to split")},
                        remap(splitPlan),
                        "The input cut into pieces along dim, one output per piece. Copies (PyTorch: views)."));
  ops.push_back(shapeOp("chunk", one,
                        {reqInt("chunks", "number of chunks wanted"), intAttr("dim", 0, "the dim to split")},
                        remap(chunkPlan),
                        "The input cut into chunks of ceil(size / chunks) along dim; there may be fewer than `chunks` "
                        "outputs (torch.chunk). Copies (PyTorch: views)."));
}

}  // namespace tensord::compute
