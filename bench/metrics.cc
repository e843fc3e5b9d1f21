// Metrics load on a real torus-head process.
//
// Starts torus-head, registers N synthetic TPU v6e hosts over gRPC (4 chips each, in 4-host slices, with the labels a
// real agent sends) and heartbeats them at the head's period throughout. Fills the head's metrics store with an hour
// of history (each node sends --fill-points reports, 5 s apart and backdated, oldest first, as fast as the head takes
// them), then measures:
//   - head CPU (% of one core, /proc/<pid>/stat) over a window with heartbeats only, and over the same window with
//     every node also reporting every --period-ms (spread evenly, in real time);
//   - head resident memory after the fill and at the end, and the series the store holds;
//   - GET /metrics latency and size at that size, GET /api/v0/metrics for the newest duty cycle of every chip, and
//     one chip's hour of history (while the reports go on).
//
// A report carries what an agent on a v6e host sends: host CPU and memory, five series per chip (duty cycle, HBM used
// and total, tensor-core and memory-bandwidth utilisation; chip labels plus process / run_id / rank on hosts of a
// run, which half of the slices are), the CPU and RSS of one worker process, and two source states (host, libtpu).
//
// With --hold-s N it then keeps the heartbeats and reports going for N more seconds, after printing the dashboard's
// login URL (`dashboard: http://<addr>/?token=<token>`) for a browser to look at the cluster (bench/dashboard.mjs);
// SIGTERM or SIGINT ends the hold early. The table printed at the end then counts the hold in "head RSS at end".
//
//   build/bin/bench_metrics --nodes 1000 --seconds 30
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "CLI/CLI.hpp"
#include "bench_head.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "torus/head.grpc.pb.h"

