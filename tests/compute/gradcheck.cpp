#include "tests/compute/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "compute/op_spec.h"

namespace tensord::compute::testing {

namespace {

std::vector<std::string>& registry() {
  static std::vector<std::string> ops;
  return ops;
}

std::mt19937& rng() { return EngineTest::rngForTests(); }

HostTensor draw(const GradInput& in) {
  int64_t n = 1;
  for (auto d : in.shape) n *= d;
  std::vector<double> v(size_t(n), 0.0);
  std::uniform_real_distribution<double> u(0, 1);
  switch (in.kind) {
    case GradInput::Kind::kUniform:
      for (auto& x : v) x = in.lo + (in.hi - in.lo) * u(rng());
      break;
    case GradInput::Kind::kDistinct:
      for (size_t i = 0; i < v.size(); ++i) v[i] = in.lo + (in.hi - in.lo) * (double(i) + 0.5) / double(v.size());
      std::shuffle(v.begin(), v.end(), rng());
      break;
    case GradInput::Kind::kAwayFromZero:
      for (auto& x : v) x = (u(rng()) < 0.5 ? -1 : 1) * (in.lo + (in.hi - in.lo) * u(rng()));
      break;
    case GradInput::Kind::kNonInteger: {
      std::uniform_int_distribution<int64_t> k(int64_t(in.lo), int64_t(in.hi) - 1);
      for (auto& x : v) x = double(k(rng())) + 0.2 + 0.6 * u(rng());
      break;
    }
    case GradInput::Kind::kIndex: {
      std::uniform_int_distribution<int64_t> k(int64_t(in.lo), int64_t(in.hi) - 1);
      for (auto& x : v) x = double(k(rng()));
      return makeTensor(in.dtype == DType::F32 ? DType::I64 : in.dtype, in.shape, std::move(v));
    }
    case GradInput::Kind::kMask:
      for (auto& x : v) x = u(rng()) < 0.5 ? 1 : 0;
      return makeTensor(DType::Bool, in.shape, std::move(v));
    case GradInput::Kind::kValues:
      v = in.values;
      break;
  }
  return makeTensor(in.dtype, in.shape, std::move(v));
}

bool isFloat(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }

std::string describe(const GradCase& c) {
  std::ostringstream s;
  s << c.op << "(";
  for (size_t i = 0; i < c.inputs.size(); ++i) s << (i ? ", " : "") << dimsName(c.inputs[i].shape);
  for (const auto& [k, v] : c.attrs) s << ", " << k << "=...";
  s << ")";
  return s.str();
}

}  // namespace

bool registerGradCases(const std::vector<GradCase>& cases) {
  for (const auto& c : cases) registry().push_back(c.op);
  return true;
}

const std::vector<std::string>& gradCheckedOps() { return registry(); }

void GradcheckTest::check(const GradCase& c) {
  SCOPED_TRACE(describe(c));
  const OpSpec* fwd = engine().ops().find(c.op);
  ASSERT_NE(fwd, nullptr) << "no op " << c.op;
  ASSERT_FALSE(fwd->backward.empty()) << c.op << " has no backward op";
  const OpSpec* bwd = engine().ops().find(fwd->backward);
  ASSERT_NE(bwd, nullptr);

  std::vector<HostTensor> x;
  for (const auto& in : c.inputs) x.push_back(draw(in));
  std::vector<HostTensor> out = call(c.op, x, c.attrs);

  // Cotangents for the float outputs.
  std::vector<HostTensor> r(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (isFloat(out[k].dtype)) r[k] = randomTensor(out[k].dtype, out[k].shape, -1, 1);
  }
  auto loss = [&](const std::vector<HostTensor>& inputs, double* magnitude) {
    auto o = call(c.op, inputs, c.attrs);
    double l = 0, m = 0;
    for (size_t k = 0; k < o.size(); ++k) {
      if (r[k].values.empty()) continue;
      for (size_t j = 0; j < o[k].values.size(); ++j) {
        l += r[k].values[j] * o[k].values[j];
        m += std::abs(r[k].values[j] * o[k].values[j]);
      }
    }
    if (magnitude) *magnitude = m;
    return l;
  };

  // The backward call, by the convention: inputs by name, outputs per
  // differentiable input that was given.
  std::vector<HostTensor> bin;
  for (const InputSpec& spec : bwd->inputs) {
    std::vector<HostTensor> got;
    if (spec.name == "grad") {
      for (size_t k = 0; k < (spec.variadic ? out.size() : 1); ++k) got.push_back(r[k]);
    } else if (spec.name.rfind("grad_", 0) == 0) {
      for (size_t k = 0; k < out.size() && k < fwd->outputs.size(); ++k) {
        if (fwd->outputs[k] == spec.name.substr(5)) got.push_back(r[k]);
      }
    } else {
      for (size_t i = 0; i < x.size(); ++i) {
        if (fwd->inputName(i) == spec.name) got.push_back(x[i]);
      }
      for (size_t k = 0; k < out.size() && k < fwd->outputs.size(); ++k) {
        if (fwd->outputs[k] == spec.name) got.push_back(out[k]);
      }
    }
    if (got.empty()) {
      ASSERT_TRUE(spec.optional) << bwd->name << " needs '" << spec.name << "', which the forward call did not have";
      break;
    }
    for (auto& t : got) bin.push_back(t);
  }
  std::vector<HostTensor> grads = call(bwd->name, bin, c.attrs);

  std::vector<size_t> gradOf;  // forward input index of each backward output
  for (const auto& o : bwd->outputs) {
    for (size_t i = 0; i < x.size(); ++i) {
      if ("grad_" + fwd->inputName(i) == o) gradOf.push_back(i);
    }
  }
  ASSERT_EQ(grads.size(), gradOf.size()) << bwd->name << " returned " << grads.size() << " gradients";

  std::uniform_real_distribution<double> u(-1, 1);
  for (size_t gi = 0; gi < grads.size(); ++gi) {
    const size_t i = gradOf[gi];
    const HostTensor& g = grads[gi];
    if (!isFloat(x[i].dtype)) continue;
    ASSERT_EQ(g.shape, x[i].shape) << "gradient of input " << i << " (" << fwd->inputName(i) << ") has the wrong shape";
    const int64_t n = x[i].numel();
    if (n == 0) continue;
    const double range = std::max(1.0, std::abs(c.inputs[i].hi - c.inputs[i].lo) / 2);
    for (int dir = 0; dir < 4; ++dir) {
      std::vector<double> v(size_t(n), 0.0);
      if (dir < 2) {
        for (auto& e : v) e = u(rng());
      } else {
        v[size_t(std::uniform_int_distribution<int64_t>(0, n - 1)(rng()))] = 1;
      }
      std::vector<HostTensor> xp = x, xm = x;
      for (int64_t j = 0; j < n; ++j) {
        xp[i].values[size_t(j)] += c.h * range * v[size_t(j)];
        xm[i].values[size_t(j)] -= c.h * range * v[size_t(j)];
      }
      xp[i] = makeTensor(x[i].dtype, x[i].shape, xp[i].values);
      xm[i] = makeTensor(x[i].dtype, x[i].shape, xm[i].values);
      double mp = 0, mm = 0;
      const double numeric = loss(xp, &mp) - loss(xm, &mm);
      double analytic = 0, scale = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double dx = xp[i].values[size_t(j)] - xm[i].values[size_t(j)];
        analytic += g.values[size_t(j)] * dx;
        scale += std::abs(g.values[size_t(j)] * dx);
      }
      const double tol = c.rtol * scale + 1e-5 * std::max(mp, mm);
      EXPECT_NEAR(numeric, analytic, tol) << "input " << i << " (" << fwd->inputName(i) << "), direction "
                                          << (dir < 2 ? "dense" : "one element") << " #" << dir;
    }
  }
}

}  // namespace tensord::compute::testing
