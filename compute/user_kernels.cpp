#include "compute/user_kernels.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <spirv-tools/libspirv.hpp>

#include "compute/allocator.h"
#include "compute/device.h"
#include "compute/kernel_cache.h"
#include "compute/kernel_templates.h"

namespace tensord::compute {
namespace {

// SPIR-V opcodes, decorations and enums the reflection reads.
enum : uint32_t {
  kOpName = 5,
  kOpEntryPoint = 15,
  kOpExecutionMode = 16,
  kOpTypeBool = 20,
  kOpTypeInt = 21,
  kOpTypeFloat = 22,
  kOpTypeVector = 23,
  kOpTypeMatrix = 24,
  kOpTypeArray = 28,
  kOpTypeRuntimeArray = 29,
  kOpTypeStruct = 30,
  kOpTypePointer = 32,
  kOpConstant = 43,
  kOpVariable = 59,
  kOpDecorate = 71,
  kOpMemberDecorate = 72,
  kOpExecutionModeId = 331,

  kDecBlock = 2,
  kDecBufferBlock = 3,
  kDecArrayStride = 6,
  kDecNonWritable = 24,
  kDecBinding = 33,
  kDecDescriptorSet = 34,
  kDecOffset = 35,

  kModeLocalSize = 17,
  kModeLocalSizeId = 38,

  kModelGLCompute = 5,

  kClassUniformConstant = 0,
  kClassUniform = 2,
  kClassPushConstant = 9,
  kClassStorageBuffer = 12,
};

std::string literalString(const uint32_t* words, size_t count) {
  std::string s;
  for (size_t i = 0; i < count; ++i) {
    for (int b = 0; b < 4; ++b) {
      char c = char((words[i] >> (8 * b)) & 0xff);
      if (c == 0) return s;
      s += c;
    }
  }
  return s;
}

struct TypeInfo {
  uint32_t op = 0;
  std::vector<uint32_t> operands;  // after the result id
};

class Reflector {
 public:
  Reflector(const std::vector<uint32_t>& words, const std::string& op) : words_(words), op_(op) {}

  SpirvReflection run() {
    if (words_.size() < 5 || words_[0] != 0x07230203) {
      throwInvalid(op_ + ": not a SPIR-V module (no SPIR-V magic number 0x07230203 at the start)");
    }
    SpirvReflection out;
    std::vector<std::pair<uint32_t, uint32_t>> variables;  // (pointer type, id) of interesting variables
    std::map<uint32_t, uint32_t> variableClass;
    for (size_t i = 5; i < words_.size();) {
      const uint32_t count = words_[i] >> 16, opcode = words_[i] & 0xffff;
      if (count == 0 || i + count > words_.size()) throwInvalid(op_ + ": SPIR-V module is truncated or malformed");
      const uint32_t* w = &words_[i + 1];
      const size_t n = count - 1;
      switch (opcode) {
        case kOpName:
          if (n >= 2) names_[w[0]] = literalString(w + 1, n - 1);
          break;
        case kOpEntryPoint:
          if (n >= 3) out.entryPoints.push_back({w[0], literalString(w + 2, n - 2), w[1]});
          break;
        case kOpExecutionMode:
        case kOpExecutionModeId:
          if (n >= 2 && w[1] == kModeLocalSize && n >= 5) out.localSize = std::array<uint32_t, 3>{w[2], w[3], w[4]};
          if (n >= 2 && w[1] == kModeLocalSizeId) out.localSizeId = true;
          break;
        case kOpTypeBool:
        case kOpTypeInt:
        case kOpTypeFloat:
        case kOpTypeVector:
        case kOpTypeMatrix:
        case kOpTypeArray:
        case kOpTypeRuntimeArray:
        case kOpTypeStruct:
        case kOpTypePointer:
          if (n >= 1) types_[w[0]] = {opcode, std::vector<uint32_t>(w + 1, w + n)};
          break;
        case kOpConstant:
          if (n >= 3) constants_[w[1]] = w[2];
          break;
        case kOpVariable:
          if (n >= 3) {
            variables.emplace_back(w[0], w[1]);
            variableClass[w[1]] = w[2];
          }
          break;
        case kOpDecorate:
          if (n >= 2) decorations_[w[0]][w[1]] = n >= 3 ? w[2] : 1;
          break;
        case kOpMemberDecorate:
          if (n >= 3) memberDecorations_[w[0]][w[1]][w[2]] = n >= 4 ? w[3] : 1;
          break;
        default:
          break;
      }
      i += count;
    }
    for (const auto& [pointerType, id] : variables) {
      const uint32_t storage = variableClass[id];
      const uint32_t pointee = pointeeOf(pointerType);
      if (storage == kClassPushConstant) {
        out.pushBytes = std::max(out.pushBytes, sizeOf(pointee));
        continue;
      }
      if (storage != kClassStorageBuffer && storage != kClassUniform && storage != kClassUniformConstant) continue;
      SpirvReflection::Buffer b;
      b.storageClass = storage;
      b.set = decoration(id, kDecDescriptorSet).value_or(0);
      b.binding = decoration(id, kDecBinding).value_or(0);
      b.name = names_.count(id) && !names_[id].empty() ? names_[id] : names_.count(pointee) ? names_[pointee] : "";
      // Arrays of blocks: look through to the block.
      uint32_t block = pointee;
      while (types_.count(block) && (types_[block].op == kOpTypeArray || types_[block].op == kOpTypeRuntimeArray)) {
        block = types_[block].operands[0];
      }
      const bool isBlock = decoration(block, kDecBlock).has_value();
      const bool isBufferBlock = decoration(block, kDecBufferBlock).has_value();
      b.storageBlock = (storage == kClassStorageBuffer && isBlock) || (storage == kClassUniform && isBufferBlock);
      if (types_.count(block) && types_[block].op == kOpTypeStruct) {
        const auto& members = types_[block].operands;
        bool allReadOnly = !members.empty();
        for (uint32_t m = 0; m < members.size(); ++m) {
          allReadOnly = allReadOnly && memberDecoration(block, m, kDecNonWritable);
        }
        b.readOnly = decoration(id, kDecNonWritable).has_value() || allReadOnly;
        if (!members.empty()) componentOf(members.back(), &b.elementBits, &b.elementFloat);
      } else {
        b.readOnly = decoration(id, kDecNonWritable).has_value();
      }
      out.buffers.push_back(std::move(b));
    }
    return out;
  }

