#include "torus/train/service_spec.h"

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/common/resources.h"

namespace torus::train {
namespace service_spec_test {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kFullYaml[] = R"(
name: llm
route_prefix: /llm/v1/
entrypoint: python3 server.py --port 8000
env: {MODEL_ID: tiny, COUNT: 3}
working_dir: /src
py_modules: [/src/lib]
replica:
  accelerator_type: TPU-V6E
  topology: 2x4
  num_slices: 1
  fallbacks: [{accelerator_type: TPU-V5P, topology: 2x2x1}]
  label_selector: {cloud.google.com/gke-spot: "true"}
health_path: /healthz
health_check_period_s: 2.5
health_check_timeout_s: 4
readiness_timeout_s: 900
autoscaling: {min_replicas: 1, max_replicas: 4, target_ongoing_requests: 3, upscale_delay_s: 10,
              downscale_delay_s: 120, initial_replicas: 2}
graceful_shutdown_timeout_s: 30
request_timeout_s: 120
max_request_bytes: 1Mi
max_queued_requests: 50
queue_timeout_s: 0.5
)";

constexpr char kFullJson[] = R"({
  "name": "llm",
  "route_prefix": "/llm/v1/",
  "entrypoint": "python3 server.py --port 8000",
  "env": {"MODEL_ID": "tiny", "COUNT": 3},
  "working_dir": "/src",
  "py_modules": ["/src/lib"],
  "replica": {
    "accelerator_type": "TPU-V6E",
    "topology": "2x4",
    "num_slices": 1,
    "fallbacks": [{"accelerator_type": "TPU-V5P", "topology": "2x2x1"}],
    "label_selector": {"cloud.google.com/gke-spot": "true"}
  },
  "health_path": "/healthz",
  "health_check_period_s": 2.5,
  "health_check_timeout_s": 4,
  "readiness_timeout_s": 900,
  "autoscaling": {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 3, "upscale_delay_s": 10,
                  "downscale_delay_s": 120, "initial_replicas": 2},
  "graceful_shutdown_timeout_s": 30,
  "request_timeout_s": 120,
  "max_request_bytes": "1Mi",
  "max_queued_requests": 50,
  "queue_timeout_s": 0.5
})";

// What kFullYaml and kFullJson describe.
ServiceSpec FullSpec() {
  ServiceSpec spec;
  spec.name = "llm";
  spec.route_prefix = "/llm/v1";
  spec.replica.entrypoint = {"/bin/sh", "-c", "python3 server.py --port 8000"};
  spec.replica.env = {{"MODEL_ID", "tiny"}, {"COUNT", "3"}};
  spec.replica.working_dir = "/src";
  spec.replica.py_modules = {"/src/lib"};
  train::ScalingConfig& s = spec.replica.scaling;
  s.use_tpu = true;
  s.accelerator_type = "TPU-V6E";
  s.topology = "2x4";
  s.num_slices = 1;
  s.fallbacks = {{"TPU-V5P", "2x2x1", 0, std::nullopt}};
  s.label_selector = {{"cloud.google.com/gke-spot", "true"}};
  spec.health_path = "/healthz";
  spec.health_check_period_ms = 2'500;
  spec.health_check_timeout_ms = 4'000;
  spec.readiness_timeout_ms = 900'000;
  spec.autoscaling = AutoscalingConfig{.min_replicas = 1,
                                       .max_replicas = 4,
                                       .target_ongoing_requests = 3,
                                       .upscale_delay_ms = 10'000,
                                       .downscale_delay_ms = 120'000,
                                       .initial_replicas = 2};
  spec.graceful_shutdown_timeout_ms = 30'000;
  spec.request_timeout_ms = 120'000;
  spec.max_request_bytes = 1 << 20;
  spec.max_queued_requests = 50;
  spec.queue_timeout_ms = 500;
  return spec;
}

// A minimal valid spec with `extra` lines appended (YAML).
std::string Minimal(const std::string& extra = "") {
  return "name: web\nentrypoint: [python3, app.py]\nreplica: {num_workers: 1}\n" + extra;
}

std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(text);
  if (spec.ok()) return "<ok>";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  return std::string(spec.status().message());
}

