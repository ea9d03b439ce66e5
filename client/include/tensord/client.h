#pragma once
// tensord's C++ client: tensors held by a remote daemon that feel local.
//
//   tensord::Client client({.address = "127.0.0.1:7450", .token = "..."});
//   auto x = client.upload(tensord::Shape{2, 3}, data);
//   auto y = relu(matmul(x, w));        // pipelined: no round trip yet
//   std::vector<float> out = y.toHost();  // one round trip for the whole chain
//
// This directory is the whole public API; every other header in the project
// is internal. A Client and the Tensors it made belong to the thread that
// created the Client. Calls are pipelined: an error in a call (bad shape,
// unknown op) surfaces as tensord::Error at the first blocking read of its
// result (toHost, info, wait), naming the op and the argument.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tensord {

enum class DType : uint8_t { F32, F16, BF16, I32, I64, U8, Bool };
std::string_view dtypeName(DType dtype);
uint32_t dtypeSize(DType dtype);

using Shape = std::vector<int64_t>;
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

// Default address and credential of a daemon on the shipped default config.
inline constexpr std::string_view kDefaultAddress = "127.0.0.1:7450";
inline constexpr std::string_view kDefaultToken = "tensord-local";

class Error : public std::runtime_error {
 public:
  enum class Kind { kFailed, kOverloaded, kDisconnected, kUnimplemented };
  Error(Kind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct DeviceInfo {
  std::string name, kind, driver, apiVersion;
  uint32_t vendorId = 0, deviceId = 0;
  uint64_t memoryBytes = 0;
  std::vector<DType> dtypes;  // dtypes tensors on this device can have (empty from a protocol 1 daemon)
};

struct MemoryStats {
  uint64_t liveBytes = 0, reservedBytes = 0, cachedBytes = 0, limitBytes = 0, tensorCount = 0, namedCount = 0;
};

struct DaemonInfo {
  std::string version;
  uint32_t protocolVersion = 0;
  DeviceInfo device;
  MemoryStats memory;
  uint64_t opsExecuted = 0;
  uint64_t maxTensorBytes = 0;
  uint32_t chunkBytes = 0;
};

struct TensorInfo {
  uint64_t id = 0;
  std::string name;  // "" when unnamed
  std::string owner;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t bytes = 0;
};

struct AttrSpec {
  std::string name;
  std::string type;  // "int", "float", "bool", "text", "ints", "floats", "scalar" (an int or a float)
  bool required = false;
  AttrValue defaultValue;  // meaningful when hasDefault
  std::string doc;
  bool hasDefault = false;  // false for a required attr, and for an optional one without default
};

struct InputInfo {
  std::string name;
  std::string role = "data";  // "data" (one of the op's dtypes), "index" (i32/i64), "mask" (bool), "any"
  bool optional = false;      // may be left off
  bool variadic = false;      // takes one or more tensors (last input only)
};

struct OpInfo {
  std::string name, category, doc, backward;
  std::vector<std::string> inputs, outputs;  // names
  std::vector<InputInfo> inputSpecs;         // the inputs in full; names only (role data) from a protocol 1 daemon
  std::vector<AttrSpec> attrs;
  std::vector<DType> dtypes;
  bool view = false;                  // output 0 shares input 0's memory
  std::vector<std::string> mutates;   // inputs written in place
  bool differentiable = false;
};

struct QuotaUse {
  std::string name;  // "device_bytes", "tensor_count", "connections", ...
  uint64_t limit = 0;
  uint64_t used = 0;  // 0 where the daemon does not measure it
};

// The caller as the daemon sees it (Session.status, protocol 4).
struct SessionStatus {
  std::string principal;
  std::vector<std::string> roles;  // from the policy in force; empty without one
  std::vector<QuotaUse> quotas;    // the quotas the policy sets for the principal
};

// The daemon's load (Session.stats, Client::daemonStats). Durations in seconds.
struct OpStats {
  std::string op;
  uint64_t completed = 0;  // calls whose work finished
  uint64_t failed = 0;     // refused once the op was known, or failed on the device
  // From a call's arrival to its work's completion (histogram estimates).
  double latencyP50 = 0, latencyP90 = 0, latencyP99 = 0, latencyMax = 0;
  // Device time (timestamp queries); 0 where the device has none.
  double deviceSeconds = 0, deviceP50 = 0, deviceP99 = 0;
};

struct PrincipalStats {
  std::string principal;
  uint64_t deviceBytes = 0;  // device memory of its live tensors
  uint64_t tensors = 0;      // live tensors it owns
  uint64_t sessions = 0;     // open sessions
  uint64_t calls = 0;        // requests since the daemon started
  uint64_t ops = 0;          // of which op calls
  uint64_t bytesIn = 0;      // uploaded
  uint64_t bytesOut = 0;     // downloaded
};

struct DaemonStats {
  std::string version;
  double uptimeSeconds = 0;
  DeviceInfo device;
  MemoryStats memory;
  uint64_t connections = 0;          // open sockets
  uint64_t connectionsAccepted = 0;  // since start
  uint64_t sessions = 0;
  uint64_t inflightCalls = 0;
  uint64_t queuedJobs = 0;  // device work waiting for a batch
  uint64_t bytesIn = 0;
  uint64_t bytesOut = 0;
  uint64_t opsExecuted = 0;
  bool deviceTimestamps = false;  // whether OpStats' device times are measured
  std::string metricsAddress;     // HOST:PORT of the Prometheus endpoint; "" when off
  std::vector<PrincipalStats> principals;
  std::vector<OpStats> ops;
};

// A safetensors file on the daemon's disk and the tensors it moved
// (Client::loadFile, Client::saveFile).
struct FileTransfer {
  std::string path;                 // the file, as the daemon resolved it
  std::vector<TensorInfo> tensors;  // load: the tensors made, in file order; save: those written, by daemon name
  uint64_t bytes = 0;               // load: the tensor bytes read; save: the file's size
};

// A group of daemons that run collectives together (Client::groupCreate,
// Client::groupList), as this daemon sees it.
struct GroupInfo {
  std::string name;
  uint32_t rank = 0, size = 0;       // this daemon's place among `size` members
  std::vector<std::string> members;  // HOST:PORT of every member, by rank
  std::string state;                 // "ready", or "broken: <why>" until re-formed
  std::string origin;                // "config" or the principal that formed it
  uint64_t collectives = 0;          // completed since the group formed
};

// A kernel registered with the daemon (Client::kernelAdd ..., protocol 7):
// an op named user.NAME, called like any other (docs/kernels.md).
struct KernelInfo {
  std::string name;          // the op's name, "user.NAME"
  std::string owner;         // principal that registered it
  std::string language;      // "glsl" or "spirv"
  std::string description;   // the JSON description it was registered with
  std::string sourceSha256;  // hex digest of the source as given
  OpInfo spec;               // how it is called, as ops() shows it
  std::string source;        // kernelShow only: the GLSL text or the SPIR-V bytes
};

// One page of a tensor listing (Client::listPage).
struct TensorPage {
  std::vector<TensorInfo> tensors;
  std::string next;  // "" on the last page; else pass it as `after` for the next one
};

// What a Client did: calls issued and requests it waited for (round trips).
struct CallStats {
  uint64_t calls = 0;       // Session.call requests sent (pipelined or not)
  uint64_t roundTrips = 0;  // requests the client blocked on (toHost, info, wait, uploads, listings ...)
};

// While one exists, calls on this thread are not recorded for autograd (as
// torch.no_grad()).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};
bool gradEnabled();  // false inside a NoGrad scope

// Called during long transfers with (bytes done, bytes total).
using Progress = std::function<void(uint64_t done, uint64_t total)>;

class Client;

class Tensor {
 public:
  Tensor() = default;  // a null handle
  explicit operator bool() const { return impl_ != nullptr; }

  TensorInfo info() const;  // blocks; throws the error of the call that made it
  DType dtype() const { return info().dtype; }
  Shape shape() const { return info().shape; }

  std::vector<std::byte> bytes(const Progress& progress = {}) const;  // blocks
  std::vector<float> toHost() const;  // blocks; f32 tensors only
  // The same downloads into memory the caller owns (a buffer reused from one
  // download to the next costs no allocation and no page faults); both block,
  // toHostInto reads f32 tensors only. `out` must hold exactly the tensor's
  // bytes (toHostInto: its elements), else they throw Error naming the call
  // and both sizes. On an error `out`'s contents are unspecified; once they
  // return or throw nothing writes to it.
  void bytesInto(std::span<std::byte> out, const Progress& progress = {}) const;
  void toHostInto(std::span<float> out) const;
  void wait() const;                  // blocks until the tensor exists (or throws)

  // Names the tensor so it outlives this client; restore() finds it again.
  void save(std::string_view name, bool overwrite = false) const;

  Client& client() const;

  // Autograd. A tensor marked setRequiresGrad() is a leaf: calls on it (and on
  // what they produce) are recorded, and backward() on a result issues the
  // backward ops in reverse order, pipelined like any call, accumulating each
  // leaf's gradient in grad(). Gradients live on the daemon.
  Tensor& setRequiresGrad(bool on = true);  // leaves only (a tensor no recorded call made)
  bool requiresGrad() const;             // a leaf marked so, or the result of a recorded call
  Tensor grad() const;                   // null until a backward() reaches this leaf
  void setGrad(Tensor grad);             // replaces it; a null Tensor clears it
  // Backpropagates from this tensor with `gradient` (ones of this tensor's
  // shape when null) and frees the recorded graph behind it. Issues calls
  // only: nothing blocks; errors surface at the next blocking read.
  void backward(const Tensor& gradient = {}) const;
  Tensor detach() const;  // the same daemon tensor, without recorded history
  // Sets (or with an empty function clears) this leaf's gradient-ready hook:
  // backward() calls it once per pass, as soon as every contribution to the
  // leaf's gradient in that pass has been issued (the gradient may still be a
  // promise), while the backward of earlier calls is still to be issued. It
  // is called with the leaf, under NoGrad, and may read and replace grad()
  // (DistributedDataParallel starts a bucket's all-reduce from it). An
  // exception from the hook leaves backward() and keeps the graph.
  void setGradReadyHook(std::function<void(Tensor& leaf)> hook);

  struct Impl;

 private:
  friend class Client;
  explicit Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

struct ConnectOptions {
  // HOST:PORT (plain TCP) or tls://HOST:PORT (TLS 1.2+; the daemon's
  // certificate must be valid for HOST: a DNS name or an IP address SAN).
  std::string address{kDefaultAddress};
  // Bearer token. Set it to "" to authenticate with the client certificate
  // (certFile) instead: the daemon maps the certificate to a principal.
  std::string token{kDefaultToken};
  std::string caFile;    // PEM CA(s) trusted for the daemon's certificate; "" = the system trust store
  std::string certFile;  // PEM client certificate (chain) for mutual TLS; "" = none
  std::string keyFile;   // its PEM private key (unencrypted)
};

namespace detail {
class Connection;
}  // namespace detail

// While a Batch of a client exists, the calls made through that client
// that have outputs are held and go to the daemon together, as one message,
// instead of one message each: a chain of small ops then costs about one
// round trip. What is held is sent when the outermost Batch ends, when
// send() is called, when anything else goes to the daemon or is waited for
// (a read, wait(), an upload, a call without outputs, a collective: order
// is kept), and every 256 calls. Each call still runs, and fails, exactly
// as on its own: its error reaches its outputs' next blocking read. Handles
// work as usual meanwhile; an output nobody holds any more when the batch
// is sent is freed on the daemon as soon as the device is done with it.
// Batches nest. Thread: the client's.
class Batch {
 public:
  explicit Batch(Client& client);
  ~Batch();  // sends what is held
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void send();  // sends what is held now; the batch stays open

 private:
  std::shared_ptr<detail::Connection> conn_;
};

// One input of a graph (Client::capture): its dtype and shape.
struct GraphInput {
  DType dtype = DType::F32;
  Shape shape;
};

// Calls captured once (Client::capture) and run many times, each run one
// request and one piece of device work, as CUDA graphs are: the checks that
// depend only on what was captured (ops, attributes, shapes) ran once, at
// capture; a run still authorizes, charges quotas and allocates its
// outputs. A chain of small ops then costs about one round trip.
class Graph {
 public:
  Graph() = default;  // a null graph
  explicit operator bool() const { return impl_ != nullptr; }

  // Runs the graph on `inputs` (one per captured input, of its dtype and
  // shape) and returns its outputs at once, pipelined like a call's; an
  // error (a wrong input, a quota) surfaces at their first blocking read.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  size_t inputs() const;   // how many run() takes
  size_t outputs() const;  // how many run() returns
  size_t calls() const;    // calls captured
  // Kernels a run records, as the daemon planned them: the captured calls
  // less views, each run of elementwise calls on one shape fused into one.
  // Asks the daemon (one round trip); 0 from a daemon that does not say.
  size_t kernels() const;

  struct Impl;

 private:
  friend class Client;
  explicit Graph(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

class Client {
 public:
  explicit Client(ConnectOptions options = {});  // connects and authenticates; throws Error
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  DaemonInfo info();
  std::string whoami();
  // Principal, roles and quota use; throws Error (kUnimplemented from a daemon
  // older than protocol 4).
  SessionStatus status();
  // Has the daemon re-read its tokens and policy (as SIGHUP does); needs the
  // `&admin:reload` right. Throws Error with the daemon's message.
  void adminReload();
  // Has the daemon read a safetensors file from its own disk into named
  // tensors: tensor T of the file becomes prefix + T. `path` must lie in one
  // of the directories the daemon's config lists under files.dirs (relative:
  // to the first). All or nothing: a bad file or a missing right loads
  // nothing. A name that exists is replaced only with `overwrite`. Needs the
  // `&files:load` right and `w` on the names. `progress` gets (bytes on the
  // device, bytes in the file). Throws Error.
  FileTransfer loadFile(std::string_view path, std::string_view prefix = {}, bool overwrite = false,
                        const Progress& progress = {});
  // Has the daemon write named tensors to a safetensors file on its disk
  // (files.dirs as for loadFile): the tensors prefix + NAME for each of
  // `names`, or with no names every tensor the caller may read whose name
  // starts with `prefix`; in the file without the prefix. The file appears
  // whole or not at all; an existing one is replaced only with `overwrite`.
  // Needs the `&files:save` right and `r` on the names. Throws Error.
  FileTransfer saveFile(std::string_view path, const std::vector<std::string>& names = {},
                        std::string_view prefix = {}, bool overwrite = false, const Progress& progress = {});
  std::vector<OpInfo> ops();
  CallStats stats() const;
  // The daemon's load: device, memory, connections, queue, bytes moved, per
  // principal and per op (Session.stats). Needs the
  // `&admin:usage` right; throws Error (kUnimplemented from an older daemon).
  DaemonStats daemonStats();

  Tensor upload(DType dtype, Shape shape, std::span<const std::byte> data, const Progress& progress = {});
  Tensor upload(Shape shape, std::span<const float> data);

  // Pipelined: returns at once; outputs can feed further calls immediately.
  std::vector<Tensor> call(std::string_view op, std::vector<Tensor> inputs, Attrs attrs = {});
  Tensor call1(std::string_view op, std::vector<Tensor> inputs, Attrs attrs = {});

  // Captures the calls `body` makes as a Graph. `body` gets one placeholder
  // tensor per entry of `inputs` and returns the graph's outputs, results
  // of calls it made; it may also use tensors made before (the graph holds
  // and reads them on every run). Calls without outputs (zero_, optimizer
  // steps) are captured too and write their inputs in place on every run;
  // a graph may then return nothing. While it runs, reading, waiting for or
  // sending a placeholder or a result (a download) throws Error, and tensors
  // made inside are placeholders that cannot be read afterwards either. Ops
  // whose output shapes depend on the input values (masked_select) cannot
  // be captured. Blocks for one round trip; throws the first call's error,
  // naming it ("graphCreate: call 3 (add): ...").
  Graph capture(const std::vector<GraphInput>& inputs,
                const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body);

  Tensor restore(std::string_view name);  // pipelined
  // The named tensors the caller may read, sorted by name, then this
  // client's live unnamed ones; with a prefix, only names starting with it.
  // Follows every page.
  std::vector<TensorInfo> list(std::string_view prefix = {});
  // One page of that listing, resuming after `after` (a previous page's
  // next; "" for the first). limit 0 = the daemon's default page size (the
  // daemon caps it). A daemon older than protocol 5 answers with everything
  // on one page.
  TensorPage listPage(std::string_view prefix = {}, std::string_view after = {}, uint32_t limit = 0);
  void remove(std::string_view name);

  // Collectives (protocol 7). groupCreate forms group `name` with this
  // daemon as member `rank` of `members` (HOST:PORT of each member's
  // listener, by rank); every member must be asked the same way, concurrently
  // (tensorctl group create does). Blocks until all members are connected to
  // each other or `timeoutMs` (0: the daemon's groups.timeout_ms) passed. A
  // group of the same name is replaced. Needs `&group:create`. Throws Error.
  GroupInfo groupCreate(std::string_view name, const std::vector<std::string>& members, uint32_t rank,
                        uint32_t timeoutMs = 0);
  std::vector<GroupInfo> groupList();       // the daemon's groups, sorted by name; blocks
  void groupDelete(std::string_view name);  // leaves the group; blocks
  // Runs collective `kind` ("allreduce", "broadcast", "allgather",
  // "reduce_scatter", "barrier") over `group` on tensors this daemon holds.
  // Every member must issue the same collectives in the same order. Attrs:
  // op ("sum", "mean", "max", "min"), root, in_place (bool), timeout_ms.
  // Pipelined like call(): returns at once; the outputs (one per input for
  // allreduce and broadcast, one for allgather and reduce_scatter, none for
  // barrier) can feed further calls; an error surfaces at the first blocking
  // read. With in_place the outputs are the inputs, written once the
  // collective succeeded.
  std::vector<Tensor> collective(std::string_view group, std::string_view kind, std::vector<Tensor> inputs,
                                 Attrs attrs = {});

  // User kernels (protocol 7, docs/kernels.md). kernelAdd registers a
  // compute kernel as op `name` ("user.NAME"; a bare NAME gets the prefix):
  // `language` "glsl" (source text) or "spirv" (the module's bytes), with
  // its JSON `description`. The daemon compiles and checks it before
  // registering anything; errors name the line or binding at fault. An
  // existing kernel is replaced only with `replace`. Needs the @kernel
  // category. Blocks; throws Error. The kernel is then called with call().
  KernelInfo kernelAdd(std::string_view name, std::string_view language, std::span<const std::byte> source,
                       std::string_view description, bool replace = false);
  KernelInfo kernelAdd(std::string_view name, std::string_view glsl, std::string_view description,
                       bool replace = false);
  std::vector<KernelInfo> kernelList();  // sorted by name
  void kernelRemove(std::string_view name);  // its owner, or a principal with @kernel
  KernelInfo kernelShow(std::string_view name);  // with `source`

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Local-feeling op helpers; each is one pipelined call.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor relu(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace tensord
