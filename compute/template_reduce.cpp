// The reduction template (see template_reduce.h) and the GLSL it generates
// from kernels/reduce.comp.

#include "compute/template_reduce.h"

#include <algorithm>
#include <cmath>

#include "compute/error.h"
#include "compute/glsl.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

struct Push {
  uint64_t x, y, z, st, meta;
  uint32_t n, d, s, chunk, outRank, redRank, final_;
  float count, param;
  uint32_t wide;      // reduce.comp's LOADA4 applies
  uint64_t counters;  // reduce.comp's p.counters: pass 1 finishes the outputs
};

// Bytes per partial state, the most reduce.comp stores field by field (an
// index and three int64 accumulators).
constexpr uint64_t kStateBytes = 32;

// Who takes one work item of reduce.comp (its TEAM).
enum class Team { kThread, kSubgroup, kGroup };

const char* teamName(Team t) {
  switch (t) {
    case Team::kThread: return "THREAD";
    case Team::kSubgroup: return "SUBGROUP";
    case Team::kGroup: return "GROUP";
  }
  return "THREAD";
}

// Sizing. A big GPU holds ~1000 workgroups of 256 (~270K threads) at once;
// host code doesn't know the subgroup size, so it sizes for 32.
constexpr uint64_t kGroupSize = 256;
constexpr uint64_t kAssumedSubgroup = 32;
constexpr uint64_t kTargetGroups = 4096;      // split long rows until the grid has this many workgroups
constexpr uint64_t kMinGroupChunk = 8192;     // elements per workgroup, at least, when splitting
constexpr uint64_t kGroupRow = 4096;          // contiguous rows this long take a workgroup
constexpr uint64_t kSubgroupRow = 32;         // contiguous rows this long (and shorter than kGroupRow) a subgroup
constexpr uint64_t kTargetThreads = 262144;   // split strided reductions until this many threads run
constexpr uint64_t kMinThreadChunk = 64;      // elements per thread, at least, when splitting

bool intDimOp(ReduceKind k) {
  return k == ReduceKind::kMax || k == ReduceKind::kMin || k == ReduceKind::kArgmax || k == ReduceKind::kArgmin;
}

bool needsElements(ReduceKind k) {
  switch (k) {
    case ReduceKind::kMax:
    case ReduceKind::kMin:
    case ReduceKind::kAmax:
    case ReduceKind::kAmin:
    case ReduceKind::kArgmax:
    case ReduceKind::kArgmin: return true;
    default: return false;
  }
}

// The input split into kept (output) dims and reduced dims, each coalesced.
struct Plan {
  Shape outShape;       // the op's output shape (keepdim applied)
  Shape outDims, redDims;
  std::vector<int64_t> outStrides, redStrides;  // input strides
  int64_t n = 1, d = 1;
  bool twoOutputs = false;
};

class Reduce final : public KernelTemplate {
 public:
  explicit Reduce(ReduceKind kind) : kind_(kind) {}

  Plan plan(const OpSpec& op, const TensorDesc& in, const Attrs& attrs) const {
    Plan pl;
    const size_t rank = in.shape.size();
    std::vector<bool> mask;
    bool keepdim = attrs.getBool("keepdim");
    if (intDimOp(kind_)) {
      if (attrs.has("dim")) {
        mask = dimMask(op.name, {attrs.getInt("dim")}, rank, false);
        pl.twoOutputs = kind_ == ReduceKind::kMax || kind_ == ReduceKind::kMin;
      } else {
        mask.assign(rank, true);
        if (kind_ == ReduceKind::kMax || kind_ == ReduceKind::kMin) keepdim = false;
      }
    } else {
      mask = dimMask(op.name, attrs.getInts("dim"), rank);
    }
    auto strides = contiguousStrides(in.shape);
    Shape outDims, redDims;
    std::vector<int64_t> outStrides, redStrides;
    for (size_t i = 0; i < rank; ++i) {
      if (mask[i]) {
        redDims.push_back(in.shape[i]);
        redStrides.push_back(strides[i]);
        pl.d *= in.shape[i];
        if (keepdim) pl.outShape.push_back(1);
      } else {
        outDims.push_back(in.shape[i]);
        outStrides.push_back(strides[i]);
        pl.n *= in.shape[i];
        pl.outShape.push_back(in.shape[i]);
      }
    }
    Coalesced co = coalesce(outDims, {outStrides});
    Coalesced cr = coalesce(redDims, {redStrides});
    pl.outDims = co.shape;
    pl.outStrides = co.strides[0];
    pl.redDims = cr.shape;
    pl.redStrides = cr.strides[0];
    if (needsElements(kind_) && pl.d == 0 && pl.n > 0) {
      throwInvalid(op.name + ": input " + in.str() +
                   " has no elements to reduce over the given dim(s); " + op.name +
                   " has no identity (give a non-empty dim)");
    }
    return pl;
  }

