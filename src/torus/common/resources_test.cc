#include "torus/common/resources.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus {
namespace resources_test {

using ::testing::HasSubstr;

struct FixedCase {
  double amount;
  int64_t fixed;
};

TEST(ToFixedTest, RoundsToNearestTenThousandth) {
  const std::vector<FixedCase> cases = {
      {0, 0},
      {-0.0, 0},
      {1, 10000},
      {0.5, 5000},
      {0.3, 3000},
      {0.1 + 0.2, 3000},  // 0.30000000000000004
      {0.7, 7000},
      {1.1, 11000},
      {2.675, 26750},
      {0.0001, 1},
      {0.00004, 0},  // below half a unit: no amount at all
      {0.00006, 1},
      {0.99996, 10000},  // the fraction carries into the whole part
      {17179869184, 171798691840000},
      // Past 2^53 / 10000 a single multiplication would round; whole and fraction are scaled apart.
      {800000000000000.5, 8000000000000005000},
      {kMaxResourceAmount, 9000000000000000000},
  };
  for (const FixedCase& c : cases) {
    absl::StatusOr<int64_t> fixed = ToFixed(c.amount);
    ASSERT_TRUE(fixed.ok()) << c.amount << ": " << fixed.status();
    EXPECT_EQ(*fixed, c.fixed) << c.amount;
  }
}

struct BadAmountCase {
  double amount;
  std::string message;
};

TEST(ToFixedTest, RejectsNegativeNonFiniteAndHuge) {
  const std::vector<BadAmountCase> cases = {
      {-1, "resource amount -1 is negative"},
      {-0.0001, "resource amount -0.0001 is negative"},
      {std::nan(""), "resource amount nan is not a finite number"},
      {std::numeric_limits<double>::infinity(), "resource amount inf is not a finite number"},
      {-std::numeric_limits<double>::infinity(), "resource amount -inf is not a finite number"},
      {1e15, "resource amount 1000000000000000 is too large; the largest is 900000000000000"},
  };
  for (const BadAmountCase& c : cases) {
    absl::StatusOr<int64_t> fixed = ToFixed(c.amount);
    ASSERT_FALSE(fixed.ok()) << c.amount;
    EXPECT_EQ(fixed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(fixed.status().message()), c.message);
  }
}

TEST(FromFixedTest, GivesTheNearestDouble) {
  EXPECT_EQ(FromFixed(0), 0.0);
  EXPECT_EQ(FromFixed(3000), 0.3);
  EXPECT_EQ(FromFixed(1), 0.0001);
  EXPECT_EQ(FromFixed(10000), 1.0);
  EXPECT_EQ(FromFixed(171798691840000), 17179869184.0);
}

struct FormatCase {
  int64_t fixed;
  std::string text;
};

TEST(FormatFixedTest, ShortestExactDecimal) {
  const std::vector<FormatCase> cases = {
      {0, "0"},
      {1, "0.0001"},
      {10, "0.001"},
      {5000, "0.5"},
      {3000, "0.3"},
      {12345, "1.2345"},
      {10010, "1.001"},
      {40000, "4"},
      {171798691840000, "17179869184"},
      {-5000, "-0.5"},
      {std::numeric_limits<int64_t>::max(), "922337203685477.5807"},
      {std::numeric_limits<int64_t>::min(), "-922337203685477.5808"},
  };
  for (const FormatCase& c : cases) EXPECT_EQ(FormatFixed(c.fixed), c.text) << c.fixed;
}

TEST(FormatFixedTest, RoundTripsUserNumbers) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.1, "0.1"}, {0.2, "0.2"}, {0.1 + 0.2, "0.3"}, {0.7, "0.7"}, {2.5, "2.5"}, {1e-4, "0.0001"}, {64, "64"}};
  for (const auto& [amount, text] : cases) {
    absl::StatusOr<int64_t> fixed = ToFixed(amount);
    ASSERT_TRUE(fixed.ok());
    EXPECT_EQ(FormatFixed(*fixed), text);
  }
}

TEST(ResourceSetTest, SetGetAndZeroRemoves) {
  ResourceSet set;
  EXPECT_TRUE(set.empty());
  set.Set("CPU", 0.1 + 0.2);
  EXPECT_EQ(set.GetFixed("CPU"), 3000);
  EXPECT_EQ(set.Get("CPU"), 0.3);
  EXPECT_EQ(set.GetFixed("GPU"), 0);
  set.SetFixed("CPU", 0);
  EXPECT_TRUE(set.empty());
  set.SetFixed("TPU", 40000);
  set.SetFixed("TPU", 80000);
  EXPECT_EQ(set.GetFixed("TPU"), 80000);
  set.Set("TPU", 0);
  EXPECT_TRUE(set.amounts().empty());
}

