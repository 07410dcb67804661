// The reduced soak (tests/soak/run.sh --quick) as a CTest test: Python's own
// tests of the file system modules run inside an acqfs sandbox in both file
// modes and on native disk; every test case must end the same way, and the
// daemon must stay under its descriptor bound with a log free of warnings.
// Meanwhile the host's git moves every second (--host-churn: commits,
// branch switches, pack-refs, gc --auto and gc --prune=now), and the
// sandbox's HEAD must not move with it (docs/git-bridge.md, "The base").
// The full soak (npm, a C++ build) is run by hand: docs/benchmarks.md.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness/binaries.h"
#include "harness/command.h"
#include "harness/sandbox.h"
#include "harness/temp_dir.h"

#ifndef ACQFS_SOAK_SCRIPT
#error "ACQFS_SOAK_SCRIPT must be defined by the build"
#endif

namespace acqfs::test {
namespace {

std::vector<std::string> Split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, sep)) out.push_back(cell);
  return out;
}

TEST(Soak, PythonsOwnFileSystemTestsEndAsOnNativeDiskInBothModes) {
  TempDir tmp;
  CommandResult r =
      RunCommand({"bash", ACQFS_SOAK_SCRIPT, "--quick", "--host-churn", "1",
                  "--acqfs", AcqfsBinary(), "--transport", TestTransport(),
                  "--work", tmp.Sub("work"), "--out", tmp.Sub("out")},
                 840);
  std::cout << r.out;
  ASSERT_TRUE(r.ok()) << r.Describe();
  // The verdict above, checked again from the results table.
  std::ifstream in(tmp.Sub("out/results.tsv"));
  std::string line;
  std::getline(in, line);  // header
  std::map<std::string, std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    auto cells = Split(line, '\t');
    ASSERT_GE(cells.size(), 10u) << line;
    rows[cells[1]] = cells;
  }
  ASSERT_EQ(rows.size(), 3u) << "native, acqfs and acqfs-handles";
  const auto& native = rows["native"];
  EXPECT_GT(std::stol(native[2]), 500) << "too few test cases ran natively";
  for (const char* t : {"acqfs", "acqfs-handles"}) {
    const auto& row = rows[t];
    ASSERT_FALSE(row.empty()) << t;
    EXPECT_EQ(row[2], native[2]) << t << ": passed";
    EXPECT_EQ(row[3], native[3]) << t << ": failed";
    EXPECT_EQ(row[4], native[4]) << t << ": skipped";
    EXPECT_LE(std::stol(row[6]), std::stol(row[7])) << t << ": peak fds";
    EXPECT_EQ(row[9], "0") << t << ": daemon warnings";
  }
}

}  // namespace
}  // namespace acqfs::test
