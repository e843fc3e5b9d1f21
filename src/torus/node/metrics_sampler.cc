#include "torus/node/metrics_sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/common/utf8.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"

namespace torus::node {
namespace {

constexpr char kHostSource[] = "host";
constexpr char kDevicePluginSource[] = "device_plugin";
constexpr char kNvmlSource[] = "nvml";
constexpr char kLibtpuConfigSource[] = "libtpu";

std::string LibtpuSource(int port) { return absl::StrCat("libtpu:", port); }

// The tags a worker lends to the samples of its processes and devices.
struct WorkerTags {
  std::vector<std::pair<std::string, std::string>> labels;
};

WorkerTags TagsOf(const RunningWorker& w, bool with_owner) {
  WorkerTags tags;
  tags.labels.emplace_back("process", w.worker_id);
  if (with_owner && !w.owner.empty()) tags.labels.emplace_back("owner", w.owner);
  static const std::pair<const char*, const char*> kEnvTags[] = {
      {"TORUS_RUN_ID", "run_id"}, {"TORUS_RANK", "rank"}, {"TORUS_JOB_ID", "job_id"}};
  for (const auto& [variable, label] : kEnvTags) {
    auto it = w.env_set.find(variable);
    // Label values travel in protobuf strings: bytes that are not UTF-8 would make the head refuse the whole report.
    if (it != w.env_set.end() && !it->second.empty()) tags.labels.emplace_back(label, ToValidUtf8(it->second));
  }
  return tags;
}

// Device index -> the worker holding it. The devices of the bundle a worker runs on come first; a worker's own
// TPU_VISIBLE_CHIPS / CUDA_VISIBLE_DEVICES (which a user may set to anything) only claims what no bundle holds.
// Among equal claims the first by worker id wins.
std::map<int, const RunningWorker*> Holders(const std::vector<RunningWorker>& workers, bool tpu) {
  std::map<int, const RunningWorker*> holders;
  for (const RunningWorker& w : workers) {
    for (int d : tpu ? w.chips : w.gpus) holders.emplace(d, &w);
  }
  for (const RunningWorker& w : workers) {
    if (!(tpu ? w.chips : w.gpus).empty()) continue;
    auto it = w.env_set.find(tpu ? "TPU_VISIBLE_CHIPS" : "CUDA_VISIBLE_DEVICES");
    if (it == w.env_set.end()) continue;
    for (int d : ParseDeviceList(it->second)) holders.emplace(d, &w);
  }
  return holders;
}

}  // namespace

std::vector<int> ParseDeviceList(const std::string& value) {
  std::vector<int> out;
  for (absl::string_view entry : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    int index = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(entry), &index) && index >= 0 && index < 4096) {
      out.push_back(index);
    }
  }
  return out;
}

MetricsSampler::MetricsSampler(const Clock* clock, MetricsSamplerOptions options, MetricsSources sources,
                               SendFn send, std::function<uint64_t()> incarnation)
    : clock_(clock),
      options_(std::move(options)),
      sources_(std::move(sources)),
      send_(std::move(send)),
      incarnation_(std::move(incarnation)),
      proc_(sources_.proc_root),
      worker_cpu_(proc_.ticks_per_second()) {}

MetricsSampler::~MetricsSampler() { Stop(); }

void MetricsSampler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void MetricsSampler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void MetricsSampler::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.Unlock();
    SampleOnce();
    Send();
    mu_.Lock();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.period_ms);
    while (!stopping_) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
  }
}

void MetricsSampler::Send() {
  if (report_.incarnation() == 0) return;  // not registered yet: the head would not know this node
  absl::StatusOr<bool> unknown = send_(report_);
  std::string error;
  if (!unknown.ok()) {
    error = absl::StrCat(absl::StatusCodeToString(unknown.status().code()), ": ", unknown.status().message());
  }
  if (error == last_send_error_) return;
  if (error.empty()) {
    spdlog::info("metrics reach the head again");
  } else if (unknown.status().code() == absl::StatusCode::kUnimplemented) {
    spdlog::info("the head does not take metrics ({}); will keep sampling", error);
  } else {
    spdlog::warn("cannot send metrics to the head ({}); will keep trying every period", error);
  }
  last_send_error_ = std::move(error);
}

