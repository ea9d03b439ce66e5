// The NV -> KHR cooperative matrix rewrite (compute/spirv_coop.h) on every
// tensor-core kernel the op table generates, checked structurally: no device
// is needed (the rewritten kernels themselves run in the conformance suite
// on a GPU with VK_KHR_cooperative_matrix).

#include "compute/spirv_coop.h"

#include <gtest/gtest.h>

#include <algorithm>
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
    if (op == 4459) m.mulAddResultTypes.insert(w[at + 1]);
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
    const Module m = parse(nvToKhrCooperativeMatrix(compileGlsl(source->name, source->glsl), true));
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

TEST(SpirvCoopTest, TruncatedModulesAreRefused) {
  EXPECT_THROW(nvToKhrCooperativeMatrix({0x07230203u, 0x10500u}), std::invalid_argument);
  std::vector<uint32_t> cut = compileGlsl("matmul", tensorCoreKernels().at(0)->glsl);
  cut.resize(6);  // the header and the first word of a two-word OpCapability
  EXPECT_THROW(nvToKhrCooperativeMatrix(cut), std::invalid_argument);
}

}  // namespace
}  // namespace tensord::compute
