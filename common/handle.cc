#include "common/handle.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace acqfs {

void FdTraits::Free(int fd) {
  if (::close(fd) != 0 && errno == EBADF) std::abort();  // double close
}

void DirTraits::Free(DIR* d) {
  if (::closedir(d) != 0 && errno == EBADF) std::abort();
}

}  // namespace acqfs
