// tensorctl kernel add/ls/show/rm: user kernels (docs/kernels.md).

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "client/commands.h"
#include "client/output.h"

namespace tensord::cli {
namespace {

using nlohmann::json;

// Splits at commas outside parentheses and brackets ("a:f32, b:f32:[dim(a,0), 3]").
std::vector<std::string> splitTop(const std::string& text, const std::string& flag) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  items.push_back(current);
  for (auto& item : items) {
    size_t a = item.find_first_not_of(' '), b = item.find_last_not_of(' ');
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
    if (item.empty()) throw UsageError(flag + ": empty item in '" + text + "'");
  }
  return items;
}

std::vector<std::string> splitColon(const std::string& item, size_t maxParts) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (parts.size() + 1 < maxParts) {
    size_t colon = item.find(':', at);
    if (colon == std::string::npos) break;
    parts.push_back(item.substr(at, colon - at));
    at = colon + 1;
  }
  parts.push_back(item.substr(at));
  return parts;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The JSON description from --inputs, --outputs, --attrs, --push, --workgroup, --grid and --doc.
json descriptionFromFlags(const KernelFlags& k) {
  json desc = json::object();
  if (!k.doc.empty()) desc["doc"] = k.doc;
  json inputs = json::array();
  std::string firstInput;
  if (!k.inputs.empty()) {
    for (const auto& item : splitTop(k.inputs, "--inputs")) {
      auto parts = splitColon(item, 2);
      if (parts.size() != 2) throw UsageError("--inputs: expected NAME:DTYPE, got '" + item + "'");
      if (firstInput.empty()) firstInput = parts[0];
      inputs.push_back({{"name", parts[0]}, {"dtype", parts[1]}});
    }
  }
  desc["inputs"] = inputs;
  json outputs = json::array();
  for (const auto& item : splitTop(k.outputs, "--outputs")) {
    auto parts = splitColon(item, 3);
    if (parts.size() < 2) throw UsageError("--outputs: expected NAME:DTYPE[:SHAPE], got '" + item + "'");
    json out = {{"name", parts[0]}, {"dtype", parts[1]}};
    std::string shape = parts.size() == 3 ? parts[2] : firstInput;
    if (shape.empty()) {
      throw UsageError("--outputs: '" + item + "' needs a shape (:INPUT or :[EXPR, ...]) when there are no inputs");
    }
    if (shape.front() == '[') {
      if (shape.back() != ']') throw UsageError("--outputs: shape '" + shape + "' lacks its closing ']'");
      json dims = json::array();
      const std::string inner = shape.substr(1, shape.size() - 2);
      if (inner.find_first_not_of(' ') != std::string::npos) {
        for (const auto& d : splitTop(inner, "--outputs")) dims.push_back(d);
      }
      out["shape"] = dims;
    } else {
      out["shape"] = shape;
    }
    outputs.push_back(out);
  }
  desc["outputs"] = outputs;
  if (!k.attrs.empty()) {
    json attrs = json::array();
    for (const auto& item : splitTop(k.attrs, "--attrs")) {
      size_t eq = item.find('=');
      auto parts = splitColon(item.substr(0, eq), 2);
      if (parts.size() != 2) throw UsageError("--attrs: expected NAME:TYPE[=DEFAULT], got '" + item + "'");
      json attr = {{"name", parts[0]}, {"type", parts[1]}};
      if (eq != std::string::npos) {
        std::string text = item.substr(eq + 1);
        try {
          attr["default"] = json::parse(text);
        } catch (const json::parse_error&) {
          throw UsageError("--attrs: default of '" + parts[0] + "' is not a number or true/false: '" + text + "'");
        }
      }
      attrs.push_back(attr);
    }
    desc["attrs"] = attrs;
  }
  if (!k.push.empty()) desc["push"] = splitTop(k.push, "--push");
  if (!k.grid.empty()) desc["grid"] = splitTop(k.grid, "--grid");
  if (!k.workgroup.empty()) {
    json sizes = json::array();
    for (const auto& s : splitTop(k.workgroup, "--workgroup")) {
      try {
        size_t used = 0;
        unsigned long v = std::stoul(s, &used);
        if (used != s.size()) throw std::invalid_argument(s);
        sizes.push_back(v);
      } catch (const std::exception&) {
        throw UsageError("--workgroup: expected X[,Y,Z] sizes, got '" + k.workgroup + "'");
      }
    }
    desc["workgroup"] = sizes;
  }
  return desc;
}

json kernelJson(const KernelInfo& k) {
  json out = {{"name", k.name},
              {"owner", k.owner},
              {"language", k.language},
              {"source_sha256", k.sourceSha256},
              {"signature", signature(k.spec)},
              {"spec", toJson(k.spec)}};
  try {
    out["description"] = json::parse(k.description, nullptr, true, true);
  } catch (const json::parse_error&) {
    out["description"] = k.description;
  }
  return out;
}

int kernelAdd(const Options& options, Connector& connector) {
  const std::string& name = options.args[1];
  const std::string& file = options.args[2];
  const bool spirv = file.ends_with(".spv");
  std::string source = readFile(file);
  std::string description = options.kernel.descriptionFile.empty() ? descriptionFromFlags(options.kernel).dump()
                                                                   : readFile(options.kernel.descriptionFile);
  KernelInfo k = connector.client().kernelAdd(name, spirv ? "spirv" : "glsl", std::as_bytes(std::span(source)),
                                              description, options.kernel.replace);
  if (options.json) {
    printJson(kernelJson(k));
  } else {
    std::printf("registered %s: %s\n", k.name.c_str(), signature(k.spec).c_str());
  }
  return 0;
}

int kernelLs(const Options& options, Connector& connector) {
  auto kernels = connector.client().kernelList();
  if (options.json) {
    json out = json::array();
    for (const auto& k : kernels) out.push_back(kernelJson(k));
    printJson(out);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "OWNER", "LANGUAGE", "SIGNATURE", "DTYPES"}};
  for (const auto& k : kernels)
    rows.push_back({k.name, k.owner, k.language, signature(k.spec), dtypeList(k.spec.dtypes, ",")});
  printTable(rows);
  return 0;
}

