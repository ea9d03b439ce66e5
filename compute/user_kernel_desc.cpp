#include "compute/user_kernel_desc.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <nlohmann/json.hpp>
#include <set>

#include "compute/error.h"

namespace tensord::compute {

// ------------------------------------------------------------ expressions

struct KernelExprNode {
  enum class Kind { kLiteral, kAttr, kDim, kNumel, kRank, kNeg, kAdd, kSub, kMul, kDiv, kMod, kCeilDiv, kMin, kMax };
  Kind kind = Kind::kLiteral;
  int64_t value = 0;                           // literal; attr index; tensor index (dim/numel/rank)
  std::shared_ptr<const KernelExprNode> a, b;  // operands (dim: b is the index)
};

namespace {

using Node = KernelExprNode;
using NodePtr = std::shared_ptr<const Node>;

bool isIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Parser {
 public:
  Parser(std::string_view text, const std::string& where, const std::vector<std::string>& tensors,
         const std::vector<std::string>& attrs)
      : text_(text), where_(where), tensors_(tensors), attrs_(attrs) {}

  NodePtr parseAll() {
    NodePtr node = expr();
    skipSpace();
    if (pos_ != text_.size()) fail("unexpected '" + std::string(text_.substr(pos_, 1)) + "'");
    return node;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throwInvalid(where_ + ": '" + std::string(text_) + "': " + problem + " at column " + std::to_string(pos_ + 1) +
                 " (expressions: integers, + - * / %, ( ), dim(T, i), numel(T), rank(T), ceil_div(a, b), "
                 "min(a, b), max(a, b), int or bool attribute names)");
  }

  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool accept(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }

  static NodePtr make(Node::Kind kind, NodePtr a = nullptr, NodePtr b = nullptr, int64_t value = 0) {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->a = std::move(a);
    node->b = std::move(b);
    node->value = value;
    return node;
  }

  NodePtr expr() {
    NodePtr left = term();
    for (;;) {
      if (accept('+')) {
        left = make(Node::Kind::kAdd, left, term());
      } else if (accept('-')) {
        left = make(Node::Kind::kSub, left, term());
      } else {
        return left;
      }
    }
  }

  NodePtr term() {
    NodePtr left = unary();
    for (;;) {
      if (accept('*')) {
        left = make(Node::Kind::kMul, left, unary());
      } else if (accept('/')) {
        left = make(Node::Kind::kDiv, left, unary());
      } else if (accept('%')) {
        left = make(Node::Kind::kMod, left, unary());
      } else {
        return left;
      }
    }
  }

  NodePtr unary() {
    if (accept('-')) return make(Node::Kind::kNeg, unary());
    return primary();
  }

  std::string ident() {
    skipSpace();
    size_t start = pos_;
    if (pos_ >= text_.size() || !isIdentStart(text_[pos_])) fail("expected a name");
    while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  int64_t tensorIndex() {
    std::string name = ident();
    auto it = std::find(tensors_.begin(), tensors_.end(), name);
    if (it == tensors_.end()) {
      std::string known;
      for (const auto& t : tensors_) known += (known.empty() ? "" : ", ") + t;
      fail("unknown tensor '" + name + "' (known here: " + (known.empty() ? "none" : known) + ")");
    }
    return it - tensors_.begin();
  }

  NodePtr primary() {
    skipSpace();
    if (pos_ >= text_.size()) fail("expression ends early");
    char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      NodePtr inner = expr();
      expect(')');
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (v > (INT64_MAX - 9) / 10) fail("number too large");
        v = v * 10 + (text_[pos_++] - '0');
      }
      return make(Node::Kind::kLiteral, nullptr, nullptr, v);
    }
    std::string name = ident();
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      ++pos_;
      if (name == "dim") {
        int64_t t = tensorIndex();
        expect(',');
        NodePtr index = expr();
        expect(')');
        return make(Node::Kind::kDim, nullptr, index, t);
      }
      if (name == "numel" || name == "rank") {
        int64_t t = tensorIndex();
        expect(')');
        return make(name == "numel" ? Node::Kind::kNumel : Node::Kind::kRank, nullptr, nullptr, t);
      }
      Node::Kind kind;
      if (name == "ceil_div") {
        kind = Node::Kind::kCeilDiv;
      } else if (name == "min") {
        kind = Node::Kind::kMin;
      } else if (name == "max") {
        kind = Node::Kind::kMax;
      } else {
        fail("unknown function '" + name + "'");
      }
      NodePtr a = expr();
      expect(',');
      NodePtr b = expr();
      expect(')');
      return make(kind, a, b);
    }
    auto it = std::find(attrs_.begin(), attrs_.end(), name);
    if (it == attrs_.end()) {
      std::string known;
      for (const auto& t : attrs_) known += (known.empty() ? "" : ", ") + t;
      fail("unknown name '" + name + "' (int and bool attributes: " + (known.empty() ? "none" : known) + ")");
    }
    return make(Node::Kind::kAttr, nullptr, nullptr, it - attrs_.begin());
  }