TEST(ResourceSetDeathTest, NegativeAmountIsACallerBug) {
  ResourceSet set;
  EXPECT_DEATH(set.SetFixed("CPU", -1), "SetFixed\\(\"CPU\", -1\\): amount is negative");
  EXPECT_DEATH(set.Set("CPU", -0.5), "Set\\(\"CPU\"\\): resource amount -0.5 is negative");
}

ResourceSet Make(std::vector<std::pair<std::string, double>> amounts) {
  ResourceSet set;
  for (const auto& [name, amount] : amounts) set.Set(name, amount);
  return set;
}

struct ContainsCase {
  std::string name;
  ResourceSet have;
  ResourceSet want;
  bool contains;
};

TEST(ResourceSetTest, Contains) {
  const std::vector<ContainsCase> cases = {
      {"empty in empty", {}, {}, true},
      {"empty in any", Make({{"CPU", 1}}), {}, true},
      {"equal", Make({{"CPU", 4}, {"TPU", 4}}), Make({{"CPU", 4}, {"TPU", 4}}), true},
      {"less", Make({{"CPU", 4}, {"TPU", 4}}), Make({{"CPU", 0.5}}), true},
      {"more", Make({{"CPU", 4}}), Make({{"CPU", 4.0001}}), false},
      {"missing name", Make({{"CPU", 4}}), Make({{"TPU", 1}}), false},
      {"fractions sum exactly", Make({{"CPU", 0.1 + 0.2}}), Make({{"CPU", 0.3}}), true},
  };
  for (const ContainsCase& c : cases) EXPECT_EQ(c.have.Contains(c.want), c.contains) << c.name;
}

TEST(ResourceSetTest, AddAndSubtract) {
  ResourceSet set = Make({{"CPU", 0.1}, {"memory", 1024}});
  set.Add(Make({{"CPU", 0.2}, {"TPU", 4}}));
  EXPECT_EQ(set, Make({{"CPU", 0.3}, {"TPU", 4}, {"memory", 1024}}));

  set.Subtract(Make({{"CPU", 0.3}, {"TPU", 1}}));
  EXPECT_EQ(set, Make({{"TPU", 3}, {"memory", 1024}}));  // CPU reached 0 and is gone

  set.Subtract(Make({{"TPU", 5}, {"GPU", 1}}));  // clamps; absent names stay absent
  EXPECT_EQ(set, Make({{"memory", 1024}}));
  EXPECT_EQ(set.amounts().count("TPU"), 0);
  EXPECT_EQ(set.amounts().count("GPU"), 0);
}

TEST(ResourceSetTest, AddSaturates) {
  ResourceSet set;
  set.SetFixed("memory", std::numeric_limits<int64_t>::max() - 1);
  ResourceSet more;
  more.SetFixed("memory", 10);
  set.Add(more);
  EXPECT_EQ(set.GetFixed("memory"), std::numeric_limits<int64_t>::max());
}

TEST(ResourceSetTest, ToJson) {
  EXPECT_EQ(ResourceSet().ToJson(), "{}");
  EXPECT_EQ(Make({{"CPU", 4}, {"memory", 1073741824}, {"TPU", 4}, {"accel_x", 0.5}}).ToJson(),
            R"({"CPU": 4, "TPU": 4, "accel_x": 0.5, "memory": 1073741824})");
  EXPECT_EQ(Make({{"CPU", 0.1 + 0.2}}).ToJson(), R"({"CPU": 0.3})");
  ResourceSet odd;
  odd.SetFixed("a\"b", 1);  // names are not validated here; the JSON stays valid
  EXPECT_EQ(odd.ToJson(), R"({"a\"b": 0.0001})");
}

struct NameCase {
  std::string name;
  std::string error;  // empty when valid
};

TEST(ValidateResourceNameTest, Table) {
  const std::string kRule =
      "a resource name is 1-128 characters of letters, digits, '_', '-', '.', '/' or ':', starting with a letter "
      "or '_'";
  const std::vector<NameCase> cases = {
      {"CPU", ""},
      {"accel_x", ""},
      {"_private", ""},
      {"a-b.c/d:e9", ""},
      {std::string(128, 'a'), ""},
      {"", "resource name \"\" is invalid: it is empty; " + kRule},
      {std::string(129, 'a'),
       "resource name \"" + std::string(129, 'a') + "\" is invalid: it is 129 characters long; " + kRule},
      {"1x", "resource name \"1x\" is invalid: it does not start with a letter or '_'; " + kRule},
      {"-x", "resource name \"-x\" is invalid: it does not start with a letter or '_'; " + kRule},
      {"a b", "resource name \"a b\" is invalid: it contains ' '; " + kRule},
      {"a\nb", "resource name \"a\\nb\" is invalid: it contains '\\n'; " + kRule},
      {"a\"b", "resource name \"a\\\"b\" is invalid: it contains '\\\"'; " + kRule},
  };
  for (const NameCase& c : cases) {
    absl::Status status = ValidateResourceName(c.name);
    if (c.error.empty()) {
      EXPECT_TRUE(status.ok()) << c.name << ": " << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_EQ(std::string(status.message()), c.error);
    }
  }
}

