# tensord wire contract.
#
# Compatibility rules: the file id below never changes; fields, enumerants and
# methods are only ever appended (new ordinals), never renumbered or removed.
# `Daemon.info` reports `protocolVersion`; bump it when something is appended.

@0xbd2f239089867d59;

$import "/capnp/c++.capnp".namespace("tensord::proto");

const protocolVersion :UInt32 = 9;
# 2: OpSpec.inputSpecs/view/mutates/differentiable, DeviceInfo.dtypes, AttrType.scalar.
# 3: Daemon.authenticateWithCertificate.
# 4: Session.adminReload, Session.status, QuotaUse.
# 5: Session.listTensors pages: prefix, after, limit and next.
# 6: Session.loadFile, saveFile, stats.
# 7: user kernels (Session @13-@16), groups and collectives (Session @17-@20).
# 8: Session.callBatch (@22), BatchCall, BatchInput, BatchOutput; Session.graphCreate (@23), Graph.

# ---------------------------------------------------------------- data types

enum DType {
  f32 @0;
  f16 @1;
  bf16 @2;
  i32 @3;
  i64 @4;
  u8 @5;
  bool @6;
}

struct TensorDesc {
  dtype @0 :DType;
  shape @1 :List(Int64);
}

struct AttrValue {
  union {
    int @0 :Int64;
    float @1 :Float64;
    bool @2 :Bool;
    text @3 :Text;
    ints @4 :List(Int64);
    floats @5 :List(Float64);
  }
}

struct Attr {
  name @0 :Text;
  value @1 :AttrValue;
}

# ------------------------------------------------------------- introspection

enum AttrType {
  int @0;
  float @1;
  bool @2;
  text @3;
  ints @4;
  floats @5;
  scalar @6;               # a number operand: int or float, kept as given (PyTorch's Python-scalar promotion)
}

struct AttrSpec {
  name @0 :Text;
  type @1 :AttrType;
  required @2 :Bool;
  default @3 :AttrValue;   # meaningful only when `required` is false
  doc @4 :Text;
}

struct InputSpec {
  name @0 :Text;
  role @1 :Text;           # what it holds, which decides its dtypes: "data" (one of
                           # the op's `dtypes`), "index" (i32 or i64), "mask" (bool),
                           # "any" (checked by the op)
  optional @2 :Bool;       # may be left off (only trailing inputs are optional)
  variadic @3 :Bool;       # last input only: takes one or more tensors (cat, stack)
}

struct OpSpec {
  name @0 :Text;
  category @1 :Text;       # "elementwise", "reduction", "linalg", ...
  inputs @2 :List(Text);   # input names, in call order
  outputs @3 :List(Text);
  attrs @4 :List(AttrSpec);
  dtypes @5 :List(DType);  # dtypes the op accepts
  doc @6 :Text;
  backward @7 :Text;       # name of the op computing its gradient, "" if none
  inputSpecs @8 :List(InputSpec);  # the inputs in full, in call order (`inputs` are their names)
  view @9 :Bool;           # output 0 shares input 0's device memory; nothing runs on the device
  mutates @10 :List(Text); # names of inputs the op writes in place (the caller needs write access)
  differentiable @11 :Bool;# false: no gradient exists (comparisons, argmax, creation ...)
}

struct DeviceInfo {
  name @0 :Text;
  kind @1 :Text;           # "discrete", "integrated", "virtual", "cpu", "other"
  vendorId @2 :UInt32;
  deviceId @3 :UInt32;
  driver @4 :Text;
  apiVersion @5 :Text;
  memoryBytes @6 :UInt64;  # size of the device-local heap
  dtypes @7 :List(DType);  # dtypes tensors on this device can have (f16/bf16, u8/bool and
                           # i64 need optional device features); an op's usable dtypes are
                           # its `dtypes` intersected with these
}

struct MemoryStats {
  liveBytes @0 :UInt64;    # bytes of live tensors (logical sizes)
  reservedBytes @1 :UInt64;# device memory held by the allocator, cache included
  cachedBytes @2 :UInt64;  # part of reserved that is free for reuse
  limitBytes @3 :UInt64;   # configured ceiling for tensor memory
  tensorCount @4 :UInt64;
  namedCount @5 :UInt64;
}

struct DaemonInfo {
  version @0 :Text;
  protocolVersion @1 :UInt32;
  device @2 :DeviceInfo;
  memory @3 :MemoryStats;
  opsExecuted @4 :UInt64;  # op calls enqueued since start, all sessions
  maxTensorBytes @5 :UInt64;
  chunkBytes @6 :UInt32;   # preferred size of one upload/download chunk
}

