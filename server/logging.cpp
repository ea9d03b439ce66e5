#include "server/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace tensord::server {
namespace {

// "%*" in the pattern: the sd-daemon(3) priority prefix for the line's level.
class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const char* prefix = "<6>";
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug:
        prefix = "<7>";
        break;
      case spdlog::level::info:
        prefix = "<6>";
        break;
      case spdlog::level::warn:
        prefix = "<4>";
        break;
      case spdlog::level::err:
        prefix = "<3>";
        break;
      case spdlog::level::critical:
        prefix = "<2>";
        break;
      default:
        break;
    }
    dest.append(prefix, prefix + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<SyslogPriorityFlag>(); }
};

}  // namespace

bool stderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  return stream != nullptr && *stream != '\0';
}

std::shared_ptr<spdlog::logger> makeLogger(std::string_view level, bool journal) {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(journal ? spdlog::color_mode::never
                                                                            : spdlog::color_mode::automatic);
  auto logger = std::make_shared<spdlog::logger>("tensord", std::move(sink));
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (journal) {
    formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%v");
  } else {
    // Trace follows single messages: microseconds.
    formatter->set_pattern(level == "trace" ? "[%Y-%m-%d %H:%M:%S.%f] [%^%l%$] %v" : "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(std::string(level)));
  logger->flush_on(spdlog::level::info);
  return logger;
}

}  // namespace tensord::server
