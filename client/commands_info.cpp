// tensorctl info, whoami, ops, ls, rm.

#include <algorithm>
#include <cstdio>

#include "client/attr_parse.h"
#include "client/commands.h"
#include "client/output.h"
#include "client/progress_bar.h"

namespace tensord::cli {

Client& Connector::client() {
  if (!client_) {
    try {
      client_ = std::make_unique<Client>(ConnectOptions{options_.address, options_.token});
    } catch (const Error& e) {
      throw ConnectError(e.what());
    }
  }
  return *client_;
}

int cmdInfo(const Options& options, Connector& connector) {
  DaemonInfo info = connector.client().info();
  if (options.json) {
    printJson(toJson(info));
    return 0;
  }
  const auto& d = info.device;
  const auto& m = info.memory;
  std::printf("tensord %s (protocol %u) at %s\n", info.version.c_str(), info.protocolVersion, options.address.c_str());
  std::printf("device:        %s (%s), driver %s, Vulkan %s, %s device memory\n", d.name.c_str(), d.kind.c_str(),
              d.driver.c_str(), d.apiVersion.c_str(), humanBytes(d.memoryBytes).c_str());
  std::printf("tensors:       %llu live (%llu named), %s\n", static_cast<unsigned long long>(m.tensorCount),
              static_cast<unsigned long long>(m.namedCount), humanBytes(m.liveBytes).c_str());
  std::printf("memory:        %s reserved (%s cached), limit %s\n", humanBytes(m.reservedBytes).c_str(),
              humanBytes(m.cachedBytes).c_str(), humanBytes(m.limitBytes).c_str());
  std::printf("ops executed:  %llu\n", static_cast<unsigned long long>(info.opsExecuted));
  std::printf("max tensor:    %s\n", humanBytes(info.maxTensorBytes).c_str());
  return 0;
}

int cmdWhoami(const Options& options, Connector& connector) {
  std::string principal = connector.client().whoami();
  if (options.json) {
    printJson({{"principal", principal}});
  } else {
    std::printf("%s\n", principal.c_str());
  }
  return 0;
}

int cmdOps(const Options& options, Connector& connector) {
  std::vector<OpInfo> ops = connector.client().ops();
  std::sort(ops.begin(), ops.end(), [](const OpInfo& a, const OpInfo& b) { return a.name < b.name; });
  if (options.json) {
    auto out = nlohmann::json::array();
    for (const auto& op : ops) out.push_back(toJson(op));
    printJson(out);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"OP", "CATEGORY", "INPUTS", "OUTPUTS", "ATTRS", "DTYPES"}};
  for (const auto& op : ops) {
    auto join = [](const std::vector<std::string>& items) {
      std::string out;
      for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
      return out.empty() ? std::string("-") : out;
    };
    std::vector<std::string> attrs;
    for (const auto& a : op.attrs) {
      attrs.push_back(a.name + ":" + a.type + (a.required ? "" : "=" + formatAttrValue(a.defaultValue)));
    }
    std::vector<std::string> dtypes;
    for (DType d : op.dtypes) dtypes.emplace_back(dtypeName(d));
    std::string attrText;
    for (const auto& a : attrs) attrText += (attrText.empty() ? "" : " ") + a;
    rows.push_back(
        {op.name, op.category, join(op.inputs), join(op.outputs), attrText.empty() ? "-" : attrText, join(dtypes)});
  }
  printTable(rows);
  return 0;
}

int cmdLs(const Options& options, Connector& connector) {
  std::vector<TensorInfo> tensors = connector.client().list();
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name != b.name ? a.name < b.name : a.id < b.id; });
  if (options.json) {
    auto out = nlohmann::json::array();
    for (const auto& t : tensors) out.push_back(toJson(t));
    printJson(out);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "BYTES", "OWNER"}};
  for (const auto& t : tensors) {
    std::string shape = describe(t.dtype, t.shape).substr(dtypeName(t.dtype).size());
    rows.push_back({t.name.empty() ? "(unnamed #" + std::to_string(t.id) + ")" : t.name,
                    std::string(dtypeName(t.dtype)), shape, std::to_string(t.bytes), t.owner});
  }
  printTable(rows);
  return 0;
}

int cmdRm(const Options& options, Connector& connector) {
  for (const auto& name : options.args) connector.client().remove(name);
  if (options.json) printJson({{"removed", options.args}});
  return 0;
}

}  // namespace tensord::cli
