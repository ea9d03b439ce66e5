// masked_select: a stream compaction whose output length is known only after
// the device counted the mask (KernelTemplate::shapeFromDevice).

#include "compute/template_select.h"

#include "compute/buffer.h"
#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

constexpr uint32_t kBlock = 1024;

struct Push {
  uint64_t y, x, m, meta, words;
  uint32_t n, rank, blocks;
};

class MaskedSelect final : public KernelTemplate {
 public:
  bool shapeFromDevice() const override { return true; }

  static Shape broadcastOf(const OpSpec& op, std::span<const TensorDesc> in) {
    auto shape = broadcastShapes(in[0].shape, in[1].shape);
    if (!shape) {
      throwInvalid(op.name + ": inputs 'input' " + in[0].str() + " and 'mask' " + in[1].str() +
                   " cannot be broadcast together (trailing dims must match or be 1)");
    }
    return *shape;
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs&) const override {
    broadcastOf(op, in);  // checks only: the length comes from the device
    return {};
  }

  std::vector<TensorDesc> outputsFromDevice(const OpSpec&, std::span<const TensorDesc> in, const Attrs&,
                                            const uint32_t* words) const override {
    return {TensorDesc{in[0].dtype, {int64_t(words[0])}}};
  }

  const KernelSource& source(DType dtype, const char* pass) const {
    return variants_.get(std::string("masked_select|") + std::string(dtypeName(dtype)) + "|" + pass, [&] {
      GlslBuilder b(dtype);
      b.output("y", dtype).input("x", dtype).input("m", DType::Bool).define(pass);
      return b.build(kernelFile("select.comp"));
    });
  }

  Push push(const OpSpec& op, Recorder& r, std::span<const TensorView> in, uint64_t y, uint64_t words) const {
    std::vector<TensorDesc> descs{in[0].desc, in[1].desc};
    Shape shape = broadcastOf(op, descs);
    Coalesced c = coalesce(shape, {broadcastStrides(in[0].desc.shape, shape), broadcastStrides(in[1].desc.shape, shape)});
    std::vector<uint32_t> meta;
    for (int64_t d : c.shape) meta.push_back(uint32_t(d));
    for (const auto& s : c.strides) for (int64_t v : s) meta.push_back(uint32_t(v));
    uint32_t n = uint32_t(TensorDesc{DType::F32, shape}.numel());
    return Push{y, in[0].buffer->deviceAddress(), in[1].buffer->deviceAddress(), r.params(meta), words, n,
                uint32_t(c.shape.size()), (n + kBlock - 1) / kBlock};
  }

  void recordShapeQuery(const OpSpec& op, Recorder& r, std::span<const TensorView> in, const Attrs&,
                        uint64_t words) const override {
    Push p = push(op, r, in, 0, words);
    r.dispatch(source(in[0].desc.dtype, "PASS_COUNT"), p, r.groupsFor(p.n, 256 * 16));
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    if (out[0].desc.numel() == 0) return;
    Push p = push(op, r, in, out[0].buffer->deviceAddress(), 0);
    auto blocks = r.scratch(uint64_t(p.blocks) * 4);
    p.words = blocks->deviceAddress();
    DType d = in[0].desc.dtype;
    r.dispatch(source(d, "PASS_BLOCKS"), p, r.groupsFor(p.blocks, 1));
    r.dispatch(source(d, "PASS_SCAN"), p, 1);
    r.dispatch(source(d, "PASS_WRITE"), p, r.groupsFor(p.blocks, 1));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    return {&source(dtype, "PASS_COUNT"), &source(dtype, "PASS_BLOCKS"), &source(dtype, "PASS_SCAN"),
            &source(dtype, "PASS_WRITE")};
  }

 private:
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> maskedSelect() { return std::make_shared<MaskedSelect>(); }

}  // namespace tensord::compute
