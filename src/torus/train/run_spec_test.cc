#include "torus/train/run_spec.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::train {
namespace run_spec_test {

using ::testing::ElementsAre;

ResourceSet Res(std::initializer_list<std::pair<const char*, double>> amounts) {
  ResourceSet r;
  for (const auto& [name, amount] : amounts) r.Set(name, amount);
  return r;
}

RunSpec TpuSpec(std::string topology = "4x4", int num_slices = 2) {
  RunSpec spec;
  spec.scaling.use_tpu = true;
  spec.scaling.accelerator_type = "TPU-V6E";
  spec.scaling.topology = std::move(topology);
  spec.scaling.num_slices = num_slices;
  spec.entrypoint = {"python3", "train.py"};
  return spec;
}

RunSpec CpuSpec(int num_workers = 3) {
  RunSpec spec;
  spec.scaling.num_workers = num_workers;
  spec.entrypoint = {"python3", "train.py"};
  return spec;
}

// "<unit> <resources per bundle> workers=<n> per_host=<k>; <alternative>: cph=<settled or -> workers=<n> ..."
std::string Summary(const GangPlan& plan) {
  const sched::SliceGroupRequest& r = plan.slice_request;
  std::string out = absl::StrCat(r.unit == sched::BundleUnit::kHost ? "host " : "chip ",
                                 r.resources_per_bundle ? r.resources_per_bundle->ToJson() : "-",
                                 " workers=", plan.num_workers, " per_host=", plan.workers_per_host);
  std::vector<const sched::SliceShapeRequest*> alts = {&r.primary};
  for (const auto& f : r.fallbacks) alts.push_back(&f);
  for (size_t i = 0; i < alts.size(); ++i) {
    absl::StrAppend(&out, "; ", alts[i]->ToString(), " selector=", alts[i]->selector.ToString(),
                    " workers=", WorkersForAlternative(plan, static_cast<int>(i)));
  }
  return out;
}

TEST(PlanRunTest, TpuPlans) {
  struct Case {
    std::string name;
    std::function<void(RunSpec&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"whole hosts, derived count", [](RunSpec&) {},
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8"},
      {"count given and right", [](RunSpec& s) { s.scaling.num_workers = 8; },
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8"},
      {"lower-case type", [](RunSpec& s) { s.scaling.accelerator_type = "tpu-v6e"; },
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8"},
      {"1 chip per worker", [](RunSpec& s) { s.scaling.resources_per_worker = Res({{"TPU", 1}}); },
       "chip {\"CPU\": 1, \"TPU\": 1} workers=32 per_host=4; TPU-V6E 4x4 x2 selector={} workers=32"},
      {"2 chips per worker", [](RunSpec& s) { s.scaling.resources_per_worker = Res({{"CPU", 2}, {"TPU", 2}}); },
       "chip {\"CPU\": 2, \"TPU\": 2} workers=16 per_host=2; TPU-V6E 4x4 x2 selector={} workers=16"},
      {"TPU = chips per host is a whole host",
       [](RunSpec& s) { s.scaling.resources_per_worker = Res({{"CPU", 8}, {"TPU", 4}, {"memory", 1e9}}); },
       "host {\"CPU\": 8, \"memory\": 1000000000} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8"},
      {"2x4 defaults to one 8-chip host",
       [](RunSpec& s) {
         s.scaling.topology = "2x4";
         s.scaling.num_slices = 1;
       },
       "host {\"CPU\": 1} workers=1 per_host=1; TPU-V6E 2x4 x1 (8 chips per host) selector={} workers=1"},
      {"2x4 on 4-chip hosts",
       [](RunSpec& s) {
         s.scaling.topology = "2x4";
         s.scaling.num_slices = 1;
         s.scaling.chips_per_host = 4;
       },
       "host {\"CPU\": 1} workers=2 per_host=1; TPU-V6E 2x4 x1 (4 chips per host) selector={} workers=2"},
      {"half of an 8-chip host",
       [](RunSpec& s) {
         s.scaling.topology = "2x4";
         s.scaling.num_slices = 1;
         s.scaling.resources_per_worker = Res({{"TPU", 4}});
       },
       "chip {\"CPU\": 1, \"TPU\": 4} workers=2 per_host=2; TPU-V6E 2x4 x1 (8 chips per host) selector={} workers=2"},
      {"chips_per_host named where only one fits",
       [](RunSpec& s) { s.scaling.chips_per_host = 4; },
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 (4 chips per host) selector={} workers=8"},
      {"v4 2x2x2",
       [](RunSpec& s) {
         s.scaling.accelerator_type = "TPU-V4";
         s.scaling.topology = "2x2x2";
         s.scaling.num_slices = 1;
       },
       "host {\"CPU\": 1} workers=2 per_host=1; TPU-V4 2x2x2 x1 selector={} workers=2"},
      {"TPU7x 2x2x1 per chip",
       [](RunSpec& s) {
         s.scaling.accelerator_type = "TPU-V7X";
         s.scaling.topology = "2x2x1";
         s.scaling.num_slices = 3;
         s.scaling.resources_per_worker = Res({{"TPU", 1}});
       },
       "chip {\"CPU\": 1, \"TPU\": 1} workers=12 per_host=4; TPU-V7X 2x2x1 x3 selector={} workers=12"},
      {"fallbacks bring their own count",
       [](RunSpec& s) {
         s.scaling.fallbacks = {{"TPU-V5LITEPOD", "2x4", 0, std::nullopt}, {"TPU-V6E", "4x4", 1, std::nullopt},
                                {"TPU-V6E", "2x4", 1, 4}};
       },
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8; TPU-V5LITEPOD 2x4 x2 (8 chips "
       "per host) selector={} workers=2; TPU-V6E 4x4 x1 selector={} workers=4; TPU-V6E 2x4 x1 (4 chips per host) "
       "selector={} workers=2"},
      {"per-chip workers with a fallback of 8-chip hosts",
       [](RunSpec& s) {
         s.scaling.resources_per_worker = Res({{"TPU", 1}});
         s.scaling.fallbacks = {{"TPU-V5LITEPOD", "2x4", 1, std::nullopt}};
       },
       "chip {\"CPU\": 1, \"TPU\": 1} workers=32 per_host=4; TPU-V6E 4x4 x2 selector={} workers=32; "
       "TPU-V5LITEPOD 2x4 x1 (8 chips per host) selector={} workers=8"},
      {"4 chips: whole 4-chip hosts, half 8-chip hosts",
       [](RunSpec& s) {
         s.scaling.resources_per_worker = Res({{"TPU", 4}});
         s.scaling.fallbacks = {{"TPU-V6E", "2x4", 0, std::nullopt}};
       },
       "chip {\"CPU\": 1, \"TPU\": 4} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8; "
       "TPU-V6E 2x4 x2 (8 chips per host) selector={} workers=4"},
      {"selector on every alternative",
       [](RunSpec& s) {
         s.scaling.label_selector = {{"ray.io/market-type", "spot"}};
         s.scaling.fallbacks = {{"TPU-V6E", "4x4", 1, std::nullopt}};
       },
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={\"torus.io/market-type\": \"spot\"} "
       "workers=8; TPU-V6E 4x4 x1 selector={\"torus.io/market-type\": \"spot\"} workers=4"},
      {"placement_strategy PACK in any case is accepted", [](RunSpec& s) { s.scaling.placement_strategy = "pack"; },
       "host {\"CPU\": 1} workers=8 per_host=1; TPU-V6E 4x4 x2 selector={} workers=8"},
  };
  for (const Case& c : cases) {
    RunSpec spec = TpuSpec();
    c.edit(spec);
    absl::StatusOr<GangPlan> plan = PlanRun(spec);
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status();
    EXPECT_TRUE(plan->tpu) << c.name;
    EXPECT_EQ(Summary(*plan), c.want) << c.name;
    EXPECT_TRUE(sched::ValidateSliceGroupRequest(plan->slice_request).ok()) << c.name;
  }
}

TEST(PlanRunTest, BundlePlans) {
  struct Case {
    std::string name;
    std::function<void(RunSpec&)> edit;
    sched::Strategy strategy;
    std::string per_bundle;
  };
  const std::vector<Case> cases = {
      {"CPU default", [](RunSpec&) {}, sched::Strategy::kPack, "{\"CPU\": 1}"},
      {"GPU default", [](RunSpec& s) { s.scaling.use_gpu = true; }, sched::Strategy::kPack,
       "{\"CPU\": 1, \"GPU\": 1}"},
      {"GPU added to given resources",
       [](RunSpec& s) {
         s.scaling.use_gpu = true;
         s.scaling.resources_per_worker = Res({{"CPU", 4}});
       },
       sched::Strategy::kPack, "{\"CPU\": 4, \"GPU\": 1}"},
      {"fractional GPU kept",
       [](RunSpec& s) {
         s.scaling.use_gpu = true;
         s.scaling.resources_per_worker = Res({{"GPU", 0.5}});
       },
       sched::Strategy::kPack, "{\"GPU\": 0.5}"},
      {"given resources as they are", [](RunSpec& s) { s.scaling.resources_per_worker = Res({{"memory", 1e9}}); },
       sched::Strategy::kPack, "{\"memory\": 1000000000}"},
      {"strategy", [](RunSpec& s) { s.scaling.placement_strategy = "strict_spread"; }, sched::Strategy::kStrictSpread,
       "{\"CPU\": 1}"},
  };
  for (const Case& c : cases) {
    RunSpec spec = CpuSpec(3);
    c.edit(spec);
    absl::StatusOr<GangPlan> plan = PlanRun(spec);
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status();
    EXPECT_FALSE(plan->tpu) << c.name;
    EXPECT_EQ(plan->num_workers, 3) << c.name;
    EXPECT_EQ(WorkersForAlternative(*plan, 0), 3) << c.name;
    EXPECT_EQ(WorkersForAlternative(*plan, 1), 0) << c.name;
    EXPECT_EQ(plan->bundle_request.strategy, c.strategy) << c.name;
    ASSERT_EQ(plan->bundle_request.primary.bundles.size(), 3u) << c.name;
    for (const ResourceSet& b : plan->bundle_request.primary.bundles) EXPECT_EQ(b.ToJson(), c.per_bundle) << c.name;
    EXPECT_TRUE(plan->bundle_request.primary.bundle_selectors.empty()) << c.name;
    EXPECT_TRUE(plan->bundle_request.fallbacks.empty()) << c.name;
  }
}

TEST(PlanRunTest, BundleSelectorOnEveryWorker) {
  RunSpec spec = CpuSpec(2);
  spec.scaling.label_selector = {{"team", "!in(a,b)"}};
  absl::StatusOr<GangPlan> plan = PlanRun(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->bundle_request.primary.bundle_selectors.size(), 2u);
  for (const LabelSelector& s : plan->bundle_request.primary.bundle_selectors) {
    EXPECT_EQ(s.ToString(), "{\"team\": \"!in(a,b)\"}");
  }
}

TEST(PlanRunTest, AcceptsRunConfigEdges) {
  RunSpec spec = CpuSpec();
  spec.run = RunConfig{"my-run_1.0", "/data/runs", -1, 1};
  spec.env = {{"A", ""}, {"B", "x=y"}};
  EXPECT_TRUE(PlanRun(spec).ok());
  spec.run.name = std::string(64, 'a');
  EXPECT_TRUE(PlanRun(spec).ok());
}

TEST(PlanRunTest, Errors) {
  struct Case {
    std::function<RunSpec()> spec;
    std::string want;
  };
  auto tpu = [](std::function<void(RunSpec&)> edit) {
    return [edit] {
      RunSpec s = TpuSpec();
      edit(s);
      return s;
    };
  };
  auto cpu = [](std::function<void(RunSpec&)> edit) {
    return [edit] {
      RunSpec s = CpuSpec();
      edit(s);
      return s;
    };
  };
  const std::vector<Case> cases = {
      // semantics §8
      {tpu([](RunSpec& s) { s.scaling.use_gpu = true; }), "use_tpu and use_gpu cannot both be set"},
      {tpu([](RunSpec& s) { s.scaling.topology.clear(); }), "use_tpu requires accelerator_type and topology"},
      {tpu([](RunSpec& s) { s.scaling.accelerator_type.clear(); }), "use_tpu requires accelerator_type and topology"},
      {tpu([](RunSpec& s) { s.scaling.num_workers = 6; }),
       "num_workers=6 does not match TPU-V6E 4x4 x2 with 4 chips per worker; expected 8"},
      {tpu([](RunSpec& s) {
         s.scaling.num_workers = 16;
         s.scaling.resources_per_worker = Res({{"TPU", 1}});
       }),
       "num_workers=16 does not match TPU-V6E 4x4 x2 with 1 chip per worker; expected 32"},
      {tpu([](RunSpec& s) { s.scaling.num_workers = 0; }),
       "num_workers=0 does not match TPU-V6E 4x4 x2 with 4 chips per worker; expected 8"},
      // semantics §7: TPU per worker
      {tpu([](RunSpec& s) { s.scaling.resources_per_worker = Res({{"TPU", 3}}); }),
       "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"},
      {tpu([](RunSpec& s) { s.scaling.resources_per_worker = Res({{"TPU", 0.5}}); }),
       "TPU request of 0.5 chips is not supported; TPU is counted in whole chips; use 1, 2, 4 or 8 chips, or a "
       "whole host"},
      {tpu([](RunSpec& s) { s.scaling.resources_per_worker = Res({{"TPU", 8}}); }),
       "TPU request of 8 chips is not supported; a host has at most 4 chips; use a slice group"},
      {tpu([](RunSpec& s) {
         s.scaling.topology = "2x4";
         s.scaling.resources_per_worker = Res({{"TPU", 16}});
       }),
       "TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice group"},
      {tpu([](RunSpec& s) {
         s.scaling.topology = "2x4";
         s.scaling.resources_per_worker = Res({{"TPU", 8}});
         s.scaling.fallbacks = {{"TPU-V6E", "4x4", 0, std::nullopt}};
       }),
       "fallback 1: TPU request of 8 chips is not supported; a host has at most 4 chips; use a slice group"},
      // shapes
      {tpu([](RunSpec& s) { s.scaling.topology = "4x5"; }),
       "topology \"4x5\" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16"},
      {tpu([](RunSpec& s) { s.scaling.accelerator_type = "TPU-V9"; }),
       "accelerator type \"TPU-V9\" is not supported; valid: TPU-V4, TPU-V5LITEPOD, TPU-V5P, TPU-V6E, TPU-V7X"},
      {tpu([](RunSpec& s) { s.scaling.chips_per_host = 2; }),
       "chips per host 2 is not valid for TPU-V6E; valid: 1, 4, 8"},
      {tpu([](RunSpec& s) { s.scaling.chips_per_host = 8; }),
       "TPU-V6E 4x4 on 8-chip hosts would span 2 hosts; multi-host slices use 4-chip hosts"},
      {tpu([](RunSpec& s) { s.scaling.num_slices = 0; }), "num_slices=0 is not valid; ask for at least 1 slice"},
      {tpu([](RunSpec& s) { s.scaling.num_slices = 2000000000; }),
       "TPU-V6E 4x4 x2000000000 with 4 chips per worker is 8000000000 workers; a run has at most 100000"},
      {tpu([](RunSpec& s) {
         s.scaling.resources_per_worker = Res({{"TPU", 1}});
         s.scaling.fallbacks = {{"TPU-V5P", "16x16x24", 20, std::nullopt}};
       }),
       "fallback 1: TPU-V5P 16x16x24 x20 with 1 chip per worker is 122880 workers; a run has at most 100000"},
      {tpu([](RunSpec& s) { s.scaling.fallbacks = {{"TPU-V6E", "", 1, std::nullopt}}; }),
       "fallback 1: accelerator_type and topology are required"},
      {tpu([](RunSpec& s) {
         s.scaling.fallbacks = {{"TPU-V6E", "4x4", 1, std::nullopt}, {"TPU-V6E", "3x3", 1, std::nullopt}};
       }),
       "fallback 2: topology \"3x3\" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16"},
      {tpu([](RunSpec& s) { s.scaling.fallbacks = {{"TPU-V6E", "4x4", -1, std::nullopt}}; }),
       "fallback 1: num_slices=-1 is not valid; ask for at least 1 slice, or 0 for as many as the primary"},
      {tpu([](RunSpec& s) { s.scaling.fallbacks = {{"TPU-V4", "2x2x2", 1, 8}}; }),
       "fallback 1: chips per host 8 is not valid for TPU-V4; valid: 4"},
      // TPU run, other fields
      {tpu([](RunSpec& s) { s.scaling.resources_per_worker = Res({{"GPU", 1}}); }),
       "resources_per_worker: GPU cannot be combined with use_tpu"},
      {tpu([](RunSpec& s) { s.scaling.placement_strategy = "SPREAD"; }),
       "placement_strategy \"SPREAD\" applies only without use_tpu; a TPU run reserves whole slices"},
      {tpu([](RunSpec& s) { s.scaling.label_selector = {{"team", "a,b"}}; }),
       "label selector for \"team\": position 2: more than one positive expression (a value or in(...)) on one "
       "key; write one in(...)"},
      // non-TPU runs
      {cpu([](RunSpec& s) { s.scaling.num_workers.reset(); }), "num_workers is required without use_tpu"},
      {cpu([](RunSpec& s) { s.scaling.num_workers = 0; }), "num_workers=0 is not valid; use 1 or more"},
      {cpu([](RunSpec& s) { s.scaling.num_workers = 100001; }),
       "num_workers=100001 is too many; a run has at most 100000"},
      {cpu([](RunSpec& s) { s.scaling.accelerator_type = "H100"; }),
       "accelerator_type requires use_tpu; to pick a GPU type, use label_selector "
       "{\"torus.io/accelerator-type\": \"H100\"}"},
      {cpu([](RunSpec& s) { s.scaling.topology = "4x4"; }), "topology requires use_tpu"},
      {cpu([](RunSpec& s) { s.scaling.num_slices = 2; }), "num_slices requires use_tpu"},
      {cpu([](RunSpec& s) { s.scaling.chips_per_host = 4; }), "chips_per_host requires use_tpu"},
      {cpu([](RunSpec& s) { s.scaling.fallbacks = {{"TPU-V6E", "4x4", 1, std::nullopt}}; }),
       "fallbacks require use_tpu"},
      {cpu([](RunSpec& s) { s.scaling.resources_per_worker = Res({{"TPU", 4}}); }),
       "resources_per_worker asks for TPU; TPU runs set use_tpu, accelerator_type and topology"},
      {cpu([](RunSpec& s) { s.scaling.resources_per_worker = Res({{"GPU", 1}}); }),
       "resources_per_worker asks for GPU; set use_gpu, or remove GPU from resources_per_worker"},
      {cpu([](RunSpec& s) { s.scaling.resources_per_worker = ResourceSet(); }),
       "resources_per_worker is empty; give at least one positive amount, e.g. {\"CPU\": 1}"},
      {cpu([](RunSpec& s) { s.scaling.placement_strategy = "BOGUS"; }),
       "placement strategy \"BOGUS\" is not supported; valid: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"},
      // command
      {cpu([](RunSpec& s) { s.entrypoint.clear(); }),
       "entrypoint is empty; give the program and its arguments, or a shell command"},
      {cpu([](RunSpec& s) { s.entrypoint = {"", "x"}; }), "entrypoint[0] is empty; it names the program to run"},
      {cpu([](RunSpec& s) { s.env = {{"A=B", "1"}}; }),
       "env: variable name \"A=B\" is not valid; a name is not empty and has no '='"},
      {cpu([](RunSpec& s) { s.env = {{"", "1"}}; }),
       "env: variable name \"\" is not valid; a name is not empty and has no '='"},
      // run config
      {cpu([](RunSpec& s) { s.run.name = "Train Run"; }),
       "name \"Train Run\" is not valid; use 1-64 characters of a-z, 0-9, '-', '_', '.', starting with a letter or "
       "digit"},
      {cpu([](RunSpec& s) { s.run.name = ".."; }),
       "name \"..\" is not valid; use 1-64 characters of a-z, 0-9, '-', '_', '.', starting with a letter or digit"},
      {cpu([](RunSpec& s) { s.run.name = std::string(65, 'a'); }),
       absl::StrCat("name \"", std::string(65, 'a'),
                    "\" is not valid; use 1-64 characters of a-z, 0-9, '-', '_', '.', starting with a letter or ",
                    "digit")},
      {cpu([](RunSpec& s) { s.run.storage_path = "runs"; }), "storage_path \"runs\" is not an absolute path"},
      {cpu([](RunSpec& s) { s.run.max_failures = -2; }),
       "max_failures=-2 is not valid; use -1 (unlimited), 0 (no restart) or more"},
      {cpu([](RunSpec& s) { s.run.checkpoints_to_keep = 0; }),
       "checkpoints_to_keep=0 is not valid; keep at least 1 (unset keeps all)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    absl::StatusOr<GangPlan> plan = PlanRun(cases[i].spec());
    ASSERT_FALSE(plan.ok()) << "case " << i << ": " << cases[i].want;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << "case " << i;
    EXPECT_EQ(std::string(plan.status().message()), cases[i].want) << "case " << i;
  }
}

TEST(DefaultRunNameTest, FromEntrypoint) {
  struct Case {
    std::vector<std::string> entrypoint;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{"python3", "/src/train.py", "--lr=1"}, "train"},
      {{"python3", "-u", "Fine_Tune.py"}, "fine_tune"},
      {{"python3", "-m", "pkg.Fit"}, "pkg.fit"},
      {{"/usr/local/bin/torchrun", "--nproc=4"}, "torchrun"},
      {{"/bin/sh", "-c", "cd /src && python3 pretrain.py --steps 10"}, "pretrain"},
      {{"bash", "-c", "./run.sh"}, "run"},
      {{"./My Job!"}, "my-job-"},
      {{"__main__"}, "main__"},
      {{std::string(80, 'x')}, std::string(64, 'x')},
      {{"/"}, "run"},
      {{}, "run"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DefaultRunName(c.entrypoint), c.want) << absl::StrJoin(c.entrypoint, " ");
  }
}

TEST(ApplyRunDefaultsTest, FillsOnlyWhatIsEmpty) {
  RunSpec spec = CpuSpec();
  RunSpec filled = ApplyRunDefaults(spec);
  EXPECT_EQ(filled.run.name, "train");
  EXPECT_EQ(filled.run.storage_path, "/tmp/torus/runs");
  spec.run.name = "mine";
  spec.run.storage_path = "/data";
  filled = ApplyRunDefaults(spec);
  EXPECT_EQ(filled.run.name, "mine");
  EXPECT_EQ(filled.run.storage_path, "/data");
  EXPECT_TRUE(PlanRun(filled).ok());
}

TEST(RunSpecJsonTest, ParsesEveryField) {
  const std::string body = R"({
    "scaling_config": {
      "num_workers": 32, "use_tpu": true, "use_gpu": false, "accelerator_type": "TPU-V6E", "topology": "4x4",
      "num_slices": 2, "chips_per_host": 4, "resources_per_worker": {"CPU": 2, "TPU": 1, "memory": 0.5},
      "placement_strategy": "PACK", "label_selector": {"torus.io/market-type": "spot"},
      "fallbacks": [{"accelerator_type": "TPU-V5LITEPOD", "topology": "2x4"},
                    {"accelerator_type": "TPU-V6E", "topology": "2x4", "num_slices": 4, "chips_per_host": 4}]
    },
    "run_config": {"name": "llm", "storage_path": "/data/runs", "max_failures": -1, "checkpoints_to_keep": 3},
    "entrypoint": ["python3", "train.py", "--steps", "100"],
    "env": {"A": "1", "B": ""},
    "working_dir": "/src"
  })";
  RunSpec want;
  want.scaling.num_workers = 32;
  want.scaling.use_tpu = true;
  want.scaling.accelerator_type = "TPU-V6E";
  want.scaling.topology = "4x4";
  want.scaling.num_slices = 2;
  want.scaling.chips_per_host = 4;
  want.scaling.resources_per_worker = Res({{"CPU", 2}, {"TPU", 1}, {"memory", 0.5}});
  want.scaling.label_selector = {{"torus.io/market-type", "spot"}};
  want.scaling.fallbacks = {{"TPU-V5LITEPOD", "2x4", 0, std::nullopt}, {"TPU-V6E", "2x4", 4, 4}};
  want.run = RunConfig{"llm", "/data/runs", -1, 3};
  want.entrypoint = {"python3", "train.py", "--steps", "100"};
  want.env = {{"A", "1"}, {"B", ""}};
  want.working_dir = "/src";
  absl::StatusOr<RunSpec> got = RunSpecFromJson(body);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want) << RunSpecToJson(*got);
  EXPECT_TRUE(PlanRun(*got).ok()) << PlanRun(*got).status();
}

TEST(RunSpecJsonTest, MinimalBodyAndNulls) {
  absl::StatusOr<RunSpec> got = RunSpecFromJson(
      R"({"scaling_config": {"num_workers": null, "chips_per_host": null, "resources_per_worker": null},
          "run_config": {"checkpoints_to_keep": null}, "entrypoint": "python3 train.py && echo done"})");
  ASSERT_TRUE(got.ok()) << got.status();
  RunSpec want;
  want.entrypoint = {"/bin/sh", "-c", "python3 train.py && echo done"};
  EXPECT_EQ(*got, want);
  EXPECT_EQ(RunSpecFromJson("{}").value(), RunSpec());
}

TEST(RunSpecJsonTest, RoundTrips) {
  RunSpec spec = TpuSpec();
  spec.scaling.num_workers = 16;
  spec.scaling.resources_per_worker = Res({{"CPU", 0.25}, {"TPU", 2}, {"memory", 17179869184}});
  spec.scaling.label_selector = {{"team", "!in(a,b)"}};
  spec.scaling.fallbacks = {{"TPU-V6E", "2x4", 0, 4}};
  spec.run = RunConfig{"run-1", "/r", 3, 2};
  spec.env = {{"X", "\"quoted\" \xc3\xa9"}};
  spec.working_dir = "/w";
  absl::StatusOr<RunSpec> back = RunSpecFromJson(RunSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec);
  EXPECT_EQ(RunSpecFromJson(RunSpecToJson(RunSpec())).value(), RunSpec());
}

TEST(RunSpecJsonTest, WritesEveryField) {
  RunSpec spec = CpuSpec(2);
  spec.scaling.resources_per_worker = Res({{"CPU", 1.5}});
  EXPECT_EQ(RunSpecToJson(spec),
            "{\"entrypoint\":[\"python3\",\"train.py\"],\"env\":{},\"run_config\":{\"max_failures\":0,\"name\":\"\","
            "\"storage_path\":\"\"},\"scaling_config\":{\"accelerator_type\":\"\",\"fallbacks\":[],"
            "\"label_selector\":{},\"num_slices\":1,\"num_workers\":2,\"placement_strategy\":\"PACK\","
            "\"resources_per_worker\":{\"CPU\":1.5},\"topology\":\"\",\"use_gpu\":false,\"use_tpu\":false},"
            "\"working_dir\":\"\"}");
}

TEST(RunSpecJsonTest, Errors) {
  struct Case {
    std::string body;
    std::string want;
  };
  const std::string kScalingFields =
      "num_workers, use_tpu, use_gpu, accelerator_type, topology, num_slices, chips_per_host, resources_per_worker, "
      "placement_strategy, label_selector, fallbacks";
  const std::vector<Case> cases = {
      {"",
       "invalid JSON: parse error at line 1, column 1: syntax error while parsing value - unexpected end of input; "
       "expected '[', '{', or a literal"},
      {"{\"env\": {}",
       "invalid JSON: parse error at line 1, column 11: syntax error while parsing object - unexpected end of input; "
       "expected '}'"},
      {"[]", "expected a JSON object, got an array"},
      {"\"x\"", "expected a JSON object, got \"x\""},
      {R"({"entrypoint": ["a"], "bogus": 1})",
       "unknown field \"bogus\"; accepted: scaling_config, run_config, entrypoint, env, working_dir, py_modules"},
      {R"({"scaling_config": {"num_worker": 2, "use_tpus": true}})",
       "scaling_config: unknown fields \"num_worker\", \"use_tpus\"; accepted: " + kScalingFields},
      {R"({"run_config": {"checkpoint": {"num_to_keep": 2}}})",
       "run_config: unknown field \"checkpoint\"; accepted: name, storage_path, max_failures, checkpoints_to_keep, placement_timeout_s"},
      {R"({"scaling_config": {"fallbacks": [{"accelerator_type": "TPU-V6E", "topology": "4x4", "tpu": 1}]}})",
       "scaling_config.fallbacks[0]: unknown field \"tpu\"; accepted: accelerator_type, topology, num_slices, "
       "chips_per_host"},
      {R"({"scaling_config": []})", "scaling_config: expected an object, got an array"},
      {R"({"scaling_config": {"num_workers": "4"}})", "scaling_config.num_workers: expected an integer, got \"4\""},
      {R"({"scaling_config": {"num_workers": 4.5}})", "scaling_config.num_workers: expected an integer, got 4.5"},
      {R"({"scaling_config": {"num_workers": true}})", "scaling_config.num_workers: expected an integer, got true"},
      {R"({"scaling_config": {"num_slices": 3000000000}})", "scaling_config.num_slices: 3000000000 is out of range"},
      {R"({"scaling_config": {"num_slices": -3000000000}})", "scaling_config.num_slices: -3000000000 is out of range"},
      {R"({"scaling_config": {"num_slices": null}})", "scaling_config.num_slices: expected an integer, got null"},
      {R"({"scaling_config": {"use_tpu": "yes"}})", "scaling_config.use_tpu: expected true or false, got \"yes\""},
      {R"({"scaling_config": {"topology": 44}})", "scaling_config.topology: expected a string, got 44"},
      {R"({"scaling_config": {"resources_per_worker": [1]}})",
       "scaling_config.resources_per_worker: expected an object of resource amounts, e.g. {\"CPU\": 1}, got an array"},
      {R"({"scaling_config": {"resources_per_worker": {"CPU": "1"}}})",
       "scaling_config.resources_per_worker.CPU: expected a non-negative number, got \"1\""},
      {R"({"scaling_config": {"resources_per_worker": {"CPU": -1}}})",
       "scaling_config.resources_per_worker.CPU: resource amount -1 is negative"},
      {R"({"scaling_config": {"label_selector": {"team": 1}}})",
       "scaling_config.label_selector.team: expected a string, got 1"},
      {R"({"scaling_config": {"label_selector": [{"team": "a"}]}})",
       "scaling_config.label_selector: expected an object of strings, got an array"},
      {R"({"scaling_config": {"fallbacks": {"topology": "4x4"}}})",
       "scaling_config.fallbacks: expected a list of shapes, got an object"},
      {R"({"scaling_config": {"fallbacks": [{"accelerator_type": "TPU-V6E", "num_slices": "2"}]}})",
       "scaling_config.fallbacks[0].num_slices: expected an integer, got \"2\""},
      {R"({"run_config": {"max_failures": "unlimited"}})",
       "run_config.max_failures: expected an integer, got \"unlimited\""},
      {R"({"entrypoint": 7})", "entrypoint: expected a list of strings or a shell command string, got 7"},
      {R"({"entrypoint": ["python3", 7]})", "entrypoint[1]: expected a string, got 7"},
      {R"({"entrypoint": "   "})", "entrypoint: the shell command is empty"},
      {R"({"env": {"A": 1}})", "env.A: expected a string, got 1"},
      {R"({"working_dir": null})", "working_dir: expected a string, got null"},
      {R"({"env": {"A": "1", "A": "2"}})", "duplicate field \"env.A\""},
      {R"({"entrypoint": ["x"], "entrypoint": ["y"]})", "duplicate field \"entrypoint\""},
      {R"({"scaling_config": {"fallbacks": [{"topology": "2x4"}, {"topology": "4x4", "topology": "4x8"}]}})",
       "duplicate field \"scaling_config.fallbacks[1].topology\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RunSpec> got = RunSpecFromJson(c.body);
    ASSERT_FALSE(got.ok()) << c.body;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(std::string(got.status().message()), c.want) << c.body;
  }
}

}  // namespace run_spec_test
}  // namespace torus::train
