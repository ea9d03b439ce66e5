// tensord._core: the C++ client library (client/include/tensord/) bound for
// Python. This layer is thin on purpose: it converts types, releases the GIL
// around everything that may wait on the network, maps tensord::Error onto
// Python exceptions and enforces the client's thread rule. The PyTorch-like
// surface (operators, indexing, the op namespace, nn, optim) is the pure
// Python package next to it (tensord/).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// Besides the public API, two internal pieces of the client library: a
// download that returns the tensor's info with its bytes in one round trip,
// and a call with an explicit output count (split, chunk); a collective
// whose completion can be awaited on its own (groups.h: an asynchronous
// barrier); and tensorctl's resolution of the connect settings (cli_args).
#include "client/cli_args.h"
#include "client/connection.h"
#include "client/groups.h"
#include "client/transfer.h"
#include "client/wire.h"
#include "tensord/client.h"
#include "tensord/distributed.h"
#include "tensord/optim.h"

namespace py = pybind11;

namespace {

// The exception classes, created at import (tensord.Error and subclasses).
PyObject* gError = nullptr;
PyObject* gRefused = nullptr;
PyObject* gOverloaded = nullptr;
PyObject* gDisconnected = nullptr;
PyObject* gUnimplemented = nullptr;
PyObject* gThreadError = nullptr;

// Raised as tensord.ThreadError.
struct WrongThread : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string threadName(std::thread::id id) {
  std::ostringstream out;
  out << id;
  return out.str();
}

// One Client and the thread it belongs to. KJ's event loop is per thread, so
// a Client and every tensor it made may only be touched by the thread that
// created it; the binding checks that on every call. A handle dropped on
// another thread (by Python's reference counting) is parked here and released
// by the owner thread's next call, since releasing a capability touches the
// event loop.
class Session {
 public:
  explicit Session(tensord::ConnectOptions options)
      : owner_(std::this_thread::get_id()), client_(std::make_unique<tensord::Client>(std::move(options))) {}

  ~Session() {
    if (std::this_thread::get_id() == owner_) return;
    // The last reference went away on another thread: the event loop belongs
    // to the owner, so the connection cannot be closed from here. Leak it; the
    // daemon frees the unnamed tensors when the process exits.
    static_cast<void>(client_.release());
    static_cast<void>(new std::vector<std::shared_ptr<void>>(std::move(parked_)));
  }

  // Throws WrongThread unless called on the owner thread; there, releases
  // what other threads parked.
  void check(const char* what) {
    if (std::this_thread::get_id() != owner_) {
      throw WrongThread(std::string(what) + ": this tensord Client (and every tensor it made) belongs to thread " +
                        threadName(owner_) + ", which created it; it was used from thread " +
                        threadName(std::this_thread::get_id()) + ". Call tensord.connect() in each thread instead.");
    }
    std::vector<std::shared_ptr<void>> released;
    {
      std::lock_guard lock(parkedMutex_);
      released.swap(parked_);
    }
  }

  bool onOwnerThread() const { return std::this_thread::get_id() == owner_; }

  // Keeps `object` alive until the owner thread's next call.
  void park(std::shared_ptr<void> object) {
    std::lock_guard lock(parkedMutex_);
    parked_.push_back(std::move(object));
  }

  tensord::Client& client() { return *client_; }

 private:
  std::thread::id owner_;
  std::unique_ptr<tensord::Client> client_;
  std::mutex parkedMutex_;
  std::vector<std::shared_ptr<void>> parked_;
};

// A tensor handle together with its client's session.
class PyTensor {
 public:
  PyTensor(std::shared_ptr<Session> session, tensord::Tensor tensor)
      : session_(std::move(session)), tensor_(std::move(tensor)) {}
  PyTensor(const PyTensor&) = delete;
  PyTensor& operator=(const PyTensor&) = delete;
  ~PyTensor() {
    if (session_ && !session_->onOwnerThread()) session_->park(std::make_shared<tensord::Tensor>(std::move(tensor_)));
  }

  // The handle, after the thread check.
  tensord::Tensor& use(const char* what) {
    session_->check(what);
    return tensor_;
  }
  const std::shared_ptr<Session>& session() const { return session_; }

 private:
  std::shared_ptr<Session> session_;
  tensord::Tensor tensor_;
};

using TensorList = std::vector<std::unique_ptr<PyTensor>>;

std::unique_ptr<PyTensor> wrap(const std::shared_ptr<Session>& session, tensord::Tensor tensor) {
  if (!tensor) return nullptr;
  return std::make_unique<PyTensor>(session, std::move(tensor));
}

// The handles of `tensors`, which must all belong to `session`.
std::vector<tensord::Tensor> unwrapAll(const Session& session, const std::vector<PyTensor*>& tensors,
                                       const std::string& what) {
  std::vector<tensord::Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] == nullptr) throw py::type_error(what + ": tensor " + std::to_string(i) + " is None");
    if (tensors[i]->session().get() != &session) {
      throw py::value_error(what + ": tensor " + std::to_string(i) +
                            " belongs to another tensord Client (tensors cannot move between clients; "
                            "download it with numpy() and upload it again)");
    }
    out.push_back(tensors[i]->use(what.c_str()));
  }
  return out;
}

tensord::DType dtypeFromName(const std::string& name) {
  for (tensord::DType d : {tensord::DType::F32, tensord::DType::F16, tensord::DType::BF16, tensord::DType::I32,
                           tensord::DType::I64, tensord::DType::U8, tensord::DType::Bool}) {
    if (tensord::dtypeName(d) == name) return d;
  }
  throw py::value_error("unknown dtype '" + name + "' (expected f32, f16, bf16, i32, i64, u8 or bool)");
}

std::string dtypeNameOf(tensord::DType d) { return std::string(tensord::dtypeName(d)); }

// An attribute value from Python: bool, int, float, str, or a list/tuple of
// ints (or of numbers: floats). bool is checked before int, since Python's
// bool is an int.
tensord::AttrValue attrValue(const std::string& name, py::handle value) {
  if (PyBool_Check(value.ptr())) return value.cast<bool>();
  if (PyLong_Check(value.ptr())) return value.cast<int64_t>();
  if (PyFloat_Check(value.ptr())) return value.cast<double>();
  if (PyUnicode_Check(value.ptr())) return value.cast<std::string>();
  if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) {
    auto seq = py::reinterpret_borrow<py::sequence>(value);
    bool allInts = true;
    for (py::handle item : seq) {
      if (PyBool_Check(item.ptr()) || !(PyLong_Check(item.ptr()) || PyFloat_Check(item.ptr()))) {
        throw py::type_error("attribute '" + name + "': expected a list of ints or floats; got an element of type " +
                             std::string(py::str(py::type::of(item).attr("__name__"))));
      }
      allInts = allInts && PyLong_Check(item.ptr());
    }
    if (allInts) return seq.cast<std::vector<int64_t>>();
    return seq.cast<std::vector<double>>();
  }
  throw py::type_error("attribute '" + name + "': expected a bool, int, float, str or a list of numbers; got " +
                       std::string(py::str(py::type::of(value).attr("__name__"))));
}

tensord::Attrs attrsOf(const std::vector<std::pair<std::string, py::object>>& attrs) {
  tensord::Attrs out;
  for (const auto& [name, value] : attrs) out.emplace_back(name, attrValue(name, value));
  return out;
}

// Relays the client library's transfer progress to an optional Python
// callable, and lets Ctrl-C abort a long transfer or wait: the progress
// callback, and a check the client library runs between slices of every long
// wait (detail::WaitCheckScope), look for a pending signal and throw, which
// ends the transfer or abandons the wait; the KeyboardInterrupt (or whatever
// the callable raised) is re-raised once the C++ code unwound.
class ProgressRelay {
 public:
  explicit ProgressRelay(py::object callback) : callback_(std::move(callback)) {}
  ProgressRelay(const ProgressRelay&) = delete;
  ProgressRelay& operator=(const ProgressRelay&) = delete;

