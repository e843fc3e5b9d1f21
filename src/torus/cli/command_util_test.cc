#include "torus/cli/command_util.h"

#include <gtest/gtest.h>

#include "torus/cli/test_util.h"

namespace torus::cli {
namespace command_util_test {

using test_util::ScopedEnv;
using test_util::TempDir;

TEST(CommandUtilTest, FailCommandPrintsTheCommandAndMessage) {
  testing::internal::CaptureStderr();
  const int code = FailCommand("job submit", absl::InvalidArgumentError("--env \"x\": expected KEY=VALUE"));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "torus job submit: --env \"x\": expected KEY=VALUE\n");
  EXPECT_EQ(code, 2);
}

TEST(CommandUtilTest, FailCommandExitsOneForAnythingButBadInput) {
  for (const absl::Status& s : {absl::NotFoundError("a"), absl::UnavailableError("b"), absl::InternalError("c"),
                                absl::AlreadyExistsError("d"), absl::DeadlineExceededError("e")}) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(FailCommand("x", s), 1) << s;
    testing::internal::GetCapturedStderr();
  }
}

TEST(CommandUtilTest, ParseEnvFlagsLaterKeyWins) {
  auto env = ParseEnvFlags({"A=1", "B=x=y", "C=", "A=2"});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"A", "2"}, {"B", "x=y"}, {"C", ""}}));
  EXPECT_TRUE(ParseEnvFlags({})->empty());
}

TEST(CommandUtilTest, ParseEnvFlagsNamesTheMalformedItem) {
  for (const std::string item : {"NOVALUE", "=1", ""}) {
    auto env = ParseEnvFlags({"OK=1", item});
    ASSERT_FALSE(env.ok()) << item;
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(env.status().message(), "--env \"" + item + "\": expected KEY=VALUE");
  }
}

TEST(CommandUtilTest, ShellQuoteLeavesPlainArgumentsAlone) {
  for (const std::string arg : {"python", "train.py", "--lr=0.1", "a/b:c,d+e@f%g_h-i.j"}) {
    EXPECT_EQ(ShellQuote(arg), arg);
  }
}

TEST(CommandUtilTest, ShellQuoteQuotesTheRest) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("x;rm -rf /"), "'x;rm -rf /'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("\"\n"), "'\"\n'");
}

TEST(CommandUtilTest, ConnectHttpApiWithoutAnAddressOrSessionSaysWhatIsMissing) {
  TempDir root;
  ScopedEnv temp("TORUS_TEMP_DIR", root.path());
  ScopedEnv address("TORUS_DASHBOARD_ADDRESS", std::nullopt);
  auto http = ConnectHttpApi({});
  ASSERT_FALSE(http.ok());
  EXPECT_EQ(http.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(http.status().message().rfind("cannot find the head's HTTP address: no --dashboard-address or "
                                          "TORUS_DASHBOARD_ADDRESS and no torus session under " +
                                              root.path(),
                                          0),
            0u)
      << http.status();
}

TEST(CommandUtilTest, ConnectHttpApiTakesTheFlags) {
  auto http = ConnectHttpApi({.token = "t", .dashboard_address = "127.0.0.1:9"});  // not contacted
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ((*http)->address(), "127.0.0.1:9");
}

// A client that is never contacted: the cases below fail, or pass through, before anything is uploaded.
std::unique_ptr<client::HttpApiClient> Unused() {
  return *client::HttpApiClient::Connect({.address = "127.0.0.1:9", .token = "t"});
}

TEST(CommandUtilTest, UploadLocationsPassesPackageUrisThrough) {
  auto http = Unused();
  auto locations = UploadLocations(*http, "gcs://wd.zip", {"gcs://a.zip", "gcs://b.zip"}, {});
  ASSERT_TRUE(locations.ok()) << locations.status();
  EXPECT_EQ(locations->working_dir, "gcs://wd.zip");
  EXPECT_EQ(locations->py_modules, (std::vector<std::string>{"gcs://a.zip", "gcs://b.zip"}));
  auto none = UploadLocations(*http, "", {}, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->working_dir, "");
  EXPECT_TRUE(none->py_modules.empty());
}

TEST(CommandUtilTest, UploadLocationsRefusesWhatIsNotADirectory) {
  TempDir dir;
  auto http = Unused();
  const std::string missing = dir.path() + "/missing";
  auto wd = UploadLocations(*http, missing, {}, {});
  ASSERT_FALSE(wd.ok());
  EXPECT_EQ(wd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wd.status().message(), "--working-dir \"" + missing +
                                       "\" is not a local directory; give a directory to upload or a package URI "
                                       "(gcs://<name>.zip)");
  const std::string file = dir.path() + "/file.py";
  test_util::WriteFile(file, "x = 1\n");
  auto module = UploadLocations(*http, "gcs://wd.zip", {"gcs://a.zip", file}, {});
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().message(), "--py-module \"" + file +
                                           "\" is not a local directory; give a directory to upload or a package "
                                           "URI (gcs://<name>.zip)");
}

}  // namespace command_util_test
}  // namespace torus::cli
