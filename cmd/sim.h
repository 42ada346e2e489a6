// `tide sim`: replays a cluster trace through the scheduler core.
#pragma once

#include <CLI/CLI.hpp>

namespace tide::cmd {

void AddSimCommand(CLI::App& app);

}  // namespace tide::cmd