  // Called with the GIL released, on the thread that runs the transfer.
  tensord::Progress progress() {
    return [this](uint64_t done, uint64_t total) {
      py::gil_scoped_acquire gil;
      if (error_) throw Aborted();
      try {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (callback_ && !callback_.is_none()) callback_(done, total);
      } catch (py::error_already_set& e) {
        error_.emplace(std::move(e));
        throw Aborted();
      }
    };
  }

  // The WaitCheckScope check: run with the GIL released, between slices of a
  // wait on the daemon (a computation still running, a file being read).
  std::function<void()> signalCheck() {
    return [this] {
      py::gil_scoped_acquire gil;
      if (error_) throw Aborted();
      if (PyErr_CheckSignals() != 0) {
        error_.emplace();  // fetches the pending KeyboardInterrupt
        throw Aborted();
      }
    };
  }

  // With the GIL held, after the transfer threw: raises the Python error that
  // aborted it, if that is what happened.
  void raiseIfAborted() {
    if (error_) {
      py::error_already_set e = std::move(*error_);
      error_.reset();
      throw e;
    }
  }

 private:
  struct Aborted : std::exception {
    const char* what() const noexcept override { return "transfer aborted by the Python progress callback"; }
  };
  py::object callback_;
  std::optional<py::error_already_set> error_;
};

// How often a wait looks for Ctrl-C.
constexpr std::chrono::milliseconds kSignalCheckInterval{50};

// Runs `body` (a transfer, or any long wait) with the GIL released and
// Ctrl-C watched, raising what aborted it.
template <typename F>
auto transfer(ProgressRelay& relay, F&& body) -> decltype(body()) {
  auto run = [&] {
    try {
      py::gil_scoped_release nogil;
      tensord::detail::WaitCheckScope watch(relay.signalCheck(), kSignalCheckInterval);
      return body();
    } catch (...) {
      relay.raiseIfAborted();
      throw;
    }
  };
  // A Ctrl-C the callback took in just as the request finished is raised
  // all the same (Python's handler has consumed the signal).
  if constexpr (std::is_void_v<decltype(body())>) {
    run();
    relay.raiseIfAborted();
  } else {
    auto result = run();
    relay.raiseIfAborted();
    return result;
  }
}

// transfer() without a progress callable: a wait Ctrl-C can interrupt.
template <typename F>
auto interruptible(F&& body) -> decltype(body()) {
  ProgressRelay relay{py::none()};
  return transfer(relay, std::forward<F>(body));
}

// A downloaded tensor: its info and its bytes as a flat uint8 array that owns
// the buffer the client library filled (no copy).
py::tuple download(PyTensor& self, py::object progress) {
  tensord::Tensor& tensor = self.use("Tensor.numpy");
  ProgressRelay relay(std::move(progress));
  auto result = transfer(relay, [&] {
    auto& impl = *tensord::Client::Impl::unwrap(tensor);
    return tensord::detail::download(impl, relay.progress());
  });
  auto* bytes = new std::vector<std::byte>(std::move(result.second));
  py::capsule owner(bytes, [](void* p) { delete static_cast<std::vector<std::byte>*>(p); });
  py::array_t<uint8_t> array({py::ssize_t(bytes->size())}, {py::ssize_t(1)},
                             reinterpret_cast<const uint8_t*>(bytes->data()), owner);
  return py::make_tuple(std::move(result.first), std::move(array));
}

// Downloads into `out` (memory the caller owns: a C-contiguous, writable
// NumPy array) once the tensor's dtype and shape turn out to be `dtype` and
// `shape`, out's own; returns the tensor's info.
tensord::TensorInfo downloadInto(PyTensor& self, py::buffer out, const std::string& dtype,
                                 const std::vector<int64_t>& shape, py::object progress) {
  tensord::Tensor& tensor = self.use("Tensor.numpy");
  py::buffer_info buffer = out.request(/*writable=*/true);
  std::span<std::byte> destination(static_cast<std::byte*>(buffer.ptr), size_t(buffer.size * buffer.itemsize));
  ProgressRelay relay(std::move(progress));
  return transfer(relay, [&] {
    auto& impl = *tensord::Client::Impl::unwrap(tensor);
    tensord::detail::SpanLanding landing(destination);
    return tensord::detail::download(
        impl, landing,
        [&](const tensord::TensorInfo& info) {
          if (tensord::dtypeName(info.dtype) != dtype || info.shape != shape || info.bytes != destination.size()) {
            throw tensord::Error(tensord::Error::Kind::kFailed,
                                 "Tensor.numpy(out=...): the tensor is " +
                                     std::string(tensord::dtypeName(info.dtype)) +
                                     tensord::wire::shapeStr(info.shape) + "; out is " + dtype +
                                     tensord::wire::shapeStr(shape) + " (expected the same dtype and shape)");
          }
        },
        relay.progress());
  });
}

// Makes `self`'s handle refer to `other`'s daemon tensor: every copy of the
// handle (the Python object, an optimizer's parameter list) sees the new
// contents, while `self` keeps its autograd role (a leaf stays a leaf, its
// requires_grad and grad kept). Item assignment uses it for a leaf that
// requires grad, under no_grad only (as PyTorch's in-place writes on
// parameters); a call recorded on the leaf before then sees the new contents
// at backward(), where PyTorch would refuse.
void replaceContents(PyTensor& self, PyTensor& other) {
  tensord::Tensor& target = self.use("Tensor.__setitem__");
  tensord::Tensor source = unwrapAll(*self.session(), {&other}, "Tensor.__setitem__").front();
  const auto& to = tensord::Client::Impl::unwrap(target);
  const auto& from = tensord::Client::Impl::unwrap(source);
  if (!to || !from) throw py::value_error("Tensor.__setitem__: a null tensor handle");
  if (to->gradFn) {
    throw py::value_error("Tensor.__setitem__: the tensor is the result of a recorded call, not a leaf; its "
                          "contents cannot be replaced in place");
  }
  to->cap = from->cap;
  to->origin = from->origin;
  to->held = from->held;
}

// tensorctl's resolution of the address, token and TLS files: the keyword
// arguments play its flags, then TENSORD_ADDR / TENSORD_TOKEN / TENSORD_CA /
// TENSORD_CERT / TENSORD_KEY, then the credentials file, then the defaults.
tensord::ConnectOptions resolveOptions(const std::optional<std::string>& address,
                                       const std::optional<std::string>& token, const std::optional<std::string>& ca,
                                       const std::optional<std::string>& cert, const std::optional<std::string>& key) {
  std::vector<std::string> args;
  auto flag = [&](const char* name, const std::optional<std::string>& value) {
    if (value) args.push_back(std::string(name) + "=" + *value);
  };
  flag("--connect", address);
  flag("--token", token);
  flag("--ca", ca);
  flag("--cert", cert);
  flag("--key", key);
  args.push_back("whoami");
  tensord::cli::Options options;
  try {
    options = tensord::cli::parseArgs(args, [](const char* name) { return std::getenv(name); });
  } catch (const tensord::cli::UsageError& e) {
    // Flag names mean little to a Python caller: name the keyword instead.
    std::string message = e.what();
    for (auto [flagName, keyword] : {std::pair{"--connect", "address"}, std::pair{"--token", "token"},
                                     std::pair{"--cert", "cert"}, std::pair{"--key", "key"}, std::pair{"--ca", "ca"}}) {
      for (size_t at; (at = message.find(flagName)) != std::string::npos;) {
        message.replace(at, std::strlen(flagName), keyword);
      }
    }
    throw py::value_error("tensord.connect: " + message);
  }
  return {.address = options.address,
          .token = options.token,
          .caFile = options.caFile,
          .certFile = options.certFile,
          .keyFile = options.keyFile};
}

