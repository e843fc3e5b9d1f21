// torus: the command-line interface. Parses subcommands and hands each to its function in commands.h.
#include <signal.h>

#include <iostream>

#include "CLI/CLI.hpp"
#include "torus/cli/commands.h"
#include "torus/common/parse_flags.h"

namespace {

void AddHeadOptions(CLI::App* cmd, torus::cli::HeadFlags& head) {
  cmd->add_option("--address", head.address, "Head HOST:PORT [default: $TORUS_ADDRESS, else the latest session]");
  cmd->add_option("--token", head.token, "Cluster token [default: $TORUS_TOKEN, else the latest session's]");
}

void AddHttpOptions(CLI::App* cmd, torus::cli::HeadFlags& head) {
  cmd->add_option("--dashboard-address", head.dashboard_address,
                  "Head HTTP HOST:PORT [default: $TORUS_DASHBOARD_ADDRESS, else the latest session]");
  cmd->add_option("--token", head.token, "Cluster token [default: $TORUS_TOKEN, else the latest session's]");
}

void AddAgentOptions(CLI::App* cmd, torus::cli::AgentFlags& agent) {
  cmd->add_option("--labels", agent.labels,
                  "Node labels k=v,k2=v2 (of torus.io/ keys only market-type, node-group, availability-zone, "
                  "availability-region)");
  cmd->add_option("--labels-file", agent.labels_file, "YAML or JSON map of node labels (--labels wins)");
  cmd->add_option("--resources", agent.resources, "Custom resources as JSON, e.g. '{\"special\": 2}'");
  cmd->add_option("--num-cpus", agent.num_cpus, "CPU resource of this node [default: CPUs available]");
  cmd->add_option("--memory", agent.memory, "memory resource, e.g. 16Gi [default: MemTotal]");
  cmd->add_option("--object-store-memory", agent.object_store_memory,
                  "Shared memory for large objects of tasks and actors, e.g. 2Gi [default: 30% of --memory]");
  cmd->add_option("--node-ip", agent.node_ip, "Address other nodes reach this node at")->capture_default_str();
  cmd->add_option("--node-id", agent.node_id, "Node id [default: random]");
  cmd->add_option("--dev-root", agent.dev_root, "Root holding dev/ for accelerator detection [default: /]");
  cmd->add_option("--sys-root", agent.sys_root, "Root holding sys/ for TPU detection [default: --dev-root]");
  cmd->add_option("--metadata-url", agent.metadata_url,
                  "GCE metadata base URL, or 'off' [default: http://metadata.google.internal]");
  cmd->add_option("--chips-per-host", agent.chips_per_host, "TPU chips per host setting")
      ->check(CLI::IsMember({1, 4, 8}));
  cmd->add_option("--slice-name", agent.slice_name, "Override the TPU slice name (TPU_NAME)");
  cmd->add_option("--task-python", agent.task_python,
                  "Python interpreter of task and actor workers [default: /usr/bin/python3]");
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"torus: a runtime for AI workloads on TPU slices and GPU hosts."};
  app.require_subcommand(1);
  int rc = 0;

