// Command-line parsing shared by the daemons and the CLI (CLI11, header-only): --help prints and exits 0; a bad flag
// prints why and exits 2.
//
// Thread-safety: used by main before anything starts.
#pragma once

#include <optional>

#include "CLI/CLI.hpp"

namespace torus {

// Parses `argv` into `app`'s options. nullopt to go on; otherwise the process's exit code (after CLI11 printed
// the help or the error).
inline std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

}  // namespace torus