  std::string_view text_;
  const std::string& where_;
  const std::vector<std::string>& tensors_;
  const std::vector<std::string>& attrs_;
  size_t pos_ = 0;
};

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t evalNode(const Node& n, const KernelExpr::Env& env, const std::string& where, const std::string& text) {
  auto fail = [&](const std::string& problem) -> int64_t { throwInvalid(where + ": '" + text + "': " + problem); };
  auto shape = [&]() -> const Shape& {
    const Shape* s = size_t(n.value) < env.shapes.size() ? env.shapes[size_t(n.value)] : nullptr;
    if (s == nullptr) fail("refers to a tensor whose shape is not known at this point");
    return *s;
  };
  auto a = [&] { return evalNode(*n.a, env, where, text); };
  auto b = [&] { return evalNode(*n.b, env, where, text); };
  switch (n.kind) {
    case Node::Kind::kLiteral:
      return n.value;
    case Node::Kind::kAttr:
      return env.attrs[size_t(n.value)];
    case Node::Kind::kDim: {
      const Shape& s = shape();
      int64_t i = b();
      int64_t rank = int64_t(s.size());
      int64_t k = i < 0 ? i + rank : i;
      if (k < 0 || k >= rank) {
        return fail("dim index " + std::to_string(i) + " is out of range for a tensor of rank " + std::to_string(rank));
      }
      return s[size_t(k)];
    }
    case Node::Kind::kNumel: {
      int64_t count = 1;
      for (int64_t d : shape()) count *= d;
      return count;
    }
    case Node::Kind::kRank:
      return int64_t(shape().size());
    case Node::Kind::kNeg:
      return -a();
    case Node::Kind::kAdd:
      return a() + b();
    case Node::Kind::kSub:
      return a() - b();
    case Node::Kind::kMul:
      return a() * b();
    case Node::Kind::kDiv:
    case Node::Kind::kMod:
    case Node::Kind::kCeilDiv: {
      int64_t x = a(), y = b();
      if (y == 0) return fail("division by zero");
      if (n.kind == Node::Kind::kDiv) return floorDiv(x, y);
      if (n.kind == Node::Kind::kMod) return x - floorDiv(x, y) * y;
      return -floorDiv(-x, y);
    }
    case Node::Kind::kMin:
      return std::min(a(), b());
    case Node::Kind::kMax:
      return std::max(a(), b());
  }
  return 0;
}

}  // namespace

KernelExpr KernelExpr::parse(std::string_view text, const std::string& where, const std::vector<std::string>& tensors,
                             const std::vector<std::string>& attrs) {
  KernelExpr e;
  e.text_ = std::string(text);
  e.where_ = where;
  e.root_ = Parser(e.text_, where, tensors, attrs).parseAll();
  return e;
}

int64_t KernelExpr::eval(const Env& env) const { return evalNode(*root_, env, where_, text_); }

// ------------------------------------------------------------ description

