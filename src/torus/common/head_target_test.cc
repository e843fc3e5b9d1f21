#include "torus/common/head_target.h"

#include <gtest/gtest.h>

namespace torus {
namespace {

TEST(HeadTargetTest, OneAddressStaysAsItIs) {
  EXPECT_EQ(HeadTarget("127.0.0.1:6380"), "127.0.0.1:6380");
  EXPECT_EQ(HeadTarget("head.example:6380"), "head.example:6380");
}

TEST(HeadTargetTest, SeveralBecomeOneIpv4TargetWithNamesResolved) {
  EXPECT_EQ(HeadTarget("127.0.0.1:6380,127.0.0.2:6381"), "ipv4:127.0.0.1:6380,127.0.0.2:6381");
  EXPECT_EQ(HeadTarget("localhost:1,127.0.0.3:2"), "ipv4:127.0.0.1:1,127.0.0.3:2");
}

TEST(HeadTargetTest, AListWithAnEntryThatDoesNotResolveIsLeftForGrpcToRefuse) {
  EXPECT_EQ(HeadTarget("127.0.0.1:1,no-such-host.invalid:2"), "127.0.0.1:1,no-such-host.invalid:2");
  EXPECT_EQ(HeadTarget("127.0.0.1:1,noport"), "127.0.0.1:1,noport");
}

}  // namespace
}  // namespace torus