struct QuotaUse {
  name @0 :Text;           # policy quota key: "device_bytes", "tensor_count", "connections", ...
  limit @1 :UInt64;        # from the policy
  used @2 :UInt64;         # current use; 0 where the daemon does not measure it
}

struct TensorInfo {
  id @0 :UInt64;
  name @1 :Text;           # "" for an unnamed (ephemeral) tensor
  owner @2 :Text;          # principal that created it
  desc @3 :TensorDesc;
  bytes @4 :UInt64;
}

# Session.stats: the daemon's load, for `tensorctl stat` and monitoring.
struct OpStats {
  op @0 :Text;
  completed @1 :UInt64;     # calls whose work finished (views: when they were made)
  failed @2 :UInt64;        # calls refused after the op was known, or failed on the device
  latencyP50 @3 :Float64;   # seconds from a call's arrival to its work's completion,
  latencyP90 @4 :Float64;   # over the completed calls (0 when none): estimates from a
  latencyP99 @5 :Float64;   # histogram whose buckets are 10^0.1 apart (within ~12%)
  latencyMax @6 :Float64;
  deviceSeconds @7 :Float64;# device time of the completed calls, summed (timestamp queries)
  deviceP50 @8 :Float64;    # device time per call; 0 where the device has no timestamps
  deviceP99 @9 :Float64;
}

struct PrincipalStats {
  principal @0 :Text;
  deviceBytes @1 :UInt64;   # device memory of the live tensors it owns
  tensors @2 :UInt64;       # live tensors it owns, named and unnamed
  sessions @3 :UInt64;      # open sessions
  calls @4 :UInt64;         # Session, Tensor and TensorWriter requests since start
  ops @5 :UInt64;           # of which op calls
  bytesIn @6 :UInt64;       # tensor data uploaded since start
  bytesOut @7 :UInt64;      # tensor data downloaded since start
}

struct DaemonStats {
  version @0 :Text;
  uptimeSeconds @1 :Float64;
  device @2 :DeviceInfo;
  memory @3 :MemoryStats;
  connections @4 :UInt64;        # open sockets (TLS handshakes included)
  connectionsAccepted @5 :UInt64;# since start
  sessions @6 :UInt64;           # open authenticated sessions
  inflightCalls @7 :UInt64;      # requests being served now
  queuedJobs @8 :UInt64;         # device work waiting to be recorded into a batch
  bytesIn @9 :UInt64;            # tensor data uploaded since start, all principals
  bytesOut @10 :UInt64;          # tensor data downloaded since start
  opsExecuted @11 :UInt64;       # op calls enqueued since start (as DaemonInfo)
  deviceTimestamps @12 :Bool;    # whether device times are measured (OpStats.device*)
  principals @13 :List(PrincipalStats);  # sorted by name
  ops @14 :List(OpStats);        # ops called since start, sorted by name
  metricsAddress @15 :Text;      # HOST:PORT of the Prometheus endpoint; "" when off
}

# A kernel registered by a peer (Session.kernelAdd ...).
struct KernelInfo {
  name @0 :Text;           # the op's name, as `call` takes it
  owner @1 :Text;          # principal that registered it
  language @2 :Text;       # "glsl" or "spirv"
  description @3 :Text;    # the JSON description it was registered with
  sourceSha256 @4 :Text;   # hex digest of the source or SPIR-V as given
  spec @5 :OpSpec;         # how it is called, as listOps shows it
}

# Groups of daemons that run collectives together (Session.groupCreate ...).
struct GroupInfo {
  name @0 :Text;
  rank @1 :UInt32;         # this daemon's place in `members`
  size @2 :UInt32;
  members @3 :List(Text);  # HOST:PORT of every member, by rank
  state @4 :Text;          # "ready", or "broken: <why>" until the group is re-formed
  origin @5 :Text;         # "config" or the principal that formed it
  collectives @6 :UInt64;  # collectives completed on this group since it formed
}

# ---------------------------------------------------------------- interfaces

interface Daemon {
  # The bootstrap capability. It only identifies the daemon and authenticates;
  # all work hangs off the Session it returns.

  info @0 () -> (info :DaemonInfo);
  authenticate @1 (token :Text) -> (session :Session, principal :Text);
  authenticateWithCertificate @2 () -> (session :Session, principal :Text);
  # Over TLS with a verified client certificate only: the certificate's
  # subject CN or one of its DNS/email SANs must be mapped to a principal in
  # the daemon's auth.certificates; fails with "authentication failed: ..."
  # otherwise (plain TCP, no certificate, no mapping).
}

