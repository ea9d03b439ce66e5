#include "acl/policy_json.h"

#include "acl/json_text.h"

#include <fnmatch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tensord::acl {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& key, const std::string& problem) { throw PolicyError(key + ": " + problem); }

std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

void requireObject(const json& value, const std::string& key) {
  if (!value.is_object()) fail(key.empty() ? "policy" : key, "expected an object, got " + shown(value));
}

void rejectUnknownKeys(const json& object, const std::string& parent, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (found) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    fail(parent.empty() ? key : parent + "." + key, "unknown key (known keys here: " + list + ")");
  }
}

bool isOpGlobChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '*' || c == '?' || c == '[' || c == ']' || c == '-' || c == '!';
}

JsonPolicy::Rule parseRule(const json& value, const std::string& key, const std::string& source) {
  if (!value.is_string()) fail(key, "expected a rule string such as \"+@nn\", got " + shown(value));
  const std::string text = value.get<std::string>();
  JsonPolicy::Rule rule;
  rule.text = text;
  rule.source = source;
  std::string_view rest = text;
  if (rest.empty()) fail(key, "empty rule");
  bool signGiven = false;
  if (rest.front() == '+' || rest.front() == '-') {
    rule.allow = rest.front() == '+';
    rest.remove_prefix(1);
    signGiven = true;
  }
  if (rest.empty()) fail(key, "rule '" + text + "' names nothing after its sign");
  if (rest.front() == '@') {
    if (!signGiven) fail(key, "category rule '" + text + "' needs a sign: +" + text + " or -" + text);
    rule.kind = JsonPolicy::Rule::Kind::kCategory;
    rule.pattern = std::string(rest.substr(1));
    bool known = false;
    std::string list;
    for (std::string_view c : knownCategories()) {
      known = known || c == rule.pattern;
      list += (list.empty() ? "@" : ", @") + std::string(c);
    }
    if (!known) fail(key, "unknown category '@" + rule.pattern + "' (known: " + list + ")");
    return rule;
  }
  if (rest.front() == '~') {
    rule.kind = JsonPolicy::Rule::Kind::kTensor;
    rest.remove_prefix(1);
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      fail(key, "tensor rule '" + text + "' needs permissions after the last ':' (e.g. '~" + std::string(rest) +
                    ":rw'; r read/restore/list, w write/save/overwrite, d delete)");
    }
    rule.pattern = std::string(rest.substr(0, colon));
    if (rule.pattern.empty()) fail(key, "tensor rule '" + text + "' has an empty name pattern");
    const std::string_view perms = rest.substr(colon + 1);
    if (perms.empty()) fail(key, "tensor rule '" + text + "' has no permissions after ':' (expected some of r, w, d)");
    for (char c : perms) {
      if (c == 'r') {
        rule.read = true;
      } else if (c == 'w') {
        rule.write = true;
      } else if (c == 'd') {
        rule.del = true;
      } else {
        fail(key, "unknown permission '" + std::string(1, c) + "' in tensor rule '" + text + "' (expected r, w, d)");
      }
    }
    return rule;
  }
  if (rest.front() == '&') {
    rule.kind = JsonPolicy::Rule::Kind::kAdmin;
    rest.remove_prefix(1);
    if (rest.starts_with("files:")) {
      // Server-side file access (Session.loadFile/saveFile), apart from admin
      // rights: &admin:* grants none of it.
      rule.kind = JsonPolicy::Rule::Kind::kFiles;
      rule.pattern = std::string(rest.substr(6));
      if (rule.pattern != "load" && rule.pattern != "save" && rule.pattern != "*") {
        fail(key, "unknown files right '" + rule.pattern + "' in '" + text + "' (known: load, save, *)");
      }
      return rule;
    }
    if (rest.starts_with("group:")) {
      // Forming and leaving groups of daemons (Session.groupCreate/groupDelete);
      // &admin:* grants none of it.
      rule.kind = JsonPolicy::Rule::Kind::kGroup;
      rule.pattern = std::string(rest.substr(6));
      if (rule.pattern != "create" && rule.pattern != "*") {
        fail(key, "unknown group right '" + rule.pattern + "' in '" + text + "' (known: create, *)");
      }
      return rule;
    }
    if (!rest.starts_with("admin:")) {
      fail(key, "admin rule '" + text + "' must read &admin:reload, &admin:usage or &admin:* (or a files right: "
                "&files:load, &files:save, &files:*, or a group right: &group:create)");
    }
    rule.pattern = std::string(rest.substr(6));
    if (rule.pattern != "reload" && rule.pattern != "usage" && rule.pattern != "*") {
      fail(key, "unknown admin right '" + rule.pattern + "' in '" + text + "' (known: reload, usage, *)");
    }
    return rule;
  }
  if (!signGiven) {
    fail(key, "rule '" + text + "' must start with + or - (op or @category), ~ (tensor names) or & (admin rights)");
  }
  rule.kind = JsonPolicy::Rule::Kind::kOp;
  rule.pattern = std::string(rest);
  for (char c : rule.pattern) {
    if (!isOpGlobChar(c)) fail(key, "op pattern '" + rule.pattern + "' in rule '" + text + "' has a bad character '" +
                                        std::string(1, c) + "'");
  }
  return rule;
}

