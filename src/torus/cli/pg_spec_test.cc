#include "torus/cli/pg_spec.h"

#include <gtest/gtest.h>

namespace torus::cli {
namespace pg_spec_test {

TEST(PgSpecTest, Bundles) {
  auto bundles = ParseBundlesJson("--bundles", R"([{"CPU": 1}, {"CPU": 0.5, "TPU": 4}])");
  ASSERT_TRUE(bundles.ok()) << bundles.status();
  ASSERT_EQ(bundles->size(), 2u);
  EXPECT_EQ((*bundles)[0].resources().at("CPU"), 10000);
  EXPECT_EQ((*bundles)[1].resources().at("CPU"), 5000);
  EXPECT_EQ((*bundles)[1].resources().at("TPU"), 40000);
}

TEST(PgSpecTest, BundleErrorsNameTheFlag) {
  struct Case {
    std::string json, error;
  };
  for (const Case& c : std::vector<Case>{
           {"[]", "--bundles: must be a non-empty JSON list of bundles"},
           {"{", "--bundles: not valid JSON"},
           {R"([{"CPU": "x"}])", "--bundles[0]: \"CPU\" must be a number"},
           {R"([1])", "--bundles[0]: must be an object of resource amounts"},
           {R"([{"CPU": -1}])", "--bundles[0]: \"CPU\":"},
       }) {
    auto bundles = ParseBundlesJson("--bundles", c.json);
    ASSERT_FALSE(bundles.ok()) << c.json;
    EXPECT_NE(bundles.status().message().find(c.error), std::string::npos) << bundles.status();
  }
}

TEST(PgSpecTest, SelectorsPerBundleOrForAll) {
  auto bundles = *ParseBundlesJson("--bundles", R"([{"CPU": 1}, {"CPU": 1}])");
  const std::string per_bundle = R"([{"a": "x"}, {"b": "!y"}])";
  absl::Status applied = ApplyBundleSelectorsJson(per_bundle, bundles);
  ASSERT_TRUE(applied.ok()) << applied;
  EXPECT_EQ(bundles[0].label_selector().at("a"), "x");
  EXPECT_EQ(bundles[1].label_selector().at("b"), "!y");
  auto all = *ParseBundlesJson("--bundles", R"([{"CPU": 1}, {"CPU": 1}])");
  const std::string for_all = R"j({"zone": "in(a,b)"})j";
  applied = ApplyBundleSelectorsJson(for_all, all);
  ASSERT_TRUE(applied.ok()) << applied;
  EXPECT_EQ(all[1].label_selector().at("zone"), "in(a,b)");
  auto s = ApplyBundleSelectorsJson(R"([{"a": "x"}])", all);
  EXPECT_EQ(s.message(),
            "--bundle-label-selector: has 1 selectors for 2 bundles; give one per bundle, or one object for all");
}

TEST(PgSpecTest, FallbackShapes) {
  auto shape = ParseFallbackShape("TPU-V5LITEPOD:4x4:2");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->accelerator_type(), "TPU-V5LITEPOD");
  EXPECT_EQ(shape->topology(), "4x4");
  EXPECT_EQ(shape->num_slices(), 2);
  EXPECT_EQ(ParseFallbackShape("TPU-V6E:4x4")->num_slices(), 1);
  for (std::string bad : {"TPU-V6E", "TPU-V6E:4x4:0", "TPU-V6E:4x4:x", ":4x4", "a:b:1:2"}) {
    EXPECT_FALSE(ParseFallbackShape(bad).ok()) << bad;
  }
}

TEST(PgSpecTest, BundleFallbacks) {
  const std::string fallback = R"({"bundles": [{"CPU": 2}], "bundle_label_selector": [{"a": "b"}]})";
  auto alt = ParseBundleFallbackJson(fallback);
  ASSERT_TRUE(alt.ok()) << alt.status();
  EXPECT_EQ(alt->bundles(0).resources().at("CPU"), 20000);
  EXPECT_EQ(alt->bundles(0).label_selector().at("a"), "b");
  const std::string misspelt = R"({"bundle": []})";
  const std::string unknown_key = R"({"bundles": [{"CPU": 1}], "x": 1})";
  EXPECT_FALSE(ParseBundleFallbackJson(misspelt).ok());
  EXPECT_FALSE(ParseBundleFallbackJson(unknown_key).ok());
}

}  // namespace pg_spec_test
}  // namespace torus::cli
