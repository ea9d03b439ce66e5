#include "compute/template_graph.h"

#include <algorithm>
#include <stdexcept>

#include "compute/error.h"
#include "compute/op_spec.h"
#include "compute/op_table.h"

namespace tensord::compute {

std::vector<Value> Graph::ins(std::string_view name) const {
  std::vector<Value> out;
  for (size_t i = 0; i < numInputs_; ++i) {
    if (op_->inputName(i) == name) out.push_back(Value{int(i)});
  }
  return out;
}

Value Graph::in(std::string_view name) const {
  auto v = ins(name);
  if (v.empty()) throw std::logic_error(op_->name + ": graph program reads input '" + std::string(name) + "', not given");
  return v.front();
}

int64_t Graph::dim(Value v, int64_t d) const {
  const Shape& s = shape(v);
  if (d < 0) d += int64_t(s.size());
  return s.at(size_t(d));
}

void Graph::expectShape(Value v, const Shape& expected, std::string_view input) const {
  if (shape(v) != expected) {
    throwInvalid(op_->name + ": input '" + std::string(input) + "' has shape " + shapeStr(shape(v)) +
                 "; expected " + shapeStr(expected));
  }
}

int Graph::newValue(TensorDesc desc, int parent) {
  descs_.push_back(std::move(desc));
  viewOf_.push_back(parent);
  return int(descs_.size()) - 1;
}

void Graph::bindInputs(std::span<const TensorDesc> inputs) {
  for (const auto& d : inputs) newValue(d, -1);
  numInputs_ = inputs.size();
}

std::vector<Value> Graph::callN(std::string_view name, std::vector<Value> inputs, const StepAttrs& attrs) {
  const OpSpec* step = table_.find(name);
  if (!step) throw std::logic_error(op_->name + ": graph program calls unknown op '" + std::string(name) + "'");
  return callSpec(*step, std::move(inputs), attrs);
}

Value Graph::call(const OpSpec& step, std::vector<Value> inputs, const StepAttrs& attrs) {
  auto out = callSpec(step, std::move(inputs), attrs);
  if (out.size() != 1) throw std::logic_error(op_->name + ": graph step '" + step.name + "' has several outputs");
  return out[0];
}

std::vector<Value> Graph::callSpec(const OpSpec& stepSpec, std::vector<Value> inputs, const StepAttrs& attrs) {
  const OpSpec* step = &stepSpec;
  if (step->shapeFromDevice()) throw std::logic_error(op_->name + ": graph step '" + step->name + "' needs a device query");
  std::vector<TensorDesc> in;
  for (Value v : inputs) in.push_back(desc(v));
  Attrs validated = validateAttrs(*step, attrs);
  std::vector<TensorDesc> outs;
  try {
    outs = inferOutputs(*step, in, validated);
  } catch (const ComputeError& e) {
    // A step's check failing is this op's error, reported under its name.
    throw ComputeError(e.kind(), op_->name + " (step " + e.what() + ")");
  }
  std::vector<Value> result;
  for (auto& d : outs) result.push_back(Value{newValue(std::move(d), step->view ? inputs.at(0).id : -1)});
  onStep(*step, inputs, validated, result);
  return result;
}

Value Graph::call(std::string_view name, std::vector<Value> inputs, const StepAttrs& attrs) {
  auto out = callN(name, std::move(inputs), attrs);
  if (out.size() != 1) throw std::logic_error(op_->name + ": graph step '" + std::string(name) + "' has several outputs");
  return out[0];
}

Value Graph::sumTo(Value a, Shape target) {
  const Shape s = shape(a);  // a copy: each call below adds values (and may move descs_)
  if (s == target) return a;
  const size_t lead = s.size() - target.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < lead || (target[i - lead] == 1 && s[i] != 1)) dims.push_back(int64_t(i));
  }
  Value r = dims.empty() ? a : sum(a, dims, true);
  return shape(r) == target ? r : reshape(r, target);
}

Value Graph::to(Value a, DType d) {
  if (desc(a).dtype == d) return a;
  return call("to", {a}, {{"dtype", std::string(dtypeName(d))}});
}

namespace {

// Pass 1: descriptors only.
class InferGraph final : public Graph {
 public:
  InferGraph(const OpTable& table, const OpSpec& op, std::span<const TensorDesc> inputs) : Graph(table, op) {
    bindInputs(inputs);
  }
  std::vector<TensorDesc> descsOf(const std::vector<Value>& values) const {
    std::vector<TensorDesc> out;
    for (Value v : values) out.push_back(desc(v));
    return out;
  }
  // Which value's memory each result should be written to: the value that
  // owns the memory a result lives in (following views), when a step
  // computes it and no earlier result claimed it. -1: copy at the end.
  std::vector<int> homes(const std::vector<Value>& results) const {
    std::vector<int> homes;
    for (Value r : results) {
      int root = r.id;
      while (viewOf_[size_t(root)] >= 0) root = viewOf_[size_t(root)];
      bool computed = size_t(root) >= numInputs_ && std::find(homes.begin(), homes.end(), root) == homes.end() &&
                      descs_[size_t(root)].bytes() == desc(r).bytes();
      homes.push_back(computed ? root : -1);
    }
    return homes;
  }
  uint64_t flops = 0;

