#include "torus/sched/bundle_policy.h"

#include <gtest/gtest.h>

#include "torus/sched/sched_test_util.h"

namespace torus::sched {
namespace bundle_policy_test {

using testing::CpuNode;
using testing::Index;
using testing::Res;
using testing::Sel;
using testing::TpuSlice;

std::string Describe(const BundleOutcome& o) {
  if (auto* p = std::get_if<BundlePlacement>(&o)) {
    std::string s = "placed alt " + std::to_string(p->alternative) + ":";
    for (const auto& id : p->node_ids) s += " " + id;
    return s;
  }
  if (auto* p = std::get_if<Pending>(&o)) return "pending: " + p->reason;
  return "infeasible: " + std::get<Infeasible>(o).reason;
}

BundleRequest Bundles(Strategy strategy, std::vector<double> cpus,
                      std::vector<std::map<std::string, std::string>> selectors = {}) {
  BundleRequest r;
  r.strategy = strategy;
  for (double c : cpus) r.primary.bundles.push_back(Res({{"CPU", c}}));
  for (const auto& s : selectors) r.primary.bundle_selectors.push_back(Sel(s));
  return r;
}

BundleOutcome Placed(std::vector<std::string> ids, int alternative = 0) {
  return BundlePlacement{std::move(ids), alternative};
}

NodeSnapshot TpuHost(const std::string& id) {
  NodeSnapshot n = TpuSlice(id, {.topology = "2x2", .pod_type = "v6e-4", .hosts = 1})[0];
  n.node_id = id;
  return n;
}

struct Case {
  std::string name;
  std::vector<NodeSnapshot> nodes;
  BundleRequest request;
  BundleOutcome expected;
};

TEST(PlaceBundlesTest, Table) {
  using S = Strategy;
  const std::vector<NodeSnapshot> three = {CpuNode("a", 4), CpuNode("b", 8), CpuNode("c", 16)};
  BundleRequest fallback = Bundles(S::kStrictPack, {16, 16});
  fallback.fallbacks.push_back({{Res({{"CPU", 4}}), Res({{"CPU", 4}})}, {}});
  BundleRequest tpu_bundles = Bundles(S::kPack, {1});
  tpu_bundles.primary.bundles[0].Set("TPU", 4);

  const std::vector<Case> cases = {
      // STRICT_PACK
      {"strict pack: the tightest node holding all", three, Bundles(S::kStrictPack, {2, 3}), Placed({"b", "b"})},
      {"strict pack: exact fit", three, Bundles(S::kStrictPack, {2, 2}), Placed({"a", "a"})},
      {"strict pack: selectors must all hold", {CpuNode("a", 8, {{"z", "1"}}), CpuNode("b", 8, {{"z", "1"}, {"t", "x"}})},
       Bundles(S::kStrictPack, {1, 1}, {{{"z", "1"}}, {{"t", "x"}}}), Placed({"b", "b"})},
      {"strict pack: busy now", {CpuNode("a", 8, {}, 4), CpuNode("b", 8, {}, 4)}, Bundles(S::kStrictPack, {3, 3}),
       Pending{"STRICT_PACK 2 bundles: no alive node has {\"CPU\": 6} free now"}},
      {"strict pack: too large", three, Bundles(S::kStrictPack, {10, 10}),
       Infeasible{"STRICT_PACK 2 bundles: no alive node is large enough for {\"CPU\": 20}"}},
      {"strict pack: selector phrase", three, Bundles(S::kStrictPack, {1, 1}, {{{"z", "1"}}, {}}),
       Infeasible{"STRICT_PACK 2 bundles: no alive node matching every bundle's selector is large enough for "
                  "{\"CPU\": 2}"}},
      // PACK
      {"pack: one node when one holds all", three, Bundles(S::kPack, {2, 2, 3}), Placed({"b", "b", "b"})},
      {"pack: largest first onto the tightest, then onto used nodes", three, Bundles(S::kPack, {10, 6, 4}),
       Placed({"c", "c", "a"})},
      {"pack: CPU bundles avoid TPU hosts", {TpuHost("a-tpu"), CpuNode("z", 8)}, Bundles(S::kPack, {1, 1}),
       Placed({"z", "z"})},
      {"pack: TPU bundles need TPU hosts", {TpuHost("t"), CpuNode("a", 8)}, tpu_bundles, Placed({"t"})},
      {"pack: a bundle that fits nowhere now", {CpuNode("a", 8, {}, 6), CpuNode("b", 8)}, Bundles(S::kPack, {8, 4}),
       Pending{"PACK 2 bundles: bundle 1 {\"CPU\": 4}: no alive node has room for it now"}},
      {"pack: cannot fit even idle", {CpuNode("a", 8)}, Bundles(S::kPack, {8, 4}),
       Infeasible{"PACK 2 bundles: bundle 1 {\"CPU\": 4}: no alive node has room for it, even with every node "
                  "idle"}},
      {"pack: per-bundle selectors", {CpuNode("a", 8, {{"z", "1"}}), CpuNode("b", 8, {{"z", "2"}})},
       Bundles(S::kPack, {1, 1}, {{{"z", "2"}}, {{"z", "1"}}}), Placed({"b", "a"})},
      // STRICT_SPREAD
      {"strict spread: distinct nodes in preference order", three, Bundles(S::kStrictSpread, {1, 1, 1}),
       Placed({"a", "b", "c"})},
      {"strict spread: largest bundle first", three, Bundles(S::kStrictSpread, {1, 12, 6}), Placed({"a", "c", "b"})},
      {"strict spread: matching where greedy fails",
       {CpuNode("a", 8, {{"z", "1"}}), CpuNode("b", 8, {{"z", "2"}})},
       Bundles(S::kStrictSpread, {1, 1}, {{}, {{"z", "1"}}}), Placed({"b", "a"})},
      {"strict spread: not enough nodes now", {CpuNode("a", 8), CpuNode("b", 8, {}, 8), CpuNode("c", 8)},
       Bundles(S::kStrictSpread, {1, 1, 1}),
       Pending{"STRICT_SPREAD 3 bundles: at most 2 of the 3 bundles fit on distinct nodes now"}},
      {"strict spread: not enough nodes ever", {CpuNode("a", 8), CpuNode("b", 8)},
       Bundles(S::kStrictSpread, {1, 1, 1}),
       Infeasible{"STRICT_SPREAD 3 bundles: at most 2 of the 3 bundles fit on distinct nodes, even with every node "
                  "idle"}},
      // SPREAD
      {"spread: distinct while enough", three, Bundles(S::kSpread, {1, 1}), Placed({"a", "b"})},
      {"spread: then the node with fewest", {CpuNode("a", 8), CpuNode("b", 8)}, Bundles(S::kSpread, {1, 1, 1, 1, 1}),
       Placed({"a", "b", "a", "b", "a"})},
      {"spread: a node too small is skipped", three, Bundles(S::kSpread, {6, 6, 1}), Placed({"b", "c", "a"})},
      {"spread: infeasible", {CpuNode("a", 8)}, Bundles(S::kSpread, {6, 6}),
       Infeasible{"SPREAD 2 bundles: bundle 1 {\"CPU\": 6}: no alive node has room for it, even with every node "
                  "idle"}},
      // Fallbacks
      {"fallback placed when the primary cannot be", {CpuNode("a", 8), CpuNode("b", 8)}, fallback,
       Placed({"a", "a"}, 1)},
      {"every alternative listed",
       {CpuNode("a", 4)}, fallback,
       Infeasible{"STRICT_PACK 2 bundles: no alive node is large enough for {\"CPU\": 32}\nfallback 1: STRICT_PACK 2 "
                  "bundles: no alive node is large enough for {\"CPU\": 8}"}},
      {"invalid request is infeasible", three, Bundles(S::kPack, {}),
       Infeasible{"bundles is empty; a placement group needs at least one bundle"}},
  };
  for (const Case& c : cases) {
    BundleOutcome got = PlaceBundles(Index(c.nodes), c.request);
    EXPECT_EQ(got, c.expected) << c.name << ": got " << Describe(got);
  }
}

TEST(PlaceBundlesTest, RescheduleAroundSurvivors) {
  // a holds bundle 0; its peer on the dead node must move.
  std::vector<NodeSnapshot> nodes = {CpuNode("a", 8, {}, 1), CpuNode("b", 8), CpuNode("c", 8)};
  struct Case {
    Strategy strategy;
    BundleOutcome expected;
  };
  const std::vector<Case> cases = {
      {Strategy::kStrictSpread, Placed({"a", "b", "c"})},  // avoids the survivor's node
      {Strategy::kPack, Placed({"a", "a", "a"})},          // joins the survivor
      {Strategy::kSpread, Placed({"a", "b", "c"})},
      {Strategy::kStrictPack, Placed({"a", "a", "a"})},    // the rest join the survivor
  };
  for (const Case& c : cases) {
    BundleRequest r = Bundles(c.strategy, {1, 1, 1});
    r.fixed = {{0, "a"}};
    BundleOutcome got = PlaceBundles(Index(nodes), r);
    EXPECT_EQ(got, c.expected) << StrategyName(c.strategy) << ": got " << Describe(got);
  }
}

TEST(PlaceBundlesTest, StrictPackReplacesAllWhenTheSurvivorsNodeIsFull) {
  BundleRequest r = Bundles(Strategy::kStrictPack, {1, 1, 1});
  r.fixed = {{0, "a"}};
  std::vector<NodeSnapshot> nodes = {CpuNode("a", 8, {}, 7), CpuNode("b", 8), CpuNode("c", 8)};
  BundleOutcome got = PlaceBundles(Index(nodes), r);
  EXPECT_EQ(got, Placed({"b", "b", "b"})) << Describe(got);
  r.fixed = {{0, "a"}, {1, "b"}};  // survivors on two nodes: not one node any more, all move
  got = PlaceBundles(Index(nodes), r);
  EXPECT_EQ(got, Placed({"b", "b", "b"})) << Describe(got);
}

TEST(PlaceBundlesTest, SurvivorsPinThePrimaryAndCountAgainstIdleCapacity) {
  // Two survivors on a and b; STRICT_SPREAD needs a third distinct node: none now, none ever.
  BundleRequest r = Bundles(Strategy::kStrictSpread, {1, 1, 1});
  r.fixed = {{0, "a"}, {1, "b"}};
  r.fallbacks.push_back({{Res({{"CPU", 1}})}, {}});  // not tried: survivors belong to the primary
  BundleOutcome got = PlaceBundles(Index({CpuNode("a", 8, {}, 1), CpuNode("b", 8, {}, 1)}), r);
  EXPECT_EQ(got, BundleOutcome(Infeasible{"STRICT_SPREAD 3 bundles: at most 2 of the 3 bundles fit on distinct nodes, "
                                          "even with every node idle"}))
      << Describe(got);
  // A survivor on a node the index lacks stays as given.
  r.fixed = {{0, "gone"}};
  got = PlaceBundles(Index({CpuNode("a", 8), CpuNode("b", 8)}), r);
  EXPECT_EQ(got, Placed({"gone", "a", "b"})) << Describe(got);
}

TEST(PlaceBundlesTest, TpuBundlesKeepWholeFreeSlices) {
  // t1 is a free single-host slice; t2's slice has a busy chip, so it is no longer whole.
  std::vector<NodeSnapshot> nodes = {TpuHost("t1"), TpuHost("t2"), CpuNode("c", 8)};
  nodes[1].available.Set("TPU", 3);
  for (Strategy s : {Strategy::kPack, Strategy::kSpread, Strategy::kStrictPack, Strategy::kStrictSpread}) {
    BundleRequest r = Bundles(s, {1});
    r.primary.bundles[0].Set("TPU", 2);
    BundleOutcome got = PlaceBundles(Index(nodes, {}, {{"t2", {3}}}), r);
    EXPECT_EQ(got, Placed({"t2"})) << StrategyName(s) << ": " << Describe(got);
  }
}

TEST(PlaceBundlesTest, SameInputSameOutputWhateverTheNodeOrder) {
  std::vector<NodeSnapshot> nodes;
  for (int i = 0; i < 30; ++i) nodes.push_back(CpuNode("n" + std::to_string(i), 8, {}, (i * 5) % 8));
  for (Strategy s : {Strategy::kPack, Strategy::kSpread, Strategy::kStrictPack, Strategy::kStrictSpread}) {
    BundleRequest r = Bundles(s, {2, 1, 3, 1});
    BundleOutcome first = PlaceBundles(Index(nodes), r);
    ASSERT_TRUE(std::holds_alternative<BundlePlacement>(first)) << Describe(first);
    for (unsigned seed = 1; seed <= 6; ++seed) {
      EXPECT_EQ(PlaceBundles(Index(testing::Shuffled(nodes, seed)), r), first) << StrategyName(s);
    }
  }
}

TEST(StrategyTest, NamesRoundTrip) {
  for (Strategy s : {Strategy::kPack, Strategy::kSpread, Strategy::kStrictPack, Strategy::kStrictSpread}) {
    auto parsed = ParseStrategy(StrategyName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(*ParseStrategy("strict_spread"), Strategy::kStrictSpread);
  absl::StatusOr<Strategy> bad = ParseStrategy("BEST");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "placement strategy \"BEST\" is not supported; valid: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD");
}

TEST(ValidateBundleRequestTest, Table) {
  auto with = [](auto edit) {
    BundleRequest r = Bundles(Strategy::kPack, {1, 1, 1});
    edit(r);
    return r;
  };
  struct Case {
    BundleRequest request;
    std::string error;
  };
  const std::vector<Case> cases = {
      {with([](BundleRequest&) {}), ""},
      {with([](BundleRequest& r) { r.primary.bundles[2].Set("TPU", 0.5); }),
       "bundle 2: TPU amount 0.5 is not a whole number of chips"},
      {with([](BundleRequest& r) { r.primary.bundles[1].Set("TPU", 3); }), ""},  // bundles take any whole count
      {with([](BundleRequest& r) { r.primary.bundles[1] = ResourceSet(); }),
       "bundle 1: has no positive resource amount; give at least one, e.g. {\"CPU\": 1}"},
      {with([](BundleRequest& r) { r.primary.bundles.clear(); }),
       "bundles is empty; a placement group needs at least one bundle"},
      {with([](BundleRequest& r) { r.primary.bundle_selectors = {LabelSelector(), LabelSelector()}; }),
       "bundle_label_selector has 2 selectors for 3 bundles; give none or one per bundle"},
      {with([](BundleRequest& r) { r.fallbacks.push_back({{Res({{"CPU", 1}})}, {LabelSelector(), LabelSelector()}}); }),
       "fallback 1: bundle_label_selector has 2 selectors for 1 bundle; give none or one per bundle"},
      {with([](BundleRequest& r) { r.fixed = {{3, "a"}}; }), "fixed bundle 3 is out of range; the primary has 3 bundles"},
      {with([](BundleRequest& r) { r.fixed = {{0, ""}}; }), "fixed bundle 0 has no node id"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateBundleRequest(c.request);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), c.error);
    }
  }
}

}  // namespace bundle_policy_test
}  // namespace torus::sched