interface Tensor {
  # A handle to a tensor held by the daemon. Dropping the last reference to an
  # unnamed tensor frees it.

  info @0 () -> (info :TensorInfo);
  download @1 (sink :ByteSink, offset :UInt64, length :UInt64) -> ();
  # Streams bytes [offset, offset+length) to `sink` in chunks, then calls
  # sink.done(). length 0 means "to the end". Returns after done() returned.
  save @2 (name :Text, overwrite :Bool) -> ();
  # Gives the tensor a persistent name; it then lives until deleted.
}

interface ByteSink {
  write @0 (data :Data) -> stream;
  done @1 () -> ();
}

interface TensorWriter {
  # Returned by Session.upload. Bytes arrive in order through write(); commit()
  # checks the byte count and yields the tensor.
  write @0 (data :Data) -> stream;
  commit @1 () -> (tensor :Tensor);
}

interface Progress {
  # Passed by a client to follow a long server-side operation (loadFile,
  # saveFile). Updates may be coalesced; the last one has done == total.
  update @0 (done :UInt64, total :UInt64) -> stream;
}

# One call of Session.callBatch.
struct BatchCall {
  op @0 :Text;
  inputs @1 :List(BatchInput);
  attrs @2 :List(Attr);
}

struct BatchInput {
  union {
    tensor @0 :Tensor;         # a tensor the client holds (may be a promise)
    earlier @1 :BatchOutput;   # an output of an earlier call of the batch
    param @2 :UInt32;          # graphCreate only: the graph's input of that index
  }
}

struct BatchOutput {
  call @0 :UInt32;    # index into the batch's calls
  output @1 :UInt32;  # index into that call's outputs
}

interface Graph {
  # Calls captured by Session.graphCreate, bound to the session that made it.
  run @0 (inputs :List(Tensor)) -> (results :OpResults, output :Tensor);
  # Runs the graph's calls on `inputs` (one per param, of its dtype and
  # shape) as one piece of device work; `results.get(i)` is the graph's
  # i-th output, pipelined. Authorization, quotas and limits apply to every
  # call of every run as they would to `call`; the checks that depend only
  # on what was captured (attributes, shapes) ran at capture. `output` is
  # the first output (since protocol 9): pipelining on it saves the `get`.
  info @1 () -> (calls :UInt32, params :List(TensorDesc), outputs :List(TensorDesc), kernels :UInt32);
  # `kernels`: the pieces of device work a run records. Views record none,
  # and each run of consecutive elementwise calls whose results share one
  # shape is fused into one kernel that keeps its intermediate values in
  # registers. 0 from a daemon that does not report it.
}

interface OpResults {
  get @0 (index :UInt32) -> (tensor :Tensor);
}

interface Session {
  # Bound to one authenticated principal.

