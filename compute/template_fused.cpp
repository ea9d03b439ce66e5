// Elementwise fusion (template_fused.h): the generated kernel, from
// kernels/fused_elementwise.comp, and the template that records it.

#include "compute/template_fused.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "compute/glsl.h"
#include "compute/kernel_templates.h"
#include "compute/op_spec.h"
#include "compute/template_elementwise.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

constexpr const char* kOperandNames[] = {"a", "b", "c", "d"};

struct Push {
  uint64_t x[kMaxFusedInputs];
  uint64_t y[kMaxFusedOutputs];
  uint64_t meta;
  uint32_t n, rank, dense, scalars;
};

// Fused kernels live for the life of the process: the kernel cache keys
// pipelines by KernelSource address, so a source must never be freed while a
// later one could take its place. Graphs of the same structure share one.
const KernelSource& fusedSource(const std::string& name, std::string glsl) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<KernelSource>> sources;
  std::lock_guard lock(mu);
  auto& slot = sources[glsl];
  if (!slot) slot = std::make_unique<KernelSource>(KernelSource{name, std::move(glsl)});
  return *slot;
}

// `v` (a float) as the value a store to `dtype` and a load back would give.
std::string roundedTo(const std::string& v, DType dtype) {
  switch (dtype) {
    case DType::F16: return "round_f16(" + v + ")";
    case DType::BF16: return "bf16_to_float(float_to_bf16(" + v + "))";
    default: return v;
  }
}

std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

class FusedElementwise final : public KernelTemplate {
 public:
  FusedElementwise(std::vector<TensorDesc> inputs, std::vector<TensorDesc> outputs, std::vector<uint32_t> scalars,
                   const KernelSource& source)
      : inputs_(std::move(inputs)), outputs_(std::move(outputs)), scalars_(std::move(scalars)), source_(source) {}

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs&) const override {
    if (in.size() != inputs_.size()) throw std::logic_error(op.name + ": inputs differ from the fused calls'");
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k] != inputs_[k]) throw std::logic_error(op.name + ": inputs differ from the fused calls'");
    }
    return outputs_;
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : in) descs.push_back(v.desc);
    ElementwiseLayout layout = elementwiseLayout(outputs_.front().shape, descs, in.size());
    std::vector<uint32_t>& meta = layout.meta;
    uint32_t scalarsAt = uint32_t(meta.size());
    meta.insert(meta.end(), scalars_.begin(), scalars_.end());

    Push push{};
    for (size_t k = 0; k < in.size(); ++k) push.x[k] = in[k].buffer->deviceAddress();
    for (size_t k = 0; k < out.size(); ++k) push.y[k] = out[k].buffer->deviceAddress();
    push.meta = r.params(meta);
    push.n = uint32_t(out[0].desc.numel());
    push.rank = layout.rank;
    push.dense = layout.dense ? 1 : 0;
    push.scalars = scalarsAt;
    r.dispatch(source_, push, r.groupsFor(push.n, layout.dense ? 256 * 4 : 256));
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType) const override { return {&source_}; }

 private:
  std::vector<TensorDesc> inputs_, outputs_;
  std::vector<uint32_t> scalars_;  // every call's scalar operands and parameters, 4 words each
  const KernelSource& source_;
};

}  // namespace

bool fusable(const OpSpec& spec, std::span<const TensorDesc> inputs, const Attrs& attrs) {
  return !spec.view && spec.mutates.empty() && spec.outputs.size() == 1 &&
         elementwisePiece(spec, inputs, attrs).has_value();
}

