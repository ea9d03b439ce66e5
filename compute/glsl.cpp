#include "compute/glsl.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace tensord::compute {
namespace {

std::string_view storageType(DType d) {
  switch (d) {
    case DType::F32: return "float";
    case DType::F16: return "float16_t";
    case DType::BF16: return "uint16_t";
    case DType::I32: return "int";
    case DType::I64: return "int64_t";
    case DType::U8:
    case DType::Bool: return "uint8_t";
  }
  return "float";
}

std::string upper(std::string_view s) {
  std::string u(s);
  for (auto& c : u) c = char(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

// Stored element `expr` as a value of glslType(d).
std::string loadStored(const std::string& expr, DType d) {
  switch (d) {
    case DType::F16: return "float(" + expr + ")";
    case DType::BF16: return "bf16_to_float(uint(" + expr + "))";
    case DType::U8: return "uint(" + expr + ")";
    case DType::Bool: return "(uint(" + expr + ") != 0u)";
    default: return expr;
  }
}

// A value of glslType(d) as the stored element type.
std::string storeValue(const std::string& expr, DType d) {
  switch (d) {
    case DType::F16: return "float16_t(" + expr + ")";
    case DType::BF16: return "uint16_t(float_to_bf16(" + expr + "))";
    case DType::U8: return "uint8_t(" + expr + ")";
    case DType::Bool: return "uint8_t((" + expr + ") ? 1u : 0u)";
    default: return expr;
  }
}

constexpr const char* kHelpers = R"(
float bf16_to_float(uint b) { return uintBitsToFloat(b << 16); }
uint float_to_bf16(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return u >> 16;
}
)";

}  // namespace

std::string_view glslType(DType d) {
  switch (d) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return "float";
    case DType::I32: return "int";
    case DType::I64: return "int64_t";
    case DType::U8: return "uint";
    case DType::Bool: return "bool";
  }
  return "float";
}

std::string glslConvert(const std::string& expr, DType from, DType to) {
  std::string_view f = glslType(from), t = glslType(to);
  if (f == t) return expr;
  if (t == "bool") {
    if (f == "float") return "((" + expr + ") != 0.0)";
    if (f == "int") return "((" + expr + ") != 0)";
    if (f == "int64_t") return "((" + expr + ") != 0l)";
    return "((" + expr + ") != 0u)";
  }
  if (f == "bool") return std::string(t) + "((" + expr + ") ? 1 : 0)";
  if (t == "uint" && f == "float") return "uint(int(" + expr + "))";  // wraps like a C cast through int
  return std::string(t) + "(" + expr + ")";
}

std::string glslLiteral(double value, DType dtype) {
  std::string_view t = glslType(dtype);
  if (t == "bool") return value != 0 ? "true" : "false";
  if (t == "float") {
    if (std::isnan(value)) return "uintBitsToFloat(0x7fc00000u)";
    if (std::isinf(value)) return value > 0 ? "uintBitsToFloat(0x7f800000u)" : "uintBitsToFloat(0xff800000u)";
    std::ostringstream s;
    s.precision(9);
    s << std::showpoint << value;
    return s.str();
  }
  if (t == "int") return std::to_string(int64_t(value));
  if (t == "int64_t") return std::to_string(int64_t(value)) + "l";
  return std::to_string(uint64_t(value)) + "u";
}

