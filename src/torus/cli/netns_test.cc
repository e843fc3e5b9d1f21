// Only the parts of netns.h that read the session's record: creating namespaces and links needs root and changes
// the machine, so those are left to the end-to-end tests. Nothing here names a recorded host that the code would
// run `ip` for.
#include "torus/cli/netns.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "torus/cli/test_util.h"

namespace torus::cli {
namespace netns_test {

using test_util::TempDir;
using test_util::WriteFile;

// The `ip` the code runs: the first of these that exists.
std::string ExpectedIp() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

TEST(NetnsTest, NamespacePrefixOfARecordedHost) {
  TempDir session;
  WriteFile(session.path() + "/netns",
            "bridge torus-br17 17\nhost cpu-0 torus17-4 tv17-4\nhost cpu-1 torus17-5 tv17-5\n");
  EXPECT_EQ(NamespacePrefix(session.path(), "cpu-1"),
            (std::vector<std::string>{ExpectedIp(), "netns", "exec", "torus17-5"}));
  EXPECT_EQ(NamespacePrefix(session.path(), "cpu-0"),
            (std::vector<std::string>{ExpectedIp(), "netns", "exec", "torus17-4"}));
}

TEST(NetnsTest, NamespacePrefixIsEmptyForAHostWithout) {
  TempDir session;
  EXPECT_TRUE(NamespacePrefix(session.path(), "head").empty());  // no record at all
  WriteFile(session.path() + "/netns", "bridge torus-br17 17\nhost short torus17-4\nhost cpu-0 torus17-4 tv17-4\n");
  EXPECT_TRUE(NamespacePrefix(session.path(), "head").empty());
  EXPECT_TRUE(NamespacePrefix(session.path(), "short").empty());        // a malformed line is skipped
  EXPECT_TRUE(NamespacePrefix(session.path(), "torus-br17").empty());  // a bridge is no host
}

TEST(NetnsTest, SetHostLinkOfAHostWithoutNamespaceIsNotFound) {
  TempDir session;
  WriteFile(session.path() + "/netns", "bridge torus-br17 17\nhost cpu-0 torus17-4 tv17-4\n");
  for (bool up : {false, true}) {
    absl::Status s = SetHostLink(session.path(), "cpu-9", up);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(s.message(), "host cpu-9 of " + session.path() +
                               " has no network namespace (only `torus up --netns` makes them)");
  }
}

TEST(NetnsTest, RemoveSessionNetworkRemovesTheRecord) {
  TempDir session;
  const std::string record = session.path() + "/netns";
  WriteFile(record, "host short torus17-4\nbridge\n");  // nothing complete to remove
  RemoveSessionNetwork(session.path());
  EXPECT_FALSE(std::filesystem::exists(record));
  RemoveSessionNetwork(session.path());  // and with no record, nothing to do
  EXPECT_FALSE(std::filesystem::exists(record));
}

}  // namespace netns_test
}  // namespace torus::cli
