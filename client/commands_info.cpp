// tensorctl info, whoami, admin, ops, ls, rm.

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>

#include "client/attr_parse.h"
#include "client/commands.h"
#include "client/output.h"
#include "client/progress_bar.h"

namespace tensord::cli {

Client& Connector::client() {
  if (!client_) {
    try {
      client_ = std::make_unique<Client>(ConnectOptions{options_.address, options_.token, options_.caFile,
                                                                options_.certFile, options_.keyFile});
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
  if (!d.dtypes.empty()) std::printf("dtypes:        %s\n", dtypeList(d.dtypes).c_str());
  std::printf("ops executed:  %llu\n", static_cast<unsigned long long>(info.opsExecuted));
  std::printf("max tensor:    %s\n", humanBytes(info.maxTensorBytes).c_str());
  return 0;
}

int cmdWhoami(const Options& options, Connector& connector) {
  SessionStatus status;
  try {
    status = connector.client().status();
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::kUnimplemented) throw;
    status.principal = connector.client().whoami();  // a daemon before protocol 4
  }
  if (options.json) {
    auto quotas = nlohmann::json::array();
    for (const auto& q : status.quotas) quotas.push_back({{"name", q.name}, {"limit", q.limit}, {"used", q.used}});
    printJson({{"principal", status.principal}, {"roles", status.roles}, {"quotas", quotas}});
    return 0;
  }
  std::printf("principal:  %s\n", status.principal.c_str());
  std::string roles;
  for (const auto& r : status.roles) roles += (roles.empty() ? "" : ", ") + r;
  std::printf("roles:      %s\n", roles.empty() ? "-" : roles.c_str());
  if (status.quotas.empty()) {
    std::printf("quotas:     none\n");
    return 0;
  }
  std::printf("\n");
  std::vector<std::vector<std::string>> rows = {{"QUOTA", "USED", "LIMIT"}};
  for (const auto& q : status.quotas) {
    const bool bytes = q.name == "device_bytes" || q.name == "largest_tensor";
    auto show = [&](uint64_t v) { return bytes ? humanBytes(v) : std::to_string(v); };
    rows.push_back({q.name, show(q.used), show(q.limit)});
  }
  printTable(rows);
  return 0;
}

int cmdAdmin(const Options& options, Connector& connector) {
  connector.client().adminReload();  // args[0] is "reload" (cli_args checks)
  if (options.json) {
    printJson({{"reloaded", true}});
  } else {
    std::printf("reloaded the daemon's tokens and policy\n");
  }
  return 0;
}

namespace {

std::string yesNo(bool b) { return b ? "yes" : "no"; }

// The full description of one op, for `tensorctl ops NAME`.
void printOp(const OpInfo& op, const std::vector<DType>& deviceDTypes) {
  std::printf("%s\n", signature(op).c_str());
  if (!op.doc.empty()) std::printf("  %s\n", op.doc.c_str());
  std::printf("\ncategory:        %s\n", op.category.c_str());

  std::printf("inputs:%s\n", op.inputSpecs.empty() ? "          none" : "");
  std::vector<std::vector<std::string>> rows;
  auto roleText = [&](const std::string& role) -> std::string {
    if (role == "data") return "data (" + dtypeList(op.dtypes) + ")";
    if (role == "index") return "index (i32 or i64)";
    if (role == "mask") return "mask (bool)";
    if (role == "any") return "any dtype";
    return role;
  };
  for (const auto& in : op.inputSpecs) {
    std::string how = in.variadic ? "one or more" : in.optional ? "optional" : "required";
    rows.push_back({"  " + in.name, roleText(in.role), how});
  }
  printTable(rows);

  std::printf("attrs:%s\n", op.attrs.empty() ? "           none" : "");
  rows.clear();
  for (const auto& a : op.attrs) {
    std::string value = a.hasDefault ? "default " + formatAttrValue(a.defaultValue)
                        : a.required ? "required"
                                     : "optional";
    rows.push_back({"  " + a.name, a.type, value, a.doc});
  }
  printTable(rows);

  std::string outputs;
  for (const auto& o : op.outputs) outputs += (outputs.empty() ? "" : ", ") + o;
  std::printf("outputs:         %s\n", outputs.empty() ? "-" : outputs.c_str());
  std::string dtypes = dtypeList(op.dtypes);
  std::vector<std::string> missing;
  if (!deviceDTypes.empty()) {
    for (DType d : op.dtypes) {
      if (std::find(deviceDTypes.begin(), deviceDTypes.end(), d) == deviceDTypes.end()) {
        missing.emplace_back(dtypeName(d));
      }
    }
  }
  if (!missing.empty()) {
    dtypes += " (not on this device:";
    for (const auto& m : missing) dtypes += " " + m;
    dtypes += ")";
  }
  std::printf("dtypes:          %s\n", dtypes.c_str());
  std::printf("view:            %s\n",
              op.view ? "yes (the output shares the first input's memory; nothing runs on the device)" : "no");
  std::string mutates;
  for (const auto& m : op.mutates) mutates += (mutates.empty() ? "" : ", ") + m;
  std::printf("mutates:         %s\n",
              mutates.empty() ? "nothing" : (mutates + " (written in place; needs write access)").c_str());
  std::string grad = yesNo(op.differentiable);
  if (!op.backward.empty()) grad += " (backward: " + op.backward + ")";
  std::printf("differentiable:  %s\n", grad.c_str());
}

}  // namespace

int cmdOps(const Options& options, Connector& connector) {
  std::vector<OpInfo> ops = connector.client().ops();
  std::sort(ops.begin(), ops.end(), [](const OpInfo& a, const OpInfo& b) { return a.name < b.name; });
  if (!options.args.empty()) {
    const std::string& name = options.args[0];
    auto it = std::find_if(ops.begin(), ops.end(), [&](const OpInfo& op) { return op.name == name; });
    if (it == ops.end()) {
      throw Error(Error::Kind::kUnimplemented, "unknown op '" + name + "' (tensorctl ops lists them)");
    }
    if (options.json) {
      printJson(toJson(*it));
    } else {
      printOp(*it, connector.client().info().device.dtypes);
    }
    return 0;
  }
  if (options.json) {
    auto out = nlohmann::json::array();
    for (const auto& op : ops) out.push_back(toJson(op));
    printJson(out);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"OP", "CATEGORY", "SIGNATURE", "DTYPES", "NOTES"}};
  for (const auto& op : ops) {
    std::string notes;
    auto note = [&](const std::string& n) { notes += (notes.empty() ? "" : "; ") + n; };
    if (op.view) note("view");
    if (!op.backward.empty()) note("grad");
    if (!op.mutates.empty()) {
      std::string m;
      for (const auto& name : op.mutates) m += (m.empty() ? "" : ",") + name;
      note("writes " + m);
    }
    rows.push_back({op.name, op.category, signature(op), dtypeList(op.dtypes, ","), notes});
  }
  printTable(rows);
  return 0;
}

int cmdLs(const Options& options, Connector& connector) {
  const std::string prefix = options.args.empty() ? "" : options.args[0];
  // Pages come sorted (names, then unnamed by id); follow them until the
  // listing or --limit ends.
  std::vector<TensorInfo> tensors;
  std::string next = options.after;
  do {
    const uint32_t want = options.limit == 0 ? 0 : uint32_t(options.limit - tensors.size());
    TensorPage page = connector.client().listPage(prefix, next, want);
    tensors.insert(tensors.end(), std::make_move_iterator(page.tensors.begin()),
                   std::make_move_iterator(page.tensors.end()));
    if (!page.next.empty() && page.next == next) {
      throw Error(Error::Kind::kFailed, "listTensors: the daemon returned the same page cursor '" + next + "' twice");
    }
    next = std::move(page.next);
  } while (!next.empty() && (options.limit == 0 || tensors.size() < options.limit));
  if (options.limit != 0 && tensors.size() > options.limit) {  // a daemon before protocol 5 sends everything
    tensors.resize(options.limit);
    next = tensors.back().name.empty() ? "#" + std::to_string(tensors.back().id) : tensors.back().name;
  }
  if (!next.empty()) {
    std::fprintf(stderr, "tensorctl: more tensors follow; go on with: tensorctl ls %s%s--limit %u --after %s\n",
                 prefix.c_str(), prefix.empty() ? "" : " ", unsigned(options.limit), next.c_str());
  }
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