void ExpectRoundTrip(const ServiceSpec& spec) {
  const std::string json = ServiceSpecToJson(spec);
  absl::StatusOr<ServiceSpec> back = ParseServiceSpec(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_EQ(*back, spec) << json;
  EXPECT_EQ(ServiceSpecToJson(*back), json);
}

TEST(ServiceSpecParseTest, FullTpuSpecYaml) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(kFullYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ServiceSpec want = FullSpec();
  EXPECT_EQ(spec->name, want.name);
  EXPECT_EQ(spec->route_prefix, want.route_prefix);
  EXPECT_EQ(spec->replica.entrypoint, want.replica.entrypoint);
  EXPECT_EQ(spec->replica.env, want.replica.env);
  EXPECT_EQ(spec->replica.scaling, want.replica.scaling);
  EXPECT_TRUE(spec->replica.scaling.use_tpu);  // implied by accelerator_type
  EXPECT_EQ(spec->replica.run, train::RunConfig());
  ASSERT_TRUE(spec->autoscaling.has_value());
  EXPECT_EQ(*spec->autoscaling, *want.autoscaling);
  EXPECT_EQ(*spec, want);
}

TEST(ServiceSpecParseTest, FullTpuSpecJsonEqualsYaml) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(kFullJson);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, FullSpec());
}