  whoami @0 () -> (principal :Text);
  info @1 () -> (info :DaemonInfo);
  listOps @2 () -> (ops :List(OpSpec));
  call @3 (op :Text, inputs :List(Tensor), attrs :List(Attr))
      -> (output :Tensor, outputs :List(Tensor), results :OpResults);
  # `output` is the first output; `outputs` all of them. Cap'n Proto can only
  # pipeline on struct fields, not list elements, so chain on `output`, or on
  # `results.get(i)` for the other outputs of a multi-output op: both can be
  # used before this call returns.
  upload @4 (desc :TensorDesc) -> (writer :TensorWriter);
  restore @5 (name :Text) -> (tensor :Tensor);
  listTensors @6 (prefix :Text, after :Text, limit :UInt32) -> (tensors :List(TensorInfo), next :Text);
  # One page of the named tensors the caller may read, sorted by name, then
  # this session's live unnamed ones, by id. `prefix`: only names starting
  # with it (unnamed tensors show only when it is empty). `after`: resume
  # after this point; pass the previous page's `next`, "" for the first page.
  # `limit`: at most this many entries; 0 = the daemon's default (1000), and
  # the daemon caps it (10000). `next` is "" on the last page; otherwise the
  # last entry's name, or "#<id>" once the unnamed tensors are reached.
  deleteTensor @7 (name :Text) -> ();
  adminReload @8 () -> ();
  # Re-reads the daemon's config file for its tokens and policy exactly as
  # SIGHUP does: both are replaced, or, when something does not parse, the
  # call fails with the error and the previous ones stay. Needs the
  # `&admin:reload` right; denials are audited.
  status @9 () -> (principal :Text, roles :List(Text), quotas :List(QuotaUse));
  # The caller's principal, its roles in the policy in force, and each quota
  # the policy sets for it with its current use.
  loadFile @10 (path :Text, prefix :Text, overwrite :Bool, progress :Progress)
      -> (path :Text, tensors :List(TensorInfo));
  # Reads a safetensors file from the daemon's own disk into named tensors:
  # tensor T of the file becomes `prefix` + T, owned by the caller. `path`
  # must lie inside one of the config's `files.dirs` (a relative path is
  # taken relative to the first); `..` and symlinks leading out are refused.
  # The whole header is validated first and the tensors are named only once
  # all of them are on the device: a bad file, a missing right or a full
  # device loads nothing. A name that exists already is replaced only with
  # `overwrite`. Needs the `&files:load` right and `w` on every name.
  # `progress` (may be null) receives (bytes on the device, bytes in the
  # file). Returns the resolved path and the tensors made, in file order.
  saveFile @11 (path :Text, names :List(Text), prefix :Text, overwrite :Bool, progress :Progress)
      -> (path :Text, tensors :List(TensorInfo), bytes :UInt64);
  # Writes named tensors to a safetensors file on the daemon's disk, inside
  # `files.dirs` as for loadFile. `names`: the tensors `prefix` + NAME; empty:
  # every tensor the caller may read whose name starts with `prefix`. In the
  # file each is named without `prefix`, so saveFile and loadFile with the
  # same prefix are inverses. The file appears complete or not at all (a
  # temporary file renamed into place); an existing one is replaced only
  # with `overwrite`. Needs the `&files:save` right and `r` on every name.
  # Returns the resolved path, the tensors written (with their daemon
  # names) and the file's size.
  stats @12 () -> (stats :DaemonStats);
  # The daemon's load since start: device and memory, connections, queue,
  # bytes moved, per-principal use and per-op counts and latencies. Shows
  # every principal, so it needs the `&admin:usage` right.

  kernelAdd @13 (name :Text, language :Text, source :Data, description :Text, replace :Bool)
      -> (kernel :KernelInfo);
  # Registers a compute kernel as op `name`: GLSL source compiled by the
  # daemon, or a SPIR-V binary, with a JSON `description` of its bindings,
  # attributes, output shapes and dispatch grid (docs/kernels.md). It is
  # compiled, validated and checked against the description before anything
  # is registered; errors name the line or the binding at fault. Needs the
  # `@kernel` category (admin by default). Kernels persist in the state
  # directory.
  kernelList @14 () -> (kernels :List(KernelInfo));
  kernelRemove @15 (name :Text) -> ();
  # Only the owner or a principal with `@kernel` may remove.
  kernelShow @16 (name :Text) -> (kernel :KernelInfo, source :Data);

  groupCreate @17 (name :Text, members :List(Text), rank :UInt32, timeoutMs :UInt32)
      -> (group :GroupInfo);
  # Forms group `name` with this daemon as member `rank` of `members`
  # (HOST:PORT of each member's listener, by rank). Every member must be
  # asked the same way (tensorctl group create does it for all at once);
  # returns once all members are connected to each other, or fails after
  # `timeoutMs` (0: the config's groups.timeout_ms) naming the members that
  # did not answer. A group of the same name is replaced. Needs the
  # `&group:create` right.
  groupList @18 () -> (groups :List(GroupInfo));
  # The groups this daemon belongs to, sorted by name.
  groupDelete @19 (name :Text) -> ();
  # Leaves group `name`; collectives in flight on it fail on every member.
  # Needs the `&group:create` right.
  collective @20 (group :Text, kind :Text, inputs :List(Tensor), attrs :List(Attr))
      -> (output :Tensor, outputs :List(Tensor), results :OpResults);
  # Runs one collective over group `group`; every member must issue the
  # same collectives in the same order (the Nth on one member meets the Nth
  # on the others). `kind`: "allreduce", "broadcast", "allgather",
  # "reduce_scatter" or "barrier". `inputs`: the tensors taking part (one or
  # more for allreduce and broadcast, which treat them as one bucket; one
  # for allgather and reduce_scatter; none for barrier); they may be
  # promises from earlier calls. Attributes: `op` ("sum", "mean", "max",
  # "min"; allreduce and reduce_scatter; default "sum"), `root` (broadcast;
  # default 0), `in_place` (bool, default false: results are new tensors;
  # true: each input is overwritten with its result once the whole
  # collective succeeded and the outputs are the inputs), `timeout_ms`
  # (default: the config's groups.timeout_ms). allgather stacks the members'
  # tensors along a new leading dimension of size `size`; reduce_scatter
  # takes a tensor whose leading dimension is divisible by the group size
  # and returns this rank's slice of the reduction. Shapes, dtypes and
  # attributes are compared across members before any data moves; a
  # mismatch fails the collective on every member with both sides named. A
  # member that fails, disconnects or stalls past the timeout fails it on
  # every survivor, whose inputs stay unchanged; the group is then "broken"
  # until re-formed. Needs the `@collective` category for `kind` (as an op
  # name) plus `r` (and `w` for in_place) on named inputs.

