#include "common/error.h"

#include <cstring>

namespace acqfs {

std::string Error::Message() const {
  std::string m = op;
  if (!path.empty()) m += ": " + path;
  m += ": ";
  m += std::strerror(err);
  return m;
}

}  // namespace acqfs
