#include "compute/kernel_cache.h"

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "compute/device.h"
#include "compute/spirv_coop.h"

namespace tensord::compute {
namespace fs = std::filesystem;

namespace {

std::string hex(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[data[i] >> 4];
    s += kDigits[data[i] & 15];
  }
  return s;
}

std::string sourceKey(const std::string& glsl) {
  // The compiler's version is part of the key: a new glslang recompiles.
  std::string keyed = glsl + "\n// glslang " + std::to_string(glslang::GetKhronosToolId()) + " " +
                      glslang::GetEsslVersionString() + " spv1.5";
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(keyed.data()), keyed.size(), digest);
  return hex(digest, sizeof digest);
}

std::vector<char> readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes via a temporary file and rename, so a crash never leaves half a file.
void writeFile(const fs::path& path, const void* data, size_t bytes) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), std::streamsize(bytes));
    if (!out) return;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

void initGlslangOnce() {
  // glslang keeps process-wide tables; they must be built exactly once.
  static const bool initialized = glslang::InitializeProcess();
  (void)initialized;
}

vk::raii::PipelineLayout makeLayout(const Device& device) {
  vk::PushConstantRange range{.stageFlags = vk::ShaderStageFlagBits::eCompute, .offset = 0, .size = kMaxPushBytes};
  return vk::raii::PipelineLayout(device.device(), {.pushConstantRangeCount = 1, .pPushConstantRanges = &range});
}

fs::path pipelineCachePath(const fs::path& dir, const Device& device) {
  return dir / ("pipelines-" + hex(device.pipelineCacheUuid().data(), 16) + ".bin");
}

vk::raii::PipelineCache makePipelineCache(const Device& device, const fs::path& dir, spdlog::logger& log) {
  std::vector<char> data;
  if (!dir.empty()) data = readFile(pipelineCachePath(dir, device));
  // The driver validates the header (vendor, device, UUID) and ignores a stale file.
  try {
    return vk::raii::PipelineCache(device.device(), {.initialDataSize = data.size(), .pInitialData = data.data()});
  } catch (const vk::SystemError&) {
    log.warn("ignoring unusable pipeline cache file");
    return vk::raii::PipelineCache(device.device(), vk::PipelineCacheCreateInfo{});
  }
}

// One statistic's value as text.
std::string statValue(const vk::PipelineExecutableStatisticKHR& s) {
  switch (s.format) {
    case vk::PipelineExecutableStatisticFormatKHR::eBool32:
      return s.value.b32 ? "true" : "false";
    case vk::PipelineExecutableStatisticFormatKHR::eInt64:
      return std::to_string(s.value.i64);
    case vk::PipelineExecutableStatisticFormatKHR::eUint64:
      return std::to_string(s.value.u64);
    case vk::PipelineExecutableStatisticFormatKHR::eFloat64:
      return std::to_string(s.value.f64);
  }
  return "?";
}