// The completion of one collective (Client.barrier(async_op=True)): wait()
// blocks until every member finished it and raises its error. One that is
// dropped unwaited runs on as a task of the connection, whose error a later
// blocking request raises (as tensord::Client::collective does for a
// barrier).
class PyCollectiveWork {
 public:
  PyCollectiveWork(std::shared_ptr<Session> session, std::shared_ptr<tensord::detail::Connection> conn,
                   std::shared_ptr<tensord::detail::PendingCall> done)
      : session_(std::move(session)), conn_(std::move(conn)), done_(std::move(done)) {}
  PyCollectiveWork(const PyCollectiveWork&) = delete;
  PyCollectiveWork& operator=(const PyCollectiveWork&) = delete;
  ~PyCollectiveWork() {
    if (waited_) return;
    if (!session_->onOwnerThread()) {
      session_->park(std::move(done_));  // released on the owner thread; nobody sees its error
      return;
    }
    try {
      conn_->addTask(done_->done.addBranch());
    } catch (...) {
      // The connection is gone: every later request reports that.
    }
  }

  // Raises the collective's error once; later calls return at once. A wait
  // interrupted by Ctrl-C can be repeated.
  void wait() {
    session_->check("CollectiveWork.wait");
    if (waited_) return;
    try {
      interruptible([&] { conn_->blocking([&] { conn_->wait(done_->done.addBranch()); }); });
    } catch (const tensord::Error&) {
      waited_ = true;
      throw;
    }
    waited_ = true;
  }

  bool waited() const { return waited_; }

 private:
  std::shared_ptr<Session> session_;
  std::shared_ptr<tensord::detail::Connection> conn_;
  std::shared_ptr<tensord::detail::PendingCall> done_;
  bool waited_ = false;
};

// A captured graph (tensord::Graph), run from its client's thread.
class PyGraph {
 public:
  PyGraph(std::shared_ptr<Session> session, tensord::Graph graph)
      : session_(std::move(session)), graph_(std::move(graph)) {}
  PyGraph(const PyGraph&) = delete;
  PyGraph& operator=(const PyGraph&) = delete;
  ~PyGraph() {
    if (session_ && !session_->onOwnerThread()) session_->park(std::make_shared<tensord::Graph>(std::move(graph_)));
  }

  TensorList run(const std::vector<PyTensor*>& inputs) {
    session_->check("Graph.run");
    std::vector<tensord::Tensor> in = unwrapAll(*session_, inputs, "Graph.run");
    std::vector<tensord::Tensor> out = graph_.run(in);  // pipelined: sends, waits for nothing
    TensorList result;
    for (auto& t : out) result.push_back(wrap(session_, std::move(t)));
    return result;
  }
  size_t inputs() const { return graph_.inputs(); }
  size_t outputs() const { return graph_.outputs(); }
  size_t calls() const { return graph_.calls(); }
  size_t kernels() {
    session_->check("Graph.kernels");
    return interruptible([&] { return graph_.kernels(); });
  }

 private:
  std::shared_ptr<Session> session_;
  tensord::Graph graph_;
};

class PyClient {
 public:
  PyClient(std::optional<std::string> address, std::optional<std::string> token, std::optional<std::string> ca,
           std::optional<std::string> cert, std::optional<std::string> key) {
    tensord::ConnectOptions options = resolveOptions(address, token, ca, cert, key);
    address_ = options.address;
    py::gil_scoped_release nogil;
    session_ = std::make_shared<Session>(std::move(options));
  }
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  const std::string& address() const { return address_; }

  tensord::Client& use(const char* what) {
    session_->check(what);
    return session_->client();
  }

  // Runs `body(client)` with the GIL released and Ctrl-C watched.
  template <typename F>
  auto blocking(const char* what, F&& body) {
    tensord::Client& client = use(what);
    return interruptible([&] { return body(client); });
  }

  // Client::loadFile / saveFile with progress (bytes) to an optional callable.
  tensord::FileTransfer loadFile(const std::string& path, const std::string& prefix, bool overwrite,
                                 py::object progress) {
    tensord::Client& client = use("Client.load_file");
    ProgressRelay relay(std::move(progress));
    return transfer(relay, [&] { return client.loadFile(path, prefix, overwrite, relay.progress()); });
  }
  tensord::FileTransfer saveFile(const std::string& path, const std::vector<std::string>& names,
                                 const std::string& prefix, bool overwrite, py::object progress) {
    tensord::Client& client = use("Client.save_file");
    ProgressRelay relay(std::move(progress));
    return transfer(relay, [&] { return client.saveFile(path, names, prefix, overwrite, relay.progress()); });
  }

  std::unique_ptr<PyTensor> upload(const std::string& dtypeName, const tensord::Shape& shape, py::buffer data,
                                   py::object progress) {
    tensord::Client& client = use("Client.upload");
    tensord::DType dtype = dtypeFromName(dtypeName);
    py::buffer_info buffer = data.request();
    // The package hands over C-contiguous arrays; check anyway, since the
    // bytes are sent as they lie in memory.
    py::ssize_t expectStride = buffer.itemsize;
    for (py::ssize_t d = buffer.ndim - 1; d >= 0; --d) {
      if (buffer.shape[size_t(d)] > 1 && buffer.strides[size_t(d)] != expectStride) {
        throw py::value_error("upload: the buffer is not C-contiguous");
      }
      expectStride *= buffer.shape[size_t(d)];
    }
    std::span<const std::byte> bytes(static_cast<const std::byte*>(buffer.ptr),
                                     size_t(buffer.size) * size_t(buffer.itemsize));
    ProgressRelay relay(std::move(progress));
    tensord::Tensor tensor =
        transfer(relay, [&] { return client.upload(dtype, shape, bytes, relay.progress()); });
    return wrap(session_, std::move(tensor));
  }

  // count < 0: as many outputs as the op table lists.
  TensorList call(const std::string& op, const std::vector<PyTensor*>& inputs,
                  const std::vector<std::pair<std::string, py::object>>& attrs, int64_t count) {
    tensord::Client& client = use(op.c_str());
    std::vector<tensord::Tensor> in = unwrapAll(*session_, inputs, op);
    tensord::Attrs a = attrsOf(attrs);
    std::vector<tensord::Tensor> out;
    {
      py::gil_scoped_release nogil;  // unknown ops cost a round trip to the op table
      if (count < 0) {
        out = client.call(op, std::move(in), std::move(a));
      } else {
        out = tensord::detail::callOp(client.impl().conn, op, in, a, size_t(count));
      }
    }
    TensorList result;
    for (auto& t : out) result.push_back(wrap(session_, std::move(t)));
    return result;
  }

  // Client::capture: `body` gets one placeholder per (dtype, shape) and
  // returns the graph's outputs. The GIL stays held: the body is Python, and
  // the capture waits for one reply only.
  std::unique_ptr<PyGraph> capture(const std::vector<std::pair<std::string, std::vector<int64_t>>>& params,
                                   const py::function& body) {
    tensord::Client& client = use("Client.capture");
    std::vector<tensord::GraphInput> inputs;
    for (const auto& [dtype, shape] : params) inputs.push_back({dtypeFromName(dtype), tensord::Shape(shape)});
    tensord::Graph graph = client.capture(inputs, [&](const std::vector<tensord::Tensor>& in) {
      TensorList args;
      for (const auto& t : in) args.push_back(wrap(session_, t));
      py::object out = body(std::move(args));
      return unwrapAll(*session_, out.cast<std::vector<PyTensor*>>(), "Client.capture: output");
    });
    return std::make_unique<PyGraph>(session_, std::move(graph));
  }

