#include "torus/head/api/jobs_http.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "torus/head/api/http_util.h"
#include "torus/head/api/views.h"
#include "torus/head/packages/package_store.h"

namespace torus::head {
namespace {

void SendText(httplib::Response& res, int code, const std::string& text) {
  res.status = code;
  res.set_content(text, "text/plain");
}

absl::Status FieldError(const std::string& field, const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat("field \"", field, "\": expected ", expected));
}

absl::StatusOr<std::map<std::string, std::string>> StringMap(const nlohmann::json& j, const std::string& field) {
  if (!j.is_object()) return FieldError(field, "an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) return FieldError(absl::StrCat(field, ".", k), "a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

absl::Status AddAmount(ResourceSet& resources, const std::string& name, const nlohmann::json& value,
                       const std::string& field) {
  if (!value.is_number()) return FieldError(field, "a number");
  double amount = value.get<double>();
  auto fixed = ToFixed(amount);
  if (!fixed.ok()) return FieldError(field, "a non-negative number");
  // Two fields may name one resource (entrypoint_num_cpus and entrypoint_resources.CPU): their sum obeys the bound
  // of one amount, so that it neither overflows nor passes what ToFixed accepts.
  constexpr int64_t kMaxFixed = static_cast<int64_t>(kMaxResourceAmount) * kResourceScale;
  if (*fixed > kMaxFixed - resources.GetFixed(name)) {
    return FieldError(field, absl::StrCat("a number that keeps the total of ", name, " at most ",
                                          FormatFixed(kMaxFixed)));
  }
  if (*fixed > 0) resources.SetFixed(name, resources.GetFixed(name) + *fixed);
  return absl::OkStatus();
}


constexpr char kLocationForms[] =
    "a string: a package uploaded to this head (\"gcs://<name>.zip\", see PUT /api/packages/gcs/<name>) or a "
    "path on the node";

// A working_dir or py_modules entry: a path on the node, or a package URI of this head's scheme.
absl::Status CheckLocation(const std::string& field, const std::string& value) {
  if (value.empty()) return FieldError(field, kLocationForms);
  if (auto name = PackageNameOf(value)) {
    absl::Status s = PackageStore::CheckName(*name);
    return s.ok() ? s : absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
  }
  if (value.find("://") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, " \"", value, "\" is not supported; use ", kLocationForms));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobRequest> ParseJobSubmission(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  JobRequest request;
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;  // nulls are ignored, as Ray's clients send them
    if (key == "entrypoint") {
      if (!value.is_string()) return FieldError(key, "a string");
      request.entrypoint = value.get<std::string>();
    } else if (key == "submission_id" || key == "job_id") {
      if (!value.is_string()) return FieldError(key, "a string");
      if (request.submission_id.empty() || key == "submission_id") request.submission_id = value.get<std::string>();
    } else if (key == "runtime_env") {
      if (!value.is_object()) return FieldError(key, "an object");
      for (const auto& [rk, rv] : value.items()) {
        if (rk == "env_vars") {
          auto env = StringMap(rv, "runtime_env.env_vars");
          if (!env.ok()) return env.status();
          request.env_vars = *env;
        } else if (rk == "working_dir") {
          if (!rv.is_string()) return FieldError("runtime_env.working_dir", kLocationForms);
          request.working_dir = rv.get<std::string>();
          if (absl::Status s = CheckLocation("runtime_env.working_dir", request.working_dir); !s.ok()) return s;
        } else if (rk == "py_modules") {
          if (!rv.is_array()) return FieldError("runtime_env.py_modules", "a list of strings");
          for (size_t i = 0; i < rv.size(); ++i) {
            const std::string field = absl::StrCat("runtime_env.py_modules[", i, "]");
            if (!rv[i].is_string()) return FieldError(field, kLocationForms);
            request.py_modules.push_back(rv[i].get<std::string>());
            if (absl::Status s = CheckLocation(field, request.py_modules.back()); !s.ok()) return s;
          }
        } else if (rk == "_ray_commit" || rk == "_inject_current_ray") {
          // What Ray's client adds about itself beside pip or conda (RuntimeEnv.to_dict()): no request of the
          // user's, so the field the head cannot honour is the one a refusal names.
        } else if (rk == "excludes") {
          // Used by the client that packed working_dir; nothing for the head to do with it.
          if (!rv.is_array() || !std::all_of(rv.begin(), rv.end(), [](const auto& e) { return e.is_string(); })) {
            return FieldError("runtime_env.excludes", "a list of strings (gitignore patterns)");
          }
        } else {
          return absl::InvalidArgumentError(absl::StrCat("runtime_env field \"", rk,
                                                         "\" is not supported; supported: env_vars, working_dir, "
                                                         "py_modules, excludes"));
        }
      }
      request.runtime_env_json = value.dump();
    } else if (key == "metadata") {
      auto metadata = StringMap(value, key);
      if (!metadata.ok()) return metadata.status();
      request.metadata = *metadata;
    } else if (key == "entrypoint_num_cpus") {
      if (absl::Status s = AddAmount(request.resources, "CPU", value, key); !s.ok()) return s;
    } else if (key == "entrypoint_num_gpus") {
      if (absl::Status s = AddAmount(request.resources, "GPU", value, key); !s.ok()) return s;
    } else if (key == "entrypoint_memory") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0) return FieldError(key, "a non-negative integer");
      if (absl::Status s = AddAmount(request.resources, "memory", value, key); !s.ok()) return s;
    } else if (key == "entrypoint_resources") {
      if (!value.is_object()) return FieldError(key, "an object of resource name to number");
      for (const auto& [name, amount] : value.items()) {
        if (absl::Status s = AddAmount(request.resources, name, amount, absl::StrCat(key, ".", name)); !s.ok()) {
          return s;
        }
      }
    } else if (key == "entrypoint_label_selector") {
      auto selector = StringMap(value, key);
      if (!selector.ok()) return selector.status();
      request.label_selector = *selector;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field \"", key, "\"; accepted: entrypoint, submission_id (or job_id), runtime_env, metadata, "
          "entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory, entrypoint_resources, "
          "entrypoint_label_selector"));
    }
  }
  if (request.entrypoint.empty()) return absl::InvalidArgumentError("field \"entrypoint\" is required");
  return request;
}