std::vector<std::string> UserKernelDesc::tensorNames() const {
  std::vector<std::string> names;
  for (const auto& b : inputs) names.push_back(b.name);
  for (const auto& b : outputs) names.push_back(b.name);
  return names;
}

std::vector<std::string> UserKernelDesc::intAttrNames() const {
  std::vector<std::string> names;
  for (const auto& a : attrs) names.push_back(a.type == AttrType::kFloat ? std::string() : a.name);
  return names;
}

namespace {

using nlohmann::json;

class DescParser {
 public:
  explicit DescParser(const std::string& op) : op_(op) {}

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throwInvalid(op_ + ": description: " + key + ": " + problem);
  }

  static std::string shown(const json& v) {
    std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  }

  void keysOnly(const json& object, const std::string& key, std::initializer_list<std::string_view> known) const {
    if (!object.is_object()) fail(key, "expected an object, got " + shown(object));
    for (const auto& [k, v] : object.items()) {
      if (std::find(known.begin(), known.end(), k) != known.end()) continue;
      std::string list;
      for (auto n : known) list += (list.empty() ? "" : ", ") + std::string(n);
      fail(key.empty() ? k : key + "." + k, "unknown key (known keys here: " + list + ")");
    }
  }

  std::string name(const json& object, const std::string& key) {
    if (!object.contains("name") || !object["name"].is_string()) fail(key + ".name", "expected a name string");
    std::string n = object["name"].get<std::string>();
    if (n.empty() || !isIdentStart(n[0]) || !std::all_of(n.begin(), n.end(), isIdentChar) || n.size() > 64) {
      fail(key + ".name", "'" + n + "' is not a name (letters, digits and _, not starting with a digit, at most 64)");
    }
    static const std::set<std::string> kReserved = {"dim", "numel", "rank", "ceil_div", "min", "max"};
    if (kReserved.count(n)) fail(key + ".name", "'" + n + "' is the name of an expression function");
    if (!names_.insert(n).second)
      fail(key + ".name", "'" + n + "' is used twice (inputs, outputs and attrs share names)");
    return n;
  }

  DType dtype(const json& object, const std::string& key) {
    if (!object.contains("dtype") || !object["dtype"].is_string()) {
      fail(key + ".dtype", "expected a dtype string (f32, f16, bf16, i32, i64, u8, bool)");
    }
    std::string text = object["dtype"].get<std::string>();
    auto d = parseDType(text);
    if (!d) {
      throw ComputeError(ComputeError::Kind::kUnsupported, op_ + ": description: " + key + ".dtype: unknown dtype '" +
                                                               text +
                                                               "' (expected f32, f16, bf16, i32, i64, u8 or bool)");
    }
    return *d;
  }

  std::optional<uint32_t> binding(const json& object, const std::string& key) {
    if (!object.contains("binding")) return std::nullopt;
    const json& b = object["binding"];
    if (!b.is_number_unsigned() || b.get<uint64_t>() > 31) fail(key + ".binding", "expected 0 to 31, got " + shown(b));
    return b.get<uint32_t>();
  }

  std::vector<const json*> list(const json& root, const char* key, bool required) {
    std::vector<const json*> items;
    if (!root.contains(key)) {
      if (required) fail(key, "missing (a list of objects)");
      return items;
    }
    const json& l = root[key];
    if (!l.is_array()) fail(key, "expected a list, got " + shown(l));
    for (const auto& item : l) items.push_back(&item);
    return items;
  }

