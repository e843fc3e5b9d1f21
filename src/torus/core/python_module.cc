// _torus_core: the core worker for Python (the `torus` package calls it; users do not). Values cross as (data,
// format, buffers) triples — pickle protocol 5 data and its out-of-band buffers; a value read from a node's object
// store comes as read-only memoryviews of its mapping — and object refs as (object id bytes, owner address) pairs;
// blocking calls release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "torus/core/core_worker.h"
#include "torus/common/label_selector.h"
#include "torus/core/groups.h"
#include "torus/core/ids.h"
#include "torus/core/python_status.h"

namespace py = pybind11;
using torus::core::CoreWorker;
using torus::core::Ref;
using torus::core::Value;

namespace {

[[noreturn]] void Raise(const absl::Status& s) { torus::core::RaiseStatus(s); }

std::vector<Ref> Refs(const std::vector<std::pair<py::bytes, std::string>>& refs) {
  std::vector<Ref> out;
  out.reserve(refs.size());
  for (const auto& [id, owner] : refs) out.push_back(Ref{.object_id = std::string(id), .owner_address = owner});
  return out;
}

// A value for Python: inline bytes, or views of the mapping of a stored one (kept mapped while a view lives).
py::tuple ValueTuple(CoreWorker& w, const Ref& ref, const Value& v) {
  if (!v.stored()) {
    py::list buffers;
    // Writable copies: an array read from a small value is the reader's own, as an in-band one would be.
    for (const std::string& b : v.buffers) buffers.append(py::bytearray(b));
    return py::make_tuple(py::bytes(v.data), v.format, buffers);
  }
  absl::StatusOr<std::shared_ptr<torus::core::MappedObject>> mapped;
  {
    py::gil_scoped_release release;
    mapped = w.MapStored(ref, v);
  }
  if (!mapped.ok()) Raise(mapped.status());
  const torus::core::StoredLayout& layout = (*mapped)->layout();
  py::memoryview whole(py::cast(*mapped));
  auto view = [&](const torus::core::StoredSpan& span) {
    return whole[py::slice(static_cast<py::ssize_t>(span.offset), static_cast<py::ssize_t>(span.offset + span.size), 1)];
  };
  py::list buffers;
  for (const auto& span : layout.buffers) buffers.append(view(span));
  return py::make_tuple(view(layout.data), layout.format, buffers);
}

// Views of a value's parts; `keep` holds the buffers' exports while the views are used.
torus::core::ValueParts PartsOf(const py::bytes& data, const std::string& format, const py::list& buffers,
                                std::vector<py::buffer_info>& keep) {
  torus::core::ValueParts parts{.format = format, .data = std::string_view(data)};
  for (py::handle b : buffers) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(b).request();
    if (info.ndim > 1 && info.strides.back() != info.itemsize) throw py::value_error("a buffer that is not contiguous");
    parts.buffers.emplace_back(static_cast<const char*>(info.ptr), static_cast<size_t>(info.size * info.itemsize));
    keep.push_back(std::move(info));
  }
  return parts;
}

// The refs inside a value, as the language lists them: (id, owner) pairs.
std::vector<std::pair<std::string, std::string>> Contained(const py::handle& list) {
  std::vector<std::pair<std::string, std::string>> out;
  for (py::handle r : list) {
    auto t = r.cast<py::tuple>();
    out.emplace_back(t[0].cast<std::string>(), t[1].cast<std::string>());
  }
  return out;
}

// Arguments: ("r", id, owner) by reference, ("v", data, format[, contained refs]) by value.
void AddArgs(torus::core::TaskSpec& spec, const py::list& args) {
  for (py::handle a : args) {
    auto t = a.cast<py::tuple>();
    auto* arg = spec.add_args();
    if (t[0].cast<std::string>() == "r") {
      arg->mutable_ref()->set_object_id(t[1].cast<std::string>());
      arg->mutable_ref()->set_owner_address(t[2].cast<std::string>());
    } else {
      arg->mutable_value()->set_data(t[1].cast<std::string>());
      arg->mutable_value()->set_format(t[2].cast<std::string>());
      if (t.size() > 3) {
        for (const auto& [id, owner] : Contained(t[3])) {
          torus::core::ObjectRef* ref = arg->mutable_value()->add_contained();
          ref->set_object_id(id);
          ref->set_owner_address(owner);
        }
      }
    }
  }
}

