// tensorctl put, get, call: the commands that move or make tensors.

#include <cstdio>

#include "client/attr_parse.h"
#include "client/commands.h"
#include "client/npy.h"
#include "client/output.h"
#include "client/progress_bar.h"

namespace tensord::cli {

namespace {

void report(const Options& options, const std::string& name, const std::string& file, DType dtype, const Shape& shape,
            uint64_t bytes) {
  if (options.json) {
    nlohmann::json out = {
        {"name", name}, {"dtype", std::string(dtypeName(dtype))}, {"shape", shapeJson(shape)}, {"bytes", bytes}};
    if (!file.empty()) out["file"] = file;
    printJson(out);
  } else {
    std::printf("%s: %s (%s)\n", name.c_str(), describe(dtype, shape).c_str(), humanBytes(bytes).c_str());
  }
}

}  // namespace

int cmdPut(const Options& options, Connector& connector) {
  if (options.args[1].ends_with(".safetensors")) return putSafetensors(options, connector);
  const std::string& name = options.args[0];
  const std::string& file = options.args[1];
  npy::Array array = npy::read(file);  // before connecting: a bad file is exit code 4

  Client& client = connector.client();
  Tensor tensor;
  {
    ProgressBar bar("put " + name);
    tensor = client.upload(array.dtype, array.shape, array.data,
                           [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  tensor.save(name, /*overwrite=*/true);
  report(options, name, file, array.dtype, array.shape, array.data.size());
  return 0;
}

int cmdGet(const Options& options, Connector& connector) {
  if (options.args.back().ends_with(".safetensors")) return getSafetensors(options, connector);
  const std::string& name = options.args[0];
  const std::string& file = options.args[1];
  Client& client = connector.client();
  Tensor tensor = client.restore(name);
  TensorInfo info = tensor.info();
  npy::descrOf(info.dtype);  // fails (exit code 4) before the transfer if .npy cannot hold the dtype

  std::vector<std::byte> data;
  {
    ProgressBar bar("get " + name);
    data = tensor.bytes([&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  npy::write(file, info.dtype, info.shape, data);
  report(options, name, file, info.dtype, info.shape, info.bytes);
  return 0;
}

int cmdCall(const Options& options, Connector& connector) {
  const std::string& opName = options.args[0];
  std::vector<std::string> inputNames(options.args.begin() + 1, options.args.end());
  Client& client = connector.client();

  // The op table came with the connection: typing attrs costs no round trip.
  std::vector<OpInfo> ops = client.ops();
  const OpInfo* op = nullptr;
  for (const auto& o : ops) {
    if (o.name == opName) op = &o;
  }
  Attrs attrs;
  if (op != nullptr) {
    attrs = parseAttrs(*op, options.attrs);
    size_t outputs = std::max<size_t>(1, op->outputs.size());
    if (options.outs.size() > outputs) {
      throw UsageError(opName + " has " + std::to_string(outputs) + " output" + (outputs == 1 ? "" : "s") + "; got " +
                       std::to_string(options.outs.size()) + " --out names");
    }
  } else if (!options.attrs.empty()) {
    throw Error(Error::Kind::kUnimplemented,
                "unknown op '" + opName + "' (the daemon does not list it; see tensorctl ops)");
  }
  // Otherwise an unknown op goes to the daemon, which says what is wrong.

  // Restore, call and save are all pipelined: the first save waits for all of it.
  std::vector<Tensor> inputs;
  for (const auto& name : inputNames) inputs.push_back(client.restore(name));
  std::vector<Tensor> outputs = client.call(opName, std::move(inputs), std::move(attrs));
  if (options.outs.size() > outputs.size()) {
    throw UsageError(opName + " has " + std::to_string(outputs.size()) + " output(s); got " +
                     std::to_string(options.outs.size()) + " --out names");
  }
  nlohmann::json saved = nlohmann::json::array();
  for (size_t i = 0; i < options.outs.size(); ++i) {
    outputs[i].save(options.outs[i], /*overwrite=*/true);
  }
  for (size_t i = 0; i < options.outs.size(); ++i) {
    TensorInfo info = outputs[i].info();
    if (options.json) {
      saved.push_back({{"name", options.outs[i]},
                       {"dtype", std::string(dtypeName(info.dtype))},
                       {"shape", shapeJson(info.shape)},
                       {"bytes", info.bytes}});
    } else {
      std::printf("%s: %s (%s)\n", options.outs[i].c_str(), describe(info.dtype, info.shape).c_str(),
                  humanBytes(info.bytes).c_str());
    }
  }
  if (options.json) printJson(saved);
  return 0;
}

}  // namespace tensord::cli