std::vector<JsonPolicy::Rule> parseRules(const json& object, const std::string& key, const std::string& source) {
  std::vector<JsonPolicy::Rule> rules;
  if (!object.contains("rules")) return rules;
  const json& list = object["rules"];
  const std::string listKey = key + ".rules";
  if (!list.is_array()) fail(listKey, "expected a list of rule strings, got " + shown(list));
  for (size_t i = 0; i < list.size(); ++i) {
    rules.push_back(parseRule(list[i], listKey + "[" + std::to_string(i) + "]", source));
  }
  return rules;
}

Quotas parseQuotas(const json& object, const std::string& key) {
  requireObject(object, key);
  rejectUnknownKeys(object, key,
                    {"device_bytes", "tensor_count", "largest_tensor", "calls_per_second", "connections",
                     "inflight_ops"});
  Quotas quotas;
  auto read = [&](const char* name, std::optional<uint64_t>& out) {
    if (!object.contains(name)) return;
    const json& v = object[name];
    if (!v.is_number_unsigned()) fail(key + "." + name, "expected a non-negative integer, got " + shown(v));
    out = v.get<uint64_t>();
  };
  read("device_bytes", quotas.deviceBytes);
  read("tensor_count", quotas.tensorCount);
  read("largest_tensor", quotas.largestTensor);
  read("calls_per_second", quotas.callsPerSecond);
  read("connections", quotas.connections);
  read("inflight_ops", quotas.inflightOps);
  return quotas;
}

char neededPermission(Action action) {
  switch (action) {
    case Action::kReadTensor:
    case Action::kRestoreTensor:
    case Action::kListTensors:
      return 'r';
    case Action::kWriteTensor:
    case Action::kSaveTensor:
      return 'w';
    case Action::kDeleteTensor:
      return 'd';
    default:
      return 0;
  }
}

bool grants(const JsonPolicy::Rule& rule, char perm) {
  return (perm == 'r' && rule.read) || (perm == 'w' && rule.write) || (perm == 'd' && rule.del);
}

std::string ruleReason(const JsonPolicy::Rule& rule) { return "rule '" + rule.text + "' of " + rule.source + " denies it"; }

}  // namespace

const std::vector<std::string_view>& knownCategories() {
  static const std::vector<std::string_view> kCategories = {
      "elementwise", "reduction", "linalg", "nn", "shape", "index", "creation",
      "optim",       "collective", "admin", "kernel", "user", "all"};
  return kCategories;
}

bool globMatch(std::string_view pattern, std::string_view text) {
  return ::fnmatch(std::string(pattern).c_str(), std::string(text).c_str(), 0) == 0;
}

std::shared_ptr<const JsonPolicy> JsonPolicy::parse(std::string_view jsonText) {
  json root = parseJsonText<PolicyError>(jsonText, "policy");
  requireObject(root, "");
  rejectUnknownKeys(root, "", {"principals", "roles"});

  std::map<std::string, std::vector<Rule>, std::less<>> roles;
  if (root.contains("roles")) {
    const json& object = root["roles"];
    requireObject(object, "roles");
    for (const auto& [name, role] : object.items()) {
      const std::string key = "roles." + name;
      requireObject(role, key);
      rejectUnknownKeys(role, key, {"rules"});
      roles[name] = parseRules(role, key, "role '" + name + "'");
    }
  }

  auto policy = std::make_shared<JsonPolicy>();
  policy->roleCount_ = roles.size();
  if (root.contains("principals")) {
    const json& object = root["principals"];
    requireObject(object, "principals");
    for (const auto& [name, principal] : object.items()) {
      const std::string key = "principals." + name;
      if (name.empty()) fail("principals", "a principal name must not be empty");
      requireObject(principal, key);
      rejectUnknownKeys(principal, key, {"roles", "rules", "quotas"});
      Entry entry;
      if (principal.contains("roles")) {
        const json& list = principal["roles"];
        if (!list.is_array()) fail(key + ".roles", "expected a list of role names, got " + shown(list));
        for (size_t i = 0; i < list.size(); ++i) {
          const std::string roleKey = key + ".roles[" + std::to_string(i) + "]";
          if (!list[i].is_string()) fail(roleKey, "expected a role name, got " + shown(list[i]));
          auto it = roles.find(list[i].get<std::string>());
          if (it == roles.end()) fail(roleKey, "unknown role '" + list[i].get<std::string>() + "' (not under roles)");
          entry.rules.insert(entry.rules.end(), it->second.begin(), it->second.end());
          entry.roles.push_back(it->first);
        }
      }
      auto own = parseRules(principal, key, "principal '" + name + "'");
      entry.rules.insert(entry.rules.end(), own.begin(), own.end());
      if (principal.contains("quotas")) entry.quotas = parseQuotas(principal["quotas"], key + ".quotas");
      policy->principals_[name] = std::move(entry);
    }
  }
  return policy;
}

