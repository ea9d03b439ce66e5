#include "compute/collective_kernels.h"

#include <memory>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/kernel_templates.h"

namespace tensord::compute {
namespace {

struct CollectivePush {
  uint64_t src, dst;
  uint32_t n;
  float scale;
};

struct MirrorPush {  // MIRROR: the reduced values also go to `copy`
  uint64_t src, dst, copy;
  uint32_t n;
  float scale;
};

enum class Mode { kConvert, kReduce, kReduceCopy };

class CollectiveKernel final : public KernelTemplate {
 public:
  explicit CollectiveKernel(Mode mode) : reduce_(mode != Mode::kConvert), mirror_(mode == Mode::kReduceCopy) {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc>, const Attrs&) const override {
    throwInvalid(spec.name + ": internal kernel; its outputs are allocated by the caller");
  }

  void record(const OpSpec& spec, Recorder& recorder, std::span<const TensorView> inputs,
              std::span<const TensorView> outputs, const Attrs& attrs) const override {
    const auto srcOffset = uint64_t(attrs.getInt("src_offset"));
    const auto dstOffset = uint64_t(attrs.getInt("dst_offset"));
    const auto count = uint64_t(attrs.getInt("count"));
    const TensorView& src = inputs[0];
    const TensorView& dst = outputs[0];
    const uint32_t srcSize = dtypeSize(src.desc.dtype), dstSize = dtypeSize(dst.desc.dtype);
    const bool over = (srcOffset + count) * srcSize > src.buffer->bytes() ||
                      (dstOffset + count) * dstSize > dst.buffer->bytes() ||
                      (mirror_ && (dstOffset + count) * dstSize > outputs[1].buffer->bytes());
    if (over) {
      throwInvalid(spec.name + ": " + std::to_string(count) + " elements at offsets " + std::to_string(srcOffset) +
                   " -> " + std::to_string(dstOffset) + " exceed a buffer (" + std::to_string(src.buffer->bytes()) +
                   " -> " + std::to_string(dst.buffer->bytes()) +
                   (mirror_ ? " and " + std::to_string(outputs[1].buffer->bytes()) : std::string()) + " bytes)");
    }
    if (count == 0) return;
    const std::string op = reduce_ ? attrs.getText("op") : "";
    const KernelSource& source = variant(src.desc.dtype, dst.desc.dtype, op);
    // One dispatch covers at most 2^32 - 1 elements (the kernel's counter).
    constexpr uint64_t kMaxPerDispatch = 0xffffff00u;
    for (uint64_t done = 0; done < count; done += kMaxPerDispatch) {
      const uint64_t n = std::min(kMaxPerDispatch, count - done);
      const uint64_t srcAt = src.buffer->deviceAddress() + (srcOffset + done) * srcSize;
      const uint64_t dstAt = (dstOffset + done) * dstSize;
      if (mirror_) {
        MirrorPush push{srcAt, dst.buffer->deviceAddress() + dstAt, outputs[1].buffer->deviceAddress() + dstAt,
                        uint32_t(n), 1.0f};
        recorder.dispatch(source, push, recorder.groupsFor(n, 256));
      } else {
        CollectivePush push{srcAt, dst.buffer->deviceAddress() + dstAt, uint32_t(n),
                            float(reduce_ ? 1.0 : attrs.getFloat("scale"))};
        recorder.dispatch(source, push, recorder.groupsFor(n, 256));
      }
    }
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    if (reduce_)
      return {&variant(DType::F32, DType::F32, "sum"), &variant(DType::F32, DType::F32, "max"),
              &variant(DType::F32, DType::F32, "min")};
    return {&variant(dtype, DType::F32, ""), &variant(DType::F32, dtype, "")};
  }

 private:
  const KernelSource& variant(DType src, DType dst, const std::string& op) const {
    const std::string key = std::string(reduce_ ? "collective_reduce_" + op : "collective_convert") +
                            (mirror_ ? "_copy_" : "_") + std::string(dtypeName(src)) + "_" +
                            std::string(dtypeName(dst));
    return variants_.get(key, [&] {
      GlslBuilder glsl(DType::F32);
      glsl.input("src", src).output("dst", dst);
      if (mirror_) glsl.output("copy", dst).define("MIRROR");
      if (reduce_) {
        glsl.define("MODE_REDUCE").define("LOAD_dst(i)", "p.dst.v[i]");
        if (op == "sum") {
          glsl.define("COMBINE(a, b)", "((a) + (b))");
        } else {
          const std::string pick = op == "max" ? "max(a, b)" : "min(a, b)";
          glsl.define("COMBINE(a, b)", "((isnan(a) || isnan(b)) ? (a) + (b) : " + pick + ")");
        }
      }
      return glsl.build(kernelFile("collective.comp"));
    });
  }

  bool reduce_;
  bool mirror_;
  KernelVariants variants_;
};

OpSpec makeSpec(const std::string& name, Mode mode) {
  OpSpec spec;
  spec.name = name;
  spec.category = "collective";
  spec.inputs = {{"src", InputRole::kData}};
  spec.outputs = {"dst"};
  if (mode == Mode::kReduceCopy) spec.outputs.push_back("copy");
  spec.dtypes = mode != Mode::kConvert ? std::vector<DType>{DType::F32}
                                       : std::vector<DType>{DType::F32, DType::F16, DType::BF16};
  spec.kernel = std::make_shared<CollectiveKernel>(mode);
  spec.differentiable = false;
  spec.doc = mode == Mode::kConvert ? "dst[dst_offset + i] = src[src_offset + i] * scale"
             : mode == Mode::kReduce
                 ? "dst[dst_offset + i] = op(dst[dst_offset + i], src[src_offset + i])"
                 : "dst[dst_offset + i] = op(dst[dst_offset + i], src[src_offset + i]); copy[dst_offset + i] = the same";
  return spec;
}

}  // namespace

const OpSpec& collectiveReduceSpec() {
  static const OpSpec spec = makeSpec("collective_reduce", Mode::kReduce);
  return spec;
}

const OpSpec& collectiveConvertSpec() {
  static const OpSpec spec = makeSpec("collective_convert", Mode::kConvert);
  return spec;
}

const OpSpec& collectiveReduceCopySpec() {
  static const OpSpec spec = makeSpec("collective_reduce_copy", Mode::kReduceCopy);
  return spec;
}

Attrs collectiveKernelAttrs(uint64_t srcOffset, uint64_t dstOffset, uint64_t count, const std::string& op,
                            double scale) {
  Attrs attrs;
  attrs.set("src_offset", int64_t(srcOffset));
  attrs.set("dst_offset", int64_t(dstOffset));
  attrs.set("count", int64_t(count));
  attrs.set("op", op);
  attrs.set("scale", scale);
  return attrs;
}

}  // namespace tensord::compute
