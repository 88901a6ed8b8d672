// Parsing of byte sizes given on the command line: "512MiB", "2GiB", "1.5GB", "4096".
#pragma once

#include <cstdint>
#include <string>

namespace gpumix::tools {

// Throws std::invalid_argument naming the text and the accepted forms.
int64_t parse_bytes(const std::string& text);

}  // namespace gpumix::tools
