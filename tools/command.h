// The gpumix program's subcommands. Each tools/cmd_*.cpp defines one and registers it
// with GPUMIX_COMMAND; main.cpp looks the first argument up in the registry. Commands
// parse their own flags (CLI11), call the library, and print: no training logic here.
#pragma once

#include <string>
#include <vector>

namespace gpumix::tools {

// argv[0] is the subcommand's name ("train"), argv[1..] its flags. Returns the exit code.
using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string name;
  std::string summary;  // one line, shown by `gpumix --help`
  CommandFn run;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { command_registry().push_back(std::move(command)); }
};

}  // namespace gpumix::tools

#define GPUMIX_COMMAND_CONCAT2(a, b) a##b
#define GPUMIX_COMMAND_CONCAT(a, b) GPUMIX_COMMAND_CONCAT2(a, b)
// Named by __COUNTER__, not __LINE__: the commands share unity files (tools/meson.build),
// where two registrars on the same line number of their own files collided.
#define GPUMIX_COMMAND(name, summary, fn)                                                   \
  static ::gpumix::tools::CommandRegistrar GPUMIX_COMMAND_CONCAT(gpumix_command_, __COUNTER__)( \
      ::gpumix::tools::Command{name, summary, fn})
