#pragma once
// Op attributes: a small typed union, validated against an op's spec.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tensord::compute {

// kScalar is a number operand (`add x --attr other=2.5`): int or float, kept
// as given, because an int scalar keeps an int tensor int and a float one
// promotes it (PyTorch's rules for Python scalars).
enum class AttrType : uint8_t { kInt, kFloat, kBool, kText, kInts, kFloats, kScalar };

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

std::string_view attrTypeName(AttrType type);  // "int", "float", ...
AttrType attrTypeOf(const AttrValue& value);

// Attributes of one call after validation: every attribute the op declares is
// present (defaults filled in) with the declared type.
class Attrs {
 public:
  void set(std::string name, AttrValue value) { values_[std::move(name)] = std::move(value); }
  bool has(std::string_view name) const { return values_.find(name) != values_.end(); }

  // Typed getters; the attribute must exist with that type (checked by validation).
  int64_t getInt(std::string_view name) const;
  double getFloat(std::string_view name) const;
  bool getBool(std::string_view name) const;
  const std::string& getText(std::string_view name) const;
  const std::vector<int64_t>& getInts(std::string_view name) const;
  const std::vector<double>& getFloats(std::string_view name) const;
  // A kScalar (or kInt/kFloat/kBool) attribute as a number; `isFloat` tells
  // whether it was given as a float.
  double getNumber(std::string_view name, bool* isFloat = nullptr) const;

  const std::map<std::string, AttrValue, std::less<>>& values() const { return values_; }

 private:
  const AttrValue& at(std::string_view name) const;
  std::map<std::string, AttrValue, std::less<>> values_;
};

}  // namespace tensord::compute
