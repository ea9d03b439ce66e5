#include "compute/device.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace tensord::compute {

void checkVk(vk::Result result, std::string_view what) {
  if (result == vk::Result::eSuccess) return;
  std::string message = std::string(what) + " failed: " + vk::to_string(result);
  if (result == vk::Result::eErrorOutOfDeviceMemory || result == vk::Result::eErrorOutOfHostMemory) {
    throw ComputeError(ComputeError::Kind::kOutOfMemory, message);
  }
  throw ComputeError(ComputeError::Kind::kDevice, message);
}

namespace {

std::string_view kindName(vk::PhysicalDeviceType type) {
  switch (type) {
    case vk::PhysicalDeviceType::eDiscreteGpu: return "discrete";
    case vk::PhysicalDeviceType::eIntegratedGpu: return "integrated";
    case vk::PhysicalDeviceType::eVirtualGpu: return "virtual";
    case vk::PhysicalDeviceType::eCpu: return "cpu";
    default: return "other";
  }
}

int typeRank(vk::PhysicalDeviceType type) {
  switch (type) {
    case vk::PhysicalDeviceType::eDiscreteGpu: return 0;
    case vk::PhysicalDeviceType::eIntegratedGpu: return 1;
    case vk::PhysicalDeviceType::eVirtualGpu: return 2;
    case vk::PhysicalDeviceType::eCpu: return 3;
    default: return 4;
  }
}

std::string versionStr(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

vk::raii::Instance makeInstance(const vk::raii::Context& context) {
  vk::ApplicationInfo app{.pApplicationName = "tensord", .apiVersion = VK_API_VERSION_1_2};
  return vkCall("vkCreateInstance", [&] { return vk::raii::Instance(context, {.pApplicationInfo = &app}); });
}

bool supportsCompute(const vk::raii::PhysicalDevice& pd) {
  auto props = pd.getProperties();
  if (props.apiVersion < VK_API_VERSION_1_2) return false;
  auto features = pd.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan12Features>();
  return features.get<vk::PhysicalDeviceVulkan12Features>().bufferDeviceAddress;
}

vk::raii::PhysicalDevice choose(const vk::raii::Instance& instance, const std::string& selector) {
  vk::raii::PhysicalDevices all(instance);
  if (all.empty()) throw ComputeError(ComputeError::Kind::kDevice, "no Vulkan device found (install mesa-vulkan-drivers for the CPU device)");
  std::string names;
  for (size_t i = 0; i < all.size(); ++i) {
    names += (i ? ", " : "") + std::to_string(i) + ": " + std::string(all[i].getProperties().deviceName.data());
  }
  if (!selector.empty()) {
    bool numeric = std::all_of(selector.begin(), selector.end(), [](char c) { return c >= '0' && c <= '9'; });
    for (size_t i = 0; i < all.size(); ++i) {
      std::string name = all[i].getProperties().deviceName.data();
      if (numeric ? std::stoul(selector) == i : name.find(selector) != std::string::npos) {
        if (!supportsCompute(all[i])) {
          throw ComputeError(ComputeError::Kind::kDevice, "device '" + name + "' lacks Vulkan 1.2 buffer device address");
        }
        return std::move(all[i]);
      }
    }
    throw ComputeError(ComputeError::Kind::kDevice,
                       "no Vulkan device matches '" + selector + "'; devices: " + names);
  }
  int best = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!supportsCompute(all[i])) continue;
    if (best < 0 || typeRank(all[i].getProperties().deviceType) < typeRank(all[best].getProperties().deviceType)) {
      best = int(i);
    }
  }
  if (best < 0) throw ComputeError(ComputeError::Kind::kDevice, "no Vulkan 1.2 device with buffer device address; devices: " + names);
  return std::move(all[best]);
}

uint32_t computeQueueFamily(const vk::raii::PhysicalDevice& pd) {
  auto families = pd.getQueueFamilyProperties();
  // Prefer a compute queue without graphics (dedicated), else any compute queue.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < families.size(); ++i) {
      auto flags = families[i].queueFlags;
      if (!(flags & vk::QueueFlagBits::eCompute)) continue;
      if (pass == 0 && (flags & vk::QueueFlagBits::eGraphics)) continue;
      return i;
    }
  }
  throw ComputeError(ComputeError::Kind::kDevice, "device has no compute queue");
}

bool hasExtension(const vk::raii::PhysicalDevice& pd, std::string_view name) {
  for (const auto& e : pd.enumerateDeviceExtensionProperties()) {
    if (name == e.extensionName.data()) return true;
  }
  return false;
}