bool MetricsSampler::Due(const std::string& source) {
  auto it = states_.find(source);
  return it == states_.end() || clock_->NowMicros() >= it->second.next_try_micros;
}

void MetricsSampler::Record(const std::string& source, const absl::Status& status) {
  SourceState& s = states_[source];
  const int64_t now_ms = clock_->WallMillis();
  if (status.ok()) {
    if (!s.known || !s.available) {
      spdlog::info("metrics source {} {}", source, s.known ? "answers again" : "available");
      s.since_ms = now_ms;
    }
    s.known = s.available = true;
    s.error.clear();
    s.backoff_ms = 0;
    s.next_try_micros = 0;
    return;
  }
  s.error = ToValidUtf8(std::string(status.message()));  // may quote what a source sent
  if (!s.known || s.available) {
    spdlog::warn("metrics source {} unavailable ({}); retrying with backoff up to {} s", source, s.error,
                 options_.max_backoff_ms / 1000);
    s.since_ms = now_ms;
  }
  s.known = true;
  s.available = false;
  s.backoff_ms = s.backoff_ms == 0 ? std::max<int64_t>(options_.period_ms, 1)
                                   : std::min(s.backoff_ms * 2, options_.max_backoff_ms);
  s.next_try_micros = clock_->NowMicros() + s.backoff_ms * 1000;
}

void MetricsSampler::Add(const char* name, double value, const Labels& labels) {
  if (!std::isfinite(value)) return;
  rpc::MetricSample* sample = report_.add_samples();
  sample->set_name(name);
  sample->set_value(value);
  auto* map = sample->mutable_labels();
  for (const auto& [k, v] : labels) (*map)[k] = v;
}

const rpc::MetricsReport& MetricsSampler::SampleOnce() {
  report_.Clear();
  report_.set_node_id(options_.node_id);
  report_.set_incarnation(incarnation_ ? incarnation_() : 0);
  report_.set_time_ms(clock_->WallMillis());
  report_.set_period_ms(options_.period_ms);
  std::vector<RunningWorker> workers;
  if (sources_.list_workers) workers = sources_.list_workers();

  SampleHost(workers);
  SampleTpus(workers);
  SampleGpus(workers);
  if (sources_.read_agent) {
    for (const AgentSample& a : sources_.read_agent()) {
      Labels labels(a.labels.begin(), a.labels.end());
      Add(a.name.c_str(), a.value, labels);
    }
  }

  for (const auto& [name, state] : states_) {
    rpc::MetricSourceStatus* status = report_.add_sources();
    status->set_source(name);
    status->set_available(state.available);
    status->set_error(state.error);
    status->set_since_ms(state.since_ms);
  }
  return report_;
}

void MetricsSampler::SampleHost(const std::vector<RunningWorker>& workers) {
  if (Due(kHostSource)) {
    absl::StatusOr<metrics::HostCpuTimes> cpu = proc_.ReadHostCpu();
    absl::StatusOr<metrics::HostMemory> memory = proc_.ReadHostMemory();
    if (cpu.ok()) {
      if (last_host_cpu_) {
        if (std::optional<double> percent = metrics::HostCpuPercent(*last_host_cpu_, *cpu)) {
          Add("torus_node_cpu_percent", *percent, {});
        }
      }
      last_host_cpu_ = *cpu;
    }
    if (memory.ok()) {
      Add("torus_node_memory_used_bytes", static_cast<double>(memory->used_bytes()), {});
      Add("torus_node_memory_total_bytes", static_cast<double>(memory->total_bytes), {});
    }
    Record(kHostSource, !cpu.ok() ? cpu.status() : memory.status());
  }

  // Worker processes: only their own trees are read.
  const int64_t now = clock_->NowMicros();
  std::vector<std::string> live;
  live.reserve(workers.size());
  for (const RunningWorker& w : workers) {
    std::vector<metrics::ProcessStat> tree = proc_.ReadTree(w.pid);
    if (tree.empty()) continue;  // exited since it was listed
    std::string key = absl::StrCat(w.worker_id, "/", w.pid);
    const WorkerTags tags = TagsOf(w, /*with_owner=*/true);
    int64_t rss_pages = 0;
    for (const metrics::ProcessStat& p : tree) rss_pages += p.rss_pages;
    Add("torus_worker_rss_bytes", static_cast<double>(rss_pages * proc_.page_size()), tags.labels);
    if (std::optional<double> cpu = worker_cpu_.Update(key, tree, now)) {
      Add("torus_worker_cpu_percent", *cpu, tags.labels);
    }
    live.push_back(std::move(key));
  }
  worker_cpu_.Retain(live);
}