struct ParseCase {
  std::string json;
  ResourceSet want;
};

TEST(ParseCustomResourcesJsonTest, Valid) {
  const std::vector<ParseCase> cases = {
      {"", {}},
      {"  \n", {}},
      {"{}", {}},
      {R"({"accel_x": 2})", Make({{"accel_x", 2}})},
      {R"({"a": 0.5, "b": 0})", Make({{"a", 0.5}})},  // zero is accepted and not stored
      {R"({"a": 1e3, "b/c:d": 0.0001})", Make({{"a", 1000}, {"b/c:d", 0.0001}})},
      {" {\n  \"x\": 0.3\n}\n", Make({{"x", 0.3}})},
  };
  for (const ParseCase& c : cases) {
    absl::StatusOr<ResourceSet> parsed = ParseCustomResourcesJson(c.json);
    ASSERT_TRUE(parsed.ok()) << c.json << ": " << parsed.status();
    EXPECT_EQ(*parsed, c.want) << c.json;
  }
}

struct ParseErrorCase {
  std::string json;
  std::string message;
};

TEST(ParseCustomResourcesJsonTest, ErrorsNameTheField) {
  const std::vector<ParseErrorCase> cases = {
      {R"({"accel_x": "abc"})", R"(--resources: "accel_x" must be a non-negative number, got "abc")"},
      {R"({"accel_x": -1})", R"(--resources: "accel_x" must be a non-negative number, got -1)"},
      {R"({"accel_x": -0.5})", R"(--resources: "accel_x" must be a non-negative number, got -0.5)"},
      {R"({"accel_x": true})", R"(--resources: "accel_x" must be a non-negative number, got true)"},
      {R"({"accel_x": null})", R"(--resources: "accel_x" must be a non-negative number, got null)"},
      {R"({"accel_x": {"n": 1}})", R"(--resources: "accel_x" must be a non-negative number, got an object)"},
      {R"({"accel_x": [1]})", R"(--resources: "accel_x" must be a non-negative number, got an array)"},
      {R"({"accel_x": 1e15})",
       R"(--resources: "accel_x": resource amount 1000000000000000 is too large; the largest is 900000000000000)"},
      {R"({"CPU": 1})", R"(--resources: "CPU" is set by --num-cpus, not --resources)"},
      {R"({"memory": 1})", R"(--resources: "memory" is set by --memory, not --resources)"},
      {R"({"TPU": 4})", R"(--resources: "TPU" is detected from the host's devices, not set by --resources)"},
      {R"({"GPU": 1})", R"(--resources: "GPU" is detected from the host's devices, not set by --resources)"},
      {R"({"1x": 1})",
       "--resources: resource name \"1x\" is invalid: it does not start with a letter or '_'; a resource name is "
       "1-128 characters of letters, digits, '_', '-', '.', '/' or ':', starting with a letter or '_'"},
      {R"({"a": 1, "b": 2, "a": 3})", R"(--resources: "a" appears more than once)"},
      {"[1, 2]",
       R"(--resources: expected a JSON object of resource names to amounts, e.g. {"accel_x": 2}, got an array)"},
      {"4", R"(--resources: expected a JSON object of resource names to amounts, e.g. {"accel_x": 2}, got 4)"},
      {"null", R"(--resources: expected a JSON object of resource names to amounts, e.g. {"accel_x": 2}, got null)"},
      {R"({"a": 1,})",
       "--resources: invalid JSON: parse error at line 1, column 9: syntax error while parsing object key - "
       "unexpected '}'; expected string literal"},
      {"{\"a\":\n abc}",
       "--resources: invalid JSON: parse error at line 2, column 2: syntax error while parsing value - invalid "
       "literal; last read: '\"a\":<U+000A> a'"},
      {"accel_x=1",
       "--resources: invalid JSON: parse error at line 1, column 1: syntax error while parsing value - invalid "
       "literal; last read: 'a'"},
  };
  for (const ParseErrorCase& c : cases) {
    absl::StatusOr<ResourceSet> parsed = ParseCustomResourcesJson(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_EQ(std::string(parsed.status().message()), c.message) << c.json;
  }
}

TEST(ParseCustomResourcesJsonTest, NumberOverflowIsAnError) {
  absl::StatusOr<ResourceSet> parsed = ParseCustomResourcesJson(R"({"a": 1e400})");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--resources: "));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("1e400"));
}

TEST(ParseCustomResourcesJsonTest, DeepNestingIsAnErrorNotACrash) {
  std::string json = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  absl::StatusOr<ResourceSet> parsed = ParseCustomResourcesJson(json);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(std::string(parsed.status().message()), R"(--resources: "a" must be a non-negative number, got an array)");
}

}  // namespace resources_test
}  // namespace torus
