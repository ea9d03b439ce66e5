// Writes one fuzz_call seed per op of the op table into a directory: the op's
// name, every attribute with its default (required ones with a value of their
// type) and its required inputs as f32[2, 3]-shaped descriptors of a dtype
// their role accepts. Most seeds pass validation, which is where fuzzing
// should start from.
//
//   call_seeds DIR

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "compute/op_table.h"
#include "protocol/tensord.capnp.h"
#include "server/wire.h"
#include "tests/fuzz/call_input.h"

namespace {

using namespace tensord;

compute::AttrValue sampleValue(compute::AttrType type) {
  switch (type) {
    case compute::AttrType::kInt: return int64_t(1);
    case compute::AttrType::kFloat:
    case compute::AttrType::kScalar: return 1.0;
    case compute::AttrType::kBool: return false;
    case compute::AttrType::kText: return std::string("f32");
    case compute::AttrType::kInts: return std::vector<int64_t>{1};
    case compute::AttrType::kFloats: return std::vector<double>{1.0};
  }
  return int64_t(0);
}

compute::DType inputDType(const compute::OpSpec& spec, compute::InputRole role) {
  switch (role) {
    case compute::InputRole::kIndex: return compute::DType::I64;
    case compute::InputRole::kMask: return compute::DType::Bool;
    case compute::InputRole::kData: return spec.dtypes.empty() ? compute::DType::F32 : spec.dtypes.front();
    case compute::InputRole::kAny: break;
  }
  return compute::DType::F32;
}

std::vector<uint8_t> seedFor(const compute::OpSpec& spec) {
  const size_t inputs = std::max<size_t>(spec.requiredInputs(), spec.variadic() ? 1 : 0);
  std::vector<uint8_t> descs;
  for (size_t i = 0; i < inputs; ++i) {
    const auto role = spec.inputs[std::min(i, spec.inputs.size() - 1)].role;
    fuzz::encodeDesc(descs, {inputDType(spec, role), {2, 3}});
  }

  capnp::MallocMessageBuilder message;
  auto params = message.initRoot<proto::Session::CallParams>();
  params.setOp(spec.name);
  params.initInputs(capnp::uint(inputs));  // null capabilities: only their count is read
  std::vector<const compute::AttrSpec*> given;
  for (const auto& attr : spec.attrs) {
    if (attr.defaultValue || !attr.optional) given.push_back(&attr);
  }
  auto attrs = params.initAttrs(capnp::uint(given.size()));
  for (size_t i = 0; i < given.size(); ++i) {
    attrs[capnp::uint(i)].setName(given[i]->name);
    server::fillAttrValue(attrs[capnp::uint(i)].initValue(),
                          given[i]->defaultValue ? *given[i]->defaultValue : sampleValue(given[i]->type));
  }

  std::vector<uint8_t> out;
  out.push_back(static_cast<uint8_t>(descs.size()));
  out.insert(out.end(), descs.begin(), descs.end());
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const compute::OpTable table;
  for (const auto& spec : table.all()) {
    const std::vector<uint8_t> seed = seedFor(spec);
    const std::string path = std::string(argv[1]) + "/" + spec.name;
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(seed.data()), std::streamsize(seed.size()));
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("%zu seeds written to %s\n", table.all().size(), argv[1]);
  return 0;
}