  torus::cli::StartFlags start;
  auto* cmd_start = app.add_subcommand("start", "Start a head (--head) or join an agent to one (--address)");
  cmd_start->add_flag("--head", start.head, "Start a head and an agent on this machine");
  cmd_start->add_option("--address", start.address, "Join the head at HOST:PORT");
  cmd_start->add_option("--token", start.token, "Cluster token when joining");
  cmd_start->add_option("--token-file", start.token_file, "File with the cluster token when joining");
  cmd_start->add_option("--host", start.host, "Head: address to listen on")->capture_default_str();
  cmd_start->add_option("--port", start.port, "Head: gRPC port (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd_start->add_option("--serve-port", start.serve_port,
                        "Head: port of the services' ingress (0 = any free, -1 = none) [default: 8000, or any free "
                        "with --dashboard-port 0]");
  cmd_start->add_option("--dashboard-port", start.dashboard_port, "Head: HTTP port of the JSON API (0 = any free)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd_start->add_option("--heartbeat-period-ms", start.heartbeat_period_ms, "Head: agents' heartbeat period")
      ->capture_default_str();
  cmd_start->add_option("--node-timeout-ms", start.node_timeout_ms, "Head: a node silent this long is DEAD")
      ->capture_default_str();
  cmd_start->add_flag("--no-local-node", start.no_local_node, "Head: do not start an agent on this machine");
  auto* start_tls = cmd_start->add_flag(
      "--tls", start.tls,
      "Head: TLS for gRPC and the HTTP API even on a loopback --host (on any other it is the default), with a "
      "cluster CA in the state directory; agents join with node certificates (docs/security.md)");
  cmd_start->add_flag("--plaintext", start.plaintext,
                      "Head: no TLS on a --host that is not loopback: the token and every request in clear text")
      ->excludes(start_tls);
  cmd_start->add_option("--tls-ca", start.tls_ca,
                        "Joining a cluster with TLS: the cluster CA's certificate (the head's <session>/ca.crt)");
  cmd_start->add_option("--join-token-file", start.join_token_file,
                        "Joining a cluster with TLS: the join token's file (the head's <session>/join_token)");
  cmd_start->add_option("--state-dir", start.state_dir,
                        "Head: directory of its journal; one that holds a cluster's state (and token) brings that "
                        "cluster back [default: <session>/state]");
  cmd_start->add_option("--state-store", start.state_store,
                        "Head: keep its journal in etcd instead, etcd://HOST:PORT[,HOST:PORT...][/PREFIX]; a head "
                        "started on it later (here or on another machine) brings the cluster's state back");
  cmd_start->add_flag("--dashboard-read-only", start.dashboard_read_only,
                      "Head: let GET requests (page, JSON views, /metrics) through without the token");
  cmd_start->add_option("--package-unused-grace-s", start.package_unused_grace_s,
                        "Head: remove an uploaded package this long after its last job or run ended [default: 600]");
  AddAgentOptions(cmd_start, start.agent);
  cmd_start->callback([&] { rc = torus::cli::CmdStart(start); });

  app.add_subcommand("stop", "Stop every torus process this machine started (by recorded pid)")
      ->callback([&] { rc = torus::cli::CmdStop(); });

  torus::cli::HeadFlags head;
  bool json = false;
  auto* cmd_status = app.add_subcommand("status", "Nodes, resources used/total and slices");
  AddHeadOptions(cmd_status, head);
  cmd_status->add_flag("--json", json, "Print JSON");
  cmd_status->callback([&] { rc = torus::cli::CmdStatus(head, json); });

  bool alive_only = false;
  auto* cmd_nodes = app.add_subcommand("nodes", "One line per node");
  AddHeadOptions(cmd_nodes, head);
  cmd_nodes->add_flag("--json", json, "Print JSON");
  cmd_nodes->add_flag("--alive", alive_only, "Only ALIVE nodes");
  cmd_nodes->callback([&] { rc = torus::cli::CmdNodes(head, json, alive_only); });

  auto* cmd_head = app.add_subcommand("head", "Act on the head");
  cmd_head->require_subcommand(1);
  auto* cmd_head_restart = cmd_head->add_subcommand(
      "restart", "Start the latest session's head again on its ports, from its journal: nothing it acknowledged is "
                 "lost, running jobs and runs are adopted (a head that runs is stopped first); of a cluster with several heads "
                 "(`torus up --ha`), start again those that stopped, as standbys");
  cmd_head_restart->callback([&] { rc = torus::cli::CmdHeadRestart(); });

  auto* cmd_node = app.add_subcommand("node", "Act on one node");
  cmd_node->require_subcommand(1);
  std::string node_id, reason, host_name;
  auto* cmd_mark_dead = cmd_node->add_subcommand("mark-dead", "Declare a node DEAD now (e.g. a preempted VM)");
  AddHeadOptions(cmd_mark_dead, head);
  cmd_mark_dead->add_option("NODE_ID", node_id, "The node")->required();
  cmd_mark_dead->add_option("--reason", reason, "Why, for the record");
  bool revoke = false;
  cmd_mark_dead->add_flag("--revoke", revoke,
                          "Also revoke the node: its certificate is refused from now on and it gets no new one "
                          "(clusters with TLS; the node id cannot register again)");
  cmd_mark_dead->callback([&] { rc = torus::cli::CmdNodeMarkDead(head, node_id, reason, revoke); });
  auto* cmd_restart = cmd_node->add_subcommand(
      "restart", "Start again the stopped agent NAME of the latest session (a simulated host or 'local')");
  cmd_restart->add_option("NAME", host_name, "Host name as in `torus nodes` (e.g. v6e-0-w2)")->required();
  cmd_restart->callback([&] { rc = torus::cli::CmdNodeRestart(host_name); });
  auto* cmd_cut = cmd_node->add_subcommand(
      "cut", "Take simulated host NAME's network link down, both ways (a cluster of `torus up --netns`)");
  cmd_cut->add_option("NAME", host_name, "Host name as in `torus nodes` (e.g. v6e-0-w2)")->required();
  cmd_cut->callback([&] { rc = torus::cli::CmdNodeLink(host_name, /*up=*/false); });
  auto* cmd_heal = cmd_node->add_subcommand("heal", "Bring simulated host NAME's network link back up");
  cmd_heal->add_option("NAME", host_name, "Host name as in `torus nodes` (e.g. v6e-0-w2)")->required();
  cmd_heal->callback([&] { rc = torus::cli::CmdNodeLink(host_name, /*up=*/true); });
  torus::cli::AddSliceFlags add_slice;
  auto* cmd_add_slice = cmd_node->add_subcommand(
      "add-slice", "Start every simulated host of slice SLICE of one of the session's node types (the autoscaler's "
                   "local provider runs this)");
  cmd_add_slice->add_option("SLICE", add_slice.slice, "Slice name, starting with the node type and '-'")->required();
  cmd_add_slice->add_option("--node-type", add_slice.node_type, "A node type of the session's spec")->required();
  cmd_add_slice->add_option("--capacity-class", add_slice.capacity_class,
                            "spot, flex-start, reserved or on-demand (the hosts' torus.io/market-type)")
      ->capture_default_str();
  cmd_add_slice->add_option("--session", add_slice.session, "Session directory [default: the latest]");
  cmd_add_slice->callback([&] { rc = torus::cli::CmdNodeAddSlice(add_slice); });
  auto* cmd_remove_slice = cmd_node->add_subcommand("remove-slice", "Stop every host of simulated slice SLICE");
  cmd_remove_slice->add_option("SLICE", add_slice.slice, "Slice name")->required();
  cmd_remove_slice->add_option("--session", add_slice.session, "Session directory [default: the latest]");
  cmd_remove_slice->callback([&] { rc = torus::cli::CmdNodeRemoveSlice(add_slice.slice, add_slice.session); });

  std::string autoscaler_file;
  auto* cmd_autoscaler = app.add_subcommand("autoscaler", "The head's autoscaler configuration");
  cmd_autoscaler->require_subcommand(1);
  auto* cmd_autoscaler_check =
      cmd_autoscaler->add_subcommand("check", "Check an autoscaler config (torus-head --autoscaler-config FILE)");
  cmd_autoscaler_check->add_option("FILE", autoscaler_file, "YAML or JSON")->required();
  cmd_autoscaler_check->callback([&] { rc = torus::cli::CmdAutoscalerCheck(autoscaler_file); });

  std::string tls_dir;
  auto* cmd_tls = app.add_subcommand("tls", "The cluster's TLS secrets");
  cmd_tls->require_subcommand(1);
  auto* cmd_tls_init = cmd_tls->add_subcommand(
      "init", "Write a new cluster CA (ca.crt, ca.key) and join token (join_token) into DIR: for heads given them "
              "(--tls-ca, --tls-ca-key, --join-token-file) and their agents, e.g. a Kubernetes Secret (docs/gke.md)");
  cmd_tls_init->add_option("DIR", tls_dir, "Directory (created 0700; existing secrets are never replaced)")->required();
  cmd_tls_init->callback([&] { rc = torus::cli::CmdTlsInit(tls_dir); });

  std::string serve_file, serve_name;
  bool serve_wait = false, serve_json = false;
  int serve_timeout_s = 600;
  auto* cmd_serve = app.add_subcommand("serve", "Services: model servers behind the ingress (docs/serving.md)");
  cmd_serve->require_subcommand(1);
  auto* cmd_serve_deploy =
      cmd_serve->add_subcommand("deploy", "Deploy a service spec, or roll out a changed one (YAML or JSON)");
  AddHttpOptions(cmd_serve_deploy, head);
  cmd_serve_deploy->add_option("FILE", serve_file, "The service spec")->required();
  cmd_serve_deploy->add_flag("--wait", serve_wait, "Return once every replica of this version is READY");
  cmd_serve_deploy->add_option("--timeout-s", serve_timeout_s, "How long --wait waits")->capture_default_str();
  cmd_serve_deploy->callback(
      [&] { rc = torus::cli::CmdServeDeploy(head, serve_file, serve_wait, serve_timeout_s); });
  auto* cmd_serve_status = cmd_serve->add_subcommand("status", "A service: its replicas, their states and load");
  AddHttpOptions(cmd_serve_status, head);
  cmd_serve_status->add_option("NAME", serve_name, "Service name")->required();
  cmd_serve_status->add_flag("--json", serve_json, "The REST answer as it is");
  cmd_serve_status->callback([&] { rc = torus::cli::CmdServeStatus(head, serve_name, serve_json); });
  auto* cmd_serve_list = cmd_serve->add_subcommand("list", "Every service");
  AddHttpOptions(cmd_serve_list, head);
  cmd_serve_list->add_flag("--json", serve_json, "The REST answer as it is");
  cmd_serve_list->callback([&] { rc = torus::cli::CmdServeList(head, serve_json); });
  std::string ingress_host = "0.0.0.0";
  int ingress_port = 8000;
  auto* cmd_serve_ingress = cmd_serve->add_subcommand(
      "ingress", "Run an ingress apart from the head (routes from the head, load reported to it) until SIGTERM");
  AddHttpOptions(cmd_serve_ingress, head);
  cmd_serve_ingress->add_option("--host", ingress_host, "Address to listen on")->capture_default_str();
  cmd_serve_ingress->add_option("--port", ingress_port, "Port to listen on (0 = any free)")->capture_default_str();
  cmd_serve_ingress->callback([&] { rc = torus::cli::CmdServeIngress(head, ingress_host, ingress_port); });
  auto* cmd_serve_delete = cmd_serve->add_subcommand("delete", "Delete a service: its replicas drain and stop");
  AddHttpOptions(cmd_serve_delete, head);
  cmd_serve_delete->add_option("NAME", serve_name, "Service name")->required();
  cmd_serve_delete->callback([&] { rc = torus::cli::CmdServeDelete(head, serve_name); });

  torus::cli::PgCreateFlags pg_create;
  auto* cmd_pg = app.add_subcommand("pg", "Placement groups: atomic reservations of resource bundles");
  cmd_pg->require_subcommand(1);
  auto* cmd_pg_create = cmd_pg->add_subcommand("create", "Reserve bundles atomically (all or nothing)");
  AddHeadOptions(cmd_pg_create, head);
  cmd_pg_create->add_option("--bundles", pg_create.bundles, "JSON list of bundles, e.g. '[{\"CPU\": 1}, {\"TPU\": 4}]'")
      ->required();
  cmd_pg_create->add_option("--strategy", pg_create.strategy, "PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
      ->capture_default_str();
  cmd_pg_create->add_option("--bundle-label-selector", pg_create.bundle_label_selector,
                            "JSON list with one selector per bundle, or one object for all");
  cmd_pg_create->add_option("--fallback", pg_create.fallbacks,
                            "Alternative, tried in order: '{\"bundles\": [...], \"bundle_label_selector\": [...]}'")
      ->allow_extra_args(false);
  cmd_pg_create->add_option("--name", pg_create.name, "Unique name among live groups");
  cmd_pg_create->add_option("--wait", pg_create.wait_s, "Wait up to SEC for CREATED (exit 1 if not)");
  cmd_pg_create->add_option("--timeout", pg_create.timeout_s, "Fail the group if not created within SEC (0 = never)");
  cmd_pg_create->add_flag("--json", pg_create.json, "Print JSON");
  cmd_pg_create->callback([&] { rc = torus::cli::CmdPgCreate(head, pg_create); });

  bool include_removed = false;
  auto* cmd_pg_list = cmd_pg->add_subcommand("list", "Live placement groups and slice groups");
  AddHeadOptions(cmd_pg_list, head);
  cmd_pg_list->add_flag("--all", include_removed, "Include REMOVED and FAILED groups");
  cmd_pg_list->add_flag("--json", json, "Print JSON");
  cmd_pg_list->callback([&] { rc = torus::cli::CmdPgList(head, include_removed, json); });

  std::string pg_id;
  double pg_wait = 0;
  auto* cmd_pg_get = cmd_pg->add_subcommand("get", "One group: state, reason, bundles (node, slice, worker, chips)");
  AddHeadOptions(cmd_pg_get, head);
  cmd_pg_get->add_option("ID", pg_id, "Group id or name")->required();
  cmd_pg_get->add_option("--wait", pg_wait, "Wait up to SEC for CREATED");
  cmd_pg_get->add_flag("--json", json, "Print JSON");
  cmd_pg_get->callback([&] { rc = torus::cli::CmdPgGet(head, pg_id, pg_wait, json); });

  auto* cmd_pg_remove = cmd_pg->add_subcommand("remove", "Release everything a group holds");
  AddHeadOptions(cmd_pg_remove, head);
  cmd_pg_remove->add_option("ID", pg_id, "Group id or name")->required();
  cmd_pg_remove->callback([&] { rc = torus::cli::CmdPgRemove(head, pg_id); });

  torus::cli::SliceReserveFlags slice;
  auto* cmd_slice = app.add_subcommand("slice", "TPU slices as a unit");
  cmd_slice->require_subcommand(1);
  auto* cmd_reserve = cmd_slice->add_subcommand("reserve", "Reserve whole TPU slices atomically, with fallback shapes");
  AddHeadOptions(cmd_reserve, head);
  cmd_reserve->add_option("--accelerator-type", slice.accelerator_type, "e.g. TPU-V6E")->required();
  cmd_reserve->add_option("--topology", slice.topology, "e.g. 4x4")->required();
  cmd_reserve->add_option("--num-slices", slice.num_slices, "Distinct slices")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd_reserve->add_option("--chips-per-host", slice.chips_per_host, "Settles v5e/v6e 2x4 (1, 4 or 8)");
  cmd_reserve->add_flag("--per-chip", slice.per_chip, "One bundle per chip instead of per host");
  cmd_reserve->add_option("--label-selector", slice.label_selector,
                          "JSON selector every host must match, e.g. '{\"torus.io/market-type\": \"spot\"}'");
  cmd_reserve->add_option("--fallback", slice.fallbacks, "TYPE:TOPOLOGY[:NUM_SLICES], tried in order (repeatable)")
      ->allow_extra_args(false);
  cmd_reserve->add_option("--resources-per-bundle", slice.resources_per_bundle,
                          "JSON object [default: {\"CPU\": 1, \"TPU\": chips per host}]");
  cmd_reserve->add_option("--name", slice.name, "Unique name among live groups");
  cmd_reserve->add_option("--wait", slice.wait_s, "Wait up to SEC for CREATED (exit 1 if not)");
  cmd_reserve->add_option("--timeout", slice.timeout_s, "Fail the group if not created within SEC (0 = never)");
  cmd_reserve->add_flag("--json", slice.json, "Print JSON");
  cmd_reserve->callback([&] { rc = torus::cli::CmdSliceReserve(head, slice); });

  auto* cmd_ledger = cmd_node->add_subcommand("ledger", "What an agent holds: prepared and committed bundles");
  AddHeadOptions(cmd_ledger, head);
  cmd_ledger->add_option("NODE_ID", node_id, "The node")->required();
  cmd_ledger->add_flag("--json", json, "Print JSON");
  cmd_ledger->callback([&] { rc = torus::cli::CmdNodeLedger(head, node_id, json); });

  // ---- jobs ----
  auto* cmd_job = app.add_subcommand("job", "Jobs: one entrypoint command, supervised (Ray Jobs API)");
  cmd_job->require_subcommand(1);
  torus::cli::JobSubmitFlags job_submit;
  auto* cmd_job_submit = cmd_job->add_subcommand("submit", "Run CMD as a job; waits and streams its output");
  AddHttpOptions(cmd_job_submit, head);
  cmd_job_submit->add_flag("--no-wait", job_submit.no_wait, "Print the job id and return");
  cmd_job_submit->add_option("--submission-id", job_submit.submission_id, "Job id [default: raysubmit_...]");
  cmd_job_submit->add_option("--resources", job_submit.resources, "Entrypoint resources, e.g. '{\"CPU\": 1}'");
  cmd_job_submit->add_option("--label-selector", job_submit.label_selector, "JSON selector of the node to run on");
  cmd_job_submit->add_option("--env", job_submit.env, "KEY=VALUE for the entrypoint (repeatable)")
      ->allow_extra_args(false);
  cmd_job_submit->add_option("--working-dir", job_submit.working_dir,
                             "Local directory to upload and run in (or a package URI, gcs://NAME.zip)");
  cmd_job_submit->add_option("--py-module", job_submit.py_modules,
                             "Local directory of a Python module to upload and put on PYTHONPATH (repeatable)")
      ->allow_extra_args(false);
  cmd_job_submit->add_option("--exclude", job_submit.excludes,
                             "gitignore pattern of files not to upload (repeatable; .gitignore files apply too)")
      ->allow_extra_args(false);
  cmd_job_submit->add_option("CMD", job_submit.command, "The command, after --")->required();
  cmd_job_submit->callback([&] { rc = torus::cli::CmdJobSubmit(head, job_submit); });

  std::string job_id;
  auto* cmd_job_status = cmd_job->add_subcommand("status", "A job's status and message");
  AddHttpOptions(cmd_job_status, head);
  cmd_job_status->add_option("ID", job_id, "Job id")->required();
  cmd_job_status->add_flag("--json", json, "Print JSON (JobDetails)");
  cmd_job_status->callback([&] { rc = torus::cli::CmdJobStatus(head, job_id, json); });

  bool follow = false;
  std::optional<int> log_rank;
  int log_attempt = 0;
  auto* cmd_job_logs = cmd_job->add_subcommand("logs", "Output of a job, or of a run (all ranks, or --rank)");
  AddHttpOptions(cmd_job_logs, head);
  cmd_job_logs->add_option("ID", job_id, "Job id or run id")->required();
  cmd_job_logs->add_flag("--follow,-f", follow, "Keep printing until it ends");
  cmd_job_logs->add_option("--rank", log_rank, "Runs: only this rank");
  cmd_job_logs->add_option("--attempt", log_attempt, "Runs: this attempt [default: the latest]");
  cmd_job_logs->callback([&] { rc = torus::cli::CmdJobLogs(head, job_id, follow, log_rank, log_attempt); });

  auto* cmd_job_stop = cmd_job->add_subcommand("stop", "Stop a job (SIGTERM, SIGKILL 3 s later) or a run");
  AddHttpOptions(cmd_job_stop, head);
  cmd_job_stop->add_option("ID", job_id, "Job id or run id")->required();
  cmd_job_stop->callback([&] { rc = torus::cli::CmdJobStop(head, job_id); });

  auto* cmd_job_list = cmd_job->add_subcommand("list", "Every job");
  AddHttpOptions(cmd_job_list, head);
  cmd_job_list->add_flag("--json", json, "Print JSON");
  cmd_job_list->callback([&] { rc = torus::cli::CmdJobList(head, json); });

  auto* cmd_job_delete = cmd_job->add_subcommand("delete", "Forget an ended job");
  AddHttpOptions(cmd_job_delete, head);
  cmd_job_delete->add_option("ID", job_id, "Job id")->required();
  cmd_job_delete->callback([&] { rc = torus::cli::CmdJobDelete(head, job_id); });

  // ---- gang runs ----
  torus::cli::TrainFlags train;
  auto* cmd_train = app.add_subcommand("train", "Run CMD as a gang: one worker per host (or chip) of a slice group");
  cmd_train->require_subcommand(0, 1);
  AddHttpOptions(cmd_train, head);
  cmd_train->add_option("--num-workers", train.num_workers, "Workers [TPU: derived from the shape]");
  cmd_train->add_option("--accelerator-type", train.accelerator_type, "TPU type, e.g. TPU-V6E (sets use_tpu)");
  cmd_train->add_option("--topology", train.topology, "TPU topology, e.g. 4x4");
  cmd_train->add_option("--num-slices", train.num_slices, "TPU slices (multislice when > 1)")->capture_default_str();
  cmd_train->add_option("--chips-per-host", train.chips_per_host, "Settles v5e/v6e 2x4");
  cmd_train->add_flag("--use-gpu", train.use_gpu, "One GPU per worker unless --resources-per-worker says otherwise");
  cmd_train->add_option("--resources-per-worker", train.resources_per_worker,
                        "JSON, e.g. '{\"TPU\": 1}' for one worker per chip");
  cmd_train->add_option("--placement-strategy", train.placement_strategy, "Non-TPU: PACK, SPREAD, STRICT_*");
  cmd_train->add_option("--label-selector", train.label_selector, "JSON selector every worker's host must match");
  cmd_train->add_option("--fallback", train.fallbacks, "TYPE:TOPOLOGY[:NUM_SLICES], tried in order (repeatable)")
      ->allow_extra_args(false);
  cmd_train->add_option("--max-failures", train.max_failures, "Restarts allowed (-1 = unlimited)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1000000));
  cmd_train->add_option("--name", train.name, "Run name [default: from the script]");
  cmd_train->add_option("--storage-path", train.storage_path, "Shared directory for checkpoints [/tmp/torus/runs]");
  cmd_train->add_option("--checkpoints-to-keep", train.checkpoints_to_keep, "Keep the newest N checkpoints");
  cmd_train->add_option("--placement-timeout-s", train.placement_timeout_s,
                        "Fail when the slices cannot be had (or renewed after a host loss) within this long "
                        "(0 = wait as long as it takes)")
      ->check(CLI::NonNegativeNumber);
  cmd_train->add_option("--env", train.env, "KEY=VALUE for every worker (repeatable)")
      ->allow_extra_args(false);
  cmd_train->add_option("--working-dir", train.working_dir,
                        "Local directory to upload; every worker runs in its copy (or a package URI, gcs://NAME.zip)");
  cmd_train->add_option("--py-module", train.py_modules,
                        "Local directory of a Python module to upload and put on PYTHONPATH (repeatable)")
      ->allow_extra_args(false);
  cmd_train->add_option("--exclude", train.excludes,
                        "gitignore pattern of files not to upload (repeatable; .gitignore files apply too)")
      ->allow_extra_args(false);
  cmd_train->add_flag("--no-wait", train.no_wait, "Print the run id and return");
  cmd_train->add_option("CMD", train.command, "The worker command, after --");
  cmd_train->callback([&] {
    if (cmd_train->get_subcommands().empty()) rc = torus::cli::CmdTrain(head, train);
  });
  std::string run_id;
  auto* cmd_train_status = cmd_train->add_subcommand("status", "A run: status, attempts, metrics, checkpoints");
  AddHttpOptions(cmd_train_status, head);
  cmd_train_status->add_option("RUN", run_id, "Run id or name")->required();
  cmd_train_status->add_flag("--json", json, "Print JSON");
  cmd_train_status->callback([&] { rc = torus::cli::CmdTrainStatus(head, run_id, json); });
  auto* cmd_train_stop = cmd_train->add_subcommand("stop", "Stop a run (every worker)");
  AddHttpOptions(cmd_train_stop, head);
  cmd_train_stop->add_option("RUN", run_id, "Run id or name")->required();
  cmd_train_stop->callback([&] { rc = torus::cli::CmdTrainStop(head, run_id); });
  auto* cmd_train_list = cmd_train->add_subcommand("list", "Every run");
  AddHttpOptions(cmd_train_list, head);
  cmd_train_list->add_flag("--json", json, "Print JSON");
  cmd_train_list->callback([&] { rc = torus::cli::CmdTrainList(head, json); });

  std::string actor_state, actor_job;
  auto* cmd_list = app.add_subcommand("list", "List objects of the cluster");
  cmd_list->require_subcommand(1);
  auto* cmd_list_actors = cmd_list->add_subcommand("actors", "Actors: state, node, pid, restarts, death cause");
  AddHttpOptions(cmd_list_actors, head);
  cmd_list_actors->add_option("--state", actor_state, "Only actors in this state (PENDING_CREATION, ALIVE, RESTARTING, DEAD)");
  cmd_list_actors->add_option("--job-id", actor_job, "Only this job's actors");
  cmd_list_actors->add_flag("--json", json, "Print JSON");
  cmd_list_actors->callback([&] { rc = torus::cli::CmdListActors(head, actor_state, actor_job, json); });
  torus::cli::ListTasksFlags list_tasks;
  auto* cmd_list_tasks = cmd_list->add_subcommand("tasks", "Tasks and actor calls, newest first, or counts by function");
  AddHttpOptions(cmd_list_tasks, head);
  cmd_list_tasks->add_option("--state", list_tasks.state, "Only tasks in this state (PENDING, RUNNING, FINISHED, FAILED)");
  cmd_list_tasks->add_option("--job-id", list_tasks.job_id, "Only this job's tasks");
  cmd_list_tasks->add_option("--name", list_tasks.name, "Only this function (module.f, or Class.method)");
  cmd_list_tasks->add_option("--limit", list_tasks.limit, "At most this many (1-10000)")->check(CLI::Range(1, 10000));
  cmd_list_tasks->add_flag("--summary", list_tasks.summary, "Counts by function and state since the head started");
  cmd_list_tasks->add_flag("--json", list_tasks.json, "Print JSON");
  cmd_list_tasks->callback([&] { rc = torus::cli::CmdListTasks(head, list_tasks); });

  torus::cli::UpFlags up;
  auto* cmd_up = app.add_subcommand("up", "Start a local simulated cluster from a spec (see examples/clusters)");
  cmd_up->add_option("SPEC", up.spec_path, "Cluster spec YAML")->required();
  cmd_up->add_option("--port", up.port, "Head gRPC port (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd_up->add_option("--serve-port", up.serve_port,
                     "Head: port of the services' ingress (0 = any free, -1 = none) [default: 8000, or any free with "
                     "--dashboard-port 0]");
  cmd_up->add_option("--dashboard-port", up.dashboard_port, "Head HTTP port of the JSON API (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd_up->add_option("--heartbeat-period-ms", up.heartbeat_period_ms, "Agents' heartbeat period")
      ->capture_default_str();
  cmd_up->add_option("--node-timeout-ms", up.node_timeout_ms, "A node silent this long is DEAD")
      ->capture_default_str();
  cmd_up->add_option("--agent-rpc-timeout-ms", up.agent_rpc_timeout_ms, "Head's deadline for each call to an agent")
      ->capture_default_str();
  cmd_up->add_option("--prepare-ttl-ms", up.prepare_ttl_ms, "Agents drop uncommitted prepares after this")
      ->capture_default_str();
  cmd_up->add_option("--wait", up.wait_s, "Seconds to wait for every node to register")->capture_default_str();
  cmd_up->add_flag("--dashboard-read-only", up.dashboard_read_only,
                   "Let GET requests (page, JSON views, /metrics) through without the token");
  cmd_up->add_option("--package-unused-grace-s", up.package_unused_grace_s,
                     "Remove an uploaded package this long after its last job or run ended [default: 600]");
  auto* up_no_journal = cmd_up->add_flag("--no-journal", up.no_journal,
                   "The head keeps its state in memory only (a head restart forgets it); for comparisons");
  auto* up_state_store = cmd_up->add_option("--state-store", up.state_store,
                     "The head keeps its journal in etcd: etcd://HOST:PORT[,HOST:PORT...][/PREFIX]")
      ->excludes(up_no_journal);
  auto* up_tls = cmd_up->add_flag(
      "--tls", up.tls,
      "TLS for gRPC and the HTTP API: the head makes a cluster CA, each agent joins with the join token for a node "
      "certificate (docs/security.md); the default with --netns, a loopback cluster is plaintext without it");
  cmd_up->add_flag("--plaintext", up.plaintext, "With --netns: no TLS (the token and every request in clear text)")
      ->excludes(up_tls);
  cmd_up->add_flag("--netns", up.netns,
                   "Each simulated host but the head's in a network namespace of its own, linked to a bridge the "
                   "head listens on, so that `torus node cut|heal NAME` can partition it (needs root and iproute2)");
  cmd_up->add_flag("--ha", up.ha,
                   "High availability on this machine: a 3-member etcd and two heads on its journal, one leading and "
                   "one standing by on the next port (agents and clients follow the leader)")
      ->excludes(up_no_journal)
      ->excludes(up_state_store);
  cmd_up->add_option("--metrics-period-ms", up.metrics_period_ms, "Agents' metrics sampling period [default: 5000]")
      ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));
  bool no_tpu_sim = false;
  cmd_up->add_flag("--no-tpu-sim", no_tpu_sim,
                   "Do not start torus-tpu-sim, the simulated libtpu metrics server of each simulated TPU host");
  cmd_up->callback([&] {
    up.tpu_sim = !no_tpu_sim;
    rc = torus::cli::CmdUp(up);
  });

  app.add_subcommand("down", "Stop the cluster of the latest session (from `torus up` or `torus start`)")
      ->callback([&] { rc = torus::cli::CmdDown(); });
  app.add_subcommand("dashboard", "Print the dashboard's login URL (with the token) of the latest session")
      ->callback([&] { rc = torus::cli::CmdDashboard(); });

  if (auto exit_code = torus::ParseFlags(app, argc, argv)) return *exit_code;
  return rc;
}