 private:
  std::optional<uint32_t> decoration(uint32_t id, uint32_t dec) const {
    auto it = decorations_.find(id);
    if (it == decorations_.end()) return std::nullopt;
    auto d = it->second.find(dec);
    if (d == it->second.end()) return std::nullopt;
    return d->second;
  }

  bool memberDecoration(uint32_t id, uint32_t member, uint32_t dec) const {
    auto it = memberDecorations_.find(id);
    if (it == memberDecorations_.end()) return false;
    auto m = it->second.find(member);
    return m != it->second.end() && m->second.count(dec);
  }

  uint32_t pointeeOf(uint32_t pointerType) const {
    auto it = types_.find(pointerType);
    if (it == types_.end() || it->second.op != kOpTypePointer || it->second.operands.size() < 2) return 0;
    return it->second.operands[1];
  }

  // The scalar component under arrays and vectors.
  void componentOf(uint32_t type, uint32_t* bits, bool* isFloat) const {
    for (int depth = 0; depth < 8; ++depth) {
      auto it = types_.find(type);
      if (it == types_.end()) return;
      const TypeInfo& t = it->second;
      if (t.op == kOpTypeArray || t.op == kOpTypeRuntimeArray || t.op == kOpTypeVector || t.op == kOpTypeMatrix) {
        type = t.operands[0];
        continue;
      }
      if (t.op == kOpTypeInt || t.op == kOpTypeFloat) {
        *bits = t.operands[0];
        *isFloat = t.op == kOpTypeFloat;
      }
      return;
    }
  }

  uint32_t sizeOf(uint32_t type, int depth = 0) const {
    auto it = types_.find(type);
    if (it == types_.end() || depth > 16) return 0;
    const TypeInfo& t = it->second;
    switch (t.op) {
      case kOpTypeBool:
        return 4;
      case kOpTypeInt:
      case kOpTypeFloat:
        return t.operands[0] / 8;
      case kOpTypeVector:
      case kOpTypeMatrix:
        return t.operands[1] * sizeOf(t.operands[0], depth + 1);
      case kOpTypeArray: {
        auto len = constants_.find(t.operands[1]);
        uint32_t stride = decoration(type, kDecArrayStride).value_or(sizeOf(t.operands[0], depth + 1));
        return len == constants_.end() ? 0 : len->second * stride;
      }
      case kOpTypeStruct: {
        uint32_t size = 0;
        for (uint32_t m = 0; m < t.operands.size(); ++m) {
          uint32_t offset = 0;
          auto md = memberDecorations_.find(type);
          if (md != memberDecorations_.end()) {
            auto mm = md->second.find(m);
            if (mm != md->second.end() && mm->second.count(kDecOffset)) offset = mm->second.at(kDecOffset);
          }
          size = std::max(size, offset + sizeOf(t.operands[m], depth + 1));
        }
        return size;
      }
      default:
        return 0;
    }
  }