// The spec of a task or an actor's creation: its id, name, code and arguments.
torus::core::TaskSpec MakeSpec(const py::bytes& task_id, std::string name, const py::bytes& function_id,
                               const py::bytes& function, const py::list& args) {
  torus::core::TaskSpec spec;
  spec.set_task_id(std::string(task_id));
  spec.set_name(std::move(name));
  spec.set_function_id(std::string(function_id));
  spec.set_function(std::string(function));
  AddArgs(spec, args);
  return spec;
}

// Where it may run.
using Selector = std::map<std::string, std::string>;
torus::core::TaskShape MakeShape(std::map<std::string, int64_t> resources, std::map<std::string, std::string> env,
                                 std::string working_dir, Selector label_selector, std::vector<Selector> fallbacks,
                                 std::string strategy, std::string placement_group, int bundle_index) {
  return {.resources = std::move(resources),
          .env = std::move(env),
          .working_dir = std::move(working_dir),
          .label_selector = std::move(label_selector),
          .fallback_selectors = std::move(fallbacks),
          .strategy = std::move(strategy),
          .placement_group = std::move(placement_group),
          .bundle_index = bundle_index};
}

py::list ArgsList(const torus::core::TaskSpec& spec) {
  py::list args;
  for (const auto& a : spec.args()) {
    if (a.has_ref()) {
      args.append(py::make_tuple("r", py::bytes(a.ref().object_id()), a.ref().owner_address()));
    } else {
      args.append(py::make_tuple("v", py::bytes(a.value().data()), a.value().format()));
    }
  }
  return args;
}

}  // namespace

py::dict GroupDict(const torus::rpc::PlacementGroupView& v) {
  py::dict d;
  d["id"] = v.id();
  d["name"] = v.name();
  d["kind"] = v.kind();
  d["state"] = v.state();
  d["reason"] = v.reason();
  py::list bundles;
  for (const auto& b : v.bundles()) {
    py::dict bd;
    bd["index"] = b.index();
    bd["node_id"] = b.node_id();
    bd["slice_name"] = b.slice_name();
    bd["worker_id"] = b.worker_id();
    bd["chips"] = std::vector<int>(b.chips().begin(), b.chips().end());
    std::map<std::string, double> resources;
    for (const auto& [k, amount] : b.resources()) resources[k] = static_cast<double>(amount) / 10000.0;
    bd["resources"] = resources;
    bundles.append(bd);
  }
  d["bundles"] = bundles;
  return d;
}

py::dict GroupOrRaise(const absl::StatusOr<torus::rpc::PlacementGroupView>& v) {
  if (!v.ok()) Raise(v.status());
  return GroupDict(*v);
}

namespace torus::core {
void AddRunFunctions(py::module_& m);  // python_runs.cc
}

