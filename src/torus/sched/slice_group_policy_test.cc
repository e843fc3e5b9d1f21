#include "torus/sched/slice_group_policy.h"

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "torus/sched/sched_test_util.h"

namespace torus::sched {
namespace slice_group_policy_test {

using testing::Append;
using testing::Find;
using testing::Index;
using testing::Res;
using testing::Sel;
using testing::SliceSpec;
using testing::TpuSlice;

Topology Topo(TpuGeneration gen, std::string_view text) {
  auto t = ParseTopology(gen, text);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Topology{};
}

SliceShapeRequest Shape(std::string_view topology = "4x4", int num_slices = 1,
                        TpuGeneration gen = TpuGeneration::kV6e) {
  SliceShapeRequest s;
  s.generation = gen;
  s.topology = Topo(gen, topology);
  s.num_slices = num_slices;
  return s;
}

SliceGroupRequest Group(std::string_view topology = "4x4", int num_slices = 1) {
  SliceGroupRequest r;
  r.primary = Shape(topology, num_slices);
  return r;
}

std::string Describe(const SliceGroupOutcome& o) {
  if (auto* p = std::get_if<SliceGroupPlacement>(&o)) {
    return "placed alt " + std::to_string(p->alternative) + ": " + absl::StrJoin(p->slice_names, ",");
  }
  if (auto* p = std::get_if<Pending>(&o)) return "pending: " + p->reason;
  return "infeasible: " + std::get<Infeasible>(o).reason;
}

// "<slice index> <slice> w<worker> <node> [chips] <resources>" per bundle.
std::vector<std::string> Layout(const SliceGroupOutcome& o) {
  std::vector<std::string> out;
  const auto* p = std::get_if<SliceGroupPlacement>(&o);
  if (p == nullptr) return {Describe(o)};
  for (const SliceBundle& b : p->bundles) {
    out.push_back(absl::StrCat(b.slice_index, " ", b.slice_name, " w", b.worker_id, " ", b.node_id, " [",
                               absl::StrJoin(b.chips, ","), "] ", b.resources.ToJson()));
  }
  return out;
}

std::vector<std::string> SliceNames(const SliceGroupOutcome& o) {
  const auto* p = std::get_if<SliceGroupPlacement>(&o);
  return p == nullptr ? std::vector<std::string>{Describe(o)} : p->slice_names;
}

std::vector<NodeSnapshot> Slices(std::initializer_list<std::string> names, const SliceSpec& spec = {}) {
  std::vector<NodeSnapshot> nodes;
  for (const std::string& name : names) Append(nodes, TpuSlice(name, spec));
  return nodes;
}

const SliceSpec kV6e8 = {.topology = "2x4", .pod_type = "v6e-8", .hosts = 1, .chips_per_host = 8};
const SliceSpec kV6e8TwoHosts = {.topology = "2x4", .pod_type = "v6e-8", .hosts = 2, .chips_per_host = 4};

TEST(PlaceSliceGroupTest, OneBundlePerHostByWorkerId) {
  SliceGroupOutcome got = PlaceSliceGroup(Index(Slices({"b", "a"})), Group());
  EXPECT_EQ(Layout(got), (std::vector<std::string>{
                             "0 a w0 a-w0 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}",
                             "0 a w1 a-w1 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}",
                             "0 a w2 a-w2 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}",
                             "0 a w3 a-w3 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}",
                         }));
  EXPECT_EQ(std::get<SliceGroupPlacement>(got).alternative, 0);
}

TEST(PlaceSliceGroupTest, PicksDistinctSlicesSliceMajor) {
  SliceGroupOutcome got = PlaceSliceGroup(Index(Slices({"c", "b", "a"})), Group("4x4", 2));
  EXPECT_EQ(SliceNames(got), (std::vector<std::string>{"a", "b"}));
  std::vector<std::string> layout = Layout(got);
  ASSERT_EQ(layout.size(), 8u);
  EXPECT_EQ(layout[3], "0 a w3 a-w3 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}");
  EXPECT_EQ(layout[4], "1 b w0 b-w0 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}");
}

TEST(PlaceSliceGroupTest, PerChipBundlesInAlignedBlocks) {
  SliceGroupRequest r = Group();
  r.unit = BundleUnit::kChip;
  r.resources_per_bundle = Res({{"TPU", 2}});
  std::vector<std::string> layout = Layout(PlaceSliceGroup(Index(Slices({"a"})), r));
  ASSERT_EQ(layout.size(), 8u);
  EXPECT_EQ(layout[0], "0 a w0 a-w0 [0,1] {\"CPU\": 1, \"TPU\": 2}");
  EXPECT_EQ(layout[1], "0 a w0 a-w0 [2,3] {\"CPU\": 1, \"TPU\": 2}");
  EXPECT_EQ(layout[2], "0 a w1 a-w1 [0,1] {\"CPU\": 1, \"TPU\": 2}");
  EXPECT_EQ(layout[7], "0 a w3 a-w3 [2,3] {\"CPU\": 1, \"TPU\": 2}");

  r.resources_per_bundle.reset();  // default {CPU: 1, TPU: 1}
  r.primary.num_slices = 2;
  layout = Layout(PlaceSliceGroup(Index(Slices({"a", "b"})), r));
  ASSERT_EQ(layout.size(), 32u);
  EXPECT_EQ(layout[0], "0 a w0 a-w0 [0] {\"CPU\": 1, \"TPU\": 1}");
  EXPECT_EQ(layout[3], "0 a w0 a-w0 [3] {\"CPU\": 1, \"TPU\": 1}");
  EXPECT_EQ(layout[4], "0 a w1 a-w1 [0] {\"CPU\": 1, \"TPU\": 1}");
  EXPECT_EQ(layout[31], "1 b w3 b-w3 [3] {\"CPU\": 1, \"TPU\": 1}");
}

TEST(PlaceSliceGroupTest, ExactReasons) {
  struct Case {
    std::string name;
    std::function<void(std::vector<NodeSnapshot>&, std::map<std::string, std::string>&,
                       std::map<std::string, std::vector<int>>&)> edit;
    SliceGroupRequest request;
    SliceGroupOutcome expected;
  };
  using Nodes = std::vector<NodeSnapshot>;
  using Holders = std::map<std::string, std::string>;
  using Busy = std::map<std::string, std::vector<int>>;
  SliceGroupRequest v5p = Group();
  v5p.primary = Shape("2x2x2", 1, TpuGeneration::kV5p);
  SliceGroupRequest pending_then_infeasible = Group("4x4", 2);
  pending_then_infeasible.fallbacks.push_back(Shape("2x2x2", 1, TpuGeneration::kV5p));
  SliceGroupRequest cpu_heavy = Group();
  cpu_heavy.unit = BundleUnit::kChip;
  cpu_heavy.resources_per_bundle = Res({{"CPU", 3}});

  const std::vector<Case> cases = {
      {"reserved and degraded",
       [](Nodes& n, Holders& h, Busy&) {
         h["a"] = "pg 7f3a";
         Find(n, "b-w2")->alive = false;
       },
       Group("4x4", 2),
       Pending{"TPU-V6E 4x4 x2: 1 of 2 slices available (a RESERVED by pg 7f3a; b DEGRADED: worker 2 dead (node "
               "b-w2))"}},
      {"a busy chip", [](Nodes&, Holders&, Busy& b) { b["b-w2"] = {1}; }, Group("4x4", 3),
       Pending{"TPU-V6E 4x4 x3: 2 of 3 slices available (b busy: chip 1 in use on worker 2 (node b-w2))"}},
      {"busy chips", [](Nodes&, Holders&, Busy& b) { b["a-w0"] = {0, 3}; }, Group("4x4", 3),
       Pending{"TPU-V6E 4x4 x3: 2 of 3 slices available (a busy: chips 0,3 in use on worker 0 (node a-w0))"}},
      {"incomplete",
       [](Nodes& n, Holders&, Busy&) { n.erase(n.begin() + 3); }, Group("4x4", 3),
       Pending{"TPU-V6E 4x4 x3: 2 of 3 slices available (a INCOMPLETE: worker 3 missing)"}},
      {"a host short of CPU",
       [](Nodes& n, Holders&, Busy&) { Find(n, "c-w1")->available = Res({{"CPU", 0.5}, {"TPU", 4}}); },
       Group("4x4", 3),
       Pending{"TPU-V6E 4x4 x3: 2 of 3 slices available (c busy: worker 1 (node c-w1) has {\"CPU\": 0.5, \"TPU\": "
               "4} free of the {\"CPU\": 1, \"TPU\": 4} each host needs)"}},
      {"per-chip bundles that outgrow a host", [](Nodes&, Holders&, Busy&) {}, cpu_heavy,
       Pending{"TPU-V6E 4x4 x1: 0 of 1 slices available (a busy: worker 0 (node a-w0) has {\"CPU\": 8, \"TPU\": 4} "
               "free of the {\"CPU\": 12, \"TPU\": 4} each host needs; b busy: worker 0 (node b-w0) has {\"CPU\": 8, "
               "\"TPU\": 4} free of the {\"CPU\": 12, \"TPU\": 4} each host needs; c busy: worker 0 (node c-w0) has "
               "{\"CPU\": 8, \"TPU\": 4} free of the {\"CPU\": 12, \"TPU\": 4} each host needs)"}},
      {"no slice of the shape", [](Nodes&, Holders&, Busy&) {}, v5p,
       Infeasible{"TPU-V5P 2x2x2 x1: infeasible: no slice of this shape"}},
      {"fewer slices than needed", [](Nodes&, Holders&, Busy&) {}, Group("4x4", 4),
       Infeasible{"TPU-V6E 4x4 x4: infeasible: only 3 slices of this shape"}},
      {"one pending alternative makes the whole pending",
       [](Nodes&, Holders& h, Busy&) { h["a"] = "pg 1"; h["b"] = "pg 2"; }, pending_then_infeasible,
       Pending{"TPU-V6E 4x4 x2: 1 of 2 slices available (a RESERVED by pg 1; b RESERVED by pg 2)\n"
               "TPU-V5P 2x2x2 x1: infeasible: no slice of this shape"}},
      {"reserved slices count as of the shape", [](Nodes&, Holders& h, Busy&) { h = {{"a", "g"}, {"b", "g"}, {"c", "g"}}; },
       Group("4x4", 3),
       Pending{"TPU-V6E 4x4 x3: 0 of 3 slices available (a RESERVED by g; b RESERVED by g; c RESERVED by g)"}},
  };
  for (const Case& c : cases) {
    Nodes nodes = Slices({"a", "b", "c"});
    Holders holders;
    Busy busy;
    c.edit(nodes, holders, busy);
    SliceGroupOutcome got = PlaceSliceGroup(Index(nodes, holders, busy), c.request);
    EXPECT_EQ(got, c.expected) << c.name << ": got " << Describe(got);
  }
}

TEST(PlaceSliceGroupTest, DetailsAreCappedAtEight) {
  std::vector<NodeSnapshot> nodes;
  std::map<std::string, std::string> holders;
  for (int i = 0; i < 11; ++i) {
    std::string name = "s" + std::string(i < 10 ? "0" : "") + std::to_string(i);
    Append(nodes, TpuSlice(name));
    holders[name] = "g";
  }
  SliceGroupOutcome got = PlaceSliceGroup(Index(nodes, holders), Group());
  EXPECT_EQ(got, SliceGroupOutcome(Pending{
                     "TPU-V6E 4x4 x1: 0 of 1 slices available (s00 RESERVED by g; s01 RESERVED by g; s02 RESERVED by "
                     "g; s03 RESERVED by g; s04 RESERVED by g; s05 RESERVED by g; s06 RESERVED by g; s07 RESERVED by "
                     "g; and 3 more)"}))
      << Describe(got);
}

TEST(PlaceSliceGroupTest, FallbacksInOrder) {
  std::vector<NodeSnapshot> nodes = Slices({"a", "b"});
  Append(nodes, Slices({"e1", "e2"}, kV6e8));
  SliceGroupRequest r = Group("4x4", 2);
  r.fallbacks = {Shape("8x8", 1), Shape("2x4", 2), Shape("2x4", 1)};
  SliceGroupOutcome got = PlaceSliceGroup(Index(nodes, {{"b", "pg 9"}}), r);
  ASSERT_TRUE(std::holds_alternative<SliceGroupPlacement>(got)) << Describe(got);
  EXPECT_EQ(std::get<SliceGroupPlacement>(got).alternative, 2);
  EXPECT_EQ(SliceNames(got), (std::vector<std::string>{"e1", "e2"}));
  EXPECT_EQ(Layout(got)[1], "1 e2 w0 e2-w0 [0,1,2,3,4,5,6,7] {\"CPU\": 1, \"TPU\": 8}");
}

TEST(PlaceSliceGroupTest, KeepsWholeSlicesFree) {
  // Prefer a slice whose hosts are partly used already (best fit) over an idle one.
  std::vector<NodeSnapshot> nodes = Slices({"a", "b", "c"});
  Find(nodes, "c-w3")->available = Res({{"CPU", 6}, {"TPU", 4}});
  EXPECT_EQ(SliceNames(PlaceSliceGroup(Index(nodes), Group())), (std::vector<std::string>{"c"}));

  // Take from the largest pool, keeping a rare pool whole for requests that select it.
  const Labels spot = {{std::string(kLabelMarketType), "spot"}};
  const Labels reserved = {{std::string(kLabelMarketType), "reserved"}};
  nodes = Slices({"a"}, {.labels = reserved});
  Append(nodes, Slices({"s1", "s2"}, {.labels = spot}));
  ClusterIndex index = Index(nodes);
  EXPECT_EQ(SliceNames(PlaceSliceGroup(index, Group())), (std::vector<std::string>{"s1"}));
  EXPECT_EQ(SliceNames(PlaceSliceGroup(index, Group("4x4", 2))), (std::vector<std::string>{"s1", "s2"}));
  SliceGroupRequest r = Group();
  r.primary.selector = Sel({{"ray.io/market-type", "reserved"}});
  EXPECT_EQ(SliceNames(PlaceSliceGroup(index, r)), (std::vector<std::string>{"a"}));
}

TEST(PlaceSliceGroupTest, SelectorMustHoldOnEveryHost) {
  std::vector<NodeSnapshot> nodes;
  // Ten slices, so that the label index narrows team=ml (7 hosts) below the free list.
  for (const char* name : {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}) Append(nodes, TpuSlice(name));
  for (const char* name : {"b", "e"}) {
    for (int w = 0; w < 4; ++w) Find(nodes, std::string(name) + "-w" + std::to_string(w))->labels["team"] = "ml";
  }
  Find(nodes, "b-w3")->labels["team"] = "web";
  SliceGroupRequest r = Group();
  r.primary.selector = Sel({{"team", "ml"}});
  EXPECT_EQ(SliceNames(PlaceSliceGroup(Index(nodes), r)), (std::vector<std::string>{"e"}));
  r.primary.num_slices = 2;
  SliceGroupOutcome got = PlaceSliceGroup(Index(nodes), r);
  EXPECT_EQ(got, SliceGroupOutcome(Infeasible{"TPU-V6E 4x4 x2 matching {\"team\": \"ml\"}: infeasible: only 1 slice of "
                                              "this shape matches the selector"}))
      << Describe(got);
  // A degraded slice of the selector still counts: pending, not infeasible.
  std::vector<NodeSnapshot> degraded = nodes;
  Find(degraded, "e-w2")->alive = false;
  r.primary.num_slices = 1;
  got = PlaceSliceGroup(Index(degraded), r);
  EXPECT_EQ(got, SliceGroupOutcome(Pending{"TPU-V6E 4x4 x1 matching {\"team\": \"ml\"}: 0 of 1 slices available (e "
                                           "DEGRADED: worker 2 dead (node e-w2))"}))
      << Describe(got);
  r.primary.num_slices = 2;
  r.primary.selector = Sel({{"team", "!ml"}});  // a negative selector scans the free list
  EXPECT_EQ(SliceNames(PlaceSliceGroup(Index(nodes), r)), (std::vector<std::string>{"a", "c"}));
}

TEST(PlaceSliceGroupTest, ChipsPerHostSettlesTwoByFour) {
  std::vector<NodeSnapshot> nodes = Slices({"e8"}, kV6e8);
  Append(nodes, Slices({"f4", "g4"}, kV6e8TwoHosts));
  ClusterIndex index = Index(nodes);
  // No chips_per_host: the variant with more free slices (4-chip hosts here) goes first.
  SliceGroupOutcome got = PlaceSliceGroup(index, Group("2x4"));
  EXPECT_EQ(Layout(got), (std::vector<std::string>{"0 f4 w0 f4-w0 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}",
                                                   "0 f4 w1 f4-w1 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}"}));
  // Never a mix: two slices of one variant.
  EXPECT_EQ(SliceNames(PlaceSliceGroup(index, Group("2x4", 2))), (std::vector<std::string>{"f4", "g4"}));
  SliceGroupRequest r = Group("2x4");
  r.primary.chips_per_host = 8;
  EXPECT_EQ(SliceNames(PlaceSliceGroup(index, r)), (std::vector<std::string>{"e8"}));
  r.primary.chips_per_host.reset();
  r.resources_per_bundle = Res({{"TPU", 8}});  // a host bundle of 8 chips
  EXPECT_EQ(SliceNames(PlaceSliceGroup(index, r)), (std::vector<std::string>{"e8"}));
  // The 4-chip variant is used up: the 8-chip one serves.
  got = PlaceSliceGroup(Index(nodes, {{"f4", "g"}, {"g4", "g"}}), Group("2x4"));
  EXPECT_EQ(SliceNames(got), (std::vector<std::string>{"e8"}));
  r = Group("2x4", 2);
  r.primary.chips_per_host = 4;
  got = PlaceSliceGroup(Index(nodes, {{"f4", "g"}}), r);
  EXPECT_EQ(got, SliceGroupOutcome(Pending{"TPU-V6E 2x4 x2 (4 chips per host): 1 of 2 slices available (f4 RESERVED "
                                           "by g)"}))
      << Describe(got);
}

TEST(PlaceSliceGroupTest, KeepSlicesComeFirstAndCount) {
  std::vector<NodeSnapshot> nodes = Slices({"a", "c", "d"});
  Find(nodes, "d-w1")->alive = false;
  SliceGroupRequest r = Group("4x4", 2);
  r.keep_slices = {"c"};
  // c is held by this very group; d, its other slice, is degraded; a replaces d.
  SliceGroupOutcome got = PlaceSliceGroup(Index(nodes, {{"c", "pg 1"}, {"d", "pg 1"}}), r);
  EXPECT_EQ(SliceNames(got), (std::vector<std::string>{"c", "a"}));
  EXPECT_EQ(Layout(got)[0], "0 c w0 c-w0 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}");
  EXPECT_EQ(Layout(got)[4], "1 a w0 a-w0 [0,1,2,3] {\"CPU\": 1, \"TPU\": 4}");

  // No replacement: pending, naming the kept slice.
  got = PlaceSliceGroup(Index(nodes, {{"a", "pg 2"}, {"c", "pg 1"}, {"d", "pg 1"}}), r);
  EXPECT_EQ(got, SliceGroupOutcome(Pending{"TPU-V6E 4x4 x2: 1 of 2 slices available (keeping c; a RESERVED by pg 2; "
                                           "d DEGRADED: worker 1 dead (node d-w1))"}))
      << Describe(got);

  // A fallback of another shape chooses afresh; the caller releases the kept slice.
  Append(nodes, Slices({"e8"}, kV6e8));
  r.fallbacks = {Shape("2x4", 1)};
  got = PlaceSliceGroup(Index(nodes, {{"a", "pg 2"}, {"c", "pg 1"}, {"d", "pg 1"}}), r);
  EXPECT_EQ(SliceNames(got), (std::vector<std::string>{"e8"}));
  EXPECT_EQ(std::get<SliceGroupPlacement>(got).alternative, 1);
}

TEST(PlaceSliceGroupTest, SameInputSameOutputWhateverTheNodeOrder) {
  std::vector<NodeSnapshot> nodes;
  for (int i = 0; i < 12; ++i) {
    Append(nodes, TpuSlice("s" + std::to_string(i),
                           {.labels = {{std::string(kLabelAvailabilityZone), i % 3 ? "z1" : "z2"}}}));
  }
  Find(nodes, "s4-w2")->alive = false;
  Find(nodes, "s7-w0")->available = Res({{"CPU", 7}, {"TPU", 4}});
  std::map<std::string, std::string> holders = {{"s1", "g"}};
  SliceGroupRequest r = Group("4x4", 3);
  r.unit = BundleUnit::kChip;
  SliceGroupOutcome first = PlaceSliceGroup(Index(nodes, holders), r);
  ASSERT_TRUE(std::holds_alternative<SliceGroupPlacement>(first)) << Describe(first);
  EXPECT_EQ(SliceNames(first), (std::vector<std::string>{"s7", "s10", "s11"}));
  for (unsigned seed = 1; seed <= 6; ++seed) {
    EXPECT_EQ(PlaceSliceGroup(Index(testing::Shuffled(nodes, seed), holders), r), first);
  }
}

TEST(ValidateSliceGroupRequestTest, Table) {
  auto with = [](auto edit) {
    SliceGroupRequest r = Group();
    edit(r);
    return r;
  };
  struct Case {
    SliceGroupRequest request;
    std::string error;
  };
  const std::vector<Case> cases = {
      {with([](SliceGroupRequest&) {}), ""},
      {with([](SliceGroupRequest& r) { r.primary.num_slices = 0; }),
       "num_slices 0 is not valid; ask for at least 1 slice"},
      {with([](SliceGroupRequest& r) { r.primary.topology = Topology{{4, 5}}; }),
       "topology \"4x5\" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16"},
      {with([](SliceGroupRequest& r) { r.primary.chips_per_host = 8; }),
       "TPU-V6E 4x4 on 8-chip hosts would span 2 hosts; multi-host slices use 4-chip hosts"},
      {with([](SliceGroupRequest& r) { r.fallbacks = {Shape("2x4"), Shape("2x4")}; r.fallbacks[1].num_slices = -1; }),
       "fallback 2: num_slices -1 is not valid; ask for at least 1 slice"},
      {with([](SliceGroupRequest& r) { r.resources_per_bundle = Res({{"TPU", 2}}); }),
       "resources_per_bundle: TPU 2 does not match the 4 chips per host of TPU-V6E 4x4; a host bundle holds every "
       "chip of its host; use bundle_unit chip for smaller bundles"},
      {with([](SliceGroupRequest& r) { r.resources_per_bundle = Res({{"TPU", 0.5}}); }),
       "resources_per_bundle: TPU amount 0.5 is not a whole number of chips"},
      {with([](SliceGroupRequest& r) { r.unit = BundleUnit::kChip; r.resources_per_bundle = Res({{"TPU", 2}}); }), ""},
      {with([](SliceGroupRequest& r) { r.unit = BundleUnit::kChip; r.resources_per_bundle = Res({{"TPU", 3}}); }),
       "resources_per_bundle: TPU 3 per chip bundle is not supported; use 1, 2, 4 or 8 chips dividing the 4 chips "
       "per host of TPU-V6E 4x4"},
      {with([](SliceGroupRequest& r) {
         r.primary = Shape("2x4");
         r.unit = BundleUnit::kChip;
         r.resources_per_bundle = Res({{"TPU", 8}});
       }),
       ""},  // 8-chip hosts admit it
      {with([](SliceGroupRequest& r) { r.keep_slices = {"a", "a"}; }), "keep_slices: slice \"a\" is named twice"},
      {with([](SliceGroupRequest& r) { r.keep_slices = {""}; }), "keep_slices: a slice name is empty"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateSliceGroupRequest(c.request);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), c.error);
    }
  }
  // An invalid request is an Infeasible outcome, never a crash.
  EXPECT_EQ(PlaceSliceGroup(Index(Slices({"a"})), cases[1].request),
            SliceGroupOutcome(Infeasible{"num_slices 0 is not valid; ask for at least 1 slice"}));
}

TEST(SliceShapeRequestTest, ToString) {
  EXPECT_EQ(Shape("4x4", 2).ToString(), "TPU-V6E 4x4 x2");
  EXPECT_EQ(Shape("2x2x2", 1, TpuGeneration::kV5p).ToString(), "TPU-V5P 2x2x2 x1");
  SliceShapeRequest s = Shape("2x4");
  s.chips_per_host = 4;
  EXPECT_EQ(s.ToString(), "TPU-V6E 2x4 x1 (4 chips per host)");
}

}  // namespace slice_group_policy_test
}  // namespace torus::sched