  const std::vector<uint32_t>& words_;
  const std::string& op_;
  std::map<uint32_t, std::string> names_;
  std::map<uint32_t, TypeInfo> types_;
  std::map<uint32_t, uint32_t> constants_;
  std::map<uint32_t, std::map<uint32_t, uint32_t>> decorations_;
  std::map<uint32_t, std::map<uint32_t, std::map<uint32_t, uint32_t>>> memberDecorations_;
};

// Runs SPIRV-Tools' validator for Vulkan 1.2; the messages in one line each.
void validateSpirv(const std::vector<uint32_t>& words, const std::string& op) {
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_2);
  std::string messages;
  tools.SetMessageConsumer([&](spv_message_level_t, const char*, const spv_position_t& position, const char* message) {
    if (!messages.empty()) messages += "; ";
    messages += message;
    if (position.index != 0) messages += " (word " + std::to_string(position.index) + ")";
  });
  if (!tools.Validate(words)) {
    throwInvalid(op + ": SPIR-V does not validate: " + (messages.empty() ? "the validator gave no reason" : messages));
  }
}

bool elementMatches(DType dtype, uint32_t bits, bool isFloat) {
  if (bits == 0) return true;  // not a plain array of scalars: not checked
  if (bits != dtypeSize(dtype) * 8) return false;
  if (isFloat) return dtype == DType::F32 || dtype == DType::F16;
  return true;  // ints of the right width: any dtype of that size, bit patterns included
}

std::string elementName(uint32_t bits, bool isFloat) { return (isFloat ? "float" : "int") + std::to_string(bits); }

// Checks the module's declarations against the description.
void checkAgainstDescription(const SpirvReflection& r, const UserKernelDesc& desc, const std::string& op,
                             std::array<uint32_t, 3>* localSize) {
  const SpirvReflection::EntryPoint* entry = nullptr;
  std::string found;
  for (const auto& e : r.entryPoints) {
    found += (found.empty() ? "" : ", ") + ("'" + e.name + "'") + (e.model == kModelGLCompute ? " (compute)" : "");
    if (e.model == kModelGLCompute && e.name == "main") entry = &e;
  }
  if (entry == nullptr) {
    throwInvalid(op + ": no compute entry point named 'main' (the module has " +
                 (found.empty() ? std::string("no entry point") : "entry point(s) " + found) + ")");
  }
  if (r.localSizeId) {
    throwInvalid(op +
                 ": the local size comes from specialization constants (LocalSizeId); declare it with "
                 "literals: layout(local_size_x = N) in;");
  }
  if (!r.localSize) throwInvalid(op + ": the module declares no local size (layout(local_size_x = N) in;)");
  *localSize = *r.localSize;
  if (desc.workgroup && *desc.workgroup != *r.localSize) {
    auto str = [](const std::array<uint32_t, 3>& s) {
      return "[" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(s[2]) + "]";
    };
    throwInvalid(op + ": the description's workgroup " + str(*desc.workgroup) +
                 " differs from the shader's local size " + str(*r.localSize));
  }

  std::map<uint32_t, const UserKernelBuffer*> described;
  std::map<uint32_t, bool> isInput;
  for (const auto& b : desc.inputs) described[b.binding] = &b, isInput[b.binding] = true;
  for (const auto& b : desc.outputs) described[b.binding] = &b, isInput[b.binding] = false;
  std::set<uint32_t> seen;
  for (const auto& b : r.buffers) {
    const std::string what = "binding " + std::to_string(b.binding) + (b.name.empty() ? "" : " ('" + b.name + "')");
    if (b.set != 0) {
      throwInvalid(op + ": " + what + " is in descriptor set " + std::to_string(b.set) +
                   "; user kernels use set 0 only");
    }
    if (!b.storageBlock) {
      throwInvalid(op + ": " + what +
                   " is not a storage buffer (uniform buffers, images and samplers are not "
                   "supported; declare layout(binding = N) buffer NAME { ... })");
    }
    auto it = described.find(b.binding);
    if (it == described.end()) {
      throwInvalid(op + ": the shader declares a buffer at " + what + " that the description does not mention");
    }
    const bool input = isInput[b.binding];
    const UserKernelBuffer& d = *it->second;
    const std::string role = std::string(input ? "input" : "output") + " '" + d.name + "'";
    if (input && !b.readOnly) {
      throwInvalid(op + ": " + what + " is " + role + " but the shader may write it; declare it readonly");
    }
    if (!input && b.readOnly) {
      throwInvalid(op + ": " + what + " is " + role + " but the shader declares it readonly");
    }
    if (!elementMatches(d.dtype, b.elementBits, b.elementFloat)) {
      throwInvalid(op + ": " + what + " is " + role + " of dtype " + std::string(dtypeName(d.dtype)) +
                   " but the shader's elements are " + elementName(b.elementBits, b.elementFloat));
    }
    seen.insert(b.binding);
  }
  for (const auto& [binding, d] : described) {
    if (!seen.count(binding)) {
      throwInvalid(op + ": the description binds " + (isInput[binding] ? "input" : "output") + " '" + d->name +
                   "' at binding " + std::to_string(binding) + ", but the shader declares no buffer there");
    }
  }
  if (r.pushBytes > desc.pushBytes()) {
    throwInvalid(op + ": the shader's push-constant block is " + std::to_string(r.pushBytes) +
                 " bytes; the description provides " + std::to_string(desc.pushBytes()) + " (" +
                 std::to_string(desc.attrs.size()) + " attr(s) and " + std::to_string(desc.push.size()) +
                 " push value(s), 4 bytes each)");
  }
}

// The template behind a user kernel's op: infers outputs from the
// description's shape rules and records one dispatch with push descriptors.
class UserKernelTemplate final : public KernelTemplate {
 public:
  UserKernelTemplate(const Device& device, const UserKernelDesc& desc, std::array<uint32_t, 3> localSize,
                     vk::raii::DescriptorSetLayout setLayout, vk::raii::PipelineLayout layout,
                     vk::raii::Pipeline pipeline)
      : device_(device),
        desc_(desc),
        localSize_(localSize),
        setLayout_(std::move(setLayout)),
        layout_(std::move(layout)),
        pipeline_(std::move(pipeline)) {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> inputs,
                                const Attrs& attrs) const override {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].dtype != desc_.inputs[i].dtype) {
        throw ComputeError(ComputeError::Kind::kUnsupported,
                           spec.name + ": input '" + desc_.inputs[i].name + "' has dtype " +
                               std::string(dtypeName(inputs[i].dtype)) + "; expected " +
                               std::string(dtypeName(desc_.inputs[i].dtype)));
      }
    }
    std::vector<int64_t> attrValues = intAttrs(spec, attrs);
    std::vector<const Shape*> shapes;
    for (const auto& in : inputs) shapes.push_back(&in.shape);
    KernelExpr::Env env{shapes, attrValues};
    std::vector<TensorDesc> outputs;
    for (const auto& out : desc_.outputs) {
      TensorDesc d{out.dtype, {}};
      if (out.sameAs) {
        d.shape = inputs[*out.sameAs].shape;
      } else {
        for (size_t k = 0; k < out.shape.size(); ++k) {
          int64_t v = out.shape[k].eval(env);
          if (v < 0) {
            throwInvalid(spec.name + ": output '" + out.name + "' dim " + std::to_string(k) + " ('" +
                         out.shape[k].text() + "') is " + std::to_string(v) + "; expected >= 0");
          }
          d.shape.push_back(v);
        }
      }
      outputs.push_back(std::move(d));
    }
    // Everything a dispatch could fail on is checked here, before the call
    // returns: binding sizes and the grid.
    const uint64_t range = device_.limits().maxStorageBufferRange;
    auto checkRange = [&](const TensorDesc& d, const std::string& role, const std::string& name) {
      if (d.bytes() > range) {
        throwInvalid(spec.name + ": " + role + " '" + name + "' is " + std::to_string(d.bytes()) +
                     " bytes; a user kernel's buffer may be at most " + std::to_string(range) +
                     " bytes on this device (maxStorageBufferRange)");
      }
    };
    for (size_t i = 0; i < inputs.size(); ++i) checkRange(inputs[i], "input", desc_.inputs[i].name);
    for (size_t i = 0; i < outputs.size(); ++i) checkRange(outputs[i], "output", desc_.outputs[i].name);
    for (const auto& out : outputs) shapes.push_back(&out.shape);
    groups(spec, KernelExpr::Env{shapes, attrValues});
    pushWords(spec, attrs, KernelExpr::Env{shapes, attrValues});
    return outputs;
  }

  void record(const OpSpec& spec, Recorder& recorder, std::span<const TensorView> inputs,
              std::span<const TensorView> outputs, const Attrs& attrs) const override {
    std::vector<int64_t> attrValues = intAttrs(spec, attrs);
    std::vector<const Shape*> shapes;
    for (const auto& v : inputs) shapes.push_back(&v.desc.shape);
    for (const auto& v : outputs) shapes.push_back(&v.desc.shape);
    const KernelExpr::Env env{shapes, attrValues};
    const std::array<uint32_t, 3> g = groups(spec, env);
    if (g[0] == 0 || g[1] == 0 || g[2] == 0) return;
    const std::vector<uint32_t> push = pushWords(spec, attrs, env);

    std::vector<vk::DescriptorBufferInfo> infos;
    std::vector<uint32_t> bindings;
    auto add = [&](const TensorView& v, uint32_t binding) {
      // A binding's range is the tensor's own bytes: with robustBufferAccess2
      // nothing outside it can be reached. An empty tensor binds 4 bytes of
      // its own block (blocks are at least 256 bytes).
      infos.push_back({.buffer = v.buffer->block().buffer,
                       .offset = v.buffer->offset(),
                       .range = std::max<uint64_t>(v.buffer->bytes(), 4)});
      bindings.push_back(binding);
    };
    for (size_t i = 0; i < inputs.size(); ++i) add(inputs[i], desc_.inputs[i].binding);
    for (size_t i = 0; i < outputs.size(); ++i) add(outputs[i], desc_.outputs[i].binding);
    std::vector<vk::WriteDescriptorSet> writes;
    for (size_t i = 0; i < infos.size(); ++i) {
      writes.push_back({.dstBinding = bindings[i],
                        .descriptorCount = 1,
                        .descriptorType = vk::DescriptorType::eStorageBuffer,
                        .pBufferInfo = &infos[i]});
    }
    recorder.recordCommands([&](VkCommandBuffer_T* handle) {
      const auto& d = *device_.device().getDispatcher();
      vk::CommandBuffer cmd(handle);
      cmd.bindPipeline(vk::PipelineBindPoint::eCompute, *pipeline_, d);
      cmd.pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, *layout_, 0, writes, d);
      if (!push.empty()) {
        cmd.pushConstants(*layout_, vk::ShaderStageFlagBits::eCompute, 0, uint32_t(push.size() * 4), push.data(), d);
      }
      cmd.dispatch(g[0], g[1], g[2], d);
    });
  }

  std::vector<const KernelSource*> variants(const OpSpec& spec, DType dtype) const override { return {}; }

 private:
  // Int and bool attribute values for expressions (floats get 0: not usable there).
  std::vector<int64_t> intAttrs(const OpSpec& spec, const Attrs& attrs) const {
    std::vector<int64_t> values;
    for (const auto& a : desc_.attrs) {
      if (a.type == AttrType::kInt) {
        int64_t v = attrs.getInt(a.name);
        if (v < INT32_MIN || v > INT32_MAX) {
          throwInvalid(spec.name + ": attribute '" + a.name + "' is " + std::to_string(v) +
                       "; expected a 32-bit int (it is passed as a push constant)");
        }
        values.push_back(v);
      } else if (a.type == AttrType::kBool) {
        values.push_back(attrs.getBool(a.name) ? 1 : 0);
      } else {
        values.push_back(0);
      }
    }
    return values;
  }

  std::array<uint32_t, 3> groups(const OpSpec& spec, const KernelExpr::Env& env) const {
    std::array<uint32_t, 3> g{1, 1, 1};
    static constexpr const char* kAxes[] = {"x", "y", "z"};
    for (size_t axis = 0; axis < desc_.grid.size(); ++axis) {
      int64_t invocations = desc_.grid[axis].eval(env);
      if (invocations < 0) {
        throwInvalid(spec.name + ": grid " + kAxes[axis] + " ('" + desc_.grid[axis].text() + "') is " +
                     std::to_string(invocations) + "; expected >= 0");
      }
      const int64_t count = (invocations + localSize_[axis] - 1) / localSize_[axis];
      const uint32_t limit = device_.limits().maxComputeWorkGroupCount[axis];
      if (count > int64_t(limit)) {
        throwInvalid(spec.name + ": grid " + kAxes[axis] + " ('" + desc_.grid[axis].text() +
                     "' = " + std::to_string(invocations) + " invocations) needs " + std::to_string(count) +
                     " workgroups of " + std::to_string(localSize_[axis]) + "; the device allows " +
                     std::to_string(limit) + " (loop inside the kernel and give a smaller grid)");
      }
      g[axis] = uint32_t(count);
    }
    return g;
  }

  std::vector<uint32_t> pushWords(const OpSpec& spec, const Attrs& attrs, const KernelExpr::Env& env) const {
    std::vector<uint32_t> words;
    for (size_t i = 0; i < desc_.attrs.size(); ++i) {
      const auto& a = desc_.attrs[i];
      if (a.type == AttrType::kFloat) {
        float f = float(attrs.getFloat(a.name));
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        words.push_back(bits);
      } else {
        words.push_back(uint32_t(int32_t(env.attrs[i])));
      }
    }
    for (size_t i = 0; i < desc_.push.size(); ++i) {
      int64_t v = desc_.push[i].eval(env);
      if (v < INT32_MIN || v > INT32_MAX) {
        throwInvalid(spec.name + ": push[" + std::to_string(i) + "] ('" + desc_.push[i].text() + "') is " +
                     std::to_string(v) + "; expected a 32-bit int");
      }
      words.push_back(uint32_t(int32_t(v)));
    }
    return words;
  }

  const Device& device_;
  const UserKernelDesc& desc_;  // owned by the UserKernel that owns this template
  std::array<uint32_t, 3> localSize_;
  vk::raii::DescriptorSetLayout setLayout_;
  vk::raii::PipelineLayout layout_;
  vk::raii::Pipeline pipeline_;
};

