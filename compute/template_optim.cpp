// The optimizer templates (see template_optim.h) and the GLSL they generate
// from kernels/optim.comp (team reductions: norm_rows.glsl).

#include "compute/template_optim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"

namespace tensord::compute {
namespace {

constexpr uint32_t kWG = 256;   // invocations per workgroup
constexpr uint32_t kItems = 4;  // elements per invocation and tile
constexpr uint32_t kTile = kWG * kItems;
// Workgroups of a dispatch at most (each walks a contiguous run of tiles):
// enough to fill a large GPU a few times over, and few partials for a norm.
constexpr uint32_t kMaxGroups = 2048;

// KIND and the step flags of optim.comp.
enum class Kind { kSgd = 0, kAdam = 1, kNormPartial = 2, kNormFinal = 3, kScale = 4, kZero = 5 };
constexpr uint32_t kMaximize = 1, kNesterov = 2, kFirstStep = 4, kAmsgrad = 8, kDecoupled = 16;

// One tensor's row of the table a kernel walks (Entry in optim.comp, std430).
struct Entry {
  uint64_t t = 0, g = 0, s0 = 0, s1 = 0, s2 = 0;
  uint32_t firstTile = 0, n = 0;
};
static_assert(sizeof(Entry) == 48);
constexpr uint32_t kWritesT = 1, kWritesStates = 2;  // which operands of an entry a kernel writes

struct StepPush {
  uint64_t table;
  uint32_t entries, tiles, flags;
  float lr, weightDecay, momentum, oneMinusDampening, decay, oneMinusBeta1, beta2, oneMinusBeta2, bc2Sqrt, eps;
};

// clip_grad_norm_'s passes and zero_ (zero_ uses the table fields only).
struct TablePush {
  uint64_t table, partial, y, err;
  uint32_t entries, tiles, partialBase, partials, errorIfNonfinite;
  float normType, maxNorm;
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string dt(DType d) { return std::string(dtypeName(d)); }

// ---------------------------------------------------------------- kernels

// `STORE_<name>` for an operand declared with input() that is also written.
std::string storeMacro(const std::string& name, DType d) {
  std::string v = "(x)";
  if (d == DType::F16) v = "float16_t(x)";
  if (d == DType::BF16) v = "uint16_t(float_to_bf16(x))";
  return "p." + name + ".v[i] = " + v;
}

// v as an f32 value the dtype can hold.
std::string roundMacro(DType d) {
  if (d == DType::F16) return "float(float16_t(v))";
  if (d == DType::BF16) return "bf16_to_float(float_to_bf16(v))";
  return "(v)";
}

const KernelSource& kernel(const KernelVariants& variants, Kind kind, DType dtype) {
  std::string key = "optim|" + std::to_string(int(kind)) + "|" + dt(dtype);
  return variants.get(key, [&] {
    GlslBuilder b(kind == Kind::kNormFinal ? DType::F32 : dtype);
    b.define("WG", std::to_string(kWG)).define("ITEMS", std::to_string(kItems));
    b.define("KIND", std::to_string(int(kind)));
    // Operands updated in place are inputs with a store macro.
    auto inout = [&](const std::string& name) {
      b.input(name, dtype).define("STORE_" + name + "(i, x)", storeMacro(name, dtype));
    };
    switch (kind) {
      case Kind::kSgd:
        inout("t");
        b.input("g", dtype);
        inout("s0");
        break;
      case Kind::kAdam:
        inout("t");
        b.input("g", dtype);
        inout("s0");
        inout("s1");
        inout("s2");
        break;
      case Kind::kNormPartial:
      case Kind::kScale:
        inout("t");
        break;
      case Kind::kNormFinal:
        b.output("y", DType::F32);
        break;
      case Kind::kZero:
        b.output("t", dtype);
        b.define("ZERO", glslLiteral(0, dtype));
        break;
    }
    if (isFloating(dtype)) b.define("ROUND(v)", roundMacro(dtype));
    return b.build(std::string(kernelFile("norm_rows.glsl")) + std::string(kernelFile("optim.comp")));
  });
}

// ---------------------------------------------------------------- tables

// What one dispatch walks: a table of entries and the tiles they own.
struct Wave {
  std::vector<Entry> entries;
  uint32_t tiles = 0;
};

// An entry's tensors, each once, and whether the kernel writes them. A group
// may name one tensor twice: each element is then read and written by one
// invocation, which is safe.
struct Use {
  uint64_t address;
  bool written;
};
std::vector<Use> usesOf(const Entry& e, uint32_t writes) {
  const bool t = writes & kWritesT, s = writes & kWritesStates;
  const Use all[] = {{e.t, t}, {e.g, false}, {e.s0, s}, {e.s1, s}, {e.s2, s}};
  std::vector<Use> out;
  for (const Use& u : all) {
    if (u.address == 0) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const Use& o) { return o.address == u.address; });
    if (it == out.end())
      out.push_back(u);
    else
      it->written |= u.written;
  }
  return out;
}

// Whether two entries share a tensor that one of them writes.
bool sharesWrittenTensor(const std::vector<Entry>& entries, uint32_t writes) {
  std::vector<Use> uses;
  for (const Entry& e : entries) {
    if (e.n == 0) continue;
    for (const Use& u : usesOf(e, writes)) uses.push_back(u);
  }
  std::sort(uses.begin(), uses.end(), [](const Use& a, const Use& b) { return a.address < b.address; });
  for (size_t i = 0, j = 0; i < uses.size(); i = j) {
    bool written = false;
    for (j = i; j < uses.size() && uses[j].address == uses[i].address; ++j) written |= uses[j].written;
    if (j - i > 1 && written) return true;
  }
  return false;
}

// Splits `entries` (in call order) into waves one dispatch each can run. An
// entry that writes a tensor the current wave uses, or uses one the wave
// writes, starts a new wave: a tensor given twice is then updated twice, in
// order, as PyTorch's loop would, instead of by two racing workgroups.
// Entries with no elements are left out.
std::vector<Wave> waves(const std::vector<Entry>& entries, uint32_t writes) {
  // Usually no tensor repeats and one wave takes everything; the sets below
  // are for the call that repeats one.
  const bool split = writes != 0 && sharesWrittenTensor(entries, writes);
  std::vector<Wave> out;
  std::unordered_set<uint64_t> used, written;
  for (const Entry& e : entries) {
    if (e.n == 0) continue;
    bool fresh = out.empty();
    if (split) {
      auto uses = usesOf(e, writes);
      fresh |= std::any_of(uses.begin(), uses.end(), [&](const Use& u) {
        return written.count(u.address) || (u.written && used.count(u.address));
      });
      if (fresh) {
        used.clear();
        written.clear();
      }
      for (const Use& u : uses) {
        used.insert(u.address);
        if (u.written) written.insert(u.address);
      }
    }
    if (fresh) out.emplace_back();
    Wave& w = out.back();
    Entry row = e;
    row.firstTile = w.tiles;
    w.tiles += (e.n + kTile - 1) / kTile;
    w.entries.push_back(row);
  }
  return out;
}

// Entries grouped by dtype, in order of first appearance: a kernel reads one dtype.
using ByDType = std::vector<std::pair<DType, std::vector<Entry>>>;

std::vector<Entry>& entriesOf(ByDType& groups, DType dtype) {
  for (auto& [d, entries] : groups) {
    if (d == dtype) return entries;
  }
  return groups.emplace_back(dtype, std::vector<Entry>{}).second;
}

// Dispatches `source` once per wave of `entries`; `push` carries the rest.
template <typename Push>
void dispatchWaves(Recorder& r, const KernelSource& source, Push push, const std::vector<Entry>& entries,
                   uint32_t writes) {
  for (const Wave& w : waves(entries, writes)) {
    push.table = r.params(w.entries);
    push.entries = uint32_t(w.entries.size());
    push.tiles = w.tiles;
    r.dispatch(source, push, std::min({w.tiles, kMaxGroups, r.maxGroups(0)}));
  }
}

const std::string kFloatList = "f32, f16 or bf16";

// ---------------------------------------------------------------- sgd, adam, adamw

class OptimizerStep final : public KernelTemplate {
 public:
  explicit OptimizerStep(OptimizerKind kind) : kind_(kind) {}

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    Config c = config(op, attrs);
    const auto& names = optimizerGroupNames(kind_);
    if (!op.variadic()) {
      // sgd(param, grad, momentum_buffer?): the optional state goes with an attribute.
      if (in.size() < c.groupSize) {
        throwInvalid(op.name + ": " + optionalReason(true) + " needs input '" + names.back() +
                     "' (a state tensor of param's shape and dtype)");
      }
      if (in.size() > c.groupSize) {
        throwInvalid(op.name + ": input '" + names.back() + "' is given, but " + optionalReason(false) +
                     "; leave it off");
      }
      checkGroup(op, in, 0, c.groupSize, "");
      return {};
    }
    if (in.size() % c.groupSize != 0) {
      std::string group;
      for (size_t k = 0; k < c.groupSize; ++k) group += (k ? ", " : "") + names[k];
      throwInvalid(op.name + ": input '" + op.inputs[0].name + "' holds " + std::to_string(in.size()) +
                   " tensors; expected groups of " + std::to_string(c.groupSize) + " (" + group +
                   "), so a multiple of " + std::to_string(c.groupSize));
    }
    for (size_t first = 0; first < in.size(); first += c.groupSize) {
      checkGroup(op, in, first, c.groupSize,
                 "group " + std::to_string(first / c.groupSize) + " of '" + op.inputs[0].name + "' (tensors[" +
                     std::to_string(first) + ".." + std::to_string(first + c.groupSize - 1) + "]): ");
    }
    return {};
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView>,
              const Attrs& attrs) const override {
    Config c = config(op, attrs);
    ByDType groups;
    for (size_t first = 0; first + c.groupSize <= in.size(); first += c.groupSize) {
      auto addr = [&](size_t k) { return k < c.groupSize ? in[first + k].buffer->deviceAddress() : 0; };
      Entry e{.t = addr(0),
              .g = addr(1),
              .s0 = addr(2),
              .s1 = addr(3),
              .s2 = addr(4),
              .n = uint32_t(in[first].desc.numel())};
      entriesOf(groups, in[first].desc.dtype).push_back(e);
    }
    for (const auto& [dtype, entries] : groups) {
      dispatchWaves(r, source(dtype), c.push, entries, kWritesT | kWritesStates);
    }
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override { return {&source(dtype)}; }

 private:
  struct Config {
    StepPush push{};
    size_t groupSize = 0;
  };

  bool sgd() const { return kind_ == OptimizerKind::kSgd; }

  const KernelSource& source(DType dtype) const { return kernel(variants_, sgd() ? Kind::kSgd : Kind::kAdam, dtype); }

  // Why the optional state is (needed = true) or is not used.
  std::string optionalReason(bool needed) const {
    if (sgd()) return needed ? "momentum != 0" : "momentum is 0 (plain SGD keeps no state)";
    return needed ? "amsgrad=true" : "amsgrad is false";
  }

  // Checks the attributes (PyTorch's rules) and turns them into the kernel's constants.
  Config config(const OpSpec& op, const Attrs& a) const {
    auto require = [&](const char* name, bool ok, const char* want) {
      if (!ok) throwInvalid(op.name + ": attribute '" + name + "' is " + num(a.getFloat(name)) + "; expected " + want);
    };
    int64_t step = a.getInt("step");
    if (step < 1) {
      throwInvalid(op.name + ": attribute 'step' is " + std::to_string(step) +
                   "; expected the 1-based number of this step (>= 1)");
    }
    double lr = a.getFloat("lr"), wd = a.getFloat("weight_decay");
    require("lr", lr >= 0, ">= 0");
    require("weight_decay", wd >= 0, ">= 0");
    Config c;
    StepPush& p = c.push;
    p.flags = a.getBool("maximize") ? kMaximize : 0;
    if (sgd()) {
      double momentum = a.getFloat("momentum"), dampening = a.getFloat("dampening");
      require("momentum", momentum >= 0, ">= 0");
      if (a.getBool("nesterov") && (momentum <= 0 || dampening != 0)) {
        throwInvalid(op.name + ": nesterov=true requires momentum > 0 and dampening 0; got momentum " + num(momentum) +
                     ", dampening " + num(dampening));
      }
      c.groupSize = momentum != 0 ? 3 : 2;
      p.lr = float(lr);
      p.weightDecay = float(wd);
      p.momentum = float(momentum);
      p.oneMinusDampening = float(1 - dampening);
      if (a.getBool("nesterov")) p.flags |= kNesterov;
      if (step == 1) p.flags |= kFirstStep;
      return c;
    }
    double beta1 = a.getFloat("beta1"), beta2 = a.getFloat("beta2"), eps = a.getFloat("eps");
    require("beta1", beta1 >= 0 && beta1 < 1, "a value in [0, 1)");
    require("beta2", beta2 >= 0 && beta2 < 1, "a value in [0, 1)");
    require("eps", eps >= 0, ">= 0");
    bool amsgrad = a.getBool("amsgrad");
    c.groupSize = amsgrad ? 5 : 4;
    // As _single_tensor_adam: the bias corrections in double, then f32.
    double bc1 = 1 - std::pow(beta1, double(step)), bc2 = 1 - std::pow(beta2, double(step));
    p.lr = float(lr / bc1);
    p.bc2Sqrt = float(std::sqrt(bc2));
    p.oneMinusBeta1 = float(1 - beta1);
    p.beta2 = float(beta2);
    p.oneMinusBeta2 = float(1 - beta2);
    p.eps = float(eps);
    if (kind_ == OptimizerKind::kAdamW) {
      p.decay = float(1 - lr * wd);
      p.flags |= kDecoupled;
    } else {
      p.weightDecay = float(wd);
    }
    if (amsgrad) p.flags |= kAmsgrad;
    return c;
  }

  // The group at in[first, first + size): every tensor has param's shape and a
  // floating dtype, param's. `where` prefixes messages about a group of a list.
  void checkGroup(const OpSpec& op, std::span<const TensorDesc> in, size_t first, size_t size,
                  const std::string& where) const {
    const auto& names = optimizerGroupNames(kind_);
    auto fail = [&](size_t k, const std::string& what) {
      std::string name = where.empty() ? "input '" + names[k] + "'" : "'" + names[k] + "'";
      throwInvalid(op.name + ": " + where + name + " " + what);
    };
    const TensorDesc& param = in[first];
    if (!isFloating(param.dtype)) fail(0, "has dtype " + dt(param.dtype) + "; expected " + kFloatList);
    const std::string like = where.empty() ? " like 'param'" : " like its 'param'";
    for (size_t k = 1; k < size; ++k) {
      const TensorDesc& t = in[first + k];
      if (t.dtype != param.dtype) fail(k, "has dtype " + dt(t.dtype) + "; expected " + dt(param.dtype) + like);
      if (t.shape != param.shape) {
        fail(k, "has shape " + shapeStr(t.shape) + "; expected " + shapeStr(param.shape) + like);
      }
    }
  }

  OptimizerKind kind_;
  KernelVariants variants_;
};

// ---------------------------------------------------------------- clip_grad_norm_

class ClipGradNorm final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    double p = attrs.getFloat("norm_type");
    if (!(p > 0)) {
      throwInvalid(op.name + ": attribute 'norm_type' is " + num(p) + "; expected a positive number or inf");
    }
    for (size_t i = 0; i < in.size(); ++i) {
      if (!isFloating(in[i].dtype)) {
        throwInvalid(op.name + ": input '" + op.inputName(i) + "' [" + std::to_string(i) + "] has dtype " +
                     dt(in[i].dtype) + "; expected " + kFloatList);
      }
    }
    return {TensorDesc{DType::F32, {}}};
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    ByDType groups;
    for (const auto& t : in) {
      entriesOf(groups, t.desc.dtype).push_back({.t = t.buffer->deviceAddress(), .n = uint32_t(t.desc.numel())});
    }
    // Pass 1 reads every grad, duplicates included (each counts, as in PyTorch): one wave per dtype.
    std::vector<std::pair<DType, Wave>> reads;
    uint32_t partials = 0;
    for (const auto& [dtype, entries] : groups) {
      auto w = waves(entries, 0);
      if (!w.empty()) reads.emplace_back(dtype, std::move(w.front()));
    }
    for (const auto& [dtype, w] : reads) partials += std::min({w.tiles, kMaxGroups, r.maxGroups(0)});
    auto scratch = r.scratch((uint64_t(partials) + 1) * sizeof(float));  // the partials, then the coefficient

