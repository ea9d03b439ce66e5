// Graphs: Client::capture records calls made on placeholders the way a
// Batch holds them, sends them as Session.graphCreate, and Graph::run runs
// them with one request.

#include "client/connection.h"
#include "client/wire.h"

namespace tensord {

struct Graph::Impl {
  std::shared_ptr<detail::Connection> conn;  // declared first: destroyed after the capability
  proto::Graph::Client cap = nullptr;
  size_t inputs = 0;
  size_t outputs = 0;
  size_t calls = 0;
  bool runOutput = false;  // run's results carry the first output (protocol 9)
};

namespace {

// Placeholders and results of a capture that outlive it point here.
kj::Exception madeWhileCapturing() {
  return KJ_EXCEPTION(FAILED, "capture: this tensor was made while capturing a graph; run the graph to compute it");
}

}  // namespace

Graph Client::capture(const std::vector<GraphInput>& inputs,
                      const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body) {
  const std::shared_ptr<detail::Connection>& conn = impl_->conn;
  if (conn->capturing()) throw Error(Error::Kind::kFailed, "capture: a capture is already running on this client");
  NoGrad noGrad;  // a graph records no autograd history
  std::vector<std::shared_ptr<detail::HeldOutput>> placeholders;
  std::vector<Tensor> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto held = std::make_shared<detail::HeldOutput>();
    held->call = detail::HeldOutput::kParam;
    held->output = uint32_t(i);
    placeholders.push_back(held);
    auto impl = std::make_shared<Tensor::Impl>();
    impl->conn = conn;
    impl->held = std::move(held);
    args.push_back(Impl::wrap(std::move(impl)));
  }

  std::vector<detail::HeldCall> calls;
  // Whatever was made inside stays a placeholder.
  auto retire = [&] {
    for (auto& held : placeholders) {
      held->sent = true;
      held->cap = proto::Tensor::Client(capnp::newBrokenCap(madeWhileCapturing()));
    }
    for (auto& call : calls) {
      for (auto& weak : call.outputs) {
        if (auto held = weak.lock()) {
          held->sent = true;
          held->cap = proto::Tensor::Client(capnp::newBrokenCap(madeWhileCapturing()));
        }
      }
    }
  };
  conn->beginCapture();
  std::vector<Tensor> results;
  try {
    results = body(args);
  } catch (...) {
    calls = conn->endCapture();
    retire();
    throw;
  }
  calls = conn->endCapture();

  std::vector<std::pair<uint32_t, uint32_t>> outputs;
  for (size_t k = 0; k < results.size(); ++k) {
    const auto& impl = Impl::unwrap(results[k]);
    if (!impl || !impl->held || impl->held->sent || impl->conn != conn ||
        impl->held->call == detail::HeldOutput::kParam) {
      retire();
      throw Error(Error::Kind::kFailed, "capture: output " + std::to_string(k) +
                                            " is not the result of a call made in the capture (an input, a null "
                                            "tensor or a tensor made before it)");
    }
    outputs.emplace_back(impl->held->call, impl->held->output);
  }
  if (calls.empty()) {
    retire();
    throw Error(Error::Kind::kFailed, "capture: the body made no calls");
  }

  auto graph = std::make_shared<Graph::Impl>();
  graph->conn = conn;
  graph->inputs = inputs.size();
  graph->outputs = outputs.size();
  graph->calls = calls.size();
  try {
    conn->blocking([&] {
      auto request = conn->session().graphCreateRequest();
      auto params = request.initParams(uint32_t(inputs.size()));
      for (size_t i = 0; i < inputs.size(); ++i) {
        params[uint32_t(i)].setDtype(wire::toWire(inputs[i].dtype));
        auto shape = params[uint32_t(i)].initShape(uint32_t(inputs[i].shape.size()));
        for (size_t d = 0; d < inputs[i].shape.size(); ++d) shape.set(uint32_t(d), inputs[i].shape[d]);
      }
      detail::Connection::encodeCalls(request.initCalls(uint32_t(calls.size())), calls);
      auto out = request.initOutputs(uint32_t(outputs.size()));
      for (size_t k = 0; k < outputs.size(); ++k) {
        out[uint32_t(k)].setCall(outputs[k].first);
        out[uint32_t(k)].setOutput(outputs[k].second);
      }
      auto response = conn->wait(request.send());
      graph->cap = response.getGraph();
      graph->runOutput = response.getRunReturnsOutput();
    });
  } catch (...) {
    retire();
    throw;
  }
  retire();
  return Graph(std::move(graph));
}

std::vector<Tensor> Graph::run(const std::vector<Tensor>& inputs) const {
  if (!impl_) throw Error(Error::Kind::kFailed, "Graph::run: the graph is null (default-constructed)");
  const auto& conn = impl_->conn;
  if (inputs.size() != impl_->inputs) {
    throw Error(Error::Kind::kFailed, "Graph::run: " + std::to_string(inputs.size()) + " input(s); the graph takes " +
                                          std::to_string(impl_->inputs));
  }
  std::vector<proto::Tensor::Client> caps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    proto::Tensor::Client cap = detail::capOf(detail::implOf(inputs[i], "Graph::run: input " + std::to_string(i)));
    caps.push_back(kj::mv(cap));
  }
  conn->sendHeld();  // a batch's calls go first
  return conn->guard([&] {
    auto request = impl_->cap.runRequest();
    auto list = request.initInputs(uint32_t(caps.size()));
    for (size_t i = 0; i < caps.size(); ++i) list.set(uint32_t(i), caps[i]);
    auto sent = request.send();
    conn->stats.calls += impl_->calls;  // each captured call counts, as in a Batch
    auto results = sent.getResults();
    std::vector<proto::Tensor::Client> outputs;
    if (impl_->runOutput && impl_->outputs > 0) outputs.push_back(sent.getOutput());
    for (size_t k = outputs.size(); k < impl_->outputs; ++k) {
      auto get = results.getRequest(capnp::MessageSize{4, 0});
      get.setIndex(uint32_t(k));
      outputs.push_back(get.send().getTensor());
    }
    if (impl_->outputs == 0) {
      // Nothing to hand back (a graph of in-place calls): the run goes on,
      // and its error is thrown by the next blocking request, as a call's.
      conn->addTask(sent.ignoreResult());
      conn->flush();
      return std::vector<Tensor>{};
    }
    auto origin = std::make_shared<detail::PendingCall>(sent.then([](capnp::Response<proto::Graph::RunResults>&&) {}));
    std::vector<Tensor> out;
    for (auto& cap : outputs) out.push_back(detail::makeTensor(conn, origin, std::move(cap)));
    conn->flush();
    return out;
  });
}

size_t Graph::inputs() const { return impl_ ? impl_->inputs : 0; }
size_t Graph::outputs() const { return impl_ ? impl_->outputs : 0; }
size_t Graph::calls() const { return impl_ ? impl_->calls : 0; }

size_t Graph::kernels() const {
  if (!impl_) throw Error(Error::Kind::kFailed, "Graph::kernels: the graph is null (default-constructed)");
  return impl_->conn->blocking([&] { return size_t(impl_->conn->wait(impl_->cap.infoRequest().send()).getKernels()); });
}

}  // namespace tensord