TEST(ServiceSpecParseTest, Defaults) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(Minimal());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "web");
  EXPECT_EQ(spec->route_prefix, "/web");
  EXPECT_EQ(spec->health_path, "/health");
  EXPECT_EQ(spec->num_replicas, 1);
  EXPECT_FALSE(spec->autoscaling.has_value());
  EXPECT_EQ(spec->health_check_period_ms, 2'000);
  EXPECT_EQ(spec->health_check_timeout_ms, 5'000);
  EXPECT_EQ(spec->readiness_timeout_ms, 600'000);
  EXPECT_EQ(spec->graceful_shutdown_timeout_ms, 20'000);
  EXPECT_EQ(spec->request_timeout_ms, 300'000);
  EXPECT_EQ(spec->max_request_bytes, int64_t{16} << 20);
  EXPECT_EQ(spec->max_queued_requests, 100);
  EXPECT_EQ(spec->queue_timeout_ms, 60'000);
  EXPECT_EQ(spec->replica.entrypoint, (std::vector<std::string>{"python3", "app.py"}));
  EXPECT_FALSE(spec->replica.scaling.use_tpu);
  EXPECT_EQ(InitialReplicas(*spec), 1);
}

TEST(ServiceSpecParseTest, ReplicaDefaultsToOneWorker) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec("name: web\nentrypoint: python3 app.py\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->replica.scaling.use_tpu);
  EXPECT_EQ(spec->replica.scaling.num_workers, 1);
  EXPECT_EQ(spec->replica.entrypoint, (std::vector<std::string>{"/bin/sh", "-c", "python3 app.py"}));
  ExpectRoundTrip(*spec);
}

TEST(ServiceSpecParseTest, RoutePrefixRootAndTrailingSlashes) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(Minimal("route_prefix: /\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->route_prefix, "/");
  spec = ParseServiceSpec(Minimal("route_prefix: /a/b//\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->route_prefix, "/a/b");
}

TEST(ServiceSpecParseTest, CpuReplica) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(R"(
name: embed
entrypoint: [python3, serve.py]
replica: {num_workers: 2, resources_per_worker: {CPU: 2, GPU: 1}, use_gpu: true}
num_replicas: 3
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const train::ScalingConfig& s = spec->replica.scaling;
  EXPECT_FALSE(s.use_tpu);
  EXPECT_TRUE(s.use_gpu);
  EXPECT_EQ(s.num_workers, 2);
  ResourceSet want;
  want.Set("CPU", 2);
  want.Set("GPU", 1);
  ASSERT_TRUE(s.resources_per_worker.has_value());
  EXPECT_EQ(*s.resources_per_worker, want);
  EXPECT_EQ(spec->num_replicas, 3);
  EXPECT_EQ(InitialReplicas(*spec), 3);
}

TEST(ServiceSpecParseTest, AutoscalingDefaults) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(Minimal("autoscaling: {max_replicas: 5}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->autoscaling.has_value());
  EXPECT_EQ(*spec->autoscaling, (AutoscalingConfig{.min_replicas = 1, .max_replicas = 5}));
  EXPECT_EQ(InitialReplicas(*spec), 1);

  // initial_replicas defaults to min_replicas, or 1 when that is 0.
  spec = ParseServiceSpec(Minimal("autoscaling: {min_replicas: 3, max_replicas: 5}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(InitialReplicas(*spec), 3);
  spec = ParseServiceSpec(Minimal("autoscaling: {min_replicas: 0, max_replicas: 5}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->autoscaling->min_replicas, 0);
  EXPECT_EQ(InitialReplicas(*spec), 1);
  spec = ParseServiceSpec(Minimal("autoscaling: {min_replicas: 0, max_replicas: 5, initial_replicas: 0}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(InitialReplicas(*spec), 0);
}

TEST(ServiceSpecRoundTripTest, FullSpecWithAutoscaling) { ExpectRoundTrip(FullSpec()); }

TEST(ServiceSpecRoundTripTest, ParsedSpecs) {
  for (const std::string& text :
       {Minimal(), Minimal("num_replicas: 0\n"), Minimal("autoscaling: {min_replicas: 0, max_replicas: 3}\n"),
        Minimal("env: {A: '1', B: 'x y', EMPTY: ''}\nworking_dir: gcs://pkg.zip\npy_modules: [a, b]\n"),
        Minimal("route_prefix: /\nhealth_path: /v1/ready\nqueue_timeout_s: 0\ngraceful_shutdown_timeout_s: 0.001\n"),
        std::string(R"(
name: embed
entrypoint: [python3, serve.py]
env: {MODEL: "m\"q", PATH_EXTRA: "/a:/b"}
working_dir: /work
replica: {num_workers: 2, resources_per_worker: {CPU: 0.5, GPU: 1}, use_gpu: true,
          placement_strategy: SPREAD, label_selector: {zone: a}}
num_replicas: 3
max_request_bytes: 4Gi
request_timeout_s: 0.1
)")}) {
    SCOPED_TRACE(text);
    absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ExpectRoundTrip(*spec);
  }
}

TEST(ServiceSpecRoundTripTest, BuiltSpecs) {
  ServiceSpec spec = FullSpec();
  spec.autoscaling.reset();
  spec.num_replicas = 7;
  spec.replica.env.clear();
  spec.replica.working_dir.clear();
  spec.replica.py_modules.clear();
  ExpectRoundTrip(spec);
  spec.replica.env = {{"K", "v"}, {"UNICODE", "caf\xc3\xa9"}};
  spec.replica.working_dir = "/srv/app";
  ExpectRoundTrip(spec);
}

TEST(ServiceSpecErrorTest, Messages) {
  struct Case {
    std::string text;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"entrypoint: [a]\nreplica: {num_workers: 1}\n", "name: is required"},
      {Minimal("name: LLM\n").substr(10),
       "name: \"LLM\" is not valid; use 1-40 of a-z, 0-9 and '-', starting and ending with a letter or digit"},
      {"name: -web\nentrypoint: [a]\nreplica: {num_workers: 1}\n",
       "name: \"-web\" is not valid; use 1-40 of a-z, 0-9 and '-', starting and ending with a letter or digit"},
      {Minimal("num_replicas: 2\nautoscaling: {max_replicas: 3}\n"),
       "num_replicas and autoscaling cannot both be given; use one"},
      {Minimal("autoscaling: {min_replicas: 5, max_replicas: 2}\n"),
       "autoscaling.min_replicas: 5 is more than max_replicas (2)"},
      {Minimal("autoscaling: {min_replicas: 1}\n"), "autoscaling.max_replicas: is required"},
      {Minimal("autoscaling: {max_replicas: 0}\n"), "autoscaling.max_replicas: must be an integer from 1 to 1000"},
      {Minimal("autoscaling: {min_replicas: 1, max_replicas: 4, initial_replicas: 5}\n"),
       "autoscaling.initial_replicas: 5 is not within min_replicas (1) and max_replicas (4)"},
      {Minimal("autoscaling: {min_replicas: 2, max_replicas: 4, initial_replicas: 1}\n"),
       "autoscaling.initial_replicas: 1 is not within min_replicas (2) and max_replicas (4)"},
      {Minimal("autoscaling: {max_replicas: 4, target_ongoing_requests: 0}\n"),
       "autoscaling.target_ongoing_requests: must be more than 0"},
      {Minimal("autoscaling: {max_replicas: 4, upscale: 1}\n"),
       "autoscaling: unknown key \"upscale\"; accepted: min_replicas, max_replicas, target_ongoing_requests, "
       "upscale_delay_s, downscale_delay_s, initial_replicas"},
      {Minimal("route_prefix: llm\n"), "route_prefix: \"llm\" must start with '/'"},
      {Minimal("route_prefix: /a b\n"),
       "route_prefix: \"/a b\" may hold only printable ASCII without spaces, '?' or '#'"},
      {Minimal("health_path: health\n"), "health_path: \"health\" must start with '/'"},
      {Minimal("num_replicas: 1001\n"), "num_replicas: must be an integer from 0 to 1000"},
      {Minimal("health_check_period_s: 0.01\n"), "health_check_period_s: must be a number from 0.1 to 3600"},
      {Minimal("max_request_bytes: 5Gi\n"), "max_request_bytes: must be at most 4Gi"},
      {"name: web\nreplica: {num_workers: 1}\n", "entrypoint: is required: a shell command or a list of arguments"},
      {"name: web\nentrypoint: [a]\nreplica: {num_workers: 1}\nenv: [A]\n", "env: must be a map of names to strings"},
      {"[a, b]", "a service spec is a map of fields (name, entrypoint, replica, ...)"},
      {"just a string", "a service spec is a map of fields (name, entrypoint, replica, ...)"},
      {"", "a service spec is a map of fields (name, entrypoint, replica, ...)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(ErrorOf(c.text), c.want);
  }
}

TEST(ServiceSpecErrorTest, UnknownTopLevelFieldListsAccepted) {
  // The message names the field and every accepted one.
  EXPECT_EQ(ErrorOf(Minimal("replicas: 2\n")),
              std::string("unknown key \"replicas\"; accepted: name, route_prefix, entrypoint, env, working_dir, "
                        "py_modules, replica, health_path, health_check_period_s, health_check_timeout_s, "
                        "readiness_timeout_s, num_replicas, autoscaling, graceful_shutdown_timeout_s, "
                        "request_timeout_s, max_request_bytes, max_queued_requests, queue_timeout_s"));
}

TEST(ServiceSpecErrorTest, ReplicaErrors) {
  EXPECT_EQ(ErrorOf(Minimal().substr(0, Minimal().find("replica")) +
                    "replica: {accelerator_type: TPU-V6E, topology: 4x5}\n"),
            "replica: topology \"4x5\" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, "
            "16x16");
  EXPECT_THAT(ErrorOf("name: web\nentrypoint: [a]\nreplica: {num_worker: 2}\n"),
              StartsWith("replica: unknown field \"num_worker\"; accepted: num_workers, use_tpu, use_gpu,"));
  EXPECT_THAT(ErrorOf("name: web\nentrypoint: [a]\nreplica: {use_tpu: true}\n"),
              StartsWith("replica"));
  EXPECT_THAT(ErrorOf("name: web\nentrypoint: [a]\nreplica: {use_tpu: true}\n"),
              HasSubstr("use_tpu requires accelerator_type and topology"));
  EXPECT_THAT(ErrorOf("name: web\nentrypoint: [a]\nreplica: {num_workers: two}\n"), StartsWith("replica.num_workers: "));
  EXPECT_THAT(ErrorOf("name: web\nentrypoint: [a]\nreplica: {num_workers: 1, num_workers: 2}\n"),
              HasSubstr("duplicate field \"replica.num_workers\""));
}

TEST(ServiceSpecErrorTest, InvalidYaml) {
  EXPECT_THAT(ErrorOf("name: [unclosed\n"), StartsWith("not valid YAML or JSON: "));
  EXPECT_THAT(ErrorOf("{\"name\": \"web\", "), StartsWith("not valid YAML or JSON: "));
}

// Invalid UTF-8 in a string the replica's spec carries (env, entrypoint, working_dir, ...) is refused with
// InvalidArgument. Disabled: ParseReplica's run.dump() throws nlohmann::json::type_error 316 instead, which
// ParseServiceSpec does not catch (it catches only YAML::Exception). See the report for the fix.
TEST(ServiceSpecErrorTest, InvalidUtf8IsRefused) {
  for (const std::string& text : {Minimal("env: {A: \"\xff\"}\n"), Minimal("working_dir: /src/\xc3\n"),
                                  std::string("name: web\nentrypoint: \"run \xc3\"\nreplica: {num_workers: 1}\n")}) {
    SCOPED_TRACE(text);
    absl::StatusOr<ServiceSpec> spec;
    EXPECT_NO_THROW(spec = ParseServiceSpec(text));
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// A spec that parses reads back from its JSON form, whatever its env names hold. Disabled: an env name that JSON
// escapes to over 1024 characters (171 control characters, 515 backslashes) is accepted, but yaml-cpp refuses a
// flow-map key that long ("end of map flow not found"), so the head could not read its own journal record back.
// See the report for the fix (env names of 1-256 printable characters).
TEST(ServiceSpecRoundTripTest, EnvNamesThatEscapeLong) {
  // The longest name taken, each character escaped when the spec is written out: it comes back the same.
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(Minimal("env: {" + std::string(256, '\\') + ": v}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->replica.env.at(std::string(256, '\\')), "v");
  ExpectRoundTrip(*spec);
  // One more character, or characters that are not printable: refused, naming the field and the accepted form.
  for (const std::string& yaml_name : {std::string(257, '\\'), std::string("\"A\\x01B\"")}) {
    absl::StatusOr<ServiceSpec> refused = ParseServiceSpec(Minimal("env: {" + yaml_name + ": v}\n"));
    ASSERT_FALSE(refused.ok()) << yaml_name;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("must be 1-256 printable characters without '='"));
  }
}

TEST(PrefixMatchesTest, Paths) {
  EXPECT_TRUE(PrefixMatches("/llm", "/llm"));
  EXPECT_TRUE(PrefixMatches("/llm", "/llm/"));
  EXPECT_TRUE(PrefixMatches("/llm", "/llm/v1"));
  EXPECT_TRUE(PrefixMatches("/llm", "/llm/v1/models"));
  EXPECT_FALSE(PrefixMatches("/llm", "/llmx"));
  EXPECT_FALSE(PrefixMatches("/llm", "/"));
  EXPECT_FALSE(PrefixMatches("/llm", "/ll"));
  EXPECT_FALSE(PrefixMatches("/llm", "/other/llm"));
  EXPECT_TRUE(PrefixMatches("/", "/"));
  EXPECT_TRUE(PrefixMatches("/", "/anything/at/all"));
  EXPECT_TRUE(PrefixMatches("/a/b", "/a/b/c"));
  EXPECT_FALSE(PrefixMatches("/a/b", "/a/bc"));
}

TEST(ReplicaRunSpecTest, NameAndNoRestarts) {
  const ServiceSpec spec = FullSpec();
  const train::RunSpec run = ReplicaRunSpec(spec, "llm-r3");
  EXPECT_EQ(run.run.name, "llm-r3");
  EXPECT_EQ(run.run.max_failures, 0);
  EXPECT_EQ(run.run.storage_path, train::kDefaultStoragePath);
  EXPECT_EQ(run.scaling, spec.replica.scaling);
  EXPECT_EQ(run.entrypoint, spec.replica.entrypoint);
  EXPECT_EQ(run.env, spec.replica.env);
  EXPECT_EQ(run.working_dir, spec.replica.working_dir);
  EXPECT_TRUE(train::PlanRun(run).ok());
}

TEST(InitialReplicasTest, NumReplicasOrAutoscaling) {
  ServiceSpec spec;
  spec.num_replicas = 4;
  EXPECT_EQ(InitialReplicas(spec), 4);
  spec.autoscaling = AutoscalingConfig{.min_replicas = 1, .max_replicas = 8, .initial_replicas = 3};
  EXPECT_EQ(InitialReplicas(spec), 3);
}

}  // namespace service_spec_test
}  // namespace torus::train
