// How many workers a shape's queued tasks ask for, and from which agent: pure.
//
// A lease costs a worker on its node, and a new worker costs a process start (hundreds of milliseconds of CPU for
// Python) before its first task runs. So leases grow as TCP's window does: while tasks wait, the requests in flight
// are at most the leases held (one at first), and each grant lets more go out; and once the tasks' time is known,
// no new lease is asked for when the leases held would finish the queue before a new worker could start. Which
// agent: the candidates in order (the local one first), each up to the workers its node can hold for the shape,
// before the next; SPREAD and placement-group bundles take their turns instead.
//
// Example: 10,000 no-op tasks of 0.1 ms each on a cluster of 16 nodes with 4 CPUs each, grants taking 300 ms: one
// request to the local agent; once granted, one more (the local agent again); then two; with 4 leases the queue's
// 9,000 tasks take 225 ms, under a grant: no more. Without that, 16 requests would go out at once and start 16
// workers on four nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace torus::core {

// What a shape's queue looks like now.
struct LeaseDemand {
  int queued = 0;         // tasks waiting for a worker
  int spare = 0;          // tasks the leases held take as they finish (pipelining), without a new lease
  int held = 0;           // leases held
  int requested = 0;      // lease requests in flight
  int max_requests = 16;  // the most in flight at once
  // The recent time one of its tasks takes on a lease (its share when pipelined); nullopt until one finished.
  std::optional<double> task_ms;
  // The recent time from a lease request to its grant; 0 until one was granted.
  double grant_ms = 0;
};

// How many new lease requests to send now (>= 0).
int LeasesToRequest(const LeaseDemand& demand);

// How many workers for `want` (fixed-point amounts) a node of `total` holds at once; -1 when unbounded (it asks for
// nothing countable).
int64_t WorkersFitting(const std::map<std::string, int64_t>& want, const std::map<std::string, int64_t>& total);

// The candidate to ask next. `taken[i]`: leases held and requested at candidate i; `capacity[i]`: the workers its
// node holds for the shape (-1: unbounded). In order, the first with room; when every one is full (or `take_turns`:
// SPREAD, placement-group bundles), round robin from `turn`, which is advanced.
size_t NextCandidate(const std::vector<int64_t>& capacity, const std::vector<int>& taken, bool take_turns,
                     size_t& turn);

}  // namespace torus::core
