#pragma once
// GLSL generation for dtype-generic kernels. A kernel template is a .comp
// file (compute/kernels/) written against a few macros; this file writes the
// prelude that defines them for one choice of dtypes:
//
//   T                   the compute type of the op ("float" for f32, f16 and
//                       bf16, "int" for i32, "int64_t", "uint" for u8, "bool")
//   <name>_ref          buffer reference type of operand <name>
//   LOAD_<name>(i)      element i of operand <name>, converted to T
//   STORE_<name>(i, v)  stores v (of the operand's value type) converted to
//                       the operand's dtype; bf16 rounds to nearest even
//   T_<name>            the GLSL type of values of operand <name>
//   DT_<NAME>           defined for the compute dtype: DT_F32, DT_I64, ...
//   IS_FLOAT / IS_INT   the compute dtype's category
//
// Push constants name their operands `<name>_ref <name>;` in a block named p.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/dtype.h"
#include "compute/recorder.h"

namespace tensord::compute {

std::string_view glslType(DType compute);  // the GLSL type values of `compute` are computed in
// `expr` (a value of GLSL type glslType(from)) converted to glslType(to).
std::string glslConvert(const std::string& expr, DType from, DType to);
// A GLSL literal of `value` in `dtype`'s compute type ("0.0", "0", "0l", "false").
std::string glslLiteral(double value, DType dtype);

// Four consecutive floats stored as f32, f16 or bf16 (the vectorized loops
// of elementwise.comp and reduce.comp): the stored vector type, its
// alignment in bytes, a stored vector `v` as a vec4, and a vec4 `x` as the
// stored vector.
bool storedAsFloat(DType d);  // f32, f16 or bf16
std::string glslVec4Type(DType d);
std::string glslVec4Align(DType d);
std::string glslLoad4(const std::string& v, DType d);
std::string glslStore4(const std::string& x, DType d);

// Appends a number to a kernel's parameter table as four words: its f32
// bits, then as i32 and as i64 (low, high), the integers saturated. A kernel
// reads the word(s) of its compute type (elementwise.comp's SCALAR_* macros).
void appendScalarWords(std::vector<uint32_t>& words, double value);

class GlslBuilder {
 public:
  explicit GlslBuilder(DType compute);
  // An operand read as T (the compute dtype).
  GlslBuilder& input(const std::string& name, DType dtype);
  // An operand written from values of `valueType` (default: the compute dtype).
  GlslBuilder& output(const std::string& name, DType dtype);
  GlslBuilder& output(const std::string& name, DType dtype, DType valueType);
  GlslBuilder& define(const std::string& name, const std::string& value = "");
  // The whole shader: prelude, then the kernel file's body.
  std::string build(std::string_view body) const;

 private:
  void declare(const std::string& name, DType dtype);
  DType compute_;
  bool int64_ = false, storage16_ = false, storage8_ = false;
  std::string decls_;
};

// The source of a kernel file from compute/kernels/ ("elementwise.comp"),
// embedded at build time. Where the environment variable TENSORD_KERNEL_DIR
// names a directory, a file of that name there is read instead (once, then
// kept): kernels can be tried on another machine without a rebuild. Throws
// std::logic_error for an unknown name.
std::string_view kernelFile(std::string_view name);
// The copy embedded at build time.
std::string_view embeddedKernelFile(std::string_view name);

// Kernel sources generated on demand and kept for the life of the template
// (the kernel cache keys pipelines by KernelSource address). Thread-safe.
// The key names the source, unless getNamed gives it another name: variants
// that differ in what a caller chooses (an elementwise op's expression, with
// its attributes) share one, so the metrics have a bounded set of names.
class KernelVariants {
 public:
  template <typename Make>
  const KernelSource& get(const std::string& key, Make&& make) const {
    return getNamed(key, key, std::forward<Make>(make));
  }
  template <typename Make>
  const KernelSource& getNamed(const std::string& key, const std::string& name, Make&& make) const {
    std::lock_guard lock(mu_);
    auto& slot = sources_[key];
    if (!slot) slot = std::make_unique<KernelSource>(KernelSource{name, make()});
    return *slot;
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<KernelSource>> sources_;
};

}  // namespace tensord::compute