std::shared_ptr<const OpSpec> fuseElementwise(std::vector<FusedCall> calls, std::vector<TensorDesc> inputs,
                                              std::vector<size_t> outputs, const Shape& shape) {
  if (calls.empty() || inputs.empty() || inputs.size() > kMaxFusedInputs || outputs.empty() ||
      outputs.size() > kMaxFusedOutputs) {
    throw std::logic_error("fuseElementwise: needs 1 or more calls, 1 to 8 inputs and 1 to 4 outputs");
  }
  std::vector<DType> results;  // each call's output dtype
  std::vector<uint32_t> scalars;
  std::string body, name = "fused(";
  for (size_t j = 0; j < calls.size(); ++j) {
    const FusedCall& call = calls[j];
    auto piece = elementwisePiece(*call.spec, call.inputDescs, *call.attrs);
    if (!piece || !fusable(*call.spec, call.inputDescs, *call.attrs)) {
      throw std::logic_error("fuseElementwise: " + call.spec->name + " cannot be fused");
    }
    if (inferOutputs(*call.spec, call.inputDescs, *call.attrs).front().shape != shape) {
      throw std::logic_error("fuseElementwise: " + call.spec->name + "'s result does not have the fused shape");
    }
    name += (j ? "," : "") + call.spec->name;
    std::string step = "T fv" + std::to_string(j) + "; { ";
    for (size_t k = 0; k < piece->operands.size(); ++k) {
      const auto& o = piece->operands[k];
      std::string value;
      if (o.tensor) {
        int from = call.inputs.at(o.input);
        if (from >= 0) {
          if (size_t(from) >= inputs.size()) throw std::logic_error("fuseElementwise: input out of range");
          value = "e[" + std::to_string(from) + "]";
        } else {
          size_t earlier = size_t(-1 - from);
          if (earlier >= j) throw std::logic_error("fuseElementwise: a call reads a later call's result");
          value = "fv" + std::to_string(earlier);
        }
      } else {
        value = "SCALAR_F(" + std::to_string(scalars.size() / 4) + "u)";
        appendScalarWords(scalars, o.value);
      }
      step += "T " + std::string(kOperandNames[k]) + " = " + value + "; ";
    }
    for (size_t s = 0; s < piece->params.size(); ++s) {
      step += "T s" + std::to_string(s) + " = SCALAR_F(" + std::to_string(scalars.size() / 4) + "u); ";
      appendScalarWords(scalars, piece->params[s]);
    }
    step += "fv" + std::to_string(j) + " = " + roundedTo("(" + oneLine(piece->expr) + ")", piece->out) + "; } ";
    body += step;
    results.push_back(piece->out);
  }
  name += ")";

  GlslBuilder b(DType::F32);
  for (size_t k = 0; k < kMaxFusedInputs; ++k) b.input("x" + std::to_string(k), k < inputs.size() ? inputs[k].dtype : DType::F32);
  std::vector<TensorDesc> outDescs;
  for (size_t k = 0; k < kMaxFusedOutputs; ++k) {
    DType d = k < outputs.size() ? results.at(outputs[k]) : DType::F32;
    b.output("y" + std::to_string(k), d);
    if (k < outputs.size()) {
      body += "STORE_y" + std::to_string(k) + "(i, fv" + std::to_string(outputs[k]) + "); ";
      outDescs.push_back(TensorDesc{d, shape});
    }
  }
  std::string dense, at;
  for (size_t k = 0; k < inputs.size(); ++k) {
    dense += "e[" + std::to_string(k) + "] = LOAD_x" + std::to_string(k) + "(i); ";
    at += "e[" + std::to_string(k) + "] = LOAD_x" + std::to_string(k) + "(idx[" + std::to_string(k) + "]); ";
  }
  b.define("INPUTS", std::to_string(inputs.size()) + "u");
  b.define("LOAD_DENSE(e, i)", dense);
  b.define("LOAD_AT(e, idx)", at);
  b.define("FUSED_BODY", body);
  const KernelSource& source =
      fusedSource(name.size() > 200 ? name.substr(0, 197) + "...)" : name,
                  b.build(std::string(kernelFile("math.glsl")) + std::string(kernelFile("fused_elementwise.comp"))));

  auto spec = std::make_shared<OpSpec>();
  spec->name = source.name;
  spec->category = "elementwise";
  // Each input is named after the first call that reads it ("add.other"),
  // as errors about a failed input name it.
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string input = "x" + std::to_string(k);
    for (const FusedCall& call : calls) {
      auto at = std::find(call.inputs.begin(), call.inputs.end(), int(k));
      if (at == call.inputs.end()) continue;
      input = call.spec->name + "." + call.spec->inputName(size_t(at - call.inputs.begin()));
      break;
    }
    spec->inputs.push_back({input, InputRole::kAny});
  }
  for (size_t k = 0; k < outputs.size(); ++k) spec->outputs.push_back("y" + std::to_string(k));
  spec->dtypes = {DType::F32, DType::F16, DType::BF16};
  spec->differentiable = false;
  spec->kernel = std::make_shared<FusedElementwise>(std::move(inputs), std::move(outDescs), std::move(scalars), source);
  return spec;
}

}  // namespace tensord::compute
