// The daemon log's file sink: spdlog's rotating file sink, but opening and
// rotating its files beneath a directory descriptor with no symlink
// followed. The log lives in the sandbox's folder, which its owner may
// change at will, and a root daemon serves that owner's sandbox too: with
// spdlog's own sink (fopen of a path) a daemon.log replaced by a symlink to
// /etc/passwd had root append its log lines there. A name that is a
// symlink, or anything but a regular file, is removed and the file made
// anew; a root daemon gives a new file to the folder's owner.
//
// Thread-safety: spdlog's base_sink serialises every call with its mutex.
#ifndef ACQFS_DAEMON_LOG_SINK_H_
#define ACQFS_DAEMON_LOG_SINK_H_

#include <spdlog/sinks/base_sink.h>

#include <cstddef>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/handle.h"

namespace acqfs::cli {

class DirLogSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Logs to `path` ("<dir>/<base>.<ext>"); once it holds `max_bytes`, it
  // becomes "<base>.1.<ext>" (the older one "<base>.2.<ext>", and so on up
  // to `max_files`) and a new file is begun, as spdlog's rotating sink
  // names them. Errors name the operation and the path.
  static Result<std::shared_ptr<DirLogSink>> Open(const std::string& path,
                                                  size_t max_bytes,
                                                  size_t max_files);

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  DirLogSink(UniqueFd dir, std::string dir_path, std::string name,
             size_t max_bytes, size_t max_files);
  // Opens (creating) the current file: *file_, size_.
  Status OpenFile();
  // The rotated name of index i ("daemon.1.log").
  std::string Rotated(size_t i) const;
  void Rotate();

  UniqueFd dir_;  // the folder (O_DIRECTORY)
  const std::string dir_path_, name_;
  const size_t max_bytes_, max_files_;
  UniqueFd file_;  // guarded by the base_sink's mutex
  size_t size_ = 0;
};

}  // namespace acqfs::cli

#endif  // ACQFS_DAEMON_LOG_SINK_H_
