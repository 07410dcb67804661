// The daemon's answers to its control socket's requests (docs/control.md):
// checkpoint, rewind and squash of the stack it serves, through its
// filesystem's MountControl.
// Thread-safety: a plain function; the store lock serialises what it
// writes, and the control server calls it for one request at a time.
#ifndef ACQFS_DAEMON_SERVE_CONTROL_H_
#define ACQFS_DAEMON_SERVE_CONTROL_H_

#include <nlohmann/json.hpp>
#include <string>

#include "fuse/mount.h"

namespace acqfs::cli {

// What the daemon of the sandbox `name` in `state` answers on its control
// socket, `mc` being its filesystem (docs/control.md): {"op": "checkpoint",
// "message": M, "kind": K}, {"op": "rewind", "number": N}, {"op":
// "squash", "merge": [refs], "id": ID, "building": DIR}, {"op": "ping"}
// and {"op": "info"} (the FUSE transport: {"transport": "io_uring" |
// "/dev/fuse"}). Every field is checked for type and range; an unknown
// request, or a field out of range, gets EINVAL.
nlohmann::json ServeControl(const std::string& state, const std::string& name,
                            MountControl* mc, const nlohmann::json& request);

}  // namespace acqfs::cli

#endif  // ACQFS_DAEMON_SERVE_CONTROL_H_