namespace {

using namespace torus::bench;
using Clock = std::chrono::steady_clock;

HeadProcess* g_head = nullptr;  // stopped by the failure path

// SIGTERM / SIGINT: while holding, end the hold (the head is stopped as usual); otherwise stop the head and exit.
volatile sig_atomic_t g_holding = 0;
volatile sig_atomic_t g_interrupted = 0;
volatile pid_t g_head_pid = 0;

void OnSignal(int sig) {
  if (g_holding) {
    g_interrupted = 1;
    return;
  }
  if (g_head_pid > 0) kill(g_head_pid, SIGTERM);
  _exit(128 + sig);
}

[[noreturn]] void Fail(const std::string& message) {
  fprintf(stderr, "bench_metrics: %s\n", message.c_str());
  if (g_head != nullptr) {
    fprintf(stderr, "end of the head's log:\n%s", HeadLogTail(*g_head, 20).c_str());
    StopHead(*g_head);
  }
  exit(1);
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Node {
  std::string id;
  uint64_t incarnation = 0;
  torus::rpc::MetricsReport report;  // template: labels and names; values and time are set per send
};

using Stub = torus::rpc::HeadService::Stub;


// A splitmix64 step: cheap, deterministic sample values.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double Unit(uint64_t seed) { return static_cast<double>(Mix(seed) >> 11) / 9007199254740992.0; }

constexpr double kGiB = 1024.0 * 1024 * 1024;

void AddSample(torus::rpc::MetricsReport& r, const std::string& name,
               const std::vector<std::pair<std::string, std::string>>& labels) {
  auto* s = r.add_samples();
  s->set_name(name);
  for (const auto& [k, v] : labels) (*s->mutable_labels())[k] = v;
}

// The series of node i: host, 4 chips x 5, one worker process x 2.
torus::rpc::MetricsReport ReportTemplate(const Node& node, int i, int64_t period_ms) {
  torus::rpc::MetricsReport r;
  r.set_node_id(node.id);
  r.set_incarnation(node.incarnation);
  r.set_period_ms(period_ms);
  const int slice = i / 4, worker = i % 4;
  const bool in_run = slice % 2 == 0;  // half of the slices run a 4-slice (64-chip) gang
  const std::string run_id = "run-" + std::to_string(slice / 8);
  const std::string rank = std::to_string((slice / 2) % 4 * 4 + worker);
  const std::string process = "w-" + std::to_string(Mix(i) % 1000000);
  AddSample(r, "torus_node_cpu_percent", {});
  AddSample(r, "torus_node_memory_used_bytes", {});
  AddSample(r, "torus_node_memory_total_bytes", {});
  for (int chip = 0; chip < 4; ++chip) {
    std::vector<std::pair<std::string, std::string>> labels = {{"chip", std::to_string(chip)}};
    if (in_run) {
      labels.emplace_back("process", process);
      labels.emplace_back("run_id", run_id);
      labels.emplace_back("rank", rank);
    }
    for (const char* name : {"torus_tpu_duty_cycle_percent", "torus_tpu_hbm_used_bytes", "torus_tpu_hbm_total_bytes",
                             "torus_tpu_tensorcore_utilization_percent",
                             "torus_tpu_memory_bandwidth_utilization_percent"}) {
      AddSample(r, name, labels);
    }
  }
  std::vector<std::pair<std::string, std::string>> worker_labels = {{"process", process}};
  if (in_run) {
    worker_labels.emplace_back("owner", "run:" + run_id);
    worker_labels.emplace_back("run_id", run_id);
    worker_labels.emplace_back("rank", rank);
  } else {
    const std::string job = "job-" + std::to_string(slice % 97);
    worker_labels.emplace_back("owner", "job:" + job);
    worker_labels.emplace_back("job_id", job);
  }
  AddSample(r, "torus_worker_cpu_percent", worker_labels);
  AddSample(r, "torus_worker_rss_bytes", worker_labels);
  auto* host = r.add_sources();
  host->set_source("host");
  host->set_available(true);
  auto* libtpu = r.add_sources();
  libtpu->set_source("libtpu:8431");
  libtpu->set_available(true);
  return r;
}

// Fills `r` (a copy of the node's template) with the values of report `seq` at `time_ms`.
void SetValues(torus::rpc::MetricsReport& r, int node, int64_t seq, int64_t time_ms) {
  r.set_time_ms(time_ms);
  const uint64_t seed = (static_cast<uint64_t>(node) << 32) ^ static_cast<uint64_t>(seq);
  const double load = 60 + 35 * Unit(seed);
  int j = 0;
  auto set = [&](double v) { r.mutable_samples(j++)->set_value(v); };
  set(load / 4 + 5 * Unit(seed + 1));                      // host cpu %
  set(40 * kGiB + 20 * kGiB * Unit(seed + 2));             // memory used
  set(720 * kGiB);                                         // memory total
  for (int chip = 0; chip < 4; ++chip) {
    const uint64_t c = seed * 31 + chip;
    set(std::min(100.0, load + 5 * Unit(c + 3)));          // duty cycle
    set(24 * kGiB + 6 * kGiB * Unit(c + 4));               // hbm used
    set(32 * kGiB);                                        // hbm total
    set(std::min(100.0, load * 0.8 + 5 * Unit(c + 5)));    // tensorcore
    set(std::min(100.0, load * 0.5 + 10 * Unit(c + 6)));   // memory bandwidth
  }
  set(100 + 20 * Unit(seed + 7));                          // worker cpu %
  set(12 * kGiB + 2 * kGiB * Unit(seed + 8));              // worker rss
}

// Sends report calls asynchronously and counts the outcome.
class Reporter {
 public:
  Reporter(std::vector<std::unique_ptr<Stub>>* stubs, std::vector<Node>* nodes, std::string bearer, int inflight)
      : stubs_(stubs), nodes_(nodes), bearer_(std::move(bearer)), inflight_(inflight) {}

  void Send(int i, int64_t seq, int64_t time_ms) {
    struct Call {
      grpc::ClientContext ctx;
      torus::rpc::MetricsReport request;
      torus::rpc::MetricsReportReply reply;
    };
    auto* call = new Call;
    call->ctx.AddMetadata("authorization", bearer_);
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    call->request = (*nodes_)[i].report;
    SetValues(call->request, i, seq, time_ms);
    inflight_.Acquire();
    ++sent;
    (*stubs_)[i % stubs_->size()]->async()->ReportMetrics(&call->ctx, &call->request, &call->reply,
                                                          [this, call](grpc::Status s) {
                                                            if (!s.ok()) {
                                                              ++failed;
                                                            } else if (call->reply.unknown_node()) {
                                                              ++unknown;
                                                            }
                                                            delete call;
                                                            inflight_.Release();
                                                          });
  }
  void Drain() { inflight_.Drain(); }

  std::atomic<int64_t> sent{0}, failed{0}, unknown{0};

 private:
  std::vector<std::unique_ptr<Stub>>* stubs_;
  std::vector<Node>* nodes_;
  const std::string bearer_;
  InFlight inflight_;
};

// Calls `f(i)` for every node once per `period_ms`, spread evenly over 10 ms ticks, until `stop` or `secs` pass.
template <typename F>
void Spread(int n, int64_t period_ms, double secs, const std::atomic<bool>& stop, F&& f) {
  const int64_t tick_ms = 10;
  const int64_t ticks_per_period = std::max<int64_t>(1, period_ms / tick_ms);
  auto start = Clock::now();
  for (int64_t tick = 0; !stop; ++tick) {
    auto due = start + std::chrono::milliseconds(tick * tick_ms);
    if (std::chrono::duration<double>(due - start).count() >= secs) break;
    std::this_thread::sleep_until(due);
    int64_t slot = tick % ticks_per_period;
    for (int i = static_cast<int>(slot); i < n; i += static_cast<int>(ticks_per_period)) f(i);
  }
}

struct Timing {
  double p50_ms = 0, p90_ms = 0, max_ms = 0;
  size_t bytes = 0;
};

Timing TimeGet(httplib::Client& http, const std::string& path, const httplib::Headers& headers, int count) {
  std::vector<double> ms;
  Timing t;
  for (int k = 0; k < count; ++k) {
    auto t0 = Clock::now();
    auto res = http.Get(path, headers);
    double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!res || res->status != 200) {
      Fail("GET " + path + ": " + (res ? std::to_string(res->status) + " " + res->body.substr(0, 200)
                                       : httplib::to_string(res.error())));
    }
    t.bytes = res->body.size();
    ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  t.p50_ms = ms[ms.size() / 2];
  t.p90_ms = ms[std::min(ms.size() - 1, ms.size() * 9 / 10)];
  t.max_ms = ms.back();
  return t;
}

// The value of an unlabelled gauge in Prometheus text.
double GaugeValue(const std::string& body, const std::string& name) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

size_t CountLines(const std::string& body, const std::string& prefix) {
  std::istringstream in(body);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) n += line.rfind(prefix, 0) == 0;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 1000;
  int seconds = 30;
  int64_t period_ms = 5000;
  int fill_points = 720;
  int64_t heartbeat_period_ms = 500;
  int scrapes = 20;
  int channels = 4;
  int fill_inflight = 64;
  int hold_s = 0;
  CLI::App app{"Metrics store load on torus-head: CPU, memory and scrape time"};
  app.add_option("--nodes", n, "Simulated TPU hosts (4 chips each)")->capture_default_str();
  app.add_option("--seconds", seconds, "Each CPU measurement window")->capture_default_str();
  app.add_option("--period-ms", period_ms, "Metrics report period of every node")->capture_default_str();
  app.add_option("--fill-points", fill_points, "Backdated reports per node before measuring")->capture_default_str();
  app.add_option("--heartbeat-period-ms", heartbeat_period_ms, "Heartbeat period (the head's default)")
      ->capture_default_str();
  app.add_option("--scrapes", scrapes, "GET /metrics repetitions")->capture_default_str();
  app.add_option("--channels", channels, "Client connections for reports")->capture_default_str();
  app.add_option("--fill-inflight", fill_inflight, "Reports in flight during the fill")->capture_default_str();
  app.add_option("--hold-s", hold_s, "After measuring, keep heartbeats and reports going this long for the dashboard")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto started = StartHead("/tmp/torus_bench_metrics_", {"--heartbeat-period-ms", std::to_string(heartbeat_period_ms)});
  if (!started.ok()) Fail(std::string(started.status().message()));
  HeadProcess head = *std::move(started);
  g_head = &head;
  g_head_pid = head.pid;
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  const std::string bearer = "Bearer " + head.token;
  auto hb_stubs = MakeStubs(head.address, 2, 0);
  auto report_stubs = MakeStubs(head.address, channels, 100);

  // Register.
  std::vector<Node> nodes(n);
  std::atomic<int64_t> register_failed{0};
  const std::vector<uint64_t> incarnations = RegisterSyntheticHosts(hb_stubs, head.token, n);
  for (int i = 0; i < n; ++i) {
    nodes[i].id = "bench-" + std::to_string(i);
    nodes[i].incarnation = incarnations[i];
    if (incarnations[i] == 0) ++register_failed;
  }
  if (register_failed > 0) Fail(std::to_string(register_failed.load()) + " registrations failed");
  for (int i = 0; i < n; ++i) nodes[i].report = ReportTemplate(nodes[i], i, period_ms);

  // Heartbeats, throughout.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> hb_sent{0}, hb_failed{0};
  InFlight hb_inflight(2000);
  std::thread heartbeats([&] {
    Spread(n, heartbeat_period_ms, 1e9, stop, [&](int i) {
      ++hb_sent;
      SendHeartbeat(*hb_stubs[i % hb_stubs.size()], bearer, nodes[i].id, nodes[i].incarnation, hb_inflight, hb_failed);
    });
  });
  auto finish = [&] {
    stop = true;
    heartbeats.join();
    hb_inflight.Drain();
  };

  httplib::Client http(head.http_host, head.http_port);
  http.set_read_timeout(60, 0);
  http.set_keep_alive(true);
  const httplib::Headers auth = {{"Authorization", bearer}};
  auto scrape = [&]() -> std::string {
    auto res = http.Get("/metrics", auth);
    if (!res || res->status != 200) Fail("GET /metrics failed");
    return res->body;
  };

  // Fill: report k of every node, then k + 1; 5 s apart, the newest a little before now.
  Reporter fill(&report_stubs, &nodes, bearer, fill_inflight);
  const int64_t fill_base_ms = WallMs();
  const double fill_cpu0 = CpuSeconds(head.pid);
  auto f0 = Clock::now();
  for (int k = 0; k < fill_points; ++k) {
    const int64_t t = fill_base_ms - static_cast<int64_t>(fill_points - k) * period_ms + 1000;
    for (int i = 0; i < n; ++i) fill.Send(i, k, t);
  }
  fill.Drain();
  const double fill_s = std::chrono::duration<double>(Clock::now() - f0).count();
  fprintf(stderr, "head pid %d: filled in %.1f s; heartbeats only for %d s\n", head.pid, fill_s, seconds + 3);
  const double fill_cpu = CpuSeconds(head.pid) - fill_cpu0;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double rss_after_fill = RssMb(head.pid);
  const std::string after_fill = scrape();
  const double series_after_fill = GaugeValue(after_fill, "torus_metrics_store_series");
  if (fill.failed > 0 || fill.unknown > 0) {
    fprintf(stderr, "fill: %lld failed, %lld dropped as unknown node\n", static_cast<long long>(fill.failed.load()),
            static_cast<long long>(fill.unknown.load()));
  }

  // (a) Heartbeats only.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  double cpu0 = CpuSeconds(head.pid);
  auto w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  double base_wall = std::chrono::duration<double>(Clock::now() - w0).count();
  const double base_cpu_percent = 100.0 * (CpuSeconds(head.pid) - cpu0) / base_wall;

  // (b) Heartbeats and reports, every node every period, in real time; one period of warm-up.
  Reporter live(&report_stubs, &nodes, bearer, 2000);
  std::atomic<bool> stop_reports{false};
  std::atomic<int64_t> seq{fill_points};
  std::thread reports([&] {
    Spread(n, period_ms, 1e9, stop_reports, [&](int i) { live.Send(i, seq++, WallMs()); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
  fprintf(stderr, "reports every %lld ms: measuring for %d s\n", static_cast<long long>(period_ms), seconds);
  const int64_t live_sent0 = live.sent;
  cpu0 = CpuSeconds(head.pid);
  w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double live_wall = std::chrono::duration<double>(Clock::now() - w0).count();
  const double live_cpu_percent = 100.0 * (CpuSeconds(head.pid) - cpu0) / live_wall;
  const double reports_per_s = static_cast<double>(live.sent - live_sent0) / live_wall;

  const double rss_before_scrapes = RssMb(head.pid);
  fprintf(stderr, "scraping\n");

  // Scrapes, with reports and heartbeats going on.
  const double scrape_cpu0 = CpuSeconds(head.pid);
  auto s0 = Clock::now();
  Timing metrics_get = TimeGet(http, "/metrics", auth, scrapes);
  const double scrape_wall = std::chrono::duration<double>(Clock::now() - s0).count();
  const double scrape_cpu = CpuSeconds(head.pid) - scrape_cpu0;
  const std::string body = scrape();
  const double series = GaugeValue(body, "torus_metrics_store_series");
  const size_t duty_lines = CountLines(body, "torus_tpu_duty_cycle_percent{");
  const std::string latest_path = "/api/v0/metrics?name=torus_tpu_duty_cycle_percent&latest=true";
  const std::string history_path = "/api/v0/metrics?name=torus_tpu_duty_cycle_percent&node_id=bench-0&chip=0&since=-1h";
  Timing latest = TimeGet(http, latest_path, auth, 10);
  Timing history = TimeGet(http, history_path, auth, 10);
  // The same on a new connection each time (a kept-alive connection can add the peer's delayed ACK to a reply the
  // server writes in two parts).
  httplib::Client fresh(head.http_host, head.http_port);
  fresh.set_read_timeout(60, 0);
  fresh.set_keep_alive(false);
  Timing metrics_fresh = TimeGet(fresh, "/metrics", auth, scrapes);
  Timing latest_fresh = TimeGet(fresh, latest_path, auth, 10);
  Timing history_fresh = TimeGet(fresh, history_path, auth, 10);
  size_t history_points = 0;
  if (auto res = http.Get(history_path, auth); res && res->status == 200) {
    const nlohmann::json reply = nlohmann::json::parse(res->body);
    for (const auto& s : reply["series"]) history_points += s["points"].size();
  }

  if (hold_s > 0) {
    g_holding = 1;
    fprintf(stderr, "holding for %d s\n", hold_s);
    printf("dashboard: http://%s:%d/?token=%s\n", head.http_host.c_str(), head.http_port, head.token.c_str());
    fflush(stdout);
    const auto until = Clock::now() + std::chrono::seconds(hold_s);
    while (!g_interrupted && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  stop_reports = true;
  reports.join();
  live.Drain();
  const double rss_end = RssMb(head.pid);
  finish();

  int alive = 0;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", bearer);
    torus::rpc::GetClusterStatusRequest request;
    torus::rpc::ClusterStatus status;
    if (hb_stubs[0]->GetClusterStatus(&ctx, request, &status).ok()) {
      for (const auto& node : status.nodes()) alive += node.state() == torus::rpc::ALIVE;
    }
  }
  StopHead(head);
  g_head = nullptr;

  const double scrape_background = live_cpu_percent / 100.0 * scrape_wall;
  printf("nodes %d x 4 chips, report every %lld ms, fill %d points per series, window %d s\n", n,
         static_cast<long long>(period_ms), fill_points, seconds);
  printf("%-52s %14s\n", "measure", "value");
  auto row = [](const char* name, const std::string& value) { printf("%-52s %14s\n", name, value.c_str()); };
  auto num = [](double v, int digits) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.*f", digits, v);
    return std::string(buf);
  };
  row("fill: reports sent", std::to_string(fill.sent.load()));
  row("fill: seconds", num(fill_s, 1));
  row("fill: reports/s", num(fill.sent / fill_s, 0));
  row("fill: head CPU-seconds", num(fill_cpu, 1));
  row("fill: head CPU us per report", num(1e6 * fill_cpu / std::max<int64_t>(1, fill.sent), 1));
  row("fill: failed / dropped as unknown node",
      std::to_string(fill.failed.load()) + " / " + std::to_string(fill.unknown.load()));
  row("series after fill", num(series_after_fill, 0));
  row("head RSS after fill (MB)", num(rss_after_fill, 1));
  row("head CPU, heartbeats only (% of a core)", num(base_cpu_percent, 1));
  row("head CPU, heartbeats + reports (% of a core)", num(live_cpu_percent, 1));
  row("head CPU for metrics (difference, % of a core)", num(live_cpu_percent - base_cpu_percent, 1));
  row("reports/s during window", num(reports_per_s, 0));
  row("reports failed / dropped as unknown node",
      std::to_string(live.failed.load()) + " / " + std::to_string(live.unknown.load()));
  row("head RSS after the window, before scrapes (MB)", num(rss_before_scrapes, 1));
  row("series at end", num(series, 0));
  row("head RSS at end (MB)", num(rss_end, 1));
  row("GET /metrics p50 (ms)", num(metrics_get.p50_ms, 1));
  row("GET /metrics p90 (ms)", num(metrics_get.p90_ms, 1));
  row("GET /metrics max (ms)", num(metrics_get.max_ms, 1));
  row("GET /metrics body (KB)", num(metrics_get.bytes / 1024.0, 0));
  row("GET /metrics, new connection p50 (ms)", num(metrics_fresh.p50_ms, 1));
  row("GET /metrics, new connection max (ms)", num(metrics_fresh.max_ms, 1));
  row("GET /metrics duty-cycle samples", std::to_string(duty_lines));
  row("GET /metrics head CPU ms per scrape (less reports)",
      num(1000 * std::max(0.0, scrape_cpu - scrape_background) / scrapes, 1));
  row("GET latest duty cycle, all chips p50 (ms)", num(latest.p50_ms, 1));
  row("GET latest duty cycle, all chips max (ms)", num(latest.max_ms, 1));
  row("GET latest duty cycle, all chips body (KB)", num(latest.bytes / 1024.0, 0));
  row("GET latest duty cycle, new connection p50 (ms)", num(latest_fresh.p50_ms, 1));
  row("GET latest duty cycle, new connection max (ms)", num(latest_fresh.max_ms, 1));
  row("GET one chip, last hour p50 (ms)", num(history.p50_ms, 1));
  row("GET one chip, last hour max (ms)", num(history.max_ms, 1));
  row("GET one chip, last hour points", std::to_string(history_points));
  row("GET one chip, last hour body (KB)", num(history.bytes / 1024.0, 0));
  row("GET one chip, new connection p50 (ms)", num(history_fresh.p50_ms, 1));
  row("GET one chip, new connection max (ms)", num(history_fresh.max_ms, 1));
  row("heartbeats sent / failed", std::to_string(hb_sent.load()) + " / " + std::to_string(hb_failed.load()));
  row("nodes alive at end", std::to_string(alive));
  return 0;
}