void MetricsSampler::SampleTpus(const std::vector<RunningWorker>& workers) {
  if (!sources_.libtpu_config_error.empty()) {
    Record(kLibtpuConfigSource, absl::InvalidArgumentError(sources_.libtpu_config_error));
  }
  std::vector<metrics::LibtpuPortReading> readings;
  if (sources_.read_libtpu) {
    for (int port : sources_.libtpu_ports) {
      const std::string source = LibtpuSource(port);
      if (!Due(source)) continue;
      readings.push_back(sources_.read_libtpu(port));
      Record(source, readings.back().chips.status());
    }
  }
  std::map<int, metrics::LibtpuChipStats> libtpu = metrics::MergePortReadings(readings, nullptr);

  std::optional<metrics::PluginChips> plugin;
  if (sources_.read_device_plugin && Due(kDevicePluginSource)) {
    absl::StatusOr<metrics::PluginChips> read = sources_.read_device_plugin();
    Record(kDevicePluginSource, read.status());
    if (read.ok()) plugin = *std::move(read);
  }
  if (libtpu.empty() && !plugin) return;

  std::set<int> chips;
  for (const auto& [chip, stats] : libtpu) chips.insert(chip);
  if (plugin) {
    for (const auto& [chip, stats] : plugin->chips) chips.insert(chip);
  }
  const std::map<int, const RunningWorker*> holders = Holders(workers, /*tpu=*/true);
  Labels labels;
  for (int chip : chips) {
    labels.clear();
    labels.emplace_back("chip", absl::StrCat(chip));
    if (auto h = holders.find(chip); h != holders.end()) {
      for (auto& kv : TagsOf(*h->second, /*with_owner=*/false).labels) labels.push_back(std::move(kv));
    }
    const metrics::LibtpuChipStats* l = nullptr;
    if (auto it = libtpu.find(chip); it != libtpu.end()) l = &it->second;
    const metrics::PluginChipStats* p = nullptr;
    if (plugin) {
      if (auto it = plugin->chips.find(chip); it != plugin->chips.end()) p = &it->second;
    }
    // libtpu first; the device plugin fills what libtpu did not give.
    std::optional<double> duty = l != nullptr ? l->duty_cycle_percent : std::nullopt;
    if (!duty && p != nullptr) duty = p->duty_cycle_percent;
    std::optional<double> used, total;
    if (l != nullptr && l->hbm_used_bytes) used = static_cast<double>(*l->hbm_used_bytes);
    if (l != nullptr && l->hbm_total_bytes) total = static_cast<double>(*l->hbm_total_bytes);
    if (!used && p != nullptr) used = p->memory_used_bytes;
    if (!total && p != nullptr) total = p->memory_total_bytes;
    if (duty) Add("torus_tpu_duty_cycle_percent", *duty, labels);
    if (used) Add("torus_tpu_hbm_used_bytes", *used, labels);
    if (total) Add("torus_tpu_hbm_total_bytes", *total, labels);
    if (p != nullptr && p->tensorcore_utilization_percent) {
      Add("torus_tpu_tensorcore_utilization_percent", *p->tensorcore_utilization_percent, labels);
    }
    if (p != nullptr && p->memory_bandwidth_utilization_percent) {
      Add("torus_tpu_memory_bandwidth_utilization_percent", *p->memory_bandwidth_utilization_percent, labels);
    }
  }
}

