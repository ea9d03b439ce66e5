// Session.call, pipelined, and the local-feeling op helpers.

#include "client/connection.h"
#include "client/wire.h"

namespace tensord {

namespace detail {

namespace {

// A call with outputs while a Batch is open, or any call while capturing a
// graph: held, to be sent with the others.
std::vector<Tensor> holdCall(const std::shared_ptr<Connection>& conn, std::string_view op,
                             const std::vector<Tensor>& inputs, const Attrs& attrs, size_t count) {
  HeldCall call;
  call.op = std::string(op);
  call.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor::Impl& impl = implOf(inputs[i], std::string(op) + ": input " + std::to_string(i));
    HeldInput& input = call.inputs.emplace_back();
    if (impl.held && !impl.held->sent && impl.conn == conn) {
      if (impl.held->call == HeldOutput::kParam) {
        input.param = true;  // a graph's input (Client::capture)
        input.call = impl.held->output;
      } else {
        input.earlier = true;  // an output of a call held with this one
        input.call = impl.held->call;
        input.output = impl.held->output;
      }
    } else {
      input.cap = capOf(impl);
    }
  }
  std::vector<Tensor> out;
  for (auto& held : conn->hold(std::move(call), count)) {
    auto impl = std::make_shared<Tensor::Impl>();
    impl->conn = conn;
    impl->held = std::move(held);
    out.push_back(Client::Impl::wrap(std::move(impl)));
  }
  recordCall(conn, op, inputs, attrs, out);
  return out;
}

}  // namespace

std::vector<Tensor> callOp(const std::shared_ptr<Connection>& conn, std::string_view op,
                           const std::vector<Tensor>& inputs, const Attrs& attrs, size_t count) {
  if ((count > 0 && conn->batching()) || conn->capturing()) return holdCall(conn, op, inputs, attrs, count);
  std::vector<proto::Tensor::Client> caps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    proto::Tensor::Client cap = capOf(implOf(inputs[i], std::string(op) + ": input " + std::to_string(i)));
    caps.push_back(kj::mv(cap));
  }
  return conn->guard([&] {
    auto request = conn->session().callRequest();
    request.setOp(std::string(op));
    wire::setInputsAndAttrs(request, caps, attrs);
    auto call = request.send();
    ++conn->stats.calls;
    if (count == 0) {
      // Nothing to hand back: the call runs on; an error is thrown by the
      // next blocking request.
      conn->addTask(call.ignoreResult());
      conn->flush();
      return std::vector<Tensor>{};
    }

    // Only struct fields pipeline: the first output through `output`, the
    // others through `results.get(i)`, all before the daemon answers.
    std::vector<proto::Tensor::Client> outputs;
    outputs.push_back(call.getOutput());
    if (count > 1) {
      auto results = call.getResults();
      for (size_t i = 1; i < count; ++i) {
        auto get = results.getRequest();
        get.setIndex(uint32_t(i));
        outputs.push_back(get.send().getTensor());
      }
    }
    auto origin = std::make_shared<PendingCall>(call.then([](capnp::Response<proto::Session::CallResults>&&) {}));
    std::vector<Tensor> out;
    for (auto& cap : outputs) out.push_back(makeTensor(conn, origin, std::move(cap)));
    recordCall(conn, op, inputs, attrs, out);
    conn->flush();
    return out;
  });
}

}  // namespace detail

namespace {

Tensor apply(std::string_view op, std::vector<Tensor> inputs, Attrs attrs = {}) {
  auto& first = detail::implOf(inputs.front(), std::string(op) + ": input 0");
  return detail::callOp(first.conn, op, inputs, attrs, 1).front();
}

}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) { return apply("add", {a, b}); }
Tensor operator-(const Tensor& a, const Tensor& b) { return apply("sub", {a, b}); }
Tensor operator*(const Tensor& a, const Tensor& b) { return apply("mul", {a, b}); }
Tensor operator/(const Tensor& a, const Tensor& b) { return apply("div", {a, b}); }
Tensor operator-(const Tensor& x) { return apply("neg", {x}); }
Tensor matmul(const Tensor& a, const Tensor& b) { return apply("matmul", {a, b}); }
Tensor relu(const Tensor& x) { return apply("relu", {x}); }
Tensor exp(const Tensor& x) { return apply("exp", {x}); }
Tensor log(const Tensor& x) { return apply("log", {x}); }

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return apply("sum", {x}, {{"dim", dim}, {"keepdim", keepdim}});
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return apply("mean", {x}, {{"dim", dim}, {"keepdim", keepdim}});
}

}  // namespace tensord