// Logs what the driver reports about `pipeline`'s executables (registers,
// shared memory, ...), and where TENSORD_PIPELINE_STATS names a directory,
// writes their internal representations (the driver's IR or ISA, where it
// offers them) there as <kernel>-<hash>.<executable>.<representation>.txt.
void logPipelineStats(const vk::raii::Device& device, const vk::raii::Pipeline& pipeline, const std::string& kernel,
                      spdlog::logger& log) {
  try {
    auto executables = device.getPipelineExecutablePropertiesKHR({.pipeline = *pipeline});
    const char* env = std::getenv("TENSORD_PIPELINE_STATS");
    const fs::path dir = env != nullptr && fs::is_directory(env) ? fs::path(env) : fs::path();
    for (uint32_t i = 0; i < executables.size(); ++i) {
      vk::PipelineExecutableInfoKHR info{.pipeline = *pipeline, .executableIndex = i};
      std::string line;
      for (const auto& stat : device.getPipelineExecutableStatisticsKHR(info)) {
        line += std::string(line.empty() ? "" : ", ") + stat.name.data() + " " + statValue(stat);
      }
      log.info("kernel {} ({}): {}", kernel, executables[i].name.data(), line);
      if (dir.empty()) continue;
      // Two calls: the sizes, then the text.
      const auto& d = *device.getDispatcher();
      uint32_t n = 0;
      const VkPipelineExecutableInfoKHR& cinfo = info;
      if (d.vkGetPipelineExecutableInternalRepresentationsKHR(*device, &cinfo, &n, nullptr) != VK_SUCCESS) continue;
      std::vector<VkPipelineExecutableInternalRepresentationKHR> irs(
          n, {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR});
      if (d.vkGetPipelineExecutableInternalRepresentationsKHR(*device, &cinfo, &n, irs.data()) != VK_SUCCESS) continue;
      std::vector<std::vector<char>> data(n);
      for (uint32_t j = 0; j < n; ++j) {
        data[j].resize(irs[j].dataSize);
        irs[j].pData = data[j].data();
      }
      if (d.vkGetPipelineExecutableInternalRepresentationsKHR(*device, &cinfo, &n, irs.data()) < 0) continue;
      // A kernel's name is its variant key (op, dtypes, and for some the
      // expression): a file name of its first characters, made safe, and a
      // hash of the whole, so no two kernels share a file.
      std::string stem = kernel.substr(0, 80);
      for (char& c : stem) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
      }
      stem += "-" + sourceKey(kernel).substr(0, 12) + "." + std::to_string(i);
      for (uint32_t j = 0; j < n; ++j) {
        std::string ir = irs[j].name;
        for (char& c : ir) {
          if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
        }
        const fs::path file = dir / (stem + "." + ir + ".txt");
        std::ofstream out(file, std::ios::binary);
        out.write(data[j].data(),
                  std::streamsize(irs[j].isText ? strnlen(data[j].data(), data[j].size()) : data[j].size()));
        if (!out) log.warn("kernel {}: cannot write {}", kernel, file.string());
      }
    }
  } catch (const std::exception& e) {
    log.warn("kernel {}: no pipeline statistics: {}", kernel, e.what());
  }
}

}  // namespace

std::vector<uint32_t> compileGlsl(const std::string& name, const std::string& glsl) {
  initGlslangOnce();
  glslang::TShader shader(EShLangCompute);
  const char* text = glsl.c_str();
  const char* names = name.c_str();
  shader.setStringsWithLengthsAndNames(&text, nullptr, &names, 1);
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_2);
  shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_5);
  auto messages = EShMessages(EShMsgSpvRules | EShMsgVulkanRules);
  if (!shader.parse(GetDefaultResources(), 460, false, messages)) {
    throw ComputeError(ComputeError::Kind::kInvalid, "kernel '" + name + "' does not compile: " + shader.getInfoLog());
  }
  glslang::TProgram program;
  program.addShader(&shader);
  if (!program.link(messages)) {
    throw ComputeError(ComputeError::Kind::kInvalid, "kernel '" + name + "' does not link: " + program.getInfoLog());
  }
  std::vector<uint32_t> spirv;
  glslang::SpvOptions options;
  options.disableOptimizer = false;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &options);
  return spirv;
}

KernelCache::KernelCache(const Device& device, fs::path cacheDir, spdlog::logger& log)
    : device_(device),
      cacheDir_(std::move(cacheDir)),
      log_(log),
      layout_(makeLayout(device)),
      pipelineCache_(makePipelineCache(device, cacheDir_, log)) {
  if (!cacheDir_.empty()) fs::create_directories(cacheDir_ / "spirv");
}

KernelCache::~KernelCache() { savePipelineCache(); }

void KernelCache::savePipelineCache() {
  if (cacheDir_.empty()) return;
  std::lock_guard lock(mu_);
  auto data = pipelineCache_.getData();
  writeFile(pipelineCachePath(cacheDir_, device_), data.data(), data.size());
}