absl::StatusOr<LogChunk> ReadJobLogWaiting(JobService& jobs, const EventLog& events, const std::string& id,
                                           int64_t offset, absl::Time deadline) {
  uint64_t cursor = events.revision();
  absl::StatusOr<LogChunk> chunk;
  while (true) {
    const int64_t left = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    chunk = jobs.ReadLog(id, offset, 1 << 20, left);
    if (!chunk.ok() || !chunk->data.empty() || absl::Now() >= deadline) break;
    if (chunk->finished) {
      // All its output is here; answer once the job's end is recorded too (its worker's exit report may still be
      // on its way), so that a follower learns both in one answer.
      auto job = jobs.Get(id);
      if (!job.ok() || job->job.Terminal()) break;
    }
    // Not started yet, its agent answered early, or its end not recorded yet: wait for the job's next change.
    auto next = events.Wait(cursor, {.ids = {id}}, deadline);
    if (next.ok()) {
      cursor = next->revision;
    } else if (next.status().code() == absl::StatusCode::kOutOfRange) {
      cursor = events.revision();
    } else {
      break;  // the head is stopping
    }
  }
  return chunk;
}

void RegisterJobRoutes(httplib::Server& server, JobService* jobs, const EventLog* events, JobsHttpOptions options) {
  server.Get("/api/version", [options](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200,
             {{"version", "4"},
              {"ray_version", options.ray_version},
              {"ray_commit", "torus"},
              {"session_name", options.session_name}});
  });

  auto submit = [jobs](const httplib::Request& req, httplib::Response& res) {
    auto request = ParseJobSubmission(req.body);
    if (!request.ok()) return SendText(res, 400, std::string(request.status().message()));
    auto id = jobs->Submit(*std::move(request));
    if (!id.ok()) return SendText(res, 400, std::string(id.status().message()));
    SendJson(res, 200, {{"job_id", id->str()}, {"submission_id", id->str()}});
  };
  server.Post("/api/jobs/", submit);
  server.Post("/api/jobs", submit);

  auto list = [jobs](const httplib::Request&, httplib::Response& res) {
    nlohmann::json out = nlohmann::json::array();
    for (const JobView& job : jobs->List()) out.push_back(JobDetailsJson(job));
    SendJson(res, 200, out);
  };
  server.Get("/api/jobs/", list);
  server.Get("/api/jobs", list);
  // The same list with filters and pages: ?status=RUNNING&limit=N&offset=N (X-Total-Count).
  server.Get("/api/v0/jobs", [jobs](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json out = nlohmann::json::array();
    for (const JobView& job : jobs->List()) out.push_back(JobDetailsJson(job));
    FilterByStatus(req, &out);
    if (Paginate(req, res, &out)) SendJson(res, 200, out);
  });

  server.Get(R"(/api/jobs/([^/]+))", [jobs](const httplib::Request& req, httplib::Response& res) {
    auto job = jobs->Get(req.matches[1]);
    if (!job.ok()) return SendText(res, 404, std::string(job.status().message()));
    SendJson(res, 200, JobDetailsJson(*job));
  });

  server.Get(R"(/api/jobs/([^/]+)/logs)", [jobs](const httplib::Request& req, httplib::Response& res) {
    std::string id = req.matches[1];
    int64_t offset = 0;
    std::string text;
    // Whole log, read in chunks; capped so one request stays bounded.
    for (int i = 0; i < 64; ++i) {
      auto chunk = jobs->ReadLog(id, offset, 1 << 20);
      if (!chunk.ok()) {
        int code = chunk.status().code() == absl::StatusCode::kNotFound ? 404 : 500;
        return SendText(res, code, std::string(chunk.status().message()));
      }
      text += chunk->data;
      if (chunk->data.empty() || chunk->next_offset == offset) break;
      offset = chunk->next_offset;
    }
    SendJson(res, 200, {{"logs", text}});
  });

  // torus's own incremental form, for following: {"data", "next_offset", "finished"}.
  server.Get(R"(/api/v0/jobs/([^/]+)/logs)", [jobs, events](const httplib::Request& req, httplib::Response& res) {
    int64_t offset = 0;
    if (req.has_param("offset") && (!absl::SimpleAtoi(req.get_param_value("offset"), &offset) || offset < 0)) {
      return SendError(res, 400, "query parameter offset must be a non-negative integer");
    }
    int64_t wait_ms = 0;
    if (req.has_param("wait_ms") &&
        (!absl::SimpleAtoi(req.get_param_value("wait_ms"), &wait_ms) || wait_ms < 0 || wait_ms > 60'000)) {
      return SendError(res, 400, "query parameter wait_ms must be a whole number of milliseconds from 0 to 60000");
    }
    const std::string id = req.matches[1];
    absl::StatusOr<LogChunk> chunk =
        ReadJobLogWaiting(*jobs, *events, id, offset, absl::Now() + absl::Milliseconds(wait_ms));
    if (!chunk.ok()) {
      return SendError(res, chunk.status().code() == absl::StatusCode::kNotFound ? 404 : 500,
                       std::string(chunk.status().message()));
    }
    auto job = jobs->Get(req.matches[1]);
    SendJson(res, 200,
             {{"data", chunk->data},
              {"next_offset", chunk->next_offset},
              {"finished", chunk->finished},
              {"status", job.ok() ? JobStatusName(job->job.status) : "UNKNOWN"}});
  });

  server.Post(R"(/api/jobs/([^/]+)/stop)", [jobs](const httplib::Request& req, httplib::Response& res) {
    auto stopped = jobs->Stop(req.matches[1]);
    if (!stopped.ok()) return SendText(res, 404, std::string(stopped.status().message()));
    SendJson(res, 200, {{"stopped", *stopped}});
  });

  server.Delete(R"(/api/jobs/([^/]+))", [jobs](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    // Ray's job server refuses with these words (its status code is 500; a refusal of the request is 400 here).
    if (auto job = jobs->Get(id); job.ok() && !job->job.Terminal()) {
      return SendText(res, 400, absl::StrCat("Attempted to delete job '", id, "', but it is in a non-terminal state ",
                                             JobStatusName(job->job.status), "."));
    }
    absl::Status s = jobs->Delete(id);
    if (s.code() == absl::StatusCode::kNotFound) return SendText(res, 404, std::string(s.message()));
    if (!s.ok()) return SendText(res, 400, std::string(s.message()));
    SendJson(res, 200, {{"deleted", true}});
  });
}

}  // namespace torus::head