void MetricsSampler::SampleGpus(const std::vector<RunningWorker>& workers) {
  if (!sources_.read_gpus || !Due(kNvmlSource)) return;
  absl::StatusOr<std::vector<metrics::GpuStats>> gpus = sources_.read_gpus();
  Record(kNvmlSource, gpus.status());
  if (!gpus.ok()) return;
  const std::map<int, const RunningWorker*> holders = Holders(workers, /*tpu=*/false);
  Labels labels;
  for (const metrics::GpuStats& g : *gpus) {
    labels.clear();
    labels.emplace_back("gpu", absl::StrCat(g.index));
    if (auto h = holders.find(g.index); h != holders.end()) {
      for (auto& kv : TagsOf(*h->second, /*with_owner=*/false).labels) labels.push_back(std::move(kv));
    }
    if (g.utilization_percent) Add("torus_gpu_utilization_percent", *g.utilization_percent, labels);
    if (g.memory_used_bytes) Add("torus_gpu_memory_used_bytes", *g.memory_used_bytes, labels);
    if (g.memory_total_bytes) Add("torus_gpu_memory_total_bytes", *g.memory_total_bytes, labels);
    if (g.power_watts) Add("torus_gpu_power_watts", *g.power_watts, labels);
    if (g.temperature_celsius) Add("torus_gpu_temperature_celsius", *g.temperature_celsius, labels);
  }
}

MetricsSources MakeHostMetricsSources(int tpu_chips, int gpus, bool use_nvml, const EnvMap& env,
                                      std::function<std::vector<RunningWorker>()> list_workers) {
  MetricsSources sources;
  sources.list_workers = std::move(list_workers);
  auto lookup = [&env](const char* key) -> const char* {
    auto it = env.find(key);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  if (tpu_chips > 0) {
    absl::StatusOr<std::vector<int>> ports = metrics::ParseMetricsPorts(lookup("TPU_RUNTIME_METRICS_PORTS"));
    if (ports.ok()) {
      auto client = std::make_shared<metrics::LibtpuClient>(*ports);
      sources.libtpu_ports = *ports;
      sources.read_libtpu = [client](int port) { return client->Read(port); };
    } else {
      sources.libtpu_config_error = std::string(ports.status().message());
    }
  }
  if (const char* addr = lookup("TPU_DEVICE_PLUGIN_ADDR"); addr != nullptr) {
    absl::StatusOr<metrics::HttpTarget> target = metrics::ParseDevicePluginAddr(addr);
    if (target.ok()) {
      auto client = std::make_shared<metrics::DevicePluginClient>(*target);
      sources.read_device_plugin = [client] { return client->Read(); };
    } else {
      const absl::Status error = target.status();
      sources.read_device_plugin = [error]() -> absl::StatusOr<metrics::PluginChips> { return error; };
    }
  }
  if (gpus > 0 && use_nvml) {
    auto nvml = std::make_shared<std::unique_ptr<metrics::NvmlMetrics>>();
    sources.read_gpus = [nvml]() -> absl::StatusOr<std::vector<metrics::GpuStats>> {
      if (*nvml == nullptr) {
        absl::StatusOr<std::unique_ptr<metrics::NvmlMetrics>> opened = metrics::NvmlMetrics::Open();
        if (!opened.ok()) return opened.status();
        *nvml = *std::move(opened);
      }
      absl::StatusOr<std::vector<metrics::GpuStats>> stats = (*nvml)->Sample();
      if (!stats.ok()) nvml->reset();  // reopen next time: the driver may have been reloaded
      return stats;
    };
  }
  return sources;
}

MetricsSampler::SendFn MakeHeadMetricsSender(std::shared_ptr<grpc::Channel> channel, std::string token) {
  std::shared_ptr<rpc::HeadService::Stub> stub = rpc::HeadService::NewStub(channel);
  return [stub, token = std::move(token)](const rpc::MetricsReport& report) -> absl::StatusOr<bool> {
    grpc::ClientContext ctx;
    ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    rpc::MetricsReportReply reply;
    grpc::Status status = stub->ReportMetrics(&ctx, report, &reply);
    if (!status.ok()) return rpc::FromGrpc(status);
    return reply.unknown_node();
  };
}

}  // namespace torus::node
