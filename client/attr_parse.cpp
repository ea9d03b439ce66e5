// --attr parsing.

#include "client/attr_parse.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <optional>
#include <type_traits>

namespace tensord::cli {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int64_t> parseInt(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<double> parseFloat(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

template <typename T, typename Parse>
std::optional<std::vector<T>> parseList(std::string_view s, Parse parse) {
  s = trim(s);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = trim(s.substr(1, s.size() - 2));
  std::vector<T> out;
  if (s.empty()) return out;
  for (;;) {
    size_t comma = s.find(',');
    auto item = parse(s.substr(0, comma));
    if (!item) return std::nullopt;
    out.push_back(*item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::string expectedText(const std::string& type) {
  if (type == "int") return "an integer";
  if (type == "float") return "a number";
  if (type == "bool") return "true or false";
  if (type == "text") return "text";
  if (type == "ints") return "comma-separated integers, e.g. 0,1";
  if (type == "floats") return "comma-separated numbers, e.g. 0.5,1";
  if (type == "scalar") return "a number (2 is sent as an int, 2.5 or 2.0 as a float) or true/false";
  return "a value of type " + type;
}

std::string attrNames(const OpInfo& op) {
  if (op.attrs.empty()) return "it takes no attrs";
  std::string out = "its attrs: ";
  for (size_t i = 0; i < op.attrs.size(); ++i) {
    if (i) out += ", ";
    out += op.attrs[i].name + " (" + op.attrs[i].type + ")";
  }
  return out;
}

}  // namespace

AttrValue parseAttrValue(std::string_view op, const AttrSpec& spec, std::string_view text) {
  std::optional<AttrValue> value;
  const std::string& type = spec.type;
  if (type == "int") {
    if (auto v = parseInt(text)) value = *v;
  } else if (type == "float") {
    if (auto v = parseFloat(text)) value = *v;
  } else if (type == "bool") {
    std::string_view t = trim(text);
    if (t == "true") value = true;
    if (t == "false") value = false;
  } else if (type == "text") {
    value = std::string(text);
  } else if (type == "scalar") {
    // Kept as written: an int scalar keeps an int tensor int, a float one
    // promotes it (PyTorch's rule for Python scalars).
    std::string_view t = trim(text);
    if (auto i = parseInt(t)) {
      value = *i;
    } else if (auto f = parseFloat(t)) {
      value = *f;
    } else if (t == "true" || t == "false") {
      value = t == "true";
    }
  } else if (type == "ints") {
    if (auto v = parseList<int64_t>(text, parseInt)) value = std::move(*v);
  } else if (type == "floats") {
    if (auto v = parseList<double>(text, parseFloat)) value = std::move(*v);
  } else {
    throw AttrError(std::string(op) + ": attr '" + spec.name + "' has type '" + type +
                    "', which this tensorctl cannot parse");
  }
  if (!value) {
    throw AttrError(std::string(op) + ": attr '" + spec.name + "' expects " + expectedText(type) + "; got '" +
                    std::string(text) + "'");
  }
  return *value;
}

Attrs parseAttrs(const OpInfo& op, const std::vector<std::string>& assignments) {
  Attrs out;
  for (const auto& assignment : assignments) {
    size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw AttrError(op.name + ": --attr expects key=value; got '" + assignment + "'");
    }
    std::string name = assignment.substr(0, eq);
    const AttrSpec* spec = nullptr;
    for (const auto& a : op.attrs) {
      if (a.name == name) spec = &a;
    }
    if (spec == nullptr) throw AttrError(op.name + " has no attr '" + name + "'; " + attrNames(op));
    for (const auto& [given, value] : out) {
      if (given == name) throw AttrError(op.name + ": attr '" + name + "' is given twice");
    }
    out.emplace_back(name, parseAttrValue(op.name, *spec, std::string_view(assignment).substr(eq + 1)));
  }
  return out;
}

std::string formatAttrValue(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%g", v);
          return buf;
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "'" + v + "'";
        } else {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
              out += std::to_string(v[i]);
            } else {
              char buf[32];
              std::snprintf(buf, sizeof buf, "%g", v[i]);
              out += buf;
            }
          }
          return out + "]";
        }
      },
      value);
}

}  // namespace tensord::cli
