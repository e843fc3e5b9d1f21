// MetricsSampler: the agent's metrics thread. Every period it samples the host (CPU, memory), each running worker's
// process tree (CPU, resident memory), the TPU chips (libtpu first, then the GKE device plugin) and the GPUs (NVML),
// and sends one MetricsReport to the head.
//
// Samples and their labels (the head adds node_id, slice and worker_id; this side never does):
//   torus_node_cpu_percent, torus_node_memory_used_bytes, torus_node_memory_total_bytes          (no labels)
//   torus_worker_cpu_percent, torus_worker_rss_bytes          process=<worker id>, owner, [run_id, rank, job_id]
//   torus_tpu_duty_cycle_percent, torus_tpu_hbm_used_bytes, torus_tpu_hbm_total_bytes,
//   torus_tpu_tensorcore_utilization_percent, torus_tpu_memory_bandwidth_utilization_percent
//                                                             chip=<local index>, [process, run_id, rank, job_id]
//   torus_gpu_utilization_percent, torus_gpu_memory_used_bytes, torus_gpu_memory_total_bytes,
//   torus_gpu_power_watts, torus_gpu_temperature_celsius      gpu=<index>, [process, run_id, rank, job_id]
// run_id, rank and job_id come from the worker's TORUS_RUN_ID, TORUS_RANK and TORUS_JOB_ID. A chip is held by the
// worker whose spec lists it (or, without a list, whose TPU_VISIBLE_CHIPS names it); a GPU by the worker whose
// CUDA_VISIBLE_DEVICES names it. CPU percentages are of one CPU for workers (200 = two CPUs busy) and of the whole
// host for the node; they appear from the second round on.
//
// Sources are `host`, `libtpu:<port>`, `device_plugin` and `nvml`; every report says whether each answered. A source
// that fails is logged once at warn (once at info when it answers again) and retried after the period, doubling up
// to a cap; it is never given up on.
//
// Thread-safety: Start() and Stop() from one owner thread; SampleOnce() only while the thread is not started (tests).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/common/clock.h"
#include "torus/head.pb.h"
#include "torus/metrics/device_plugin.h"
#include "torus/metrics/libtpu_metrics.h"
#include "torus/metrics/nvml_metrics.h"
#include "torus/metrics/proc_stats.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

// A sample of the agent's own state (e.g. its task leases).
struct AgentSample {
  std::string name;
  double value = 0;
  std::map<std::string, std::string> labels;
};

// Where samples come from; a function left empty means the source does not exist on this host.
struct MetricsSources {
  std::string proc_root = "/proc";
  std::vector<int> libtpu_ports;        // TPU hosts only
  std::string libtpu_config_error;      // a bad TPU_RUNTIME_METRICS_PORTS: reported as source `libtpu`
  std::function<metrics::LibtpuPortReading(int port)> read_libtpu;
  std::function<absl::StatusOr<metrics::PluginChips>()> read_device_plugin;  // when TPU_DEVICE_PLUGIN_ADDR is set
  std::function<absl::StatusOr<std::vector<metrics::GpuStats>>()> read_gpus;  // GPU hosts without --no-nvml
  std::function<std::vector<RunningWorker>()> list_workers;
  std::function<std::vector<AgentSample>()> read_agent;  // the agent's own counts, every round
};

// The production sources for a host with `tpu_chips` chips and `gpus` GPUs, from the agent's environment
// (TPU_RUNTIME_METRICS_PORTS, TPU_DEVICE_PLUGIN_ADDR). NVML is opened on first use and reopened after a failure.
MetricsSources MakeHostMetricsSources(int tpu_chips, int gpus, bool use_nvml, const EnvMap& env,
                                      std::function<std::vector<RunningWorker>()> list_workers);

struct MetricsSamplerOptions {
  std::string node_id;
  int64_t period_ms = 5000;
  int64_t max_backoff_ms = 60'000;
};

class MetricsSampler {
 public:
  // Sends one report; OK with true when the head did not know the incarnation (the report was dropped).
  using SendFn = std::function<absl::StatusOr<bool>(const rpc::MetricsReport&)>;

  // `incarnation` is the agent's current registration (0 = not registered: nothing is sent).
  MetricsSampler(const Clock* clock, MetricsSamplerOptions options, MetricsSources sources, SendFn send,
                 std::function<uint64_t()> incarnation);
  ~MetricsSampler();

  MetricsSampler(const MetricsSampler&) = delete;
  MetricsSampler& operator=(const MetricsSampler&) = delete;

  // Starts the thread: a round at once, then one every period.
  void Start();
  // Stops and joins the thread (a round in progress finishes first).
  void Stop();

  // One round: samples every source that is due and returns the report (valid until the next round).
  const rpc::MetricsReport& SampleOnce();

 private:
  struct SourceState {
    bool known = false;  // has had an outcome
    bool available = false;
    std::string error;
    int64_t since_ms = 0;
    int64_t backoff_ms = 0;
    int64_t next_try_micros = 0;
  };
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void Loop();
  void Send();
  // Whether `source` may be asked now (it is not backing off).
  bool Due(const std::string& source);
  // Records an outcome: logs transitions, schedules a retry after a failure.
  void Record(const std::string& source, const absl::Status& status);
  void Add(const char* name, double value, const Labels& labels);
  void SampleHost(const std::vector<RunningWorker>& workers);
  void SampleTpus(const std::vector<RunningWorker>& workers);
  void SampleGpus(const std::vector<RunningWorker>& workers);

  const Clock* clock_;
  const MetricsSamplerOptions options_;
  MetricsSources sources_;
  const SendFn send_;
  const std::function<uint64_t()> incarnation_;
  metrics::ProcReader proc_;
  metrics::CpuRateTracker worker_cpu_;
  std::optional<metrics::HostCpuTimes> last_host_cpu_;
  std::map<std::string, SourceState> states_;
  rpc::MetricsReport report_;  // reused round after round
  std::string last_send_error_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The agent's sender: HeadService.ReportMetrics over `channel` with the cluster token.
MetricsSampler::SendFn MakeHeadMetricsSender(std::shared_ptr<grpc::Channel> channel, std::string token);

// Chips named by a TPU_VISIBLE_CHIPS / CUDA_VISIBLE_DEVICES value ("0,1,3"); entries that are not indices (GPU
// UUIDs, garbage) are left out.
std::vector<int> ParseDeviceList(const std::string& value);

}  // namespace torus::node