PYBIND11_MODULE(_torus_core, m) {
  m.doc() = "torus core worker (internal)";
  // Debian's Abseil graphs every lock gRPC takes, per call, for deadlock detection: a few percent of a task's CPU in
  // drivers and workers. As in the daemons, the graph is not kept.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  py::class_<torus::core::MappedObject, std::shared_ptr<torus::core::MappedObject>>(m, "MappedObject",
                                                                                  py::buffer_protocol())
      .def_buffer([](torus::core::MappedObject& o) {
        return py::buffer_info(const_cast<char*>(o.data()), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(o.size())}, {py::ssize_t{1}}, /*readonly=*/true);
      });
  m.attr("INLINE_MAX_BYTES") = torus::core::kInlineMaxBytes;
  torus::core::AddRunFunctions(m);
  m.def("new_task_id", [] { return py::bytes(torus::core::NewTaskId()); });
  m.def("check_label_selector", [](const std::map<std::string, std::string>& selector) {
    auto parsed = torus::LabelSelector::Parse(selector);
    if (!parsed.ok()) throw py::value_error(std::string(parsed.status().message()));
  });
  m.def("cluster_nodes", [](const std::string& head_address, const std::string& token) {
    absl::StatusOr<std::vector<torus::core::LeaseNode>> nodes;
    {
      py::gil_scoped_release release;
      nodes = torus::core::FetchNodes(head_address, token);
    }
    if (!nodes.ok()) Raise(nodes.status());
    py::list out;
    for (const auto& n : *nodes) {
      out.append(py::make_tuple(n.node_id, n.agent_address, n.total, n.labels));
    }
    return out;
  });

  py::class_<CoreWorker>(m, "CoreWorker")
      .def(py::init([](std::string job_id, std::string node_ip, std::string head_address, std::string local_agent,
                       std::string token, std::string worker_id, bool follow_output, size_t object_store_memory) {
             absl::StatusOr<std::unique_ptr<CoreWorker>> w;
             {
               py::gil_scoped_release release;
               w = CoreWorker::Start({.job_id = std::move(job_id),
                                      .node_ip = std::move(node_ip),
                                      .head_address = std::move(head_address),
                                      .local_agent = std::move(local_agent),
                                      .token = std::move(token),
                                      .worker_id = std::move(worker_id),
                                      .follow_output = follow_output,
                                      .object_store_memory = object_store_memory});
             }
             if (!w.ok()) Raise(w.status());
             return std::move(*w);
           }),
           py::arg("job_id"), py::arg("node_ip"), py::arg("head_address"), py::arg("local_agent"), py::arg("token"),
           py::arg("worker_id") = "", py::arg("follow_output") = false, py::arg("object_store_memory") = 0)
      .def_property_readonly("address", &CoreWorker::address)
      .def_property_readonly("head_address", [](const CoreWorker& w) { return w.options().head_address; })
      .def("refresh_nodes",
           [](CoreWorker& w) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = w.RefreshNodes();
             }
             if (!s.ok()) Raise(s);
           })
      .def("nodes",
           [](CoreWorker& w) {
             py::list out;
             for (const auto& n : w.nodes()) {
               out.append(py::make_tuple(n.node_id, n.agent_address, n.total, n.labels));
             }
             return out;
           })
      // submit(task_id, name, function_id, function, args, num_returns, resources, env, working_dir, max_retries,
      //        retry_exceptions, label_selector, strategy, placement_group, bundle_index, fallback_selectors=[],
      //        retry_exception_types=b"") -> [return object ids]
      // resources: fixed-point amounts; label_selector and each of fallback_selectors (tried in order when no node
      // can hold the task under the one before): {key: expression}; retry_exception_types: the pickled tuple of
      // exception types an error is retried for (b"": any, with retry_exceptions), which the worker checks.
      .def("submit",
           [](CoreWorker& w, py::bytes task_id, std::string name, py::bytes function_id, py::bytes function,
              py::list args, int num_returns, std::map<std::string, int64_t> resources,
              std::map<std::string, std::string> env, std::string working_dir, int max_retries,
              bool retry_exceptions, Selector label_selector, std::string strategy, std::string placement_group,
              int bundle_index, std::vector<Selector> fallback_selectors, py::bytes retry_exception_types,
              std::string generator) {
             torus::core::TaskSpec spec = MakeSpec(task_id, std::move(name), function_id, function, args);
             spec.set_num_returns(num_returns);
             spec.set_generator(std::move(generator));
             spec.set_retry_exception_types(std::string(retry_exception_types));
             torus::core::TaskOptions options{
                 .shape = MakeShape(std::move(resources), std::move(env), std::move(working_dir),
                                    std::move(label_selector), std::move(fallback_selectors), std::move(strategy),
                                    std::move(placement_group), bundle_index),
                 .max_retries = max_retries,
                 .retry_exceptions = retry_exceptions};
             std::vector<std::string> ids;
             {
               py::gil_scoped_release release;
               ids = w.Submit(std::move(spec), std::move(options));
             }
             py::list out;
             for (const auto& id : ids) out.append(py::bytes(id));
             return out;
           },
           py::arg("task_id"), py::arg("name"), py::arg("function_id"), py::arg("function"), py::arg("args"),
           py::arg("num_returns"), py::arg("resources"), py::arg("env"), py::arg("working_dir"),
           py::arg("max_retries"), py::arg("retry_exceptions"), py::arg("label_selector"), py::arg("strategy"),
           py::arg("placement_group"), py::arg("bundle_index"), py::arg("fallback_selectors") = std::vector<Selector>{},
           py::arg("retry_exception_types") = py::bytes(), py::arg("generator") = std::string())
      // create_actor(task_id, name, function_id, function, args, resources, env, working_dir, max_restarts,
      //              max_task_retries, label_selector, strategy, placement_group, bundle_index, actor_name, ns,
      //              class_name, methods, detached, fallback_selectors=[]) -> actor id
      // fallback_selectors as for submit; a detached actor takes none (ValueError).
      .def("create_actor",
           [](CoreWorker& w, py::bytes task_id, std::string name, py::bytes function_id, py::bytes function,
              py::list args, std::map<std::string, int64_t> resources, std::map<std::string, std::string> env,
              std::string working_dir, int max_restarts, int max_task_retries, Selector label_selector,
              std::string strategy, std::string placement_group, int bundle_index, std::string actor_name,
              std::string ns, std::string class_name, std::vector<std::string> methods, bool detached,
              std::vector<Selector> fallback_selectors) {
             torus::core::TaskSpec spec = MakeSpec(task_id, std::move(name), function_id, function, args);
             torus::core::ActorOptions options{
                 .shape = MakeShape(std::move(resources), std::move(env), std::move(working_dir),
                                    std::move(label_selector), std::move(fallback_selectors), std::move(strategy),
                                    std::move(placement_group), bundle_index),
                 .max_restarts = max_restarts,
                 .max_task_retries = max_task_retries,
                 .name = std::move(actor_name),
                 .ns = std::move(ns),
                 .class_name = std::move(class_name),
                 .methods = std::move(methods),
                 .detached = detached};
             absl::StatusOr<std::string> id;
             {
               py::gil_scoped_release release;
               id = w.CreateActor(std::move(spec), std::move(options));
             }
             if (!id.ok()) Raise(id.status());
             return py::bytes(*id);
           },
           py::arg("task_id"), py::arg("name"), py::arg("function_id"), py::arg("function"), py::arg("args"),
           py::arg("resources"), py::arg("env"), py::arg("working_dir"), py::arg("max_restarts"),
           py::arg("max_task_retries"), py::arg("label_selector"), py::arg("strategy"), py::arg("placement_group"),
           py::arg("bundle_index"), py::arg("actor_name"), py::arg("ns"), py::arg("class_name"), py::arg("methods"),
           py::arg("detached"), py::arg("fallback_selectors") = std::vector<Selector>{})
      .def("get_named_actor",
           [](CoreWorker& w, const std::string& ns, const std::string& name) {
             absl::StatusOr<torus::rpc::ActorView> v;
             {
               py::gil_scoped_release release;
               v = w.GetNamedActor(ns, name);
             }
             if (!v.ok()) Raise(v.status());
             py::dict d;
             d["actor_id"] = v->actor_id();
             d["owner_address"] = v->owner_address();
             d["class_name"] = v->class_name();
             d["methods"] = std::vector<std::string>(v->methods().begin(), v->methods().end());
             d["state"] = v->state();
             d["max_task_retries"] = v->max_task_retries();
             return d;
           })
      .def("call_actor",
           [](CoreWorker& w, py::bytes actor_id, std::string owner, py::bytes task_id, std::string name,
              std::string method, py::list args, int num_returns, int max_retries, std::string generator) {
             torus::core::TaskSpec spec;
             spec.set_task_id(std::string(task_id));
             spec.set_generator(std::move(generator));
             spec.set_name(std::move(name));
             spec.set_method(std::move(method));
             spec.set_num_returns(num_returns);
             spec.set_max_retries(max_retries);
             AddArgs(spec, args);
             std::vector<std::string> ids;
             {
               py::gil_scoped_release release;
               ids = w.CallActor(std::string(actor_id), owner, std::move(spec));
             }
             py::list out;
             for (const auto& id : ids) out.append(py::bytes(id));
             return out;
           },
           py::arg("actor_id"), py::arg("owner"), py::arg("task_id"), py::arg("name"), py::arg("method"),
           py::arg("args"), py::arg("num_returns"), py::arg("max_retries"), py::arg("generator") = std::string())
      // report_generator_item(task_id, index, data, format, buffers, contained, value): item `index` (from 1) of a
      // streaming generator task running here, to its owner; returns once the owner holds it. `value` (the Python
      // object) is kept alive until then, so the refs inside it stay held. RuntimeError when it cannot be reported.
      .def("report_generator_item",
           [](CoreWorker& w, py::bytes task_id, uint32_t index, py::bytes data, std::string format, py::list buffers,
              py::object contained, py::object value) {
             std::vector<py::buffer_info> keep;
             torus::core::ValueParts parts = PartsOf(data, format, buffers, keep);
             auto inner = Contained(contained);
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = w.ReportGeneratorItem(std::string(task_id), index, parts, std::move(inner));
             }
             if (!s.ok()) throw std::runtime_error(std::string(s.message()));
           })
      // next_generator_item(task_id, index, timeout_ms) -> object id of item `index` (from 1) of a generator task
      // this process submitted, or None after its last item; ValueError "timeout: ..." when none came in time.
      .def("next_generator_item",
           [](CoreWorker& w, py::bytes task_id, uint32_t index, int64_t timeout_ms) -> py::object {
             absl::StatusOr<std::optional<std::string>> next;
             {
               py::gil_scoped_release release;
               next = w.NextGeneratorItem(std::string(task_id), index, timeout_ms);
             }
             if (absl::IsDeadlineExceeded(next.status())) {
               throw py::value_error("timeout: " + std::string(next.status().message()));
             }
             if (!next.ok()) throw py::key_error(std::string(next.status().message()));
             if (!next->has_value()) return py::none();
             return py::bytes(**next);
           })
      .def("resolve_actor",
           [](CoreWorker& w, py::bytes actor_id, std::string owner, int64_t wait_ms) {
             torus::core::ActorInfo info;
             {
               py::gil_scoped_release release;
               info = w.ResolveActor(std::string(actor_id), owner, wait_ms);
             }
             py::dict d;
             d["state"] = torus::core::ActorInfo::State_Name(info.state());
             d["address"] = info.address();
             d["incarnation"] = info.incarnation();
             d["restarts"] = info.restarts();
             d["death_cause"] = info.death_cause();
             if (info.has_creation_error()) {
               d["creation_error"] = py::bytes(info.creation_error().data());
             } else {
               d["creation_error"] = py::none();
             }
             return d;
           })
      .def("kill_actor",
           [](CoreWorker& w, py::bytes actor_id, std::string owner, bool no_restart) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = w.KillActor(std::string(actor_id), owner, no_restart);
             }
             if (!s.ok()) Raise(s);
           })
      // create_placement_group(name, strategy, bundles, selectors, timeout_s, fallbacks=[]): bundles in fixed point,
      // one label selector per bundle (or none); fallbacks: [(bundles, selectors)] tried in order when the bundles
      // before cannot be placed.
      .def("create_placement_group",
           [](CoreWorker& w, std::string name, std::string strategy,
              std::vector<std::map<std::string, int64_t>> bundles,
              std::vector<std::map<std::string, std::string>> selectors, double timeout_s,
              std::vector<std::pair<std::vector<std::map<std::string, int64_t>>,
                                    std::vector<std::map<std::string, std::string>>>>
                  fallbacks) {
             torus::rpc::PlacementGroupSpec spec;
             spec.set_name(std::move(name));
             spec.set_strategy(std::move(strategy));
             spec.set_timeout_s(timeout_s);
             auto add = [](auto* out, const std::vector<std::map<std::string, int64_t>>& resources,
                           const std::vector<std::map<std::string, std::string>>& labels) {
               for (size_t i = 0; i < resources.size(); ++i) {
                 auto* b = out->Add();
                 for (const auto& [k, v] : resources[i]) (*b->mutable_resources())[k] = v;
                 if (i < labels.size()) {
                   for (const auto& [k, v] : labels[i]) (*b->mutable_label_selector())[k] = v;
                 }
               }
             };
             add(spec.mutable_bundles(), bundles, selectors);
             for (const auto& [alt_bundles, alt_selectors] : fallbacks) {
               add(spec.add_fallbacks()->mutable_bundles(), alt_bundles, alt_selectors);
             }
             absl::StatusOr<torus::rpc::PlacementGroupView> view;
             {
               py::gil_scoped_release release;
               view = torus::core::CreateGroup(w.channels(), w.options().head_address, spec);
             }
             return GroupOrRaise(view);
           },
           py::arg("name"), py::arg("strategy"), py::arg("bundles"), py::arg("selectors"), py::arg("timeout_s"),
           py::arg("fallbacks") = std::vector<std::pair<std::vector<std::map<std::string, int64_t>>,
                                                        std::vector<std::map<std::string, std::string>>>>{})
      .def("reserve_slices",
           [](CoreWorker& w, std::string name, std::string accelerator_type, std::string topology, int num_slices,
              std::map<std::string, int64_t> resources_per_bundle, bool per_chip,
              std::map<std::string, std::string> label_selector, double timeout_s) {
             torus::rpc::SliceGroupSpec spec;
             spec.set_name(std::move(name));
             spec.mutable_primary()->set_accelerator_type(std::move(accelerator_type));
             spec.mutable_primary()->set_topology(std::move(topology));
             spec.mutable_primary()->set_num_slices(num_slices);
             for (const auto& [k, v] : label_selector) (*spec.mutable_primary()->mutable_label_selector())[k] = v;
             spec.set_per_chip(per_chip);
             for (const auto& [k, v] : resources_per_bundle) (*spec.mutable_resources_per_bundle())[k] = v;
             spec.set_timeout_s(timeout_s);
             absl::StatusOr<torus::rpc::PlacementGroupView> view;
             {
               py::gil_scoped_release release;
               view = torus::core::ReserveSlices(w.channels(), w.options().head_address, spec);
             }
             return GroupOrRaise(view);
           })
      .def("get_placement_group",
           [](CoreWorker& w, std::string id, int64_t wait_ms) {
             absl::StatusOr<torus::rpc::PlacementGroupView> view;
             {
               py::gil_scoped_release release;
               view = torus::core::GetGroup(w.channels(), w.options().head_address, id, wait_ms);
             }
             return GroupOrRaise(view);
           })
      .def("remove_placement_group",
           [](CoreWorker& w, std::string id) {
             absl::Status s;
             {
               py::gil_scoped_release release;
               s = torus::core::RemoveGroup(w.channels(), w.options().head_address, id);
             }
             if (!s.ok()) Raise(s);
           })
      .def("group_ready_ref",
           [](CoreWorker& w, std::string id, py::bytes ready) {
             return py::bytes(w.WhenGroupReady(id, Value{.data = std::string(ready), .format = "pickle5"}));
           })
      .def("put",
           [](CoreWorker& w, py::bytes data, std::string format, py::list buffers, py::list contained) {
             std::vector<py::buffer_info> keep;
             torus::core::ValueParts parts = PartsOf(data, format, buffers, keep);
             auto inner = Contained(contained);
             absl::StatusOr<std::string> id;
             {
               py::gil_scoped_release release;
               id = w.PutParts(parts, std::move(inner));
             }
             if (id.status().code() == absl::StatusCode::kResourceExhausted) {
               throw py::buffer_error(std::string(id.status().message()));  // the SDK raises ObjectStoreFullError
             }
             if (!id.ok()) Raise(id.status());
             return py::bytes(*id);
           },
           py::arg("data"), py::arg("format"), py::arg("buffers"), py::arg("contained") = py::list())
      .def("borrow",
           [](CoreWorker& w, const std::vector<std::pair<py::bytes, std::string>>& refs) {
             std::vector<Ref> r = Refs(refs);
             py::gil_scoped_release release;
             w.Borrow(r);
           })
      .def("get",
           [](CoreWorker& w, const std::vector<std::pair<py::bytes, std::string>>& refs, int64_t timeout_ms) {
             std::vector<Ref> r = Refs(refs);
             absl::StatusOr<std::vector<Value>> values;
             {
               py::gil_scoped_release release;
               values = w.Get(r, timeout_ms);
             }
             if (!values.ok()) Raise(values.status());
             py::list out;
             for (size_t i = 0; i < values->size(); ++i) out.append(ValueTuple(w, r[i], (*values)[i]));
             return out;
           })
      .def("wait",
           [](CoreWorker& w, const std::vector<std::pair<py::bytes, std::string>>& refs, size_t num,
              int64_t timeout_ms) {
             std::vector<Ref> r = Refs(refs);
             py::gil_scoped_release release;
             return w.Wait(r, num, timeout_ms);
           })
      .def("add_ref", [](CoreWorker& w, py::bytes id) { w.AddRef(std::string(id)); })
      .def("remove_ref", [](CoreWorker& w, py::bytes id) { w.RemoveRef(std::string(id)); })
      .def("mark_escaped", [](CoreWorker& w, py::bytes id) { w.MarkEscaped(std::string(id)); })
      .def("next_task",
           [](CoreWorker& w, int64_t timeout_ms) -> py::object {
             std::optional<torus::core::Execution> e;
             {
               py::gil_scoped_release release;
               e = w.executor().Next(timeout_ms);
             }
             if (!e) return py::none();
             py::dict d;
             d["task_id"] = py::bytes(e->spec.task_id());
             d["name"] = e->spec.name();
             d["function_id"] = py::bytes(e->spec.function_id());
             d["function"] = py::bytes(e->spec.function());
             d["args"] = ArgsList(e->spec);
             d["num_returns"] = e->spec.num_returns();
             d["attempt"] = e->spec.attempt();
             d["job_id"] = e->spec.job_id();
             d["owner_address"] = e->spec.owner_address();
             d["actor_id"] = py::bytes(e->spec.actor_id());
             d["actor_creation"] = e->spec.actor_creation();
             d["method"] = e->spec.method();
             d["retry_exception_types"] = py::bytes(e->spec.retry_exception_types());
             d["generator"] = e->spec.generator();
             std::map<std::string, double> resources;
             for (const auto& [k, v] : e->spec.resources()) resources[k] = static_cast<double>(v) / 10000.0;
             d["resources"] = resources;
             return d;
           })
      // finish_task(task_id, returns, function_unknown=False, retryable=True); retryable=False: the task's error is
      // of no type in its retry_exception_types (it is not retried).
      .def("finish_task",
           [](CoreWorker& w, py::bytes task_id, py::list returns, bool function_unknown, bool retryable) {
             const std::string id(task_id);
             std::vector<Value> values;
             uint32_t index = 0;
             for (py::handle r : returns) {
               auto t = r.cast<py::tuple>();
               std::vector<py::buffer_info> keep;
               const std::string format = t[1].cast<std::string>();
               torus::core::ValueParts parts =
                   PartsOf(t[0].cast<py::bytes>(), format, t.size() > 2 ? t[2].cast<py::list>() : py::list(), keep);
               auto inner = t.size() > 3 ? Contained(t[3]) : std::vector<std::pair<std::string, std::string>>{};
               py::gil_scoped_release release;
               values.push_back(w.StoreReturn(id, ++index, parts));
               values.back().contained = std::move(inner);
             }
             py::gil_scoped_release release;
             w.executor().Finish(id, std::move(values), function_unknown, retryable);
           },
           py::arg("task_id"), py::arg("returns"), py::arg("function_unknown") = false, py::arg("retryable") = true)
      // cancel(task_id, force, recursive=True): recursive also cancels what the task submitted (and so on).
      .def("cancel",
           [](CoreWorker& w, py::bytes task_id, bool force, bool recursive) {
             py::gil_scoped_release release;
             return w.CancelTask(std::string(task_id), force, recursive);
           },
           py::arg("task_id"), py::arg("force"), py::arg("recursive") = true)
      .def("set_cancel_handler",
           [](CoreWorker& w, py::function handler) {
             auto shared = std::make_shared<py::function>(std::move(handler));
             w.executor().SetCancelHandler([shared](const std::string& task_id) {
               py::gil_scoped_acquire acquire;
               try {
                 (*shared)(py::bytes(task_id));
               } catch (py::error_already_set& e) {
                 e.discard_as_unraisable("torus cancel handler");
               }
             });
           })
      .def("available_resources",
           [](CoreWorker& w) {
             py::gil_scoped_release release;
             return w.AvailableResources();
           })
      .def("next_output",
           [](CoreWorker& w, int64_t timeout_ms) -> py::object {
             std::optional<torus::core::OutputLine> line;
             {
               py::gil_scoped_release release;
               line = w.NextOutput(timeout_ms);
             }
             if (!line) return py::none();
             return py::make_tuple(line->source, py::bytes(line->text));
           })
      .def("counts",
           [](CoreWorker& w) {
             auto c = w.counts();
             py::dict d;
             d["submitted"] = c.submitted;
             d["finished"] = c.finished;
             d["failed"] = c.failed;
             d["retried"] = c.retried;
             d["leases_granted"] = c.leases_granted;
             d["objects"] = w.table().size();
             d["object_bytes"] = w.table().bytes();
             return d;
           })
      .def("shutdown", [](CoreWorker& w) {
        py::gil_scoped_release release;
        w.Shutdown();
      });
}
