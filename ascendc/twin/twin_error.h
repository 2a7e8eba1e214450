// Twin of the Ascend C API: the exception every violated Ascend rule turns into.
// On a device these bugs hang the core or corrupt memory silently; on the twin they throw, so a
// test names the rule instead of printing a wrong number.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace AscendC::twin {

class TwinError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// The message is built only on failure (a lambda), because checks sit on every vector op.
template <typename MakeMessage>
void Require(bool ok, MakeMessage&& make_message) {
  if (!ok) {
    throw TwinError("Ascend C rule violated: " + make_message());
  }
}

}  // namespace AscendC::twin