  groupConnect @21 (group :Text, members :List(Text), rank :UInt32, nonce :UInt64)
      -> (peer :GroupPeer, nonce :UInt64);
  # Node to node: the daemon that is member `rank` of group `group` (with
  # exactly these `members`) dials this daemon, a fellow member, and gets
  # the capability through which it sends this daemon its part of every
  # collective. `nonce` names the dialer's formation of the group (a new
  # groupCreate makes a new one); the reply's `nonce` names this daemon's.
  # Fails while this daemon has no group of that name forming or ready with
  # the same members (the dialer retries until its timeout), or when that
  # rank is already connected. Needs the `@collective` category; clients
  # never call it (groupCreate does).

  callBatch @22 (calls :List(BatchCall), keep :List(BatchOutput)) -> (results :OpResults);
  # Runs `calls` in order as if each were its own `call`, in one message:
  # a chain of small ops costs one round trip instead of one message each.
  # An input is a tensor the client holds or an output of an earlier call
  # of the same batch. Each call is authorized, validated and enqueued
  # exactly as `call` would; a call that fails fails alone (and the calls
  # that use its outputs, with its error), the others run. `keep` lists the
  # outputs the client wants handles to, in the order `results.get(i)`
  # returns them; a kept output of a failed call is a capability broken
  # with that call's error. Outputs not kept are freed once the device is
  # done with them. At most 4096 calls per batch.

  graphCreate @23 (params :List(TensorDesc), calls :List(BatchCall), outputs :List(BatchOutput))
      -> (graph :Graph, runReturnsOutput :Bool);
  # Captures `calls` once, as a graph to run many times (as CUDA graphs
  # are): an input is a `param` (the graph's input of that index, of the
  # dtype and shape `params` gives), an earlier call's output, or a tensor
  # (held by the graph and read by every run). Every call is checked now,
  # exactly as `call` would check it (op, authorization, attributes,
  # shapes); the first that fails fails the capture, naming it. `outputs`
  # are what each run returns. Ops whose output shapes depend on the input
  # values (masked_select) cannot be captured. At most 4096 calls.
  # `runReturnsOutput`: the graph's `run` sets `output` (protocol 9 on).
}

# ------------------------------------------------- node to node (collectives)

# What one member is about to run as its Nth collective on a group; members
# exchange these before any data moves and fail together on a mismatch.
struct CollectiveHeader {
  seq @0 :UInt64;                  # N: collectives issued on the group before it
  kind @1 :Text;                   # "allreduce", "broadcast", ...
  op @2 :Text;                     # reduction ("sum", "mean", "max", "min"); "" when none
  root @3 :UInt32;                 # broadcast's root; 0 otherwise
  inputs @4 :List(TensorDesc);     # the member's inputs, in order
}

interface GroupPeer {
  # Held by a member of a group; the daemon hosting it is another member.
  # Calls arrive in the order they were sent (one sender per capability).
  header @0 (header :CollectiveHeader) -> ();
  data @1 (seq :UInt64, step :UInt32, chunk :UInt32, data :Data) -> ();
  # Chunk `chunk` of the sender's step `step` of collective `seq`; what it
  # holds follows from the agreed headers (the algorithm's layout). Sent only
  # once the receiver's header for `seq` arrived. Answered once the receiver
  # has taken the bytes off the message. Not a streaming call, so that the
  # receiver may land several chunks at once; the sender keeps a window of
  # unanswered calls itself. (On the wire the same as `-> stream`.)
  abort @2 (seq :UInt64, reason :Text) -> ();
  # The sender failed collective `seq` (a mismatch, a lost member, a
  # timeout): the receiver fails it too, naming the sender and the reason.
  formed @3 () -> ();
  # The sender has every link of the group up, both ways. A member is ready
  # (its groupCreate returns) once every other member said so and answered
  # its own `formed`: then no member is still forming when one of them uses
  # or deletes the group.
}

