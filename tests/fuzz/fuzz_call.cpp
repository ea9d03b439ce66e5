// libFuzzer target: what the daemon does with the bytes of a Session.call
// before anything reaches a device. The message is read with the listener's
// reader limits, then validated exactly as SessionImpl::call does: the op is
// looked up in the op table, the wire attributes decoded (attrsFromWire) and
// checked (validateAttrs), and the outputs inferred (inferOutputs) from
// input descriptors the fuzzer picks (see call_input.h). A kj::Exception or a
// ComputeError is the expected answer to bad input; anything else escaping,
// a sanitizer report, a hang, or an inferred output no tensor could have is
// a bug.

#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compute/error.h"
#include "compute/op_table.h"
#include "protocol/tensord.capnp.h"
#include "server/config.h"
#include "server/wire.h"
#include "tests/fuzz/call_input.h"

namespace {

using namespace tensord;

[[noreturn]] void bug(const compute::OpSpec& spec, const compute::TensorDesc& out, const char* what) {
  std::fprintf(stderr, "%s: inferred output %s %s\n", spec.name.c_str(), out.str().c_str(), what);
  std::abort();
}

void validateCall(std::span<const uint8_t> descBytes, kj::ArrayPtr<const capnp::word> message) {
  // The listener's ReaderOptions: a traversal limit of max_message_bytes
  // (here its default), the default nesting limit.
  capnp::ReaderOptions options;
  options.traversalLimitInWords = server::Limits{}.maxMessageBytes / sizeof(capnp::word);
  capnp::FlatArrayMessageReader reader(message, options);
  auto params = reader.getRoot<proto::Session::CallParams>();

  // The order of SessionImpl::call; the session's quota and policy checks
  // are left out (they have their own tests and do not read the message).
  static const compute::OpTable table;  // needs no device
  const std::string op = params.getOp();
  const compute::OpSpec* spec = table.find(op);
  if (spec == nullptr) return;  // the daemon answers "unknown op"
  compute::Attrs attrs = server::mapComputeErrors(
      [&] { return compute::validateAttrs(*spec, server::attrsFromWire(params.getAttrs(), op)); });
  const auto descs = fuzz::decodeDescs(descBytes, params.getInputs().size());
  if (spec->shapeFromDevice()) return;  // its outputs come from the device
  const auto outputs = server::mapComputeErrors([&] { return compute::inferOutputs(*spec, descs, attrs); });

  // What finishCall relies on before it allocates: every output is a
  // descriptor the daemon could hold (as descFromWire would accept it).
  for (const auto& out : outputs) {
    if (out.rank() > compute::kMaxRank) bug(*spec, out, "has a rank above the limit");
    for (int64_t d : out.shape) {
      if (d < 0) bug(*spec, out, "has a negative dim");
    }
  }
  if (spec->view && (descs.empty() || outputs.size() != 1 || outputs[0].bytes() > descs[0].bytes())) {
    bug(*spec, outputs.empty() ? compute::TensorDesc{} : outputs[0], "is not a view of its first input");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t descLength = std::min<size_t>(data[0], size - 1);
  std::span<const uint8_t> descBytes(data + 1, descLength);
  const uint8_t* rest = data + 1 + descLength;
  const size_t restSize = size - 1 - descLength;
  // Messages arrive word-aligned off the wire; copy into words likewise.
  auto words = kj::heapArray<capnp::word>((restSize + sizeof(capnp::word) - 1) / sizeof(capnp::word));
  if (words.size() > 0) {
    std::memset(words.begin(), 0, words.size() * sizeof(capnp::word));
    std::memcpy(words.begin(), rest, restSize);
  }
  try {
    validateCall(descBytes, words);
  } catch (const kj::Exception&) {
    // A malformed message or a refused call: the expected outcome for most inputs.
  }
  return 0;
}
