#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace tide {

void InitLogging(const std::string& component, const std::string& level) {
  auto logger = spdlog::stderr_color_mt(component);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ " + component + " %v");
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace tide