std::vector<uint32_t> spirvWords(const std::string& bytes, const std::string& op) {
  if (bytes.empty() || bytes.size() % 4 != 0) {
    throwInvalid(op + ": SPIR-V must be a whole number of 4-byte words; got " + std::to_string(bytes.size()) +
                 " bytes");
  }
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

}  // namespace

SpirvReflection reflectSpirv(const std::vector<uint32_t>& words, const std::string& op) {
  return Reflector(words, op).run();
}

UserKernel::UserKernel(UserKernelSource source, UserKernelDesc desc, std::vector<uint32_t> spirv,
                       std::array<uint32_t, 3> localSize)
    : source_(std::move(source)), desc_(std::move(desc)), spirv_(std::move(spirv)), localSize_(localSize) {}

std::shared_ptr<const UserKernel> buildUserKernel(const Device& device, KernelCache& cache, UserKernelSource source,
                                                  spdlog::logger& log) {
  const std::string op = source.name;
  UserKernelDesc desc = parseUserKernelDesc(source.description, op);
  const DeviceFeatures& features = device.info().features;
  if (!features.pushDescriptors || !features.robustBufferAccess2) {
    throw ComputeError(ComputeError::Kind::kUnsupported,
                       op +
                           ": user kernels need VK_KHR_push_descriptor and VK_EXT_robustness2 "
                           "(robustBufferAccess2), which " +
                           device.info().name + " lacks");
  }
  for (const auto* list : {&desc.inputs, &desc.outputs}) {
    for (const auto& b : *list) {
      const bool supported = b.dtype == DType::I64                             ? features.int64
                             : b.dtype == DType::F16 || b.dtype == DType::BF16 ? features.storage16
                             : b.dtype == DType::U8 || b.dtype == DType::Bool  ? features.storage8
                                                                               : true;
      if (!supported) {
        throw ComputeError(ComputeError::Kind::kUnsupported, op + ": '" + b.name + "' has dtype " +
                                                                 std::string(dtypeName(b.dtype)) + ", which " +
                                                                 device.info().name + " does not support");
      }
    }
  }

  std::vector<uint32_t> words;
  if (source.language == "glsl") {
    words = cache.compile(op, source.source);
  } else if (source.language == "spirv") {
    words = spirvWords(source.source, op);
  } else {
    throwInvalid(op + ": language '" + source.language + "' is not known (expected \"glsl\" or \"spirv\")");
  }
  SpirvReflection reflection = reflectSpirv(words, op);
  validateSpirv(words, op);
  std::array<uint32_t, 3> localSize{};
  checkAgainstDescription(reflection, desc, op, &localSize);
  const uint64_t invocations = uint64_t(localSize[0]) * localSize[1] * localSize[2];
  const auto& limits = device.limits();
  if (invocations > limits.maxComputeWorkGroupInvocations || localSize[0] > limits.maxComputeWorkGroupSize[0] ||
      localSize[1] > limits.maxComputeWorkGroupSize[1] || localSize[2] > limits.maxComputeWorkGroupSize[2]) {
    throwInvalid(op + ": local size " + std::to_string(localSize[0]) + "x" + std::to_string(localSize[1]) + "x" +
                 std::to_string(localSize[2]) + " exceeds the device's limits (" +
                 std::to_string(limits.maxComputeWorkGroupInvocations) + " invocations, " +
                 std::to_string(limits.maxComputeWorkGroupSize[0]) + "x" +
                 std::to_string(limits.maxComputeWorkGroupSize[1]) + "x" +
                 std::to_string(limits.maxComputeWorkGroupSize[2]) + ")");
  }

  std::vector<vk::DescriptorSetLayoutBinding> bindings;
  for (const auto* list : {&desc.inputs, &desc.outputs}) {
    for (const auto& b : *list) {
      bindings.push_back({.binding = b.binding,
                          .descriptorType = vk::DescriptorType::eStorageBuffer,
                          .descriptorCount = 1,
                          .stageFlags = vk::ShaderStageFlagBits::eCompute});
    }
  }
  auto setLayout = vkCall("vkCreateDescriptorSetLayout", [&] {
    return vk::raii::DescriptorSetLayout(device.device(),
                                         {.flags = vk::DescriptorSetLayoutCreateFlagBits::ePushDescriptorKHR,
                                          .bindingCount = uint32_t(bindings.size()),
                                          .pBindings = bindings.data()});
  });
  vk::PushConstantRange range{.stageFlags = vk::ShaderStageFlagBits::eCompute, .offset = 0, .size = desc.pushBytes()};
  vk::DescriptorSetLayout setLayoutHandle = *setLayout;
  auto layout = vkCall("vkCreatePipelineLayout", [&] {
    return vk::raii::PipelineLayout(device.device(), {.setLayoutCount = 1,
                                                      .pSetLayouts = &setLayoutHandle,
                                                      .pushConstantRangeCount = desc.pushBytes() ? 1u : 0u,
                                                      .pPushConstantRanges = &range});
  });
  vk::raii::Pipeline pipeline = cache.createPipeline(words, layout);

  auto kernel = std::make_shared<UserKernel>(std::move(source), std::move(desc), std::move(words), localSize);
  OpSpec& spec = kernel->spec_;
  const UserKernelDesc& d = kernel->desc_;
  spec.name = op;
  spec.category = "user";
  for (const auto& in : d.inputs) {
    if (std::find(spec.dtypes.begin(), spec.dtypes.end(), in.dtype) == spec.dtypes.end())
      spec.dtypes.push_back(in.dtype);
  }
  // Inputs of one dtype are data inputs (listOps shows that dtype); with
  // several dtypes each is "any" and infer() checks it against its own.
  for (const auto& in : d.inputs) {
    spec.inputs.push_back({.name = in.name, .role = spec.dtypes.size() == 1 ? InputRole::kData : InputRole::kAny});
  }
  if (spec.dtypes.empty()) spec.dtypes.push_back(d.outputs.front().dtype);
  for (const auto& out : d.outputs) spec.outputs.push_back(out.name);
  for (const auto& a : d.attrs)
    spec.attrs.push_back({.name = a.name, .type = a.type, .defaultValue = a.defaultValue, .doc = a.doc});
  spec.doc = d.doc;
  spec.differentiable = false;
  spec.kernel = std::make_shared<UserKernelTemplate>(device, d, localSize, std::move(setLayout), std::move(layout),
                                                     std::move(pipeline));
  log.debug("built user kernel {} ({} SPIR-V words, local size {}x{}x{})", op, kernel->spirv_.size(), localSize[0],
            localSize[1], localSize[2]);
  return kernel;
}

}  // namespace tensord::compute
