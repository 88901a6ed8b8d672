// gpumix: the command-line front end. `gpumix <command> [flags]`; `gpumix --help` lists
// the commands. Errors from the library reach the user as one clear message and exit 1.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>

#include "core/log.h"

#include "tools/command.h"

namespace gpumix::tools {

std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}

}  // namespace gpumix::tools

namespace {

void print_usage(FILE* out) {
  auto commands = gpumix::tools::command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::fprintf(out,
               "gpumix: train transformers on GPUs that are not alike\n\n"
               "usage: gpumix <command> [flags]   (gpumix <command> --help for its flags)\n\n"
               "commands:\n");
  for (const auto& c : commands) std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // The program's output: the library's log lines on the console, as the library says them.
  gpumix::LogSink console;
  console.level = gpumix::LogLevel::info;
  console.console = true;
  gpumix::set_process_logger(std::make_shared<gpumix::Logger>(console));
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& command : gpumix::tools::command_registry()) {
    if (command.name != argv[1]) continue;
    try {
      return command.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumix %s: error: %s\n", argv[1], e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "gpumix: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
