#include "compute/attrs.h"

#include <array>
#include <cassert>
#include <stdexcept>

namespace tensord::compute {

std::string_view attrTypeName(AttrType type) {
  static constexpr std::array<std::string_view, 7> kNames = {"int", "float", "bool", "text", "ints", "floats", "scalar"};
  return kNames[size_t(type)];
}

AttrType attrTypeOf(const AttrValue& value) { return AttrType(value.index()); }

const AttrValue& Attrs::at(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error("attribute '" + std::string(name) + "' was not validated");
  return it->second;
}

int64_t Attrs::getInt(std::string_view name) const { return std::get<int64_t>(at(name)); }
double Attrs::getFloat(std::string_view name) const { return std::get<double>(at(name)); }
bool Attrs::getBool(std::string_view name) const { return std::get<bool>(at(name)); }
const std::string& Attrs::getText(std::string_view name) const { return std::get<std::string>(at(name)); }
const std::vector<int64_t>& Attrs::getInts(std::string_view name) const {
  return std::get<std::vector<int64_t>>(at(name));
}
const std::vector<double>& Attrs::getFloats(std::string_view name) const {
  return std::get<std::vector<double>>(at(name));
}

double Attrs::getNumber(std::string_view name, bool* isFloat) const {
  const AttrValue& v = at(name);
  if (isFloat) *isFloat = std::holds_alternative<double>(v);
  if (auto* f = std::get_if<double>(&v)) return *f;
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  throw std::logic_error("attribute '" + std::string(name) + "' is not a number");
}

}  // namespace tensord::compute