  std::unique_ptr<PyTensor> restore(const std::string& name) {
    auto t = blocking("Client.restore", [&](tensord::Client& c) { return c.restore(name); });
    return wrap(session_, std::move(t));
  }

  // Session.collective, pipelined: (outputs, None), or for a collective
  // without outputs (barrier) ([], its completion). The outputs carry the
  // collective's error themselves.
  py::tuple collective(const std::string& group, const std::string& kind, const std::vector<PyTensor*>& inputs,
                       const std::vector<std::pair<std::string, py::object>>& attrs) {
    const std::string what = kind + " on group '" + group + "'";
    tensord::Client& client = use(what.c_str());
    std::vector<tensord::Tensor> in = unwrapAll(*session_, inputs, what);
    tensord::Attrs a = attrsOf(attrs);
    tensord::detail::Collective run = tensord::detail::collectiveOp(client.impl().conn, group, kind, in, a);
    TensorList outputs;
    for (auto& t : run.outputs) outputs.push_back(wrap(session_, std::move(t)));
    if (!outputs.empty()) return py::make_tuple(py::cast(std::move(outputs)), py::none());
    auto work = std::make_unique<PyCollectiveWork>(session_, client.impl().conn, std::move(run.done));
    return py::make_tuple(py::cast(std::move(outputs)), py::cast(std::move(work)));
  }

  const std::shared_ptr<Session>& session() const { return session_; }

 private:
  std::string address_;
  std::shared_ptr<Session> session_;
};

// The session every tensor of `params` belongs to (one, and not none).
std::shared_ptr<Session> sessionOf(const std::vector<PyTensor*>& params, const char* what) {
  if (params.empty()) throw py::value_error(std::string(what) + ": got an empty parameter list");
  if (params.front() == nullptr) throw py::type_error(std::string(what) + ": parameter 0 is None");
  return params.front()->session();
}

// The C++ optimizers, owned by the thread of their parameters' client.
class PyOptimizer {
 public:
  PyOptimizer(std::shared_ptr<Session> session, std::unique_ptr<tensord::optim::Optimizer> optimizer)
      : session_(std::move(session)), optimizer_(std::move(optimizer)) {}
  ~PyOptimizer() {
    if (!session_->onOwnerThread()) session_->park(std::shared_ptr<tensord::optim::Optimizer>(std::move(optimizer_)));
  }
  void step() {
    session_->check("Optimizer.step");
    py::gil_scoped_release nogil;
    optimizer_->step();
  }
  void zeroGrad() {
    session_->check("Optimizer.zero_grad");
    optimizer_->zeroGrad();
  }

 private:
  std::shared_ptr<Session> session_;
  std::unique_ptr<tensord::optim::Optimizer> optimizer_;
};

template <typename Optimizer, typename Options>
std::unique_ptr<PyOptimizer> makeOptimizer(const std::vector<PyTensor*>& params, const Options& options,
                                           const char* what) {
  std::shared_ptr<Session> session = sessionOf(params, what);
  std::vector<tensord::Tensor> handles = unwrapAll(*session, params, what);
  return std::make_unique<PyOptimizer>(session, std::make_unique<Optimizer>(std::move(handles), options));
}

// tensord.no_grad()'s engine: a tensord::NoGrad scope per `with` block.
class NoGradScope {
 public:
  void enter() {
    if (scope_) throw py::value_error("no_grad: this context manager is already entered");
    scope_.emplace();
  }
  void exit() { scope_.reset(); }

 private:
  std::optional<tensord::NoGrad> scope_;
};

// Client.batch()'s engine: a tensord::Batch per `with` block.
class BatchScope {
 public:
  explicit BatchScope(PyClient& client) : client_(&client) {}
  void enter() {
    if (batch_) throw py::value_error("Client.batch: this context manager is already entered");
    batch_.emplace(client_->use("Client.batch"));
  }
  void send() {
    if (!batch_) throw py::value_error("Client.batch: send() outside the with block");
    batch_->send();
  }
  void exit() { batch_.reset(); }

 private:
  PyClient* client_;
  std::optional<tensord::Batch> batch_;
};

// A member's view of a group (tensord::ProcessGroup), owned by the thread of
// its client's session; DistributedDataParallel runs its collectives.
class PyProcessGroup {
 public:
  PyProcessGroup(PyClient& client, const std::string& name) : session_(client.session()) {
    tensord::Client& c = client.use("ProcessGroup");
    group_ = interruptible([&] { return std::make_shared<tensord::ProcessGroup>(c, name); });
  }
  PyProcessGroup(const PyProcessGroup&) = delete;
  PyProcessGroup& operator=(const PyProcessGroup&) = delete;
  ~PyProcessGroup() {
    if (!session_->onOwnerThread()) session_->park(std::move(group_));
  }

  tensord::ProcessGroup& use(const char* what) {
    session_->check(what);
    return *group_;
  }
  const tensord::ProcessGroup& get() const { return *group_; }
  const std::shared_ptr<Session>& session() const { return session_; }
  const std::shared_ptr<tensord::ProcessGroup>& shared() const { return group_; }

 private:
  std::shared_ptr<Session> session_;
  std::shared_ptr<tensord::ProcessGroup> group_;
};

// tensord::DistributedDataParallel over a PyProcessGroup, which it keeps
// alive. Its gradient-ready hooks run inside Tensor.backward() (C++ only).
class PyDistributedDataParallel {
 public:
  PyDistributedDataParallel(PyProcessGroup& group, const std::vector<PyTensor*>& params, tensord::DdpOptions options) {
    const char* what = "DistributedDataParallel";
    tensord::ProcessGroup& g = group.use(what);
    if (params.empty()) throw py::value_error(std::string(what) + ": got an empty parameter list");
    std::vector<tensord::Tensor> handles = unwrapAll(*group.session(), params, what);
    state_ = std::make_shared<State>();
    state_->group = group.shared();
    state_->ddp = interruptible(
        [&] { return std::make_unique<tensord::DistributedDataParallel>(g, std::move(handles), options); });
    session_ = group.session();
  }
  PyDistributedDataParallel(const PyDistributedDataParallel&) = delete;
  PyDistributedDataParallel& operator=(const PyDistributedDataParallel&) = delete;
  ~PyDistributedDataParallel() {
    if (session_ && !session_->onOwnerThread()) session_->park(std::move(state_));
  }

  tensord::DistributedDataParallel& use(const char* what) {
    session_->check(what);
    return *state_->ddp;
  }

 private:
  // Declaration order is teardown order: the DDP before its group.
  struct State {
    std::shared_ptr<tensord::ProcessGroup> group;
    std::unique_ptr<tensord::DistributedDataParallel> ddp;
  };
  std::shared_ptr<Session> session_;
  std::shared_ptr<State> state_;
};

// Plain-data views of the library's structs (as_dict()), and short reprs.
std::string pyRepr(const py::object& value) { return py::repr(value).cast<std::string>(); }

py::dict tensorInfoDict(const tensord::TensorInfo& i) {
  py::dict d;
  d["id"] = i.id;
  d["name"] = i.name;
  d["owner"] = i.owner;
  d["dtype"] = dtypeNameOf(i.dtype);
  d["shape"] = py::tuple(py::cast(i.shape));
  d["bytes"] = i.bytes;
  return d;
}

py::dict deviceDict(const tensord::DeviceInfo& i) {
  py::dict d;
  d["name"] = i.name;
  d["kind"] = i.kind;
  d["driver"] = i.driver;
  d["api_version"] = i.apiVersion;
  d["vendor_id"] = i.vendorId;
  d["device_id"] = i.deviceId;
  d["memory_bytes"] = i.memoryBytes;
  py::list dtypes;
  for (auto t : i.dtypes) dtypes.append(dtypeNameOf(t));
  d["dtypes"] = dtypes;
  return d;
}