 private:
  void onStep(const OpSpec& step, const std::vector<Value>& inputs, const Attrs& attrs,
              const std::vector<Value>& outputs) override {
    if (step.view) return;
    std::vector<TensorView> in, out;
    for (Value v : inputs) in.push_back({desc(v), nullptr});
    for (Value v : outputs) out.push_back({desc(v), nullptr});
    flops += step.kernel->flops(step, in, out, attrs);
  }
};

// Pass 2: records every step; results land in the op's outputs.
class RecordGraph final : public Graph {
 public:
  RecordGraph(const OpTable& table, const OpSpec& op, Recorder& recorder, std::span<const TensorView> inputs,
              std::span<const TensorView> outputs, std::vector<int> homes)
      : Graph(table, op), recorder_(recorder), outputs_(outputs), homes_(std::move(homes)) {
    std::vector<TensorDesc> descs;
    for (const auto& v : inputs) {
      descs.push_back(v.desc);
      buffers_.push_back(v.buffer);
    }
    bindInputs(descs);
  }

  void finish(const std::vector<Value>& results) {
    for (size_t j = 0; j < results.size(); ++j) {
      if (homes_[j] >= 0) continue;  // computed in place
      const uint64_t bytes = outputs_[j].desc.bytes();
      if (bytes == 0) continue;
      const auto& src = buffers_[size_t(results[j].id)];
      CopyPush push{src->deviceAddress(), outputs_[j].buffer->deviceAddress(), uint32_t((bytes + 15) / 16)};
      recorder_.dispatch(copyKernel(), push, recorder_.groupsFor(push.count16, 256));
    }
  }

 private:
  void onStep(const OpSpec& step, const std::vector<Value>& inputs, const Attrs& attrs,
              const std::vector<Value>& outputs) override {
    std::vector<TensorView> in, out;
    for (Value v : inputs) in.push_back({desc(v), buffers_[size_t(v.id)]});
    for (Value v : outputs) {
      std::shared_ptr<Buffer> buffer;
      if (step.view) {
        buffer = in.at(0).buffer;
      } else if (auto it = std::find(homes_.begin(), homes_.end(), v.id); it != homes_.end()) {
        buffer = outputs_[size_t(it - homes_.begin())].buffer;
      } else {
        buffer = recorder_.scratch(std::max<uint64_t>(desc(v).bytes(), 16));
      }
      buffers_.push_back(buffer);
      out.push_back({desc(v), buffer});
    }
    if (!step.view) step.kernel->record(step, recorder_, in, out, attrs);
  }

  Recorder& recorder_;
  std::span<const TensorView> outputs_;
  std::vector<int> homes_;
  std::vector<std::shared_ptr<Buffer>> buffers_;  // per value
};

class GraphTemplate final : public KernelTemplate {
 public:
  GraphTemplate(const OpTable& table, GraphProgram program, std::vector<std::shared_ptr<const OpSpec>> steps)
      : table_(table), program_(std::move(program)), steps_(std::move(steps)) {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> inputs,
                                const Attrs& attrs) const override {
    InferGraph g(table_, spec, inputs);
    return g.descsOf(program_(g, attrs));
  }

  void record(const OpSpec& spec, Recorder& recorder, std::span<const TensorView> inputs,
              std::span<const TensorView> outputs, const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : inputs) descs.push_back(v.desc);
    InferGraph plan(table_, spec, descs);
    std::vector<int> homes = plan.homes(program_(plan, attrs));
    RecordGraph g(table_, spec, recorder, inputs, outputs, std::move(homes));
    g.finish(program_(g, attrs));
  }

  uint64_t flops(const OpSpec& spec, std::span<const TensorView> inputs, std::span<const TensorView>,
                 const Attrs& attrs) const override {
    std::vector<TensorDesc> descs;
    for (const auto& v : inputs) descs.push_back(v.desc);
    InferGraph g(table_, spec, descs);
    program_(g, attrs);
    return g.flops;
  }

  // Steps that are ops of the table have their kernels checked with them;
  // the private ones are checked here.
  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    std::vector<const KernelSource*> out;
    for (const auto& s : steps_) {
      auto v = s->kernel->variants(*s, dtype);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

 private:
  const OpTable& table_;
  GraphProgram program_;
  std::vector<std::shared_ptr<const OpSpec>> steps_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> graphTemplate(const OpTable& table, GraphProgram program,
                                                    std::vector<std::shared_ptr<const OpSpec>> steps) {
  return std::make_shared<GraphTemplate>(table, std::move(program), std::move(steps));
}

}  // namespace tensord::compute