    TablePush push{};
    push.partial = scratch->deviceAddress();
    push.partials = partials;
    push.normType = float(attrs.getFloat("norm_type"));
    push.maxNorm = float(attrs.getFloat("max_norm"));
    for (const auto& [dtype, w] : reads) {
      push.table = r.params(w.entries);
      push.entries = uint32_t(w.entries.size());
      push.tiles = w.tiles;
      uint32_t groupCount = std::min({w.tiles, kMaxGroups, r.maxGroups(0)});
      r.dispatch(kernel(variants_, Kind::kNormPartial, dtype), push, groupCount);
      push.partialBase += groupCount;
    }

    push.y = out[0].buffer->deviceAddress();
    if (attrs.getBool("error_if_nonfinite")) {
      push.errorIfNonfinite = 1;
      std::string name = op.name, order = num(attrs.getFloat("norm_type"));
      push.err = r.errorSlot([name, order](const uint32_t* words) {
        float total;
        std::memcpy(&total, &words[1], sizeof total);
        return name + ": the total norm of order " + order + " of the gradients is " +
               (std::isnan(total) ? "nan" : num(total)) +
               " (non-finite), so it cannot clip them; set error_if_nonfinite=false to scale them by it anyway";
      });
    }
    r.dispatch(kernel(variants_, Kind::kNormFinal, DType::F32), push, 1);

