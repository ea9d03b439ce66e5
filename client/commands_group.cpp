// tensorctl group create/ls/rm, and allreduce, broadcast, barrier: groups of
// daemons and collectives started on every member at once.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "client/commands.h"
#include "client/output.h"
#include "tensord/distributed.h"

namespace tensord::cli {

namespace {

nlohmann::json toJson(const GroupInfo& g) {
  return {{"name", g.name},   {"rank", g.rank},     {"size", g.size},
          {"members", g.members}, {"state", g.state}, {"origin", g.origin},
          {"collectives", g.collectives}};
}

// A connection to `address` with the command line's credentials.
std::unique_ptr<Client> connectTo(const Options& options, const std::string& address, size_t rank) {
  try {
    return std::make_unique<Client>(
        ConnectOptions{address, options.token, options.caFile, options.certFile, options.keyFile});
  } catch (const Error& e) {
    throw ConnectError("member " + std::to_string(rank) + " (" + address + "): " + e.what());
  }
}

// The group as the --connect daemon knows it.
GroupInfo findGroup(const Options& options, Client& client, const std::string& name) {
  std::string known;
  for (GroupInfo& g : client.groupList()) {
    if (g.name == name) return std::move(g);
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw Error(Error::Kind::kFailed, "the daemon at " + options.address + " has no group '" + name +
                                        "' (its groups: " + (known.empty() ? "none" : known) + ")");
}

// One client per member of `group`: the --connect daemon's for its own rank,
// new connections for the others.
struct Members {
  std::vector<std::unique_ptr<Client>> owned;
  std::vector<Client*> clients;
};

Members connectMembers(const Options& options, Connector& connector, const GroupInfo& group) {
  Members m;
  for (size_t rank = 0; rank < group.members.size(); ++rank) {
    if (rank == group.rank) {
      m.clients.push_back(&connector.client());
    } else {
      m.owned.push_back(connectTo(options, group.members[rank], rank));
      m.clients.push_back(m.owned.back().get());
    }
  }
  return m;
}

int groupCreate(const Options& options) {
  const std::string& name = options.args[1];
  std::vector<std::unique_ptr<Client>> owned;
  std::vector<Client*> clients;
  for (size_t rank = 0; rank < options.members.size(); ++rank) {
    owned.push_back(connectTo(options, options.members[rank], rank));
    clients.push_back(owned.back().get());
  }
  std::vector<GroupInfo> formed = formGroup(clients, name, options.members, options.timeoutMs);
  if (options.json) {
    auto out = nlohmann::json::array();
    for (const auto& g : formed) out.push_back(toJson(g));
    printJson(out);
    return 0;
  }
  std::printf("group %s formed: %zu members\n", name.c_str(), formed.size());
  std::vector<std::vector<std::string>> rows = {{"RANK", "MEMBER", "STATE"}};
  for (size_t rank = 0; rank < formed.size(); ++rank) {
    rows.push_back({std::to_string(formed[rank].rank), options.members[rank], formed[rank].state});
  }
  printTable(rows);
  return 0;
}

int groupLs(const Options& options, Connector& connector) {
  std::vector<GroupInfo> groups = connector.client().groupList();
  if (options.json) {
    auto out = nlohmann::json::array();
    for (const auto& g : groups) out.push_back(toJson(g));
    printJson(out);
    return 0;
  }
  if (groups.empty()) {
    std::printf("no groups\n");
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "RANK", "SIZE", "STATE", "COLLECTIVES", "ORIGIN", "MEMBERS"}};
  for (const auto& g : groups) {
    std::string members;
    for (const auto& m : g.members) members += (members.empty() ? "" : ",") + m;
    rows.push_back({g.name, std::to_string(g.rank), std::to_string(g.size), g.state, std::to_string(g.collectives),
                    g.origin, members});
  }
  printTable(rows);
  return 0;
}

int groupRm(const Options& options, Connector& connector) {
  const std::string& name = options.args[1];
  GroupInfo group = findGroup(options, connector.client(), name);
  int failed = 0;
  auto out = nlohmann::json::array();
  for (size_t rank = 0; rank < group.members.size(); ++rank) {
    std::string error;
    try {
      if (rank == group.rank) {
        connector.client().groupDelete(name);
      } else {
        connectTo(options, group.members[rank], rank)->groupDelete(name);
      }
    } catch (const std::exception& e) {
      error = e.what();
      ++failed;
      std::fprintf(stderr, "tensorctl: group rm %s: member %zu (%s): %s\n", name.c_str(), rank,
                   group.members[rank].c_str(), error.c_str());
    }
    out.push_back({{"rank", rank}, {"member", group.members[rank]}, {"ok", error.empty()}, {"error", error}});
  }
  if (options.json) {
    printJson({{"group", name}, {"members", out}});
  } else if (failed == 0) {
    std::printf("group %s removed from %zu members\n", name.c_str(), group.members.size());
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int cmdGroup(const Options& options, Connector& connector) {
  const std::string& sub = options.args[0];
  if (sub == "create") return groupCreate(options);
  if (sub == "ls") return groupLs(options, connector);
  return groupRm(options, connector);
}

// allreduce, broadcast, barrier: the collective in place on each member's
// tensors of the given names, issued on every member before any is awaited.
int cmdCollective(const Options& options, Connector& connector) {
  const std::string& kind = options.command;
  GroupInfo group = findGroup(options, connector.client(), options.group);
  Members members = connectMembers(options, connector, group);
  Attrs attrs;
  if (kind == "allreduce") attrs.emplace_back("op", options.reduceOp.empty() ? "sum" : options.reduceOp);
  if (kind == "broadcast") attrs.emplace_back("root", int64_t(*options.root));
  if (kind != "barrier") attrs.emplace_back("in_place", true);
  if (options.timeoutMs != 0) attrs.emplace_back("timeout_ms", int64_t(options.timeoutMs));

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<Tensor>> inputs;
  for (Client* client : members.clients) {
    inputs.emplace_back();
    for (const auto& name : options.args) inputs.back().push_back(client->restore(name));
  }
  std::vector<MemberCollective> runs = collectiveOnAll(members.clients, group.name, kind, inputs, attrs);
  int failed = 0;
  auto out = nlohmann::json::array();
  for (size_t rank = 0; rank < runs.size(); ++rank) {
    const std::string& error = runs[rank].error;
    if (!error.empty()) {
      ++failed;
      std::fprintf(stderr, "tensorctl: %s on group %s: member %zu (%s): %s\n", kind.c_str(), group.name.c_str(), rank,
                   group.members[rank].c_str(), error.c_str());
    }
    out.push_back({{"rank", rank}, {"member", group.members[rank]}, {"ok", error.empty()}, {"error", error}});
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.json) {
    nlohmann::json report = {{"group", group.name}, {"kind", kind}, {"names", options.args},
                             {"seconds", seconds},  {"members", out}};
    for (const auto& [key, value] : attrs) {
      if (key != "in_place") report[key] = toJson(value);
    }
    printJson(report);
  } else if (failed == 0) {
    std::string what = kind;
    if (kind == "allreduce") what += " (" + (options.reduceOp.empty() ? std::string("sum") : options.reduceOp) + ")";
    if (kind == "broadcast") what += " from rank " + std::to_string(*options.root);
    for (size_t i = 0; i < options.args.size(); ++i) what += (i ? ", " : " of ") + options.args[i];
    std::printf("%s on group %s: %zu members, %.1f ms\n", what.c_str(), group.name.c_str(), runs.size(),
                seconds * 1e3);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace tensord::cli
