// Turns the policy options of `mount`/`run` (and a --policy JSON file) into
// the record a sandbox keeps in meta.json (docs/sandboxes.md, "Policy").
#ifndef ACQFS_CLI_POLICY_ARGS_H_
#define ACQFS_CLI_POLICY_ARGS_H_

#include "cli/commands.h"
#include "common/error.h"
#include "state/state.h"

namespace acqfs::cli {

// The file's lists first, then the flags'; --hide-secrets (flag or file)
// puts Policy::SecretPatterns() first; duplicates dropped; --quota beats the
// file's "quota". EINVAL naming the file, key, pattern or size that is
// wrong; an unknown key in the file is refused, never ignored.
Result<PolicyRecord> ResolvePolicy(const PolicyArgs& args);

}  // namespace acqfs::cli

#endif  // ACQFS_CLI_POLICY_ARGS_H_
