#include "torus/head/head_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace torus::head {
namespace {

// Parses `args` (after the program name); the exit code when the head would not run.
std::optional<int> Parse(std::vector<std::string> args, HeadFlags* flags) {
  args.insert(args.begin(), "torus-head");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseHeadFlags(static_cast<int>(argv.size()), argv.data(), flags);
}

TEST(HeadFlagsTest, TlsIsOnUnlessTheHostIsLoopback) {
  const std::pair<std::string, bool> cases[] = {{"127.0.0.1", false}, {"127.8.0.1", false}, {"::1", false},
                                                {"localhost", false}, {"0.0.0.0", true},    {"::", true},
                                                {"10.0.0.5", true},   {"head.example.com", true},
                                                {"127.example.com", true}};
  for (const auto& [host, tls] : cases) {
    HeadFlags flags;
    ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--host", host}, &flags), std::nullopt);
    EXPECT_EQ(flags.UseTls(), tls) << host;
  }
}

TEST(HeadFlagsTest, HeartbeatDatagramsTakeThePortOrAreTurnedOff) {
  HeadFlags defaults;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s"}, &defaults), std::nullopt);
  EXPECT_EQ(defaults.heartbeat_port, -1);  // the gRPC port's number
  EXPECT_FALSE(defaults.no_heartbeat_datagrams);
  HeadFlags port;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--heartbeat-port", "7000"}, &port), std::nullopt);
  EXPECT_EQ(port.heartbeat_port, 7000);
  HeadFlags off;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--no-heartbeat-datagrams"}, &off), std::nullopt);
  EXPECT_TRUE(off.no_heartbeat_datagrams);
  HeadFlags both;
  EXPECT_EQ(Parse({"--session-dir", "/tmp/s", "--no-heartbeat-datagrams", "--heartbeat-port", "7000"}, &both), 2);
  HeadFlags out_of_range;
  EXPECT_EQ(Parse({"--session-dir", "/tmp/s", "--heartbeat-port", "70000"}, &out_of_range), 2);
}

TEST(HeadFlagsTest, TlsOnLoopbackIsAskedForAndPlaintextElsewhereIsToo) {
  HeadFlags on_loopback;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--tls"}, &on_loopback), std::nullopt);
  EXPECT_TRUE(on_loopback.UseTls());
  HeadFlags given_ca;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--tls-ca", "ca.crt", "--tls-ca-key", "ca.key"}, &given_ca),
            std::nullopt);
  EXPECT_TRUE(given_ca.UseTls());
  HeadFlags given_token;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--join-token-file", "join_token"}, &given_token), std::nullopt);
  EXPECT_TRUE(given_token.UseTls());
  HeadFlags plaintext;
  ASSERT_EQ(Parse({"--session-dir", "/tmp/s", "--host", "0.0.0.0", "--plaintext"}, &plaintext), std::nullopt);
  EXPECT_FALSE(plaintext.UseTls());
}

TEST(HeadFlagsTest, PlaintextExcludesTlsAndItsSecrets) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--plaintext", "--tls"}, {"--plaintext", "--tls-ca", "ca.crt"},
        {"--plaintext", "--join-token-file", "join_token"}}) {
    HeadFlags flags;
    std::vector<std::string> full = {"--session-dir", "/tmp/s"};
    full.insert(full.end(), args.begin(), args.end());
    testing::internal::CaptureStderr();
    EXPECT_EQ(Parse(full, &flags), 2) << args[1];
    EXPECT_NE(testing::internal::GetCapturedStderr().find("excludes"), std::string::npos) << args[1];
  }
}

TEST(HeadFlagsTest, HeadsSharingAJournalWithTlsMustBeGivenOneCaAndJoinToken) {
  HeadFlags own_ca;
  testing::internal::CaptureStderr();
  EXPECT_EQ(Parse({"--session-dir", "/tmp/s", "--host", "0.0.0.0", "--state-store", "etcd://10.0.0.1:2379"}, &own_ca),
            2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "every head of the cluster must issue with one CA and accept one join token; give --tls-ca, "
                "--tls-ca-key and --join-token-file"),
            std::string::npos);
  HeadFlags given;
  EXPECT_EQ(Parse({"--session-dir", "/tmp/s", "--host", "0.0.0.0", "--head-addresses", "a:1,b:2", "--tls-ca", "ca",
                   "--tls-ca-key", "key", "--join-token-file", "jt"},
                  &given),
            std::nullopt);
  HeadFlags plaintext;
  EXPECT_EQ(Parse({"--session-dir", "/tmp/s", "--host", "0.0.0.0", "--state-store", "etcd://10.0.0.1:2379",
                   "--plaintext"},
                  &plaintext),
            std::nullopt);
  HeadFlags loopback;  // plaintext there: nothing to share
  EXPECT_EQ(Parse({"--session-dir", "/tmp/s", "--state-store", "etcd://127.0.0.1:2379"}, &loopback), std::nullopt);
}

}  // namespace
}  // namespace torus::head