py::dict memoryDict(const tensord::MemoryStats& m) {
  py::dict d;
  d["live_bytes"] = m.liveBytes;
  d["reserved_bytes"] = m.reservedBytes;
  d["cached_bytes"] = m.cachedBytes;
  d["limit_bytes"] = m.limitBytes;
  d["tensor_count"] = m.tensorCount;
  d["named_count"] = m.namedCount;
  return d;
}

py::dict opStatsDict(const tensord::OpStats& o) {
  py::dict d;
  d["op"] = o.op;
  d["completed"] = o.completed;
  d["failed"] = o.failed;
  d["latency_p50"] = o.latencyP50;
  d["latency_p90"] = o.latencyP90;
  d["latency_p99"] = o.latencyP99;
  d["latency_max"] = o.latencyMax;
  d["device_seconds"] = o.deviceSeconds;
  d["device_p50"] = o.deviceP50;
  d["device_p99"] = o.deviceP99;
  return d;
}

py::dict principalStatsDict(const tensord::PrincipalStats& p) {
  py::dict d;
  d["principal"] = p.principal;
  d["device_bytes"] = p.deviceBytes;
  d["tensors"] = p.tensors;
  d["sessions"] = p.sessions;
  d["calls"] = p.calls;
  d["ops"] = p.ops;
  d["bytes_in"] = p.bytesIn;
  d["bytes_out"] = p.bytesOut;
  return d;
}

py::dict daemonStatsDict(const tensord::DaemonStats& s) {
  py::dict d;
  d["version"] = s.version;
  d["uptime_seconds"] = s.uptimeSeconds;
  d["device"] = deviceDict(s.device);
  d["memory"] = memoryDict(s.memory);
  d["connections"] = s.connections;
  d["connections_accepted"] = s.connectionsAccepted;
  d["sessions"] = s.sessions;
  d["inflight_calls"] = s.inflightCalls;
  d["queued_jobs"] = s.queuedJobs;
  d["bytes_in"] = s.bytesIn;
  d["bytes_out"] = s.bytesOut;
  d["ops_executed"] = s.opsExecuted;
  d["device_timestamps"] = s.deviceTimestamps;
  d["metrics_address"] = s.metricsAddress;
  py::list principals, ops;
  for (const auto& p : s.principals) principals.append(principalStatsDict(p));
  for (const auto& o : s.ops) ops.append(opStatsDict(o));
  d["principals"] = principals;
  d["ops"] = ops;
  return d;
}

py::dict groupInfoDict(const tensord::GroupInfo& g) {
  py::dict d;
  d["name"] = g.name;
  d["rank"] = g.rank;
  d["size"] = g.size;
  d["state"] = g.state;
  d["members"] = py::list(py::cast(g.members));
  d["origin"] = g.origin;
  d["collectives"] = g.collectives;
  return d;
}

py::dict fileTransferDict(const tensord::FileTransfer& f) {
  py::dict d;
  d["path"] = f.path;
  py::list tensors;
  for (const auto& t : f.tensors) tensors.append(tensorInfoDict(t));
  d["tensors"] = tensors;
  d["bytes"] = f.bytes;
  return d;
}

// "Name(key=value, ...)" over the scalar entries of `fields` (nested dicts
// and lists are summarized by the caller).
std::string reprOf(const char* name, const py::dict& fields) {
  std::string out = std::string(name) + "(";
  bool first = true;
  for (auto [key, value] : fields) {
    if (py::isinstance<py::dict>(value) || py::isinstance<py::list>(value)) continue;
    out += (first ? "" : ", ") + key.cast<std::string>() + "=" + pyRepr(py::reinterpret_borrow<py::object>(value));
    first = false;
  }
  return out;
}