  DType outDType(DType in) const {
    switch (kind_) {
      case ReduceKind::kSum:
      case ReduceKind::kProd: return isFloating(in) ? in : DType::I64;
      case ReduceKind::kArgmax:
      case ReduceKind::kArgmin:
      case ReduceKind::kCountNonzero: return DType::I64;
      case ReduceKind::kAll:
      case ReduceKind::kAny: return DType::Bool;
      default: return in;
    }
  }

  std::vector<TensorDesc> infer(const OpSpec& op, std::span<const TensorDesc> in, const Attrs& attrs) const override {
    Plan pl = plan(op, in[0], attrs);
    DType out = outDType(in[0].dtype);
    if (kind_ == ReduceKind::kVarMean) return {TensorDesc{out, pl.outShape}, TensorDesc{out, pl.outShape}};
    if (pl.twoOutputs) return {TensorDesc{out, pl.outShape}, TensorDesc{DType::I64, pl.outShape}};
    return {TensorDesc{out, pl.outShape}};
  }

  const KernelSource& source(const OpSpec& op, DType dtype, bool twoOutputs, int pass, Team team) const {
    std::string key = op.name + "|" + std::string(dtypeName(dtype)) + "|" + (twoOutputs ? "2" : "1") + "|p" +
                      std::to_string(pass) + "|" + teamName(team);
    return variants_.get(key, [&] {
      DType acc = isFloating(dtype) ? DType::F32 : DType::I64;
      GlslBuilder b(dtype);
      b.input("x", dtype);
      std::string opDef, finY = "s.x", finZ;
      int fields = 1;  // the St fields the op uses (reduce.comp's ST_FIELDS): 1 x, 2 y, 4 z, 8 i
      DType yValue = acc, zDType = DType::I64, zValue = DType::I64;
      switch (kind_) {
        case ReduceKind::kSum: opDef = "OP_SUM"; break;
        case ReduceKind::kMean: opDef = "OP_SUM"; finY = "s.x / p.count"; break;
        case ReduceKind::kProd: opDef = "OP_PROD"; break;
        case ReduceKind::kAmax: opDef = "OP_MAX"; break;
        case ReduceKind::kAmin: opDef = "OP_MIN"; break;
        case ReduceKind::kMax:
        case ReduceKind::kMin:
          if (twoOutputs) {
            opDef = kind_ == ReduceKind::kMax ? "OP_ARGMAX" : "OP_ARGMIN";
            finZ = "s.i";
            fields = 1 | 8;
          } else {
            opDef = kind_ == ReduceKind::kMax ? "OP_MAX" : "OP_MIN";
          }
          break;
        case ReduceKind::kArgmax:
        case ReduceKind::kArgmin:
          opDef = kind_ == ReduceKind::kArgmax ? "OP_ARGMAX" : "OP_ARGMIN";
          finY = "s.i";
          fields = 1 | 8;
          yValue = DType::I64;
          break;
        case ReduceKind::kVar: opDef = "OP_WELFORD"; finY = "welford_var(s)"; fields = 7; break;
        case ReduceKind::kStd: opDef = "OP_WELFORD"; finY = "sqrt(welford_var(s))"; fields = 7; break;
        case ReduceKind::kVarMean:
          opDef = "OP_WELFORD";
          fields = 7;
          finY = "welford_var(s)";
          finZ = "s.x == 0.0 ? uintBitsToFloat(0x7fc00000u) : s.y";  // the mean of nothing is NaN
          zDType = dtype;
          zValue = DType::F32;
          break;
        case ReduceKind::kNorm: opDef = "OP_NORM"; finY = "norm_fin(s)"; break;
        case ReduceKind::kLogsumexp: opDef = "OP_LSE"; finY = "lse_fin(s)"; fields = 1 | 2; break;
        case ReduceKind::kAll: opDef = "OP_ALL"; finY = "(s.i != 0l)"; yValue = DType::Bool; fields = 8; break;
        case ReduceKind::kAny: opDef = "OP_ANY"; finY = "(s.i != 0l)"; yValue = DType::Bool; fields = 8; break;
        case ReduceKind::kCountNonzero: opDef = "OP_COUNT"; finY = "s.i"; yValue = DType::I64; fields = 8; break;
      }
      b.output("y", outDType(dtype), yValue);
      b.output("z", zDType, zValue);
      if (!finZ.empty()) {
        b.define("HAS_Z");
        b.define("FIN_Z(s)", "(" + finZ + ")");
      }
      b.define("FIN_Y(s)", "(" + finY + ")");
      b.define(opDef);
      b.define("A", std::string(glslType(acc)));
      if (acc == DType::F32) b.define("ACC_FLOAT");
      b.define("LOADA(i)", glslConvert("LOAD_x(i)", dtype, acc));
      b.define("ST_FIELDS", std::to_string(fields));
      b.define("PASS", std::to_string(pass));
      b.define("TEAM", std::string("TEAM_") + teamName(team));
      // Enough loads in flight per invocation: 16-32 bytes.
      b.define("UNROLL", dtypeSize(dtype) <= 2 ? "8u" : "4u");
      // Partial states loaded at once when they are combined: 16 where a
      // state is one f32 (sum, mean, amax, ...). On an H100 the last of 4096
      // workgroups combining a whole-tensor sum's states took 1-2% less with
      // 16 than with 4; argmax's states (a value and an index) did better with 4.
      b.define("CUNROLL", fields == 1 && acc == DType::F32 ? "16u" : "4u");
      if (vectorizable(dtype, pass, team)) {
        b.define("VEC4_TYPE", glslVec4Type(dtype)).define("VEC4_ALIGN", glslVec4Align(dtype));
        b.define("LOADA4(q)", glslLoad4("X4(uint64_t(p.x)).v[q]", dtype));
      }
      return b.build(kernelFile("reduce.comp"));
    });
  }

