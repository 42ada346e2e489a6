// Logging: spdlog, one process-wide logger writing to stderr.
#pragma once

#include <spdlog/spdlog.h>

namespace tide {

// Sets the pattern and level ("debug", "info", "warn"). Call once in main.
void InitLogging(const std::string& component, const std::string& level = "info");

}  // namespace tide