std::shared_ptr<const JsonPolicy> JsonPolicy::loadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PolicyError("policy: cannot open " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw PolicyError("policy: cannot read " + path.string());
  return parse(text.str());
}

const std::vector<JsonPolicy::Rule>* JsonPolicy::rules(std::string_view principal) const {
  auto it = principals_.find(principal);
  return it == principals_.end() ? nullptr : &it->second.rules;
}

std::optional<Quotas> JsonPolicy::quotas(std::string_view principal) const {
  auto it = principals_.find(principal);
  if (it == principals_.end()) return std::nullopt;
  return it->second.quotas;
}

std::vector<std::string> JsonPolicy::roles(std::string_view principal) const {
  auto it = principals_.find(principal);
  return it == principals_.end() ? std::vector<std::string>{} : it->second.roles;
}

Decision JsonPolicy::decide(const Principal& principal, const Request& request) const {
  const std::vector<Rule>* rules = this->rules(principal.name);
  if (rules == nullptr) return Decision::deny("the policy does not name principal '" + principal.name + "'");
  const Rule* last = nullptr;
  switch (request.action) {
    case Action::kCallOp:
      for (const Rule& rule : *rules) {
        const bool match = (rule.kind == Rule::Kind::kCategory &&
                            (rule.pattern == "all" || (!request.category.empty() && rule.pattern == request.category))) ||
                           (rule.kind == Rule::Kind::kOp && globMatch(rule.pattern, request.resource));
        if (match) last = &rule;
      }
      break;
    case Action::kAdminReload:
    case Action::kAdminUsage: {
      const std::string_view right = request.action == Action::kAdminReload ? "reload" : "usage";
      for (const Rule& rule : *rules) {
        if (rule.kind == Rule::Kind::kAdmin && (rule.pattern == "*" || rule.pattern == right)) last = &rule;
      }
      break;
    }
    case Action::kLoadFile:
    case Action::kSaveFile: {
      const std::string_view right = request.action == Action::kLoadFile ? "load" : "save";
      for (const Rule& rule : *rules) {
        if (rule.kind == Rule::Kind::kFiles && (rule.pattern == "*" || rule.pattern == right)) last = &rule;
      }
      if (last == nullptr) return Decision::deny("no rule grants &files:" + std::string(right));
      break;
    }
    case Action::kGroupCreate:
      for (const Rule& rule : *rules) {
        if (rule.kind == Rule::Kind::kGroup) last = &rule;
      }
      if (last == nullptr) return Decision::deny("no rule grants &group:create");
      break;
    case Action::kManageKernel:
      // Registering kernels runs a peer's code on the device: only an explicit
      // +@kernel grants it (+@all does not, as it grants no admin right).
      for (const Rule& rule : *rules) {
        if (rule.kind == Rule::Kind::kCategory && rule.pattern == "kernel") last = &rule;
      }
      if (last == nullptr) return Decision::deny("no rule grants @kernel");
      break;
    case Action::kListTensors:
      // Listing shows only names the principal may read (the server filters);
      // it is allowed when some rule grants read at all.
      for (const Rule& rule : *rules) {
        if (rule.kind == Rule::Kind::kTensor && rule.allow && rule.read) return Decision::allow();
      }
      return Decision::deny("no tensor rule grants read (r)");
    default: {
      const bool unnamed = request.resource.empty() || request.resource.front() == '#';
      if (unnamed && (request.action == Action::kReadTensor || request.action == Action::kWriteTensor)) {
        // Unnamed tensors are reachable only through the capabilities of the
        // session that made them: uploading and using them needs no rule.
        return Decision::allow();
      }
      const char perm = neededPermission(request.action);
      for (const Rule& rule : *rules) {
        if (rule.kind == Rule::Kind::kTensor && grants(rule, perm) && globMatch(rule.pattern, request.resource)) {
          last = &rule;
        }
      }
      if (last == nullptr) return Decision::deny(std::string("no rule grants ") + perm + " on it");
      break;
    }
  }
  if (last == nullptr) return Decision::deny("no rule allows it");
  if (!last->allow) return Decision::deny(ruleReason(*last));
  return Decision::allow();
}

}  // namespace tensord::acl