  UserKernelDesc parse(std::string_view text) {
    json root;
    try {
      root = json::parse(text, nullptr, true, /*ignore_comments=*/true);
    } catch (const json::parse_error& e) {
      throwInvalid(op_ + ": description is not valid JSON: " + e.what());
    }
    keysOnly(root, "", {"doc", "inputs", "outputs", "attrs", "push", "workgroup", "grid"});
    UserKernelDesc desc;
    if (root.contains("doc")) {
      if (!root["doc"].is_string()) fail("doc", "expected a string");
      desc.doc = root["doc"].get<std::string>();
    }
    std::vector<std::optional<uint32_t>> bindings;
    auto inputs = list(root, "inputs", false);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string key = "inputs[" + std::to_string(i) + "]";
      keysOnly(*inputs[i], key, {"name", "dtype", "binding"});
      UserKernelBuffer b;
      b.name = name(*inputs[i], key);
      b.dtype = dtype(*inputs[i], key);
      bindings.push_back(binding(*inputs[i], key));
      desc.inputs.push_back(std::move(b));
    }
    auto outputs = list(root, "outputs", true);
    if (outputs.empty()) fail("outputs", "a kernel needs at least one output");
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string key = "outputs[" + std::to_string(i) + "]";
      keysOnly(*outputs[i], key, {"name", "dtype", "binding", "shape"});
      UserKernelBuffer b;
      b.name = name(*outputs[i], key);
      b.dtype = dtype(*outputs[i], key);
      bindings.push_back(binding(*outputs[i], key));
      desc.outputs.push_back(std::move(b));
    }
    if (desc.inputs.size() + desc.outputs.size() > 16) fail("inputs", "at most 16 buffers (inputs and outputs) in all");

    auto attrs = list(root, "attrs", false);
    for (size_t i = 0; i < attrs.size(); ++i) {
      const std::string key = "attrs[" + std::to_string(i) + "]";
      const json& a = *attrs[i];
      keysOnly(a, key, {"name", "type", "default", "doc"});
      UserKernelAttr attr;
      attr.name = name(a, key);
      if (!a.contains("type") || !a["type"].is_string()) fail(key + ".type", "expected \"int\", \"float\" or \"bool\"");
      std::string type = a["type"].get<std::string>();
      if (type == "int") {
        attr.type = AttrType::kInt;
      } else if (type == "float") {
        attr.type = AttrType::kFloat;
      } else if (type == "bool") {
        attr.type = AttrType::kBool;
      } else {
        fail(key + ".type", "unknown type '" + type + "' (expected int, float or bool)");
      }
      if (a.contains("default")) {
        const json& d = a["default"];
        if (attr.type == AttrType::kInt && d.is_number_integer()) {
          int64_t v = d.get<int64_t>();
          if (v < INT32_MIN || v > INT32_MAX) fail(key + ".default", "does not fit a 32-bit int");
          attr.defaultValue = v;
        } else if (attr.type == AttrType::kFloat && d.is_number()) {
          attr.defaultValue = d.get<double>();
        } else if (attr.type == AttrType::kBool && d.is_boolean()) {
          attr.defaultValue = d.get<bool>();
        } else {
          fail(key + ".default", "expected a " + type + ", got " + shown(d));
        }
      }
      if (a.contains("doc")) {
        if (!a["doc"].is_string()) fail(key + ".doc", "expected a string");
        attr.doc = a["doc"].get<std::string>();
      }
      desc.attrs.push_back(std::move(attr));
    }

    // Bindings: given explicitly, or inputs then outputs from 0; each once.
    std::set<uint32_t> used;
    for (size_t i = 0; i < bindings.size(); ++i) {
      bool input = i < desc.inputs.size();
      UserKernelBuffer& b = input ? desc.inputs[i] : desc.outputs[i - desc.inputs.size()];
      b.binding = bindings[i].value_or(uint32_t(i));
      if (!used.insert(b.binding).second) {
        fail(std::string(input ? "inputs" : "outputs") + "[" + std::to_string(input ? i : i - desc.inputs.size()) +
                 "].binding",
             "binding " + std::to_string(b.binding) + " is taken by another buffer");
      }
    }

    std::vector<std::string> inputNames;
    for (const auto& b : desc.inputs) inputNames.push_back(b.name);
    const std::vector<std::string> intAttrs = desc.intAttrNames();
    const std::vector<std::string> allTensors = desc.tensorNames();
    for (size_t i = 0; i < desc.outputs.size(); ++i) {
      const std::string key = "outputs[" + std::to_string(i) + "].shape";
      if (!outputs[i]->contains("shape")) {
        fail(key, "missing: the name of an input whose shape it has, or a list of dim expressions");
      }
      const json& s = (*outputs[i])["shape"];
      UserKernelBuffer& out = desc.outputs[i];
      if (s.is_string()) {
        auto it = std::find(inputNames.begin(), inputNames.end(), s.get<std::string>());
        if (it == inputNames.end()) {
          fail(key, "'" + s.get<std::string>() +
                        "' is not an input (a string names the input whose shape the "
                        "output has; give a list of expressions otherwise)");
        }
        out.sameAs = size_t(it - inputNames.begin());
      } else if (s.is_array()) {
        if (s.size() > kMaxRank) fail(key, "at most " + std::to_string(kMaxRank) + " dims");
        for (size_t d = 0; d < s.size(); ++d) {
          const std::string where = key + "[" + std::to_string(d) + "]";
          if (s[d].is_number_integer()) {
            out.shape.push_back(
                KernelExpr::parse(std::to_string(s[d].get<int64_t>()), op_ + ": " + where, inputNames, intAttrs));
          } else if (s[d].is_string()) {
            out.shape.push_back(KernelExpr::parse(s[d].get<std::string>(), op_ + ": " + where, inputNames, intAttrs));
          } else {
            fail(where, "expected an expression string or an integer, got " + shown(s[d]));
          }
        }
      } else {
        fail(key, "expected an input's name or a list of dim expressions, got " + shown(s));
      }
    }

    auto exprList = [&](const char* key, size_t max) {
      std::vector<KernelExpr> out;
      if (!root.contains(key)) return out;
      json l = root[key];
      if (l.is_string()) l = json::array({l});
      if (!l.is_array() || l.empty() || l.size() > max) {
        fail(key, "expected a list of 1 to " + std::to_string(max) + " expression strings");
      }
      for (size_t i = 0; i < l.size(); ++i) {
        const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
        if (l[i].is_number_integer()) {
          out.push_back(
              KernelExpr::parse(std::to_string(l[i].get<int64_t>()), op_ + ": " + where, allTensors, intAttrs));
        } else if (l[i].is_string()) {
          out.push_back(KernelExpr::parse(l[i].get<std::string>(), op_ + ": " + where, allTensors, intAttrs));
        } else {
          fail(where, "expected an expression string, got " + shown(l[i]));
        }
      }
      return out;
    };
    desc.grid = exprList("grid", 3);
    if (desc.grid.empty()) {
      desc.grid.push_back(
          KernelExpr::parse("numel(" + desc.outputs[0].name + ")", op_ + ": grid[0]", allTensors, intAttrs));
    }
    desc.push = exprList("push", 32);
    if (desc.pushBytes() > 128) {
      fail("attrs", "attrs and push take " + std::to_string(desc.pushBytes()) +
                        " bytes of push constants; at most 128 (32 values of 4 bytes)");
    }
    if (root.contains("workgroup")) {
      const json& w = root["workgroup"];
      std::array<uint32_t, 3> size{1, 1, 1};
      if (!w.is_array() || w.empty() || w.size() > 3)
        fail("workgroup", "expected a list of 1 to 3 sizes, got " + shown(w));
      for (size_t i = 0; i < w.size(); ++i) {
        if (!w[i].is_number_unsigned() || w[i].get<uint64_t>() == 0 || w[i].get<uint64_t>() > 1024) {
          fail("workgroup[" + std::to_string(i) + "]", "expected 1 to 1024, got " + shown(w[i]));
        }
        size[i] = w[i].get<uint32_t>();
      }
      desc.workgroup = size;
    }
    return desc;
  }

 private:
  const std::string& op_;
  std::set<std::string> names_;
};

}  // namespace

UserKernelDesc parseUserKernelDesc(std::string_view json, const std::string& op) { return DescParser(op).parse(json); }

}  // namespace tensord::compute