std::vector<uint32_t> KernelCache::spirv(const KernelSource& source) {
  fs::path file;
  if (!cacheDir_.empty()) {
    file = cacheDir_ / "spirv" / (sourceKey(source.glsl) + ".spv");
    auto bytes = readFile(file);
    if (!bytes.empty() && bytes.size() % 4 == 0) {
      std::vector<uint32_t> words(bytes.size() / 4);
      std::memcpy(words.data(), bytes.data(), bytes.size());
      return words;
    }
  }
  auto words = compileGlsl(source.name, source.glsl);
  if (!file.empty()) writeFile(file, words.data(), words.size() * 4);
  log_.debug("compiled kernel {} ({} words)", source.name, words.size());
  return words;
}

std::vector<uint32_t> KernelCache::compile(const std::string& name, const std::string& glsl) {
  std::lock_guard lock(mu_);
  return spirv(KernelSource{name, glsl});
}

std::vector<uint32_t> KernelCache::forDevice(const std::string& name, std::vector<uint32_t> spirv, bool bf16) const {
  if (!device_.info().features.coopMatrixKhr) return spirv;
  try {
    if (!usesNvCooperativeMatrix(spirv)) return spirv;
    return nvToKhrCooperativeMatrix(spirv, bf16);
  } catch (const std::invalid_argument& e) {
    throw ComputeError(ComputeError::Kind::kUnsupported,
                       "kernel '" + name + "' cannot run through VK_KHR_cooperative_matrix: " + e.what());
  }
}

vk::raii::Pipeline KernelCache::createPipeline(const std::vector<uint32_t>& original,
                                               const vk::raii::PipelineLayout& layout) {
  std::lock_guard lock(mu_);
  // A user kernel written for the NV extension runs through KHR where that is what the device enabled.
  const std::vector<uint32_t> spirv = forDevice("user kernel", original, false);
  vk::raii::ShaderModule module = vkCall("vkCreateShaderModule", [&] {
    return vk::raii::ShaderModule(device_.device(), {.codeSize = spirv.size() * 4, .pCode = spirv.data()});
  });
  vk::ComputePipelineCreateInfo info{
      .stage = {.stage = vk::ShaderStageFlagBits::eCompute, .module = *module, .pName = "main"}, .layout = *layout};
  return vkCall("vkCreateComputePipelines", [&] { return vk::raii::Pipeline(device_.device(), pipelineCache_, info); });
}

const vk::raii::Pipeline& KernelCache::pipeline(const KernelSource& source) {
  const vk::raii::Pipeline& p = compiled(source);
  std::lock_guard lock(countsMu_);
  ++counts_[&source];
  return p;
}

const vk::raii::Pipeline& KernelCache::compiled(const KernelSource& source) {
  std::lock_guard lock(mu_);
  auto& slot = pipelines_[&source];
  if (slot) return *slot;
  auto words = spirv(source);
  const bool bf16 = source.glsl.find("#define " + std::string(kBf16OperandsDefine) + "\n") != std::string::npos;
  words = forDevice(source.name, std::move(words), bf16);
  vk::raii::ShaderModule module(device_.device(), {.codeSize = words.size() * 4, .pCode = words.data()});
  const bool stats = device_.info().features.pipelineStats;
  vk::ComputePipelineCreateInfo info{
      .flags = stats ? vk::PipelineCreateFlagBits::eCaptureStatisticsKHR |
                           vk::PipelineCreateFlagBits::eCaptureInternalRepresentationsKHR
                     : vk::PipelineCreateFlags(),
      .stage = {.stage = vk::ShaderStageFlagBits::eCompute, .module = *module, .pName = "main"},
      .layout = *layout_};
  slot = std::make_unique<vk::raii::Pipeline>(
      vkCall("vkCreateComputePipelines", [&] { return vk::raii::Pipeline(device_.device(), pipelineCache_, info); }));
  if (stats) logPipelineStats(device_.device(), *slot, source.name, log_);
  return *slot;
}

std::map<std::string, uint64_t> KernelCache::dispatches() const {
  std::map<std::string, uint64_t> byName;  // variants of one family may share a name
  std::lock_guard lock(countsMu_);
  for (const auto& [source, count] : counts_) byName[source->name] += count;
  return byName;
}

}  // namespace tensord::compute
