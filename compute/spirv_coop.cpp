#include "compute/spirv_coop.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>

namespace tensord::compute {
namespace {

// Opcodes and operands from the SPIR-V registry (Debian 12's SPIR-V headers
// predate the KHR extension).
enum : uint32_t {
  kOpName = 5,
  kOpMemberName = 6,
  kOpExtension = 10,
  kOpCapability = 17,
  kOpTypeInt = 21,
  kOpTypeFloat = 22,
  kOpConstantTrue = 41,
  kOpConstantFalse = 42,
  kOpConstant = 43,
  kOpSpecConstant = 50,
  kOpDecorate = 71,
  kOpMemberDecorate = 72,
  kDecorationSpecId = 1,
  kCapabilityNv = 5357,
  kOpTypeNv = 5358,
  kOpLoadNv = 5359,
  kOpStoreNv = 5360,
  kOpMulAddNv = 5361,
  kOpLengthNv = 5362,
  kCapabilityKhr = 6022,
  kCapabilityBf16Type = 5116,
  kCapabilityBf16Matrix = 5118,
  kEncodingBf16 = 0,
  kOpTypeKhr = 4456,
  kOpLoadKhr = 4457,
  kOpStoreKhr = 4458,
  kOpMulAddKhr = 4459,
  kOpLengthKhr = 4460,
};
constexpr size_t kHeaderWords = 5;
constexpr std::string_view kNvExtension = "SPV_NV_cooperative_matrix";
constexpr std::string_view kKhrExtension = "SPV_KHR_cooperative_matrix";
constexpr std::string_view kBf16Extension = "SPV_KHR_bfloat16";

uint32_t opcode(uint32_t word) { return word & 0xffffu; }
uint32_t wordCount(uint32_t word) { return word >> 16; }
uint32_t first(uint32_t op, size_t words) { return uint32_t(words) << 16 | op; }

// A literal string operand (nul-terminated, padded to whole words).
std::vector<uint32_t> stringWords(std::string_view s) {
  std::vector<uint32_t> w(s.size() / 4 + 1, 0);
  std::memcpy(w.data(), s.data(), s.size());
  return w;
}

std::string_view stringAt(const uint32_t* words, size_t n) {
  const char* c = reinterpret_cast<const char*>(words);
  return std::string_view(c, size_t(std::find(c, c + n * 4, '\0') - c));
}

// Calls f(offset, opcode, words) for every instruction after the header.
template <typename F>
void forEachInstruction(const std::vector<uint32_t>& spirv, F&& f) {
  if (spirv.size() < kHeaderWords) throw std::invalid_argument("SPIR-V module shorter than its header");
  for (size_t at = kHeaderWords; at < spirv.size();) {
    const size_t n = wordCount(spirv[at]);
    if (n == 0 || at + n > spirv.size()) throw std::invalid_argument("SPIR-V instruction past the module's end");
    f(at, opcode(spirv[at]), n);
    at += n;
  }
}

}  // namespace

bool usesNvCooperativeMatrix(const std::vector<uint32_t>& spirv) {
  bool uses = false;
  forEachInstruction(spirv, [&](size_t at, uint32_t op, size_t n) {
    if (op == kOpCapability && n == 2 && spirv[at + 1] == kCapabilityNv) uses = true;
  });
  return uses;
}

std::vector<uint32_t> nvToKhrCooperativeMatrix(const std::vector<uint32_t>& spirv, bool bf16Operands) {
  // What the rewrite needs to know before it writes anything.
  std::set<uint32_t> trueIds, falseIds, specConstants, accumulators;
  std::map<uint32_t, uint32_t> scopeOf;  // NV matrix type -> its scope's id
  std::map<uint32_t, uint32_t> floatWidth;
  std::map<uint32_t, uint32_t> valueType;          // result id -> its type, for every instruction that has both
  std::vector<std::array<uint32_t, 3>> products;  // each multiply-add's a, b, c
  uint32_t intType = 0;
  size_t intTypeAt = 0, firstMatrixAt = 0;
  forEachInstruction(spirv, [&](size_t at, uint32_t op, size_t n) {
    const uint32_t* w = &spirv[at];
    switch (op) {
      case kOpConstantTrue: trueIds.insert(w[2]); break;
      case kOpConstantFalse: falseIds.insert(w[2]); break;
      case kOpSpecConstant: specConstants.insert(w[2]); break;
      case kOpTypeFloat: floatWidth[w[1]] = w[2]; break;
      case kOpTypeInt:
        if (intType == 0 && n >= 4 && w[2] == 32) intType = w[1], intTypeAt = at;
        break;
      case kOpTypeNv:
        if (n < 6) throw std::invalid_argument("OpTypeCooperativeMatrixNV with fewer than 5 operands");
        scopeOf[w[1]] = w[3];
        if (firstMatrixAt == 0) firstMatrixAt = at;
        break;
      case kOpMulAddNv:
        if (n < 6) throw std::invalid_argument("OpCooperativeMatrixMulAddNV with fewer than 5 operands");
        accumulators.insert(w[1]);
        products.push_back({w[3], w[4], w[5]});
        break;
      default: break;
    }
    // Instructions with a result type have it in word 1 and their result in
    // word 2; names and decorations are the others that can name a type there.
    if (n >= 3 && op != kOpName && op != kOpMemberName && op != kOpDecorate && op != kOpMemberDecorate) {
      valueType.emplace(w[2], w[1]);  // a result is defined before any use of it
    }
  });
  if (scopeOf.empty()) return spirv;
  if (intType == 0 || intTypeAt > firstMatrixAt) {
    throw std::invalid_argument("no 32-bit integer type declared before the first cooperative matrix type");
  }

  // Three new constants: 0, 1, 2 (uses A, B, accumulator; layouts row-major,
  // column-major), and with bf16Operands a bfloat16 type.
  const uint32_t bound = spirv[3];
  const uint32_t c0 = bound, c1 = bound + 1, c2 = bound + 2, bf16 = bound + 3;
  std::map<uint32_t, uint32_t> useOf;
  std::set<uint32_t> scopesToFix;
  for (const auto& [type, scope] : scopeOf) {
    if (accumulators.count(type)) useOf[type] = c2;
    else if (specConstants.count(scope)) useOf[type] = c1, scopesToFix.insert(scope);
    else useOf[type] = c0;
  }
  // Every product must take an A, a B and an accumulator, as the rewrite
  // assigned them: a kernel whose A and B fragments share a type cannot be
  // told apart (see spirv_coop.h).
  for (const auto& operands : products) {
    for (size_t k = 0; k < 3; ++k) {
      auto type = valueType.find(operands[k]);
      if (type == valueType.end() || useOf.count(type->second) == 0) continue;  // not traced back to a type
      if (useOf.at(type->second) != c0 + uint32_t(k)) {
        throw std::invalid_argument(std::string("operand ") + "abc"[k] + " of a multiply-add has a matrix type used as " +
                                    (useOf.at(type->second) == c0 ? "A" : useOf.at(type->second) == c1 ? "B" : "C") +
                                    "; give the B fragments a type of their own (a specialization-constant scope)");
      }
    }
  }
  auto layout = [&](uint32_t columnMajor) {
    if (trueIds.count(columnMajor)) return c1;
    if (falseIds.count(columnMajor)) return c0;
    throw std::invalid_argument("cooperative matrix load or store whose column-major flag is not a constant");
  };

  std::vector<uint32_t> out(spirv.begin(), spirv.begin() + kHeaderWords);
  out[3] = bound + (bf16Operands ? 4 : 3);
  forEachInstruction(spirv, [&](size_t at, uint32_t op, size_t n) {
    const uint32_t* w = &spirv[at];
    auto copyAs = [&](uint32_t newOp) {
      out.push_back(first(newOp, n));
      out.insert(out.end(), w + 1, w + n);
    };
    switch (op) {
      case kOpCapability:
        if (n == 2 && w[1] == kCapabilityNv) {
          out.insert(out.end(), {first(kOpCapability, 2), kCapabilityKhr});
          if (bf16Operands) {
            out.insert(out.end(), {first(kOpCapability, 2), kCapabilityBf16Type, first(kOpCapability, 2),
                                   kCapabilityBf16Matrix});
          }
          return;
        }
        break;
      case kOpExtension:
        if (stringAt(w + 1, n - 1) == kNvExtension) {
          for (std::string_view name : {kKhrExtension, kBf16Extension}) {
            if (name == kBf16Extension && !bf16Operands) break;
            auto s = stringWords(name);
            out.push_back(first(kOpExtension, 1 + s.size()));
            out.insert(out.end(), s.begin(), s.end());
          }
          return;
        }
        break;
      case kOpDecorate:
        if (n >= 3 && w[2] == kDecorationSpecId && scopesToFix.count(w[1])) return;  // a plain constant now
        break;
      case kOpSpecConstant:
        if (scopesToFix.count(w[2])) {
          copyAs(kOpConstant);
          return;
        }
        break;
      case kOpTypeNv: {
        if (at == firstMatrixAt) {
          for (uint32_t v = 0; v < 3; ++v) out.insert(out.end(), {first(kOpConstant, 4), intType, c0 + v, v});
          if (bf16Operands) out.insert(out.end(), {first(kOpTypeFloat, 4), bf16, 16, kEncodingBf16});
        }
        uint32_t component = w[2];
        if (bf16Operands && useOf.at(w[1]) != c2) {
          if (floatWidth.count(component) == 0 || floatWidth.at(component) != 16) {
            throw std::invalid_argument("bf16 operands asked for, but an A or B matrix type is not of 16-bit floats");
          }
          component = bf16;
        }
        out.insert(out.end(), {first(kOpTypeKhr, 7), w[1], component, w[3], w[4], w[5], useOf.at(w[1])});
        return;
      }
      case kOpLoadNv:  // result type, result, pointer, stride, column-major[, memory access]
        out.insert(out.end(), {first(kOpLoadKhr, n), w[1], w[2], w[3], layout(w[5]), w[4]});
        out.insert(out.end(), w + 6, w + n);
        return;
      case kOpStoreNv:  // pointer, object, stride, column-major[, memory access]
        out.insert(out.end(), {first(kOpStoreKhr, n), w[1], w[2], layout(w[4]), w[3]});
        out.insert(out.end(), w + 5, w + n);
        return;
      case kOpMulAddNv: copyAs(kOpMulAddKhr); return;
      case kOpLengthNv: copyAs(kOpLengthKhr); return;
      default: break;
    }
    out.insert(out.end(), w, w + n);
  });
  return out;
}

}  // namespace tensord::compute
