#include "tests/compute/conformance.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/error.h"

namespace tensord::compute::testing {

namespace {
std::vector<std::string>& registry() {
  static std::vector<std::string> names;
  return names;
}

uint16_t floatToHalf(float f) {
  // Round to nearest even, with subnormals, inf and NaN.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0));
  int e = int(exp) - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    mant |= 0x800000u;
    uint32_t shift = uint32_t(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return uint16_t(half);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      x = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | mant << 13;
  } else {
    x = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

bool coverOps(std::initializer_list<const char*> names) {
  for (const char* n : names) registry().push_back(n);
  return true;
}

const std::vector<std::string>& coveredOps() { return registry(); }

double roundTo(DType dtype, double x) {
  switch (dtype) {
    case DType::F32: return double(float(x));
    case DType::F16: return halfToFloat(floatToHalf(float(x)));
    case DType::BF16: return bf16ToFloat(floatToBf16(float(x)));
    case DType::I32: return std::isfinite(x) ? double(int32_t(int64_t(std::trunc(x)))) : 0;
    case DType::I64: return std::isfinite(x) ? double(int64_t(std::trunc(x))) : 0;
    case DType::U8: return std::isfinite(x) ? double(uint8_t(int64_t(std::trunc(x)))) : 0;
    case DType::Bool: return x != 0 ? 1 : 0;
  }
  return x;
}

HostTensor makeTensor(DType dtype, const Shape& shape, std::vector<double> values) {
  for (auto& v : values) v = roundTo(dtype, v);
  return {dtype, shape, std::move(values)};
}

HostTensor randomTensor(DType dtype, const Shape& shape, double lo, double hi) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  if (dtype == DType::Bool) {
    std::bernoulli_distribution dist(0.5);
    for (auto& x : v) x = dist(EngineTest::rngForTests()) ? 1 : 0;
  } else if (isIntegral(dtype)) {
    std::uniform_int_distribution<int64_t> dist(int64_t(std::ceil(lo)), int64_t(std::floor(hi)));
    for (auto& x : v) x = double(dist(EngineTest::rngForTests()));
  } else {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (auto& x : v) x = dist(EngineTest::rngForTests());
  }
  return makeTensor(dtype, shape, std::move(v));
}

Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::F32: return {1e-6, 1e-5};
    case DType::F16: return {1e-3, 2e-3};
    case DType::BF16: return {1e-2, 1.6e-2};
    default: return {0, 0};
  }
}

void expectClose(const HostTensor& got, const HostTensor& want, const std::string& what, double scale, Tolerance tol) {
  ASSERT_EQ(got.dtype, want.dtype) << what << ": dtype";
  ASSERT_EQ(got.shape, want.shape) << what << ": shape";
  ASSERT_EQ(got.values.size(), want.values.size()) << what;
  if (tol.atol < 0) tol = tolerance(want.dtype);
  size_t bad = 0;
  for (size_t i = 0; i < got.values.size(); ++i) {
    double g = got.values[i], w = want.values[i];
    bool ok;
    if (std::isnan(w)) ok = std::isnan(g);
    else if (std::isinf(w)) ok = g == w;
    else ok = std::abs(g - w) <= tol.atol * scale + tol.rtol * std::abs(w);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.values.size() << " elements off";
}

TensorView ConformanceTest::put(const HostTensor& t) {
  std::vector<std::byte> bytes(size_t(t.numel()) * dtypeSize(t.dtype));
  for (size_t i = 0; i < t.values.size(); ++i) {
    double v = t.values[i];
    std::byte* p = bytes.data() + i * dtypeSize(t.dtype);
    switch (t.dtype) {
      case DType::F32: { float f = float(v); std::memcpy(p, &f, 4); break; }
      case DType::F16: { uint16_t h = floatToHalf(float(v)); std::memcpy(p, &h, 2); break; }
      case DType::BF16: { uint16_t h = floatToBf16(float(v)); std::memcpy(p, &h, 2); break; }
      case DType::I32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::I64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
      case DType::U8: { uint8_t x = uint8_t(int64_t(v)); std::memcpy(p, &x, 1); break; }
      case DType::Bool: { uint8_t x = v != 0; std::memcpy(p, &x, 1); break; }
    }
  }
  return uploadBytes(TensorDesc{t.dtype, t.shape}, bytes);
}

HostTensor ConformanceTest::get(const TensorView& t) {
  auto bytes = downloadBytes(t);
  HostTensor h{t.desc.dtype, t.desc.shape, std::vector<double>(size_t(t.desc.numel()))};
  for (size_t i = 0; i < h.values.size(); ++i) {
    const std::byte* p = bytes.data() + i * dtypeSize(t.desc.dtype);
    switch (t.desc.dtype) {
      case DType::F32: { float f; std::memcpy(&f, p, 4); h.values[i] = f; break; }
      case DType::F16: { uint16_t x; std::memcpy(&x, p, 2); h.values[i] = halfToFloat(x); break; }
      case DType::BF16: { uint16_t x; std::memcpy(&x, p, 2); h.values[i] = bf16ToFloat(x); break; }
      case DType::I32: { int32_t x; std::memcpy(&x, p, 4); h.values[i] = x; break; }
      case DType::I64: { int64_t x; std::memcpy(&x, p, 8); h.values[i] = double(x); break; }
      case DType::U8: { uint8_t x; std::memcpy(&x, p, 1); h.values[i] = x; break; }
      case DType::Bool: { uint8_t x; std::memcpy(&x, p, 1); h.values[i] = x; break; }
    }
  }
  return h;
}

std::vector<HostTensor> ConformanceTest::call(const std::string& op, const std::vector<HostTensor>& inputs,
                                              const std::vector<std::pair<std::string, AttrValue>>& attrs) {
  std::vector<TensorView> views;
  for (const auto& t : inputs) views.push_back(put(t));
  std::vector<HostTensor> out;
  for (const auto& v : run(op, views, attrs)) out.push_back(get(v));
  return out;
}

std::string ConformanceTest::errorOf(const std::string& op, const std::vector<HostTensor>& inputs,
                                     const std::vector<std::pair<std::string, AttrValue>>& attrs) {
  try {
    call(op, inputs, attrs);
  } catch (const ComputeError& e) {
    return e.what();
  }
  return "no error";
}

std::vector<int64_t> unravel(int64_t index, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? index % shape[k] : 0;
    index = shape[k] ? index / shape[k] : 0;
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t off = 0, stride = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    size_t d = shape.size() - 1 - k, i = idx.size() - 1 - k;
    off += (shape[d] == 1 ? 0 : idx[i]) * stride;
    stride *= shape[d];
  }
  return off;
}

int64_t broadcastIndex(const Shape& shape, const Shape& out, int64_t i) { return ravel(unravel(i, out), shape); }

std::string dimsName(const Shape& s) {
  if (s.empty()) return "scalar";
  std::string n;
  for (size_t i = 0; i < s.size(); ++i) n += (i ? "x" : "") + std::to_string(s[i]);
  return n;
}

bool anyContains(const std::vector<std::string>& names, const std::string& part) {
  for (const auto& n : names) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string namesStr(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return "[" + s + "]";
}

}  // namespace tensord::compute::testing
