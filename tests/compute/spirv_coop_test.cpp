// The NV -> KHR cooperative matrix rewrite (compute/spirv_coop.h) on every
// tensor-core kernel the op table generates, checked structurally: no device
// is needed (the rewritten kernels themselves run in the conformance suite
// on a GPU with VK_KHR_cooperative_matrix).

#include "compute/spirv_coop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "compute/kernel_cache.h"
#include "compute/kernel_templates.h"
#include "compute/op_table.h"

namespace tensord::compute {
namespace {

struct Module {
  std::set<uint32_t> opcodes, capabilities;
  std::vector<std::string> extensions;
  std::map<uint32_t, uint32_t> constants;        // id -> value (32-bit OpConstant)
  std::map<uint32_t, uint32_t> matrixUse;        // KHR matrix type -> its use operand's value
  std::map<uint32_t, uint32_t> matrixComponent;  // ... -> its component type
  std::map<uint32_t, uint32_t> floatWidth;       // OpTypeFloat -> width
  std::set<uint32_t> bf16Types;                  // OpTypeFloat 16 with the BFloat16 encoding
  std::set<uint32_t> mulAddResultTypes, specIdTargets, scopes;
  std::map<uint32_t, uint32_t> valueType;                  // result id -> type, where word 1 is a matrix type
  std::vector<std::array<uint32_t, 3>> products;           // each multiply-add's a, b, c
  std::vector<std::pair<uint32_t, uint32_t>> layoutStride;  // each load's and store's (layout, stride) operands
  uint32_t maxId = 0, bound = 0;
};

Module parse(const std::vector<uint32_t>& w) {
  Module m;
  m.bound = w.at(3);
  for (size_t at = 5; at < w.size();) {
    const uint32_t op = w[at] & 0xffffu, n = w[at] >> 16;
    EXPECT_GT(n, 0u);
    if (n == 0) break;
    m.opcodes.insert(op);
    if (op == 17) m.capabilities.insert(w[at + 1]);
    if (op == 10) m.extensions.emplace_back(reinterpret_cast<const char*>(&w[at + 1]));
    if (op == 22) m.floatWidth[w[at + 1]] = w[at + 2];
    if (op == 22 && n == 4 && w[at + 2] == 16 && w[at + 3] == 0) m.bf16Types.insert(w[at + 1]);
    if (op == 43 && n == 4) m.constants[w[at + 2]] = w[at + 3];
    if (op == 71 && w[at + 2] == 1) m.specIdTargets.insert(w[at + 1]);
    if (op == 4456) {
      m.matrixComponent[w[at + 1]] = w[at + 2];
      m.scopes.insert(w[at + 3]);
      m.matrixUse[w[at + 1]] = m.constants.at(w[at + 6]);
    }
    if (op == 4459) {
      m.mulAddResultTypes.insert(w[at + 1]);
      m.products.push_back({w[at + 3], w[at + 4], w[at + 5]});
    }
    if (op == 4457) m.layoutStride.emplace_back(w[at + 4], w[at + 5]);
    if (op == 4458) m.layoutStride.emplace_back(w[at + 3], w[at + 4]);
    if (n >= 3 && m.matrixUse.count(w[at + 1]) && op != 71 && op != 5) m.valueType.emplace(w[at + 2], w[at + 1]);
    at += n;
  }
  return m;
}

std::vector<const KernelSource*> tensorCoreKernels() {
  static OpTable table;
  std::vector<const KernelSource*> found;
  std::set<const KernelSource*> seen;
  for (const OpSpec& op : table.all()) {
    for (DType dtype : op.dtypes) {
      for (const KernelSource* s : op.kernel->variants(op, dtype)) {
        if (seen.insert(s).second && s->glsl.find("GL_NV_cooperative_matrix") != std::string::npos) found.push_back(s);
      }
    }
  }
  return found;
}

TEST(SpirvCoopTest, EveryTensorCoreKernelRewritesToTheKhrExtension) {
  const auto kernels = tensorCoreKernels();
  ASSERT_GE(kernels.size(), 4u) << "matmul_coop.comp and conv_gemm_coop.comp variants";
  for (const KernelSource* source : kernels) {
    SCOPED_TRACE(source->name);
    const std::vector<uint32_t> nv = compileGlsl(source->name, source->glsl);
    ASSERT_TRUE(usesNvCooperativeMatrix(nv));
    const std::vector<uint32_t> khr = nvToKhrCooperativeMatrix(nv);
    EXPECT_FALSE(usesNvCooperativeMatrix(khr));
    const Module m = parse(khr);
    for (uint32_t op = 5358; op <= 5362; ++op) EXPECT_FALSE(m.opcodes.count(op)) << "NV opcode " << op << " left";
    EXPECT_TRUE(m.capabilities.count(6022));
    EXPECT_FALSE(m.capabilities.count(5357));
    EXPECT_NE(std::find(m.extensions.begin(), m.extensions.end(), "SPV_KHR_cooperative_matrix"), m.extensions.end());
    EXPECT_EQ(std::find(m.extensions.begin(), m.extensions.end(), "SPV_NV_cooperative_matrix"), m.extensions.end());
    for (uint32_t op : {4457u, 4458u, 4459u}) EXPECT_TRUE(m.opcodes.count(op)) << "KHR opcode " << op;
    EXPECT_EQ(m.bound, parse(nv).bound + 3);
    // One f16 A type, one f16 B type, f32 accumulators that are what the products return.
    std::map<uint32_t, int> uses;
    for (const auto& [type, use] : m.matrixUse) {
      ++uses[use];
      const uint32_t width = m.floatWidth.at(m.matrixComponent.at(type));
      if (use == 2) {
        EXPECT_EQ(width, 32u);
        EXPECT_TRUE(m.mulAddResultTypes.count(type));
      } else {
        EXPECT_EQ(width, 16u);
      }
    }
    EXPECT_EQ(uses[0], 1);
    EXPECT_EQ(uses[1], 1);
    EXPECT_EQ(uses[2], 1);
    // Each product takes an A, a B and an accumulator, in that order.
    ASSERT_FALSE(m.products.empty());
    for (const auto& operands : m.products) {
      for (uint32_t k = 0; k < 3; ++k) {
        ASSERT_TRUE(m.valueType.count(operands[k])) << "operand " << k << " traced to a matrix type";
        EXPECT_EQ(m.matrixUse.at(m.valueType.at(operands[k])), k) << "operand " << k << " of a product";
      }
    }
    // Loads and stores: the memory layout is one of the new constants (0 or
    // 1, ids past the NV module's bound), the stride is not.
    const uint32_t nvBound = parse(nv).bound;
    ASSERT_FALSE(m.layoutStride.empty());
    for (const auto& [layout, stride] : m.layoutStride) {
      EXPECT_TRUE(layout == nvBound || layout == nvBound + 1) << "layout operand " << layout;
      EXPECT_LT(stride, nvBound) << "stride operand " << stride;
    }
    for (uint32_t scope : m.scopes) {
      EXPECT_EQ(m.constants.at(scope), 3u) << "subgroup scope, a plain constant";
      EXPECT_FALSE(m.specIdTargets.count(scope)) << "no specialization id left on a scope";
    }
  }
}

// bf16 products: the same kernels, their A and B fragments made bf16.
TEST(SpirvCoopTest, Bf16KernelsGetBf16Operands) {
  const std::string marker = "#define " + std::string(kBf16OperandsDefine) + "\n";
  int checked = 0;
  for (const KernelSource* source : tensorCoreKernels()) {
    if (source->glsl.find(marker) == std::string::npos) continue;
    SCOPED_TRACE(source->name);
    ++checked;
    const std::vector<uint32_t> nv = compileGlsl(source->name, source->glsl);
    const Module m = parse(nvToKhrCooperativeMatrix(nv, true));
    EXPECT_EQ(m.bound, parse(nv).bound + 4);
    EXPECT_TRUE(m.capabilities.count(5116) && m.capabilities.count(5118)) << "BFloat16 type and matrix capabilities";
    EXPECT_NE(std::find(m.extensions.begin(), m.extensions.end(), "SPV_KHR_bfloat16"), m.extensions.end());
    ASSERT_EQ(m.bf16Types.size(), 1u);
    for (const auto& [type, use] : m.matrixUse) {
      if (use == 2) EXPECT_EQ(m.floatWidth.at(m.matrixComponent.at(type)), 32u);
      else EXPECT_TRUE(m.bf16Types.count(m.matrixComponent.at(type))) << "use " << use << " is bf16";
    }
  }
  EXPECT_GE(checked, 2) << "matmul_coop.comp's bf16 variants";
}

TEST(SpirvCoopTest, ModulesWithoutCooperativeMatricesStayAsTheyAre) {
  const std::string glsl =
      "#version 460\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 0) buffer B { float v[]; };\n"
      "void main() { v[gl_GlobalInvocationID.x] *= 2.0; }\n";
  const std::vector<uint32_t> plain = compileGlsl("plain", glsl);
  EXPECT_FALSE(usesNvCooperativeMatrix(plain));
  EXPECT_EQ(nvToKhrCooperativeMatrix(plain), plain);
}

// A kernel whose A and B fragments share one type cannot say which is B:
// the rewrite refuses it rather than write a product with two A operands.
TEST(SpirvCoopTest, FragmentsSharingATypeAreRefused) {
  const std::string glsl = R"(#version 460
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
layout(local_size_x = 32) in;
const int kScope = 3;  // subgroup
layout(std430, binding = 0) buffer H { float16_t h[]; };
layout(std430, binding = 1) buffer F { float f[]; };
void main() {
  fcoopmatNV<16, kScope, 16, 16> a, b;
  fcoopmatNV<32, kScope, 16, 16> c = fcoopmatNV<32, kScope, 16, 16>(0.0);
  coopMatLoadNV(a, h, 0, 16, false);
  coopMatLoadNV(b, h, 256, 16, false);
  c = coopMatMulAddNV(a, b, c);
  coopMatStoreNV(c, f, 0, 16, false);
}
)";
  const std::vector<uint32_t> nv = compileGlsl("shared type", glsl);
  ASSERT_TRUE(usesNvCooperativeMatrix(nv));
  try {
    nvToKhrCooperativeMatrix(nv);
    FAIL() << "rewritten although B cannot be told from A";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("operand b of a multiply-add"), std::string::npos) << e.what();
  }
}

TEST(SpirvCoopTest, TruncatedModulesAreRefused) {
  EXPECT_THROW(nvToKhrCooperativeMatrix({0x07230203u, 0x10500u}), std::invalid_argument);
  std::vector<uint32_t> cut = compileGlsl("matmul", tensorCoreKernels().at(0)->glsl);
  cut.resize(6);  // the header and the first word of a two-word OpCapability
  EXPECT_THROW(nvToKhrCooperativeMatrix(cut), std::invalid_argument);
}

}  // namespace
}  // namespace tensord::compute