    for (const auto& [dtype, entries] : groups) {
      dispatchWaves(r, kernel(variants_, Kind::kScale, dtype), push, entries, kWritesT);
    }
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    return {&kernel(variants_, Kind::kNormPartial, dtype), &kernel(variants_, Kind::kNormFinal, DType::F32),
            &kernel(variants_, Kind::kScale, dtype)};
  }

 private:
  KernelVariants variants_;
};

// ---------------------------------------------------------------- zero_

class Zero final : public KernelTemplate {
 public:
  std::vector<TensorDesc> infer(const OpSpec&, std::span<const TensorDesc>, const Attrs&) const override { return {}; }

  void record(const OpSpec&, Recorder& r, std::span<const TensorView> in, std::span<const TensorView>,
              const Attrs&) const override {
    TablePush push{};
    std::vector<Entry> entries{{.t = in[0].buffer->deviceAddress(), .n = uint32_t(in[0].desc.numel())}};
    dispatchWaves(r, kernel(variants_, Kind::kZero, in[0].desc.dtype), push, entries, kWritesT);
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType dtype) const override {
    return {&kernel(variants_, Kind::kZero, dtype)};
  }

 private:
  KernelVariants variants_;
};

}  // namespace

const std::vector<std::string>& optimizerGroupNames(OptimizerKind kind) {
  static const std::vector<std::string> sgd = {"param", "grad", "momentum_buffer"};
  static const std::vector<std::string> adam = {"param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return kind == OptimizerKind::kSgd ? sgd : adam;
}

std::shared_ptr<const KernelTemplate> optimizerStepTemplate(OptimizerKind kind) {
  return std::make_shared<OptimizerStep>(kind);
}
std::shared_ptr<const KernelTemplate> clipGradNormTemplate() { return std::make_shared<ClipGradNorm>(); }
std::shared_ptr<const KernelTemplate> zeroTemplate() { return std::make_shared<Zero>(); }

}  // namespace tensord::compute