  // Whether pass 1 of a team over contiguous rows gets reduce.comp's 4-wide
  // loads (LOADA4): floats stored as f32, f16 or bf16.
  static bool vectorizable(DType dtype, int pass, Team team) {
    return pass == 1 && team != Team::kThread && storedAsFloat(dtype);
  }

  static void grid(const Recorder& r, uint64_t groups, uint32_t* gx, uint32_t* gy) {
    groups = std::max<uint64_t>(groups, 1);
    *gx = uint32_t(std::min<uint64_t>(groups, r.maxGroups(0)));
    *gy = uint32_t(std::min<uint64_t>((groups + *gx - 1) / *gx, r.maxGroups(1)));
  }

  // Workgroups for `items` taken by `team`s (the kernels loop over what a
  // capped grid leaves).
  static uint64_t groupsFor(Team team, uint64_t items) {
    switch (team) {
      case Team::kGroup: return items;
      case Team::kSubgroup: return (items + kGroupSize / kAssumedSubgroup - 1) / (kGroupSize / kAssumedSubgroup);
      case Team::kThread: return (items + kGroupSize - 1) / kGroupSize;
    }
    return items;
  }

  void record(const OpSpec& op, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    Plan pl = plan(op, in[0].desc, attrs);
    if (pl.n == 0) return;
    DType dtype = in[0].desc.dtype;
    uint64_t n = uint64_t(pl.n), d = uint64_t(pl.d);
    // Contiguous rows (the innermost reduced dim has stride 1): a team of
    // invocations per row reads it coalesced, a workgroup for long rows, a
    // subgroup for short ones. Else (strided "columns") a thread per output,
    // neighbouring threads on neighbouring outputs, reads coalesced across
    // the team of outputs. Rows and columns too few to fill the GPU are split
    // into chunks whose partial states a second pass combines.
    bool contiguous = !pl.redDims.empty() && pl.redStrides.back() == 1;
    Team team = Team::kThread;
    uint64_t splits = 1;
    if (contiguous && d >= kGroupRow) {
      team = Team::kGroup;
      splits = std::min<uint64_t>((kTargetGroups + n - 1) / n, d / kMinGroupChunk);
    } else if (contiguous && d >= kSubgroupRow) {
      team = Team::kSubgroup;
    } else {
      splits = std::min<uint64_t>((kTargetThreads + n - 1) / n, d / kMinThreadChunk);
    }
    splits = std::max<uint64_t>(splits, 1);
    // 4-wide loads: rows of whole groups of 4 that start on one, in memory
    // aligned to 4 elements, and chunks of whole groups.
    bool wide = vectorizable(dtype, 1, team) && pl.redDims.size() == 1 && d > 0 && d % 4 == 0 &&
                in[0].buffer->deviceAddress() % (4 * dtypeSize(dtype)) == 0;
    for (int64_t stride : pl.outStrides) wide = wide && stride % 4 == 0;
    uint64_t chunk = d == 0 ? 0 : (d + splits - 1) / splits;
    if (wide) chunk = (chunk + 3) / 4 * 4;
    if (chunk) splits = (d + chunk - 1) / chunk;

    std::vector<uint32_t> meta;
    for (int64_t v : pl.outDims) meta.push_back(uint32_t(v));
    for (int64_t v : pl.outStrides) meta.push_back(uint32_t(v));
    for (int64_t v : pl.redDims) meta.push_back(uint32_t(v));
    for (int64_t v : pl.redStrides) meta.push_back(uint32_t(v));
    meta.push_back(0);  // never empty

    Push push{};
    push.x = in[0].desc.numel() ? in[0].buffer->deviceAddress() : 0;
    push.y = out[0].buffer->deviceAddress();
    push.z = out.size() > 1 ? out[1].buffer->deviceAddress() : 0;
    push.meta = r.params(meta);
    push.n = uint32_t(n);
    push.d = uint32_t(d);
    push.s = uint32_t(splits);
    push.chunk = uint32_t(chunk);
    push.outRank = uint32_t(pl.outDims.size());
    push.redRank = uint32_t(pl.redDims.size());
    push.final_ = splits == 1 ? 1 : 0;
    push.wide = wide ? 1 : 0;
    push.count = float(d);
    push.param = 0;
    if (kind_ == ReduceKind::kVar || kind_ == ReduceKind::kStd || kind_ == ReduceKind::kVarMean) {
      push.param = float(attrs.getFloat("correction"));
    } else if (kind_ == ReduceKind::kNorm) {
      push.param = float(attrs.getFloat("p"));
    }
    std::shared_ptr<Buffer> states;
    if (splits > 1) {
      states = r.scratch(n * splits * kStateBytes);
      push.st = states->deviceAddress();
    }
    // A workgroup per split: the last one of an output to finish combines
    // its states (reduce.comp, p.counters), so no second pass runs. On an
    // H100 (op_bench, alternately in one lease) whole-tensor sums of
    // 8192x8192 went from 2809-2816 GB/s to 2838-2846, and to 2852-2858 with
    // kTargetGroups 4096 (2048 before) and 16 states loaded at once; sums of
    // 64 rows of 4M from 2942-2951 to 2988-2992. Counters zeroed on the
    // device (a fill and its barrier) instead of in params() memory cost
    // more than the second pass did: 2668-2676.
    const bool lastCombines = splits > 1 && team == Team::kGroup;
    if (lastCombines) push.counters = r.zeroedWords(uint32_t(n));
    uint32_t gx, gy;
    grid(r, groupsFor(team, n * splits), &gx, &gy);
    r.dispatch(source(op, dtype, pl.twoOutputs, 1, team), push, gx, gy);
    if (splits > 1 && !lastCombines) {
      // Many partial states per output: a workgroup per output; few: a thread.
      Team team2 = splits >= 64 ? Team::kGroup : Team::kThread;
      grid(r, groupsFor(team2, n), &gx, &gy);
      r.dispatch(source(op, dtype, pl.twoOutputs, 2, team2), push, gx, gy);
    }
  }

  std::vector<const KernelSource*> variants(const OpSpec& op, DType dtype) const override {
    std::vector<const KernelSource*> out;
    bool two = kind_ == ReduceKind::kMax || kind_ == ReduceKind::kMin;
    for (int outputs = 1; outputs <= (two ? 2 : 1); ++outputs) {
      for (Team team : {Team::kThread, Team::kSubgroup, Team::kGroup}) {
        out.push_back(&source(op, dtype, outputs == 2, 1, team));
      }
      for (Team team : {Team::kThread, Team::kGroup}) out.push_back(&source(op, dtype, outputs == 2, 2, team));
    }
    return out;
  }

 private:
  ReduceKind kind_;
  KernelVariants variants_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> reduce(ReduceKind kind) { return std::make_shared<Reduce>(kind); }

}  // namespace tensord::compute