// The products VK_NV_cooperative_matrix offers ("16x16x16 f16*f16+f32->f32
// subgroup"); empty without the extension.
std::vector<vk::CooperativeMatrixPropertiesNV> coopMatrixProducts(const vk::raii::PhysicalDevice& pd) {
  if (!hasExtension(pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return {};
  return vkCall("vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
                [&] { return pd.getCooperativeMatrixPropertiesNV(); });
}

std::string productsStr(const std::vector<vk::CooperativeMatrixPropertiesNV>& products) {
  auto type = [](vk::ComponentTypeNV t) {
    switch (t) {
      case vk::ComponentTypeNV::eFloat16: return "f16";
      case vk::ComponentTypeNV::eFloat32: return "f32";
      case vk::ComponentTypeNV::eFloat64: return "f64";
      case vk::ComponentTypeNV::eSint8: return "i8";
      case vk::ComponentTypeNV::eUint8: return "u8";
      case vk::ComponentTypeNV::eSint32: return "i32";
      case vk::ComponentTypeNV::eUint32: return "u32";
      case vk::ComponentTypeNV(1000141000): return "bf16";  // VK_KHR_shader_bfloat16
      default: return "?";
    }
  };
  std::string s;
  for (const auto& p : products) {
    if (!s.empty()) s += ", ";
    s += std::to_string(p.MSize) + "x" + std::to_string(p.NSize) + "x" + std::to_string(p.KSize) + " " +
         type(p.AType) + "*" + type(p.BType) + "+" + type(p.CType) + "->" + type(p.DType);
    if (p.scope != vk::ScopeNV::eSubgroup) s += " (not subgroup)";
  }
  return s.empty() ? "none" : s;
}

// VK_KHR_cooperative_matrix, which Debian 12's Vulkan headers (1.3.239)
// predate: its name, feature and product structures, from the registry.
constexpr const char* kCoopKhrExtension = "VK_KHR_cooperative_matrix";
struct CoopFeaturesKhr {
  VkStructureType sType = VkStructureType(1000506000);
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
struct CoopProductKhr {
  VkStructureType sType = VkStructureType(1000506001);
  void* pNext = nullptr;
  uint32_t MSize = 0, NSize = 0, KSize = 0;
  VkComponentTypeNV AType{}, BType{}, CType{}, ResultType{};  // the KHR enum has the same values
  VkBool32 saturatingAccumulation = VK_FALSE;
  VkScopeNV scope{};
};
using GetCoopProductsKhr = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, CoopProductKhr*);
// VK_KHR_shader_bfloat16 (newer than the headers too).
constexpr const char* kBf16Extension = "VK_KHR_shader_bfloat16";
constexpr auto kComponentBf16 = VkComponentTypeNV(1000141000);
struct Bf16FeaturesKhr {
  VkStructureType sType = VkStructureType(1000141000);
  void* pNext = nullptr;
  VkBool32 shaderBFloat16Type = VK_FALSE;
  VkBool32 shaderBFloat16DotProduct = VK_FALSE;
  VkBool32 shaderBFloat16CooperativeMatrix = VK_FALSE;
};

// The 16x16x16 subgroup product of `operand` A and B into f32.
bool isProduct(uint32_t m, uint32_t n, uint32_t k, VkComponentTypeNV a, VkComponentTypeNV b, VkComponentTypeNV c,
               VkComponentTypeNV d, VkScopeNV scope, VkComponentTypeNV operand = VK_COMPONENT_TYPE_FLOAT16_NV) {
  return m == 16 && n == 16 && k == 16 && a == operand && b == operand && c == VK_COMPONENT_TYPE_FLOAT32_NV &&
         d == VK_COMPONENT_TYPE_FLOAT32_NV && scope == VK_SCOPE_SUBGROUP_NV;
}

// Whether the NV extension offers the 16x16x16 f16 product into f32.
bool coopNvUsable(const vk::raii::PhysicalDevice& pd) {
  auto products = coopMatrixProducts(pd);
  bool product = std::any_of(products.begin(), products.end(), [](const vk::CooperativeMatrixPropertiesNV& p) {
    return isProduct(p.MSize, p.NSize, p.KSize, VkComponentTypeNV(p.AType), VkComponentTypeNV(p.BType),
                     VkComponentTypeNV(p.CType), VkComponentTypeNV(p.DType), VkScopeNV(p.scope));
  });
  if (!product) return false;
  return pd.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceCooperativeMatrixFeaturesNV>()
      .get<vk::PhysicalDeviceCooperativeMatrixFeaturesNV>()
      .cooperativeMatrix;
}

// The products the KHR extension offers; empty without it.
std::vector<CoopProductKhr> coopKhrProducts(const vk::raii::Instance& instance, const vk::raii::PhysicalDevice& pd) {
  if (!hasExtension(pd, kCoopKhrExtension)) return {};
  auto get = reinterpret_cast<GetCoopProductsKhr>(instance.getProcAddr("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
  if (get == nullptr) return {};
  uint32_t n = 0;
  if (get(*pd, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<CoopProductKhr> products(n);
  if (get(*pd, &n, products.data()) != VK_SUCCESS) return {};
  products.resize(n);
  return products;
}

std::string productsStr(const std::vector<CoopProductKhr>& products) {
  std::vector<vk::CooperativeMatrixPropertiesNV> nv;
  for (const auto& p : products) {
    nv.push_back({.MSize = p.MSize, .NSize = p.NSize, .KSize = p.KSize, .AType = vk::ComponentTypeNV(p.AType),
                  .BType = vk::ComponentTypeNV(p.BType), .CType = vk::ComponentTypeNV(p.CType),
                  .DType = vk::ComponentTypeNV(p.ResultType), .scope = vk::ScopeNV(p.scope)});
  }
  return productsStr(nv);
}

// Whether the KHR extension offers the 16x16x16 product of `operand` A and B into f32.
bool coopKhrOffers(const vk::raii::Instance& instance, const vk::raii::PhysicalDevice& pd, VkComponentTypeNV operand) {
  auto products = coopKhrProducts(instance, pd);
  return std::any_of(products.begin(), products.end(), [&](const CoopProductKhr& p) {
    return isProduct(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.ResultType, p.scope, operand);
  });
}

// A feature structure the headers lack, as the device fills it in.
template <typename Features>
Features featuresOf(const vk::raii::PhysicalDevice& pd) {
  Features f;
  VkPhysicalDeviceFeatures2 features{.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f};
  pd.getDispatcher()->vkGetPhysicalDeviceFeatures2(*pd, &features);
  return f;
}

// ... whether the KHR extension offers it in f16 ...
bool coopKhrUsable(const vk::raii::Instance& instance, const vk::raii::PhysicalDevice& pd) {
  return coopKhrOffers(instance, pd, VK_COMPONENT_TYPE_FLOAT16_NV) && featuresOf<CoopFeaturesKhr>(pd).cooperativeMatrix;
}

// ... and in bf16, with the bfloat16 type and its cooperative matrices.
bool coopBf16Usable(const vk::raii::Instance& instance, const vk::raii::PhysicalDevice& pd) {
  if (!hasExtension(pd, kBf16Extension) || !coopKhrOffers(instance, pd, kComponentBf16)) return false;
  const auto bf16 = featuresOf<Bf16FeaturesKhr>(pd);
  return bf16.shaderBFloat16Type && bf16.shaderBFloat16CooperativeMatrix;
}

// Whether the device can run kernels/matmul_coop.comp and conv_gemm_coop.comp
// at all: the 32-wide subgroups their tiling assumes, the shared memory of
// their largest tile (conv_gemm_coop.comp's 64x256 tap-major one: 44 KiB)
// and the shader features their SPIR-V declares.
bool coopShadersUsable(const vk::raii::PhysicalDevice& pd) {
  auto features = pd.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan12Features>();
  const auto& have12 = features.get<vk::PhysicalDeviceVulkan12Features>();
  auto props = pd.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceVulkan11Properties>();
  const auto& p11 = props.get<vk::PhysicalDeviceVulkan11Properties>();
  constexpr uint32_t kTileSharedBytes = 44 << 10;
  return have12.shaderFloat16 && have12.vulkanMemoryModel && p11.subgroupSize == 32 &&
         props.get<vk::PhysicalDeviceProperties2>().properties.limits.maxComputeSharedMemorySize >= kTileSharedBytes &&
         (p11.subgroupSupportedStages & vk::ShaderStageFlagBits::eCompute);
}

// Turns on what the kernels use where the device has it: 64-bit integers,
// 8/16-bit storage (f16, bf16, u8, bool tensors), float atomics and
// cooperative matrices (f16 and bf16 matmul and conv).
vk::raii::Device makeDevice(const vk::raii::Instance& instance, const vk::raii::PhysicalDevice& pd, uint32_t family,
                            DeviceFeatures* enabled) {
  float priority = 1.0f;
  vk::DeviceQueueCreateInfo queueInfo{.queueFamilyIndex = family, .queueCount = 1, .pQueuePriorities = &priority};
  auto available = pd.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features,
                                   vk::PhysicalDeviceVulkan12Features>();
  const auto& have = available.get<vk::PhysicalDeviceFeatures2>().features;
  const auto& have11 = available.get<vk::PhysicalDeviceVulkan11Features>();
  const auto& have12 = available.get<vk::PhysicalDeviceVulkan12Features>();
  enabled->int64 = have.shaderInt64;
  enabled->storage16 = have11.storageBuffer16BitAccess;
  enabled->storage8 = have12.storageBuffer8BitAccess;
  const bool shaders = enabled->storage16 && coopShadersUsable(pd);
  const bool nv = shaders && coopNvUsable(pd), khr = shaders && coopKhrUsable(instance, pd);
  const char* choice = std::getenv("TENSORD_COOPERATIVE_MATRIX");
  enabled->coopMatrixKhr = khr && !(nv && choice != nullptr && std::string_view(choice) == "nv");
  enabled->coopMatrixF16 = nv || khr;
  enabled->coopMatrixBf16 = enabled->coopMatrixKhr && coopBf16Usable(instance, pd);
  Bf16FeaturesKhr bf16Features{.shaderBFloat16Type = VK_TRUE, .shaderBFloat16CooperativeMatrix = VK_TRUE};
  bool coop = enabled->coopMatrixF16;
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV coopFeaturesNv{.cooperativeMatrix = true};
  CoopFeaturesKhr coopFeaturesKhr{.pNext = enabled->coopMatrixBf16 ? &bf16Features : nullptr,
                                  .cooperativeMatrix = VK_TRUE};
  void* coopFeatures = !coop ? nullptr
                       : enabled->coopMatrixKhr ? static_cast<void*>(&coopFeaturesKhr)
                                                : static_cast<void*>(&coopFeaturesNv);
  // Robust buffer access for user kernels' descriptors (built-in kernels use
  // device addresses, which it does not cover, and pay nothing for it).
  enabled->pushDescriptors = hasExtension(pd, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  if (hasExtension(pd, VK_EXT_ROBUSTNESS_2_EXTENSION_NAME)) {
    auto robust = pd.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceRobustness2FeaturesEXT>();
    enabled->robustBufferAccess2 = have.robustBufferAccess &&
                                   robust.get<vk::PhysicalDeviceRobustness2FeaturesEXT>().robustBufferAccess2;
  }
  // Pipeline statistics for kernel tuning, on request only (capturing them
  // may cost the driver time at pipeline creation).
  enabled->pipelineStats = std::getenv("TENSORD_PIPELINE_STATS") != nullptr &&
                           hasExtension(pd, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) &&
                           pd.getFeatures2<vk::PhysicalDeviceFeatures2,
                                           vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR>()
                               .get<vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR>()
                               .pipelineExecutableInfo;
  vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR statsFeatures{.pNext = coopFeatures,
                                                                          .pipelineExecutableInfo = true};
  void* beforeRobust = enabled->pipelineStats ? static_cast<void*>(&statsFeatures) : coopFeatures;
  vk::PhysicalDeviceRobustness2FeaturesEXT robust2{.pNext = beforeRobust,
                                                   .robustBufferAccess2 = enabled->robustBufferAccess2};
  // Only chained with its extension enabled.
  void* afterV12 = enabled->robustBufferAccess2 ? static_cast<void*>(&robust2) : robust2.pNext;
  vk::PhysicalDeviceVulkan12Features v12{.pNext = afterV12,
                                         .storageBuffer8BitAccess = enabled->storage8,
                                         .shaderFloat16 = coop,
                                         .bufferDeviceAddress = true,
                                         .vulkanMemoryModel = coop};
  vk::PhysicalDeviceVulkan11Features v11{.pNext = &v12, .storageBuffer16BitAccess = enabled->storage16};
  vk::PhysicalDeviceFeatures2 features{.pNext = &v11};
  features.features.shaderInt64 = enabled->int64;
  features.features.robustBufferAccess = have.robustBufferAccess;
  std::vector<const char*> extensions;
  if (coop) extensions.push_back(enabled->coopMatrixKhr ? kCoopKhrExtension : VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  if (enabled->coopMatrixBf16) extensions.push_back(kBf16Extension);
  if (enabled->pushDescriptors) extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  if (enabled->robustBufferAccess2) extensions.push_back(VK_EXT_ROBUSTNESS_2_EXTENSION_NAME);
  if (enabled->pipelineStats) extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  vk::DeviceCreateInfo info{.pNext = &features,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &queueInfo,
                            .enabledExtensionCount = uint32_t(extensions.size()),
                            .ppEnabledExtensionNames = extensions.data()};
  return vkCall("vkCreateDevice", [&] { return vk::raii::Device(pd, info); });
}

}  // namespace

Device::Device(const std::string& selector, spdlog::logger& log, bool f32OnTensorCores)
    : instance_(makeInstance(context_)),
      physical_(choose(instance_, selector)),
      queueFamily_(computeQueueFamily(physical_)),
      device_(makeDevice(instance_, physical_, queueFamily_, &info_.features)),
      queue_(device_, queueFamily_, 0) {
  auto props = physical_.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceDriverProperties>();
  const auto& p = props.get<vk::PhysicalDeviceProperties2>().properties;
  const auto& driver = props.get<vk::PhysicalDeviceDriverProperties>();
  limits_ = p.limits;
  memory_ = physical_.getMemoryProperties();
  std::copy(p.pipelineCacheUUID.begin(), p.pipelineCacheUUID.end(), pipelineCacheUuid_.begin());

  info_.name = p.deviceName.data();
  info_.kind = kindName(p.deviceType);
  info_.vendorId = p.vendorID;
  info_.deviceId = p.deviceID;
  info_.driver = std::string(driver.driverName.data()) + " " + driver.driverInfo.data();
  info_.apiVersion = versionStr(p.apiVersion);
  for (uint32_t i = 0; i < memory_.memoryHeapCount; ++i) {
    if (memory_.memoryHeaps[i].flags & vk::MemoryHeapFlagBits::eDeviceLocal) {
      info_.memoryBytes = std::max<uint64_t>(info_.memoryBytes, memory_.memoryHeaps[i].size);
    }
  }
  info_.features.sharedMemoryBytes = limits_.maxComputeSharedMemorySize;
  info_.features.f32SplitBf16 = info_.features.coopMatrixBf16 && f32OnTensorCores;
  if (hasExtension(physical_, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
    auto sm = physical_.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>();
    info_.features.computeUnits = sm.get<vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>().shaderSMCount;
  } else if (hasExtension(physical_, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) {
    auto core = physical_.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderCorePropertiesAMD>();
    const auto& c = core.get<vk::PhysicalDeviceShaderCorePropertiesAMD>();
    info_.features.computeUnits = c.shaderEngineCount * c.shaderArraysPerEngineCount * c.computeUnitsPerShaderArray;
  }
  auto maint3 = physical_.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceMaintenance3Properties>();
  info_.maxAllocationBytes = maint3.get<vk::PhysicalDeviceMaintenance3Properties>().maxMemoryAllocationSize;

  log.info(
      "vulkan device: {} ({}, {}, Vulkan {}, {} MiB device-local, {} KiB shared memory per workgroup; int64 {}, "
      "16-bit storage {}, 8-bit storage {}, f16 cooperative matrix {}, bf16 {}, f32 products on tensor cores {}, "
      "compute units {})",
      info_.name, info_.kind, info_.driver, info_.apiVersion, info_.memoryBytes >> 20,
      limits_.maxComputeSharedMemorySize >> 10, info_.features.int64, info_.features.storage16, info_.features.storage8,
      !info_.features.coopMatrixF16  ? "no"
      : info_.features.coopMatrixKhr ? "KHR"
                                     : "NV",
      info_.features.coopMatrixBf16, info_.features.f32SplitBf16,
      info_.features.computeUnits ? std::to_string(info_.features.computeUnits) : "not reported");
  if (hasExtension(physical_, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) {
    log.info("cooperative matrix products (NV): {}", productsStr(coopMatrixProducts(physical_)));
  }
  if (hasExtension(physical_, kCoopKhrExtension)) {
    log.info("cooperative matrix products (KHR): {}", productsStr(coopKhrProducts(instance_, physical_)));
  }
  if (std::getenv("TENSORD_PIPELINE_STATS") != nullptr && !info_.features.pipelineStats) {
    log.warn("TENSORD_PIPELINE_STATS is set but the device has no VK_KHR_pipeline_executable_properties: "
             "no kernel statistics");
  }
}

uint32_t Device::memoryType(uint32_t typeBits, vk::MemoryPropertyFlags required,
                            vk::MemoryPropertyFlags preferred) const {
  int fallback = -1;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    if (!(typeBits & (1u << i))) continue;
    auto flags = memory_.memoryTypes[i].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return i;
    if (fallback < 0) fallback = int(i);
  }
  if (fallback < 0) throw ComputeError(ComputeError::Kind::kDevice, "no suitable Vulkan memory type: " + vk::to_string(required));
  return uint32_t(fallback);
}

}  // namespace tensord::compute