bool storedAsFloat(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

std::string glslVec4Type(DType d) { return d == DType::F32 ? "vec4" : d == DType::F16 ? "f16vec4" : "u16vec4"; }

std::string glslVec4Align(DType d) { return std::to_string(4 * dtypeSize(d)); }

std::string glslLoad4(const std::string& v, DType d) {
  if (d == DType::F16) return "vec4(" + v + ")";
  if (d == DType::BF16) return "uintBitsToFloat(uvec4(" + v + ") << 16)";
  return v;
}

std::string glslStore4(const std::string& x, DType d) {
  if (d == DType::F16) return "f16vec4(" + x + ")";
  // 16-bit vectors are built from vectors only (no 16-bit arithmetic types).
  if (d == DType::BF16) {
    return "u16vec4(uvec4(float_to_bf16(" + x + ".x), float_to_bf16(" + x + ".y), float_to_bf16(" + x +
           ".z), float_to_bf16(" + x + ".w)))";
  }
  return x;
}

void appendScalarWords(std::vector<uint32_t>& words, double value) {
  float f = float(value);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  double v = std::isnan(value) ? 0 : value;  // integers saturate (clamp's open bounds are +-inf)
  int32_t i32 = int32_t(std::max(-2147483648.0, std::min(2147483647.0, v)));
  int64_t i64 = int64_t(std::max(-9.2e18, std::min(9.2e18, v)));
  words.push_back(bits);
  words.push_back(uint32_t(i32));
  words.push_back(uint32_t(uint64_t(i64)));
  words.push_back(uint32_t(uint64_t(i64) >> 32));
}

GlslBuilder::GlslBuilder(DType compute) : compute_(compute) {
  if (compute == DType::I64) int64_ = true;
}

void GlslBuilder::declare(const std::string& name, DType dtype) {
  if (dtype == DType::I64) int64_ = true;
  if (dtype == DType::F16 || dtype == DType::BF16) storage16_ = true;
  if (dtype == DType::U8 || dtype == DType::Bool) storage8_ = true;
  decls_ += "layout(buffer_reference, std430, buffer_reference_align = " + std::to_string(dtypeSize(dtype)) +
            ") buffer " + name + "_ref { " + std::string(storageType(dtype)) + " v[]; };\n";
}

GlslBuilder& GlslBuilder::input(const std::string& name, DType dtype) {
  declare(name, dtype);
  decls_ += "#define T_" + name + " T\n";
  decls_ += "#define LOAD_" + name + "(i) " + glslConvert(loadStored("p." + name + ".v[i]", dtype), dtype, compute_) + "\n";
  decls_ += "#define RAW_" + name + "(i) " + loadStored("p." + name + ".v[i]", dtype) + "\n";
  return *this;
}

GlslBuilder& GlslBuilder::output(const std::string& name, DType dtype) { return output(name, dtype, compute_); }

GlslBuilder& GlslBuilder::output(const std::string& name, DType dtype, DType valueType) {
  declare(name, dtype);
  decls_ += "#define T_" + name + " " + std::string(glslType(valueType)) + "\n";
  decls_ += "#define STORE_" + name + "(i, x) p." + name + ".v[i] = " +
            storeValue(glslConvert("(x)", valueType, dtype), dtype) + "\n";
  return *this;
}

GlslBuilder& GlslBuilder::define(const std::string& name, const std::string& value) {
  decls_ += "#define " + name + (value.empty() ? "" : " " + value) + "\n";
  return *this;
}

std::string GlslBuilder::build(std::string_view body) const {
  std::string s = "#version 460\n#extension GL_EXT_buffer_reference : require\n";
  s += "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n";
  s += "#extension GL_EXT_shader_16bit_storage : require\n";
  s += "#extension GL_EXT_shader_8bit_storage : require\n";
  s += "#extension GL_KHR_shader_subgroup_arithmetic : require\n";
  s += "#define T " + std::string(glslType(compute_)) + "\n";
  s += "#define DT_" + upper(dtypeName(compute_)) + "\n";
  s += isFloating(compute_) ? "#define IS_FLOAT\n" : compute_ == DType::Bool ? "#define IS_BOOL\n" : "#define IS_INT\n";
  s += "layout(buffer_reference, std430, buffer_reference_align = 4) buffer Meta { uint v[]; };\n";
  s += "layout(buffer_reference, std430, buffer_reference_align = 4) buffer ErrorWords { uint v[]; };\n";
  s += kHelpers;
  s += decls_;
  s += "#line 1\n";
  s += body;
  return s;
}

std::string_view kernelFile(std::string_view name) {
  static const char* dir = std::getenv("TENSORD_KERNEL_DIR");
  if (dir == nullptr || *dir == '\0') return embeddedKernelFile(name);
  static std::mutex mu;
  static std::map<std::string, std::string, std::less<>> read;  // never erased: callers keep views
  std::lock_guard lock(mu);
  if (auto it = read.find(name); it != read.end()) return it->second;
  std::ifstream in(std::string(dir) + "/" + std::string(name), std::ios::binary);
  if (!in) return embeddedKernelFile(name);
  std::ostringstream text;
  text << in.rdbuf();
  return read.emplace(std::string(name), text.str()).first->second;
}

}  // namespace tensord::compute
