#include "torus/rpc/advertised_host.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace torus::rpc {
namespace advertised_host_test {

TEST(AdvertisedHostTest, WhatItIsToldToAdvertiseWins) {
  EXPECT_EQ(AdvertisedHost("0.0.0.0", "head.example.internal"), "head.example.internal");
  EXPECT_EQ(AdvertisedHost("127.0.0.1", "10.0.0.7"), "10.0.0.7");
}

TEST(AdvertisedHostTest, AServerBoundToOneAddressGivesThatAddress) {
  EXPECT_EQ(AdvertisedHost("127.0.0.1", ""), "127.0.0.1");
  EXPECT_EQ(AdvertisedHost("10.1.2.3", ""), "10.1.2.3");
}

TEST(AdvertisedHostTest, AWildcardBindGivesAnAddressOfThisMachineNeverTheWildcard) {
  for (const std::string wildcard : {"0.0.0.0", "::", "[::]", ""}) {
    EXPECT_TRUE(IsWildcardHost(wildcard)) << wildcard;
    const std::string host = AdvertisedHost(wildcard, "");
    in_addr parsed{};
    EXPECT_EQ(inet_pton(AF_INET, host.c_str(), &parsed), 1) << host;
    EXPECT_NE(host, "0.0.0.0");
  }
  EXPECT_FALSE(IsWildcardHost("127.0.0.1"));
}

}  // namespace advertised_host_test
}  // namespace torus::rpc
