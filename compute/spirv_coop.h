#pragma once
// Rewrites SPIR-V that uses SPV_NV_cooperative_matrix (what Debian 12's
// glslang emits for GL_NV_cooperative_matrix) into SPV_KHR_cooperative_matrix,
// for devices where the KHR extension is the faster (or the only) one.
//
// The KHR matrix types say which operand they are (A, B or accumulator);
// the NV ones do not. The rewrite takes a type that is the result type of a
// multiply-add as the accumulator, a type whose scope is a specialization
// constant as B (kernels declare their B fragments that way, so that glslang
// keeps them a type of their own) and any other as A; that scope becomes a
// plain constant. Loads and stores get the KHR memory layout operand in
// place of NV's column-major flag, which must be a constant.
//
// With `bf16Operands`, the A and B types get a bfloat16 component instead of
// f16 (SPV_KHR_bfloat16): a kernel written for f16 operands that moves them
// as raw 16-bit words then multiplies bf16 ones. Kernels built for that
// define kBf16OperandsDefine.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tensord::compute {

// Whether `spirv` declares the NV cooperative matrix capability.
bool usesNvCooperativeMatrix(const std::vector<uint32_t>& spirv);

inline constexpr std::string_view kBf16OperandsDefine = "BF16_OPERANDS";

// The module rewritten to the KHR extension. Throws std::invalid_argument
// naming what it cannot rewrite: a multiply-add whose operand types do not
// have the roles above (A and B fragments of one type), a column-major flag
// that is not a constant, no 32-bit integer type to build the KHR operands
// from.
std::vector<uint32_t> nvToKhrCooperativeMatrix(const std::vector<uint32_t>& spirv, bool bf16Operands = false);

}  // namespace tensord::compute