int kernelShow(const Options& options, Connector& connector) {
  KernelInfo k = connector.client().kernelShow(options.args[1]);
  if (options.json) {
    json out = kernelJson(k);
    if (k.language == "glsl") out["source"] = k.source;
    printJson(out);
    return 0;
  }
  std::printf("%s  (owner %s, %s, sha256 %s)\n%s\n", k.name.c_str(), k.owner.c_str(), k.language.c_str(),
              k.sourceSha256.c_str(), signature(k.spec).c_str());
  if (!k.spec.doc.empty()) std::printf("%s\n", k.spec.doc.c_str());
  std::string description = k.description;
  try {
    description = json::parse(k.description, nullptr, true, true).dump(2);
  } catch (const json::parse_error&) {
  }
  std::printf("\ndescription:\n%s\n", description.c_str());
  if (k.language == "glsl") {
    std::printf("\nsource:\n%s%s", k.source.c_str(), k.source.ends_with('\n') ? "" : "\n");
  } else {
    std::printf("\nsource: %zu bytes of SPIR-V\n", k.source.size());
  }
  return 0;
}

}  // namespace

int cmdKernel(const Options& options, Connector& connector) {
  const std::string& sub = options.args[0];
  if (sub == "add") return kernelAdd(options, connector);
  if (sub == "ls") return kernelLs(options, connector);
  if (sub == "show") return kernelShow(options, connector);
  for (size_t i = 1; i < options.args.size(); ++i) {
    connector.client().kernelRemove(options.args[i]);
    if (!options.json) std::printf("removed %s\n", options.args[i].c_str());
  }
  return 0;
}

}  // namespace tensord::cli