PyObject* newException(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("tensord.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "tensord's C++ client library, bound for Python (internal: use the tensord package)";

  gError = newException(m, "Error", PyExc_RuntimeError,
                        "An error of tensord: the daemon refused or failed a request, or could not be reached. "
                        "The message is the daemon's (or the client library's).");
  gRefused = newException(m, "Refused", gError,
                          "The daemon refused or failed the request: bad arguments (shape, dtype, attribute), a "
                          "name that does not exist, or an access policy that does not allow it.");
  gOverloaded = newException(m, "Overloaded", gError,
                             "Out of device memory or over a quota (device bytes, tensors, calls in flight); "
                             "the request may succeed later.");
  gDisconnected = newException(m, "Disconnected", gError,
                               "The daemon cannot be reached, or the connection to it was lost (or refused the TLS "
                               "handshake).");
  gUnimplemented = newException(m, "Unimplemented", gError,
                                "The daemon does not know the request: an unknown op or dtype, or a method an "
                                "older daemon lacks.");
  gThreadError = newException(m, "ThreadError", gError,
                              "A Client or one of its tensors was used from a thread other than the one that "
                              "created the Client.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tensord::Error& e) {
      PyObject* type = gRefused;
      switch (e.kind()) {
        case tensord::Error::Kind::kOverloaded:
          type = gOverloaded;
          break;
        case tensord::Error::Kind::kDisconnected:
          type = gDisconnected;
          break;
        case tensord::Error::Kind::kUnimplemented:
          type = gUnimplemented;
          break;
        case tensord::Error::Kind::kFailed:
          break;
      }
      PyErr_SetString(type, e.what());
    } catch (const WrongThread& e) {
      PyErr_SetString(gThreadError, e.what());
    }
  });

  py::class_<tensord::TensorInfo>(m, "TensorInfo")
      .def("as_dict", &tensorInfoDict)
      .def_readonly("id", &tensord::TensorInfo::id)
      .def_readonly("name", &tensord::TensorInfo::name)
      .def_readonly("owner", &tensord::TensorInfo::owner)
      .def_property_readonly("dtype", [](const tensord::TensorInfo& i) { return dtypeNameOf(i.dtype); })
      .def_property_readonly("shape", [](const tensord::TensorInfo& i) { return py::tuple(py::cast(i.shape)); })
      .def_readonly("bytes", &tensord::TensorInfo::bytes)
      .def("__repr__", [](const tensord::TensorInfo& i) {
        std::string shape;
        for (int64_t d : i.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        return "TensorInfo(name='" + i.name + "', dtype=" + dtypeNameOf(i.dtype) + ", shape=[" + shape +
               "], bytes=" + std::to_string(i.bytes) + ", owner='" + i.owner + "')";
      });
  py::class_<tensord::TensorPage>(m, "TensorPage")
      .def_readonly("tensors", &tensord::TensorPage::tensors)
      .def_readonly("next", &tensord::TensorPage::next);

  py::class_<tensord::DeviceInfo>(m, "DeviceInfo")
      .def("as_dict", &deviceDict)
      .def("__repr__", [](const tensord::DeviceInfo& i) {
        py::dict d = deviceDict(i);
        return reprOf("DeviceInfo", d) + ", dtypes=" + pyRepr(d["dtypes"]) + ")";
      })
      .def_readonly("name", &tensord::DeviceInfo::name)
      .def_readonly("kind", &tensord::DeviceInfo::kind)
      .def_readonly("driver", &tensord::DeviceInfo::driver)
      .def_readonly("api_version", &tensord::DeviceInfo::apiVersion)
      .def_readonly("vendor_id", &tensord::DeviceInfo::vendorId)
      .def_readonly("device_id", &tensord::DeviceInfo::deviceId)
      .def_readonly("memory_bytes", &tensord::DeviceInfo::memoryBytes)
      .def_property_readonly("dtypes", [](const tensord::DeviceInfo& d) {
        std::vector<std::string> out;
        for (auto t : d.dtypes) out.push_back(dtypeNameOf(t));
        return out;
      });
  py::class_<tensord::MemoryStats>(m, "MemoryStats")
      .def("as_dict", &memoryDict)
      .def("__repr__", [](const tensord::MemoryStats& s) { return reprOf("MemoryStats", memoryDict(s)) + ")"; })
      .def_readonly("live_bytes", &tensord::MemoryStats::liveBytes)
      .def_readonly("reserved_bytes", &tensord::MemoryStats::reservedBytes)
      .def_readonly("cached_bytes", &tensord::MemoryStats::cachedBytes)
      .def_readonly("limit_bytes", &tensord::MemoryStats::limitBytes)
      .def_readonly("tensor_count", &tensord::MemoryStats::tensorCount)
      .def_readonly("named_count", &tensord::MemoryStats::namedCount);
  py::class_<tensord::DaemonInfo>(m, "DaemonInfo")
      .def_readonly("version", &tensord::DaemonInfo::version)
      .def_readonly("protocol_version", &tensord::DaemonInfo::protocolVersion)
      .def_readonly("device", &tensord::DaemonInfo::device)
      .def_readonly("memory", &tensord::DaemonInfo::memory)
      .def_readonly("ops_executed", &tensord::DaemonInfo::opsExecuted)
      .def_readonly("max_tensor_bytes", &tensord::DaemonInfo::maxTensorBytes)
      .def_readonly("chunk_bytes", &tensord::DaemonInfo::chunkBytes)
      .def("__repr__", [](const tensord::DaemonInfo& i) {
        return "DaemonInfo(version=" + pyRepr(py::str(i.version)) + ", protocol_version=" +
               std::to_string(i.protocolVersion) + ", device=" + pyRepr(py::str(i.device.name)) +
               ", ops_executed=" + std::to_string(i.opsExecuted) + ")";
      });

  py::class_<tensord::OpStats>(m, "OpStats", "One op's counts and latencies since the daemon started (seconds).")
      .def_readonly("op", &tensord::OpStats::op)
      .def_readonly("completed", &tensord::OpStats::completed)
      .def_readonly("failed", &tensord::OpStats::failed)
      .def_readonly("latency_p50", &tensord::OpStats::latencyP50)
      .def_readonly("latency_p90", &tensord::OpStats::latencyP90)
      .def_readonly("latency_p99", &tensord::OpStats::latencyP99)
      .def_readonly("latency_max", &tensord::OpStats::latencyMax)
      .def_readonly("device_seconds", &tensord::OpStats::deviceSeconds)
      .def_readonly("device_p50", &tensord::OpStats::deviceP50)
      .def_readonly("device_p99", &tensord::OpStats::deviceP99)
      .def("as_dict", &opStatsDict)
      .def("__repr__", [](const tensord::OpStats& o) { return reprOf("OpStats", opStatsDict(o)) + ")"; });
  py::class_<tensord::PrincipalStats>(m, "PrincipalStats", "One principal's use of the daemon.")
      .def_readonly("principal", &tensord::PrincipalStats::principal)
      .def_readonly("device_bytes", &tensord::PrincipalStats::deviceBytes)
      .def_readonly("tensors", &tensord::PrincipalStats::tensors)
      .def_readonly("sessions", &tensord::PrincipalStats::sessions)
      .def_readonly("calls", &tensord::PrincipalStats::calls)
      .def_readonly("ops", &tensord::PrincipalStats::ops)
      .def_readonly("bytes_in", &tensord::PrincipalStats::bytesIn)
      .def_readonly("bytes_out", &tensord::PrincipalStats::bytesOut)
      .def("as_dict", &principalStatsDict)
      .def("__repr__",
           [](const tensord::PrincipalStats& p) { return reprOf("PrincipalStats", principalStatsDict(p)) + ")"; });
  py::class_<tensord::DaemonStats>(m, "DaemonStats",
                                   "The daemon's load since it started: device, memory, connections, queue, bytes "
                                   "moved, per principal (principals) and per op (ops). as_dict() gives it as plain "
                                   "dicts and lists.")
      .def_readonly("version", &tensord::DaemonStats::version)
      .def_readonly("uptime_seconds", &tensord::DaemonStats::uptimeSeconds)
      .def_readonly("device", &tensord::DaemonStats::device)
      .def_readonly("memory", &tensord::DaemonStats::memory)
      .def_readonly("connections", &tensord::DaemonStats::connections)
      .def_readonly("connections_accepted", &tensord::DaemonStats::connectionsAccepted)
      .def_readonly("sessions", &tensord::DaemonStats::sessions)
      .def_readonly("inflight_calls", &tensord::DaemonStats::inflightCalls)
      .def_readonly("queued_jobs", &tensord::DaemonStats::queuedJobs)
      .def_readonly("bytes_in", &tensord::DaemonStats::bytesIn)
      .def_readonly("bytes_out", &tensord::DaemonStats::bytesOut)
      .def_readonly("ops_executed", &tensord::DaemonStats::opsExecuted)
      .def_readonly("device_timestamps", &tensord::DaemonStats::deviceTimestamps)
      .def_readonly("metrics_address", &tensord::DaemonStats::metricsAddress)
      .def_readonly("principals", &tensord::DaemonStats::principals)
      .def_readonly("ops", &tensord::DaemonStats::ops)
      .def("op", [](const tensord::DaemonStats& s, const std::string& name) -> py::object {
        for (const auto& o : s.ops) {
          if (o.op == name) return py::cast(o);
        }
        return py::none();
      }, py::arg("name"), "The OpStats of op `name`, or None when the daemon has not run it.")
      .def("as_dict", &daemonStatsDict)
      .def("__repr__", [](const tensord::DaemonStats& s) {
        return reprOf("DaemonStats", daemonStatsDict(s)) + ", device=" + pyRepr(py::str(s.device.name)) +
               ", principals=" + std::to_string(s.principals.size()) + ", ops=" + std::to_string(s.ops.size()) + ")";
      });
  py::class_<tensord::FileTransfer>(m, "FileTransfer",
                                    "A safetensors file on the daemon's disk and the tensors moved: path (as the "
                                    "daemon resolved it), tensors (TensorInfo, by daemon name), bytes (load: tensor "
                                    "bytes read; save: the file's size).")
      .def_readonly("path", &tensord::FileTransfer::path)
      .def_readonly("tensors", &tensord::FileTransfer::tensors)
      .def_readonly("bytes", &tensord::FileTransfer::bytes)
      .def_property_readonly("names", [](const tensord::FileTransfer& f) {
        std::vector<std::string> out;
        for (const auto& t : f.tensors) out.push_back(t.name);
        return out;
      })
      .def("as_dict", &fileTransferDict)
      .def("__repr__", [](const tensord::FileTransfer& f) {
        std::string names;
        for (const auto& t : f.tensors) names += (names.empty() ? "" : ", ") + pyRepr(py::str(t.name));
        return "FileTransfer(path=" + pyRepr(py::str(f.path)) + ", tensors=[" + names +
               "], bytes=" + std::to_string(f.bytes) + ")";
      });
  py::class_<tensord::GroupInfo>(m, "GroupInfo",
                                 "A group of daemons as this daemon sees it: name, rank (this daemon's place), "
                                 "size, members (HOST:PORT by rank), state ('ready', or 'broken: <why>' until "
                                 "re-formed), origin ('config' or the principal that formed it), collectives "
                                 "(completed since it formed).")
      .def_readonly("name", &tensord::GroupInfo::name)
      .def_readonly("rank", &tensord::GroupInfo::rank)
      .def_readonly("size", &tensord::GroupInfo::size)
      .def_readonly("members", &tensord::GroupInfo::members)
      .def_readonly("state", &tensord::GroupInfo::state)
      .def_readonly("origin", &tensord::GroupInfo::origin)
      .def_readonly("collectives", &tensord::GroupInfo::collectives)
      .def_property_readonly("ready", [](const tensord::GroupInfo& g) { return g.state == "ready"; })
      .def("as_dict", &groupInfoDict)
      .def("__repr__", [](const tensord::GroupInfo& g) {
        return "GroupInfo(name=" + pyRepr(py::str(g.name)) + ", rank=" + std::to_string(g.rank) +
               ", size=" + std::to_string(g.size) + ", state=" + pyRepr(py::str(g.state)) +
               ", members=" + pyRepr(py::cast(g.members)) + ")";
      });
  py::class_<PyCollectiveWork>(m, "CollectiveWork",
                               "The completion of a collective started with async_op=True (a barrier): wait() "
                               "blocks until every member reached it and raises its error. Dropped without "
                               "wait(), its error is raised by a later request of the client that waits.")
      .def("wait", &PyCollectiveWork::wait)
      .def_property_readonly("waited", &PyCollectiveWork::waited);
  py::class_<tensord::QuotaUse>(m, "QuotaUse")
      .def_readonly("name", &tensord::QuotaUse::name)
      .def_readonly("limit", &tensord::QuotaUse::limit)
      .def_readonly("used", &tensord::QuotaUse::used);
  py::class_<tensord::SessionStatus>(m, "SessionStatus")
      .def_readonly("principal", &tensord::SessionStatus::principal)
      .def_readonly("roles", &tensord::SessionStatus::roles)
      .def_readonly("quotas", &tensord::SessionStatus::quotas);
  py::class_<tensord::CallStats>(m, "CallStats")
      .def_readonly("calls", &tensord::CallStats::calls)
      .def_readonly("round_trips", &tensord::CallStats::roundTrips);

  py::class_<tensord::AttrSpec>(m, "AttrSpec")
      .def_readonly("name", &tensord::AttrSpec::name)
      .def_readonly("type", &tensord::AttrSpec::type)
      .def_readonly("required", &tensord::AttrSpec::required)
      .def_readonly("has_default", &tensord::AttrSpec::hasDefault)
      .def_readonly("default", &tensord::AttrSpec::defaultValue)
      .def_readonly("doc", &tensord::AttrSpec::doc);
  py::class_<tensord::InputInfo>(m, "InputSpec")
      .def_readonly("name", &tensord::InputInfo::name)
      .def_readonly("role", &tensord::InputInfo::role)
      .def_readonly("optional", &tensord::InputInfo::optional)
      .def_readonly("variadic", &tensord::InputInfo::variadic);
  py::class_<tensord::OpInfo>(m, "OpInfo")
      .def_readonly("name", &tensord::OpInfo::name)
      .def_readonly("category", &tensord::OpInfo::category)
      .def_readonly("doc", &tensord::OpInfo::doc)
      .def_readonly("backward", &tensord::OpInfo::backward)
      .def_readonly("inputs", &tensord::OpInfo::inputSpecs)
      .def_readonly("outputs", &tensord::OpInfo::outputs)
      .def_readonly("attrs", &tensord::OpInfo::attrs)
      .def_property_readonly("dtypes",
                             [](const tensord::OpInfo& op) {
                               std::vector<std::string> out;
                               for (auto t : op.dtypes) out.push_back(dtypeNameOf(t));
                               return out;
                             })
      .def_readonly("view", &tensord::OpInfo::view)
      .def_readonly("mutates", &tensord::OpInfo::mutates)
      .def_readonly("differentiable", &tensord::OpInfo::differentiable);

  py::class_<PyTensor>(m, "Tensor")
      .def("info", [](PyTensor& t) {
        tensord::Tensor& h = t.use("Tensor.info");
        return interruptible([&] { return h.info(); });
      })
      .def("download", &download, py::arg("progress") = py::none())
      .def("download_into", &downloadInto, py::arg("out"), py::arg("dtype"), py::arg("shape"),
           py::arg("progress") = py::none())
      .def("wait", [](PyTensor& t) {
        tensord::Tensor& h = t.use("Tensor.wait");
        interruptible([&] { h.wait(); });
      })
      .def("save", [](PyTensor& t, const std::string& name, bool overwrite) {
        tensord::Tensor& h = t.use("Tensor.save");
        interruptible([&] { h.save(name, overwrite); });
      }, py::arg("name"), py::arg("overwrite") = false)
      .def("replace_contents", &replaceContents, py::arg("other"))
      .def_property_readonly("is_leaf", [](PyTensor& t) {
        const auto& impl = tensord::Client::Impl::unwrap(t.use("Tensor.is_leaf"));
        return impl == nullptr || impl->gradFn == nullptr;
      })
      .def_property("requires_grad", [](PyTensor& t) { return t.use("Tensor.requires_grad").requiresGrad(); },
                    [](PyTensor& t, bool on) { t.use("Tensor.requires_grad").setRequiresGrad(on); })
      .def_property("grad",
                    [](PyTensor& t) { return wrap(t.session(), t.use("Tensor.grad").grad()); },
                    [](PyTensor& t, PyTensor* grad) {
                      tensord::Tensor& h = t.use("Tensor.grad");
                      if (grad == nullptr) {
                        h.setGrad({});
                        return;
                      }
                      h.setGrad(unwrapAll(*t.session(), {grad}, "Tensor.grad").front());
                    })
      .def("backward", [](PyTensor& t, PyTensor* gradient) {
        tensord::Tensor& h = t.use("Tensor.backward");
        tensord::Tensor seed;
        if (gradient != nullptr) seed = unwrapAll(*t.session(), {gradient}, "backward").front();
        py::gil_scoped_release nogil;
        h.backward(seed);
      }, py::arg("gradient") = nullptr)
      .def("detach", [](PyTensor& t) { return wrap(t.session(), t.use("Tensor.detach").detach()); });

  py::class_<PyClient>(m, "Client")
      .def(py::init<std::optional<std::string>, std::optional<std::string>, std::optional<std::string>,
                    std::optional<std::string>, std::optional<std::string>>(),
           py::arg("address") = py::none(), py::arg("token") = py::none(), py::arg("ca") = py::none(),
           py::arg("cert") = py::none(), py::arg("key") = py::none())
      .def_property_readonly("address", &PyClient::address)
      .def("info", [](PyClient& c) { return c.blocking("Client.info", [](tensord::Client& x) { return x.info(); }); })
      .def("whoami",
           [](PyClient& c) { return c.blocking("Client.whoami", [](tensord::Client& x) { return x.whoami(); }); })
      .def("status",
           [](PyClient& c) { return c.blocking("Client.status", [](tensord::Client& x) { return x.status(); }); })
      .def("admin_reload", [](PyClient& c) {
        c.blocking("Client.admin_reload", [](tensord::Client& x) { x.adminReload(); });
      })
      .def("ops", [](PyClient& c) { return c.blocking("Client.ops", [](tensord::Client& x) { return x.ops(); }); })
      .def("stats", [](PyClient& c) { return c.use("Client.stats").stats(); })
      .def("daemon_stats", [](PyClient& c) {
        return c.blocking("Client.daemon_stats", [](tensord::Client& x) { return x.daemonStats(); });
      })
      .def("load_file", &PyClient::loadFile, py::arg("path"), py::arg("prefix") = "", py::arg("overwrite") = false,
           py::arg("progress") = py::none())
      .def("save_file", &PyClient::saveFile, py::arg("path"), py::arg("names") = std::vector<std::string>{},
           py::arg("prefix") = "", py::arg("overwrite") = false, py::arg("progress") = py::none())
      .def("upload", &PyClient::upload, py::arg("dtype"), py::arg("shape"), py::arg("data"),
           py::arg("progress") = py::none())
      .def("call", &PyClient::call, py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("count") = -1)
      .def("restore", &PyClient::restore)
      .def("capture", &PyClient::capture, py::arg("params"), py::arg("body"))
      .def("list", [](PyClient& c, const std::string& prefix) {
        return c.blocking("Client.ls", [&](tensord::Client& x) { return x.list(prefix); });
      }, py::arg("prefix") = "")
      .def("list_page", [](PyClient& c, const std::string& prefix, const std::string& after, uint32_t limit) {
        return c.blocking("Client.ls", [&](tensord::Client& x) { return x.listPage(prefix, after, limit); });
      }, py::arg("prefix") = "", py::arg("after") = "", py::arg("limit") = 0)
      .def("remove", [](PyClient& c, const std::string& name) {
        c.blocking("Client.rm", [&](tensord::Client& x) { x.remove(name); });
      })
      .def("group_create", [](PyClient& c, const std::string& name, const std::vector<std::string>& members,
                              uint32_t rank, uint32_t timeoutMs) {
        return c.blocking("Client.group_create",
                          [&](tensord::Client& x) { return x.groupCreate(name, members, rank, timeoutMs); });
      }, py::arg("name"), py::arg("members"), py::arg("rank"), py::arg("timeout_ms") = 0)
      .def("group_list", [](PyClient& c) {
        return c.blocking("Client.group_list", [](tensord::Client& x) { return x.groupList(); });
      })
      .def("group_delete", [](PyClient& c, const std::string& name) {
        c.blocking("Client.group_delete", [&](tensord::Client& x) { x.groupDelete(name); });
      }, py::arg("name"))
      .def("collective", &PyClient::collective, py::arg("group"), py::arg("kind"), py::arg("inputs"),
           py::arg("attrs"));

  m.def("form_group", [](const std::vector<PyClient*>& clients, const std::string& name,
                         const std::vector<std::string>& members, uint32_t timeoutMs) {
    std::vector<tensord::Client*> handles;
    for (size_t i = 0; i < clients.size(); ++i) {
      if (clients[i] == nullptr) throw py::type_error("form_group: client " + std::to_string(i) + " is None");
      handles.push_back(&clients[i]->use("form_group"));
    }
    return interruptible([&] { return tensord::formGroup(handles, name, members, timeoutMs); });
  }, py::arg("clients"), py::arg("name"), py::arg("members"), py::arg("timeout_ms") = 0);

  py::class_<PyProcessGroup>(m, "ProcessGroup")
      .def(py::init<PyClient&, const std::string&>(), py::arg("client"), py::arg("name"))
      .def_property_readonly("name", [](const PyProcessGroup& g) { return g.get().name(); })
      .def_property_readonly("rank", [](const PyProcessGroup& g) { return g.get().rank(); })
      .def_property_readonly("size", [](const PyProcessGroup& g) { return g.get().size(); })
      .def_property_readonly("info", [](const PyProcessGroup& g) { return g.get().info(); })
      .def("set_timeout_ms",
           [](PyProcessGroup& g, uint32_t ms) { g.use("ProcessGroup.timeout_ms").setTimeoutMs(ms); });

  py::class_<PyDistributedDataParallel>(m, "DistributedDataParallel")
      .def(py::init([](PyProcessGroup& group, const std::vector<PyTensor*>& params, uint64_t bucketBytes,
                       bool overlap, bool broadcastParameters) {
             return std::make_unique<PyDistributedDataParallel>(
                 group, params,
                 tensord::DdpOptions{
                     .bucketBytes = bucketBytes, .overlap = overlap, .broadcastParameters = broadcastParameters});
           }),
           py::arg("group"), py::arg("params"), py::arg("bucket_bytes"), py::arg("overlap"),
           py::arg("broadcast_parameters"))
      .def("finish_gradients", [](PyDistributedDataParallel& d) {
        auto& ddp = d.use("DistributedDataParallel.finish_gradients");
        py::gil_scoped_release nogil;
        ddp.finishGradients();
      })
      .def("sync_gradients", [](PyDistributedDataParallel& d) {
        auto& ddp = d.use("DistributedDataParallel.sync_gradients");
        py::gil_scoped_release nogil;
        ddp.syncGradients();
      })
      .def("set_overlap", [](PyDistributedDataParallel& d, bool on) {
        d.use("DistributedDataParallel.overlap").setOverlap(on);
      })
      .def_property_readonly("buckets", [](PyDistributedDataParallel& d) {
        return d.use("DistributedDataParallel.buckets").buckets();
      });

  py::class_<PyGraph>(m, "Graph")
      .def("run", &PyGraph::run)
      .def_property_readonly("inputs", &PyGraph::inputs)
      .def_property_readonly("outputs", &PyGraph::outputs)
      .def_property_readonly("calls", &PyGraph::calls)
      .def("kernels", &PyGraph::kernels);

  py::class_<BatchScope>(m, "BatchScope")
      .def(py::init<PyClient&>(), py::arg("client"), py::keep_alive<1, 2>())
      .def("enter", &BatchScope::enter)
      .def("send", &BatchScope::send)
      .def("exit", &BatchScope::exit);

  py::class_<NoGradScope>(m, "NoGradScope")
      .def(py::init<>())
      .def("enter", &NoGradScope::enter)
      .def("exit", &NoGradScope::exit);
  m.def("grad_enabled", &tensord::gradEnabled);

  py::class_<PyOptimizer>(m, "Optimizer")
      .def("step", &PyOptimizer::step)
      .def("zero_grad", &PyOptimizer::zeroGrad);
  m.def("sgd", [](const std::vector<PyTensor*>& params, double lr, double momentum, double dampening,
                  double weightDecay, bool nesterov, bool maximize) {
    return makeOptimizer<tensord::optim::SGD>(params,
                                              tensord::optim::SGDOptions{.lr = lr,
                                                                         .momentum = momentum,
                                                                         .dampening = dampening,
                                                                         .weightDecay = weightDecay,
                                                                         .nesterov = nesterov,
                                                                         .maximize = maximize},
                                              "SGD");
  });
  m.def("adam", [](const std::vector<PyTensor*>& params, double lr, double beta1, double beta2, double eps,
                   double weightDecay, bool amsgrad, bool maximize) {
    return makeOptimizer<tensord::optim::Adam>(params,
                                               tensord::optim::AdamOptions{.lr = lr,
                                                                           .beta1 = beta1,
                                                                           .beta2 = beta2,
                                                                           .eps = eps,
                                                                           .weightDecay = weightDecay,
                                                                           .amsgrad = amsgrad,
                                                                           .maximize = maximize},
                                               "Adam");
  });
  m.def("adamw", [](const std::vector<PyTensor*>& params, double lr, double beta1, double beta2, double eps,
                    double weightDecay, bool amsgrad, bool maximize) {
    return makeOptimizer<tensord::optim::AdamW>(params,
                                                tensord::optim::AdamWOptions{.lr = lr,
                                                                             .beta1 = beta1,
                                                                             .beta2 = beta2,
                                                                             .eps = eps,
                                                                             .weightDecay = weightDecay,
                                                                             .amsgrad = amsgrad,
                                                                             .maximize = maximize},
                                                "AdamW");
  });
  m.def("clip_grad_norm", [](const std::vector<PyTensor*>& params, double maxNorm, double normType) {
    std::shared_ptr<Session> session = sessionOf(params, "clip_grad_norm_");
    std::vector<tensord::Tensor> handles = unwrapAll(*session, params, "clip_grad_norm_");
    tensord::Tensor norm;
    {
      py::gil_scoped_release nogil;
      norm = tensord::optim::clipGradNorm(handles, maxNorm, normType);
    }
    return wrap(session, std::move(norm));
  });
}
