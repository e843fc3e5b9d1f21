#include "torus/head/workloads/explain.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

namespace torus::head {
namespace explain_test {

// Rank r runs on host "h<r>".
Worker Rank(int rank, std::optional<WorkerExit> exit) {
  Worker w;
  w.rank = rank;
  w.node = NodeId("h" + std::to_string(rank));
  w.phase = exit ? WorkerPhase::kExited : WorkerPhase::kRunning;
  w.exit = std::move(exit);
  return w;
}
WorkerExit Code(int code, int64_t at, std::string tail = "") {
  return {.exit_code = code, .wall_ms = at, .output_tail = std::move(tail)};
}
WorkerExit Stopped(int64_t at) { return {.signal = SIGTERM, .wall_ms = at, .stopped = true}; }
WorkerExit HostSilent(const std::string& node, int64_t last_seen, int64_t declared) {
  return {.lost = true,
          .reason = "node " + node + " died: no heartbeat for 3.0 s",
          .wall_ms = declared,
          .host_loss = HostLoss::kSilent,
          .host_last_seen_ms = last_seen};
}

Explanation Explain(const std::vector<Worker>& workers, bool stop = false) {
  std::vector<const Worker*> ptrs;
  for (const Worker& w : workers) ptrs.push_back(&w);
  return ExplainAttempt(ptrs, stop);
}

TEST(ExplainAttempt, AHostLostBeforeItsPeersFailedIsTheCauseThoughDeclaredLater) {
  // Rank 2's host went silent at 1000; ranks 1 and 3 broke at 1100-1150; the host was declared dead at 4000.
  const Explanation e = Explain({Rank(0, Stopped(1200)), Rank(1, Code(1, 1100, "RuntimeError: Connection reset")),
                                 Rank(2, HostSilent("h2", 1000, 4000)), Rank(3, Code(1, 1150))});
  EXPECT_EQ(e.kind, CauseKind::kHostLost);
  EXPECT_EQ(e.text,
            "host h2 lost (no heartbeat for 3.0 s); ranks 1, 3 exited 1 after their peer died; rank 0 stopped by "
            "torus");
}

TEST(ExplainAttempt, ARankThatFailedWhileEveryHostWasHeardFromIsTheCause) {
  // Rank 1 exits 3 at 1000; rank 2's host is heard from until 2000, lost after: not the cause.
  const Explanation e =
      Explain({Rank(0, Code(1, 1050)), Rank(1, Code(3, 1000, "step 7\nValueError: bad batch\n")),
               Rank(2, HostSilent("h2", 2000, 5000))});
  EXPECT_EQ(e.kind, CauseKind::kExitCode);
  EXPECT_EQ(e.text,
            "rank 1 on h1 exited with code 3: ValueError: bad batch; rank 0 exited 1 after its peer died; rank 2 lost "
            "with host h2");
  EXPECT_EQ(e.details, "step 7\nValueError: bad batch\n");
}

TEST(ExplainAttempt, APythonExceptionIsNamedThoughALibraryPrintedAfterIt) {
  // JAX prints a note after its exception; a chained exception's last traceback is the one that ended the worker.
  const std::string tail =
      "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'x'\n\nDuring handling "
      "of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"a.py\", "
      "line 3, in <module>\n    f()\njaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: no collectives\n"
      "--------------------\nFor simplicity, JAX has removed its internal frames from the traceback.\n";
  const Explanation e = Explain({Rank(0, Code(1, 1000, tail))});
  EXPECT_EQ(e.text, "rank 0 on h0 exited with code 1: jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: no "
                    "collectives");
  // Without a traceback, the last line.
  EXPECT_EQ(Explain({Rank(0, Code(2, 1000, "step 3\nout of data\n"))}).text, "rank 0 on h0 exited with code 2: out of data");
}

TEST(ExplainAttempt, NamesTheOomKillerWithThePeakRss) {
  const Explanation e = Explain(
      {Rank(0, WorkerExit{.signal = SIGKILL, .wall_ms = 500, .oom_killed = true, .peak_rss_bytes = 3 << 29}),
       Rank(1, Code(1, 520))});
  EXPECT_EQ(e.kind, CauseKind::kOomKilled);
  EXPECT_EQ(e.text,
            "rank 0 on h0 was killed by the kernel's OOM killer (peak RSS 1.5 GiB); rank 1 exited 1 after its peer "
            "died");
}

TEST(ExplainAttempt, AKillFromOutsideIsNamedWithTheSignal) {
  const Explanation e = Explain({Rank(0, WorkerExit{.signal = SIGKILL, .wall_ms = 500}), Rank(1, Stopped(600))});
  EXPECT_EQ(e.kind, CauseKind::kSignal);
  EXPECT_EQ(e.text, "rank 0 on h0 was killed by signal 9 (SIGKILL) from outside torus; rank 1 stopped by torus");
}

TEST(ExplainAttempt, AnAcceleratorErrorOutranksAPeerThatExitedAtTheSameMoment) {
  const Explanation e =
      Explain({Rank(0, Code(1, 700)),
               Rank(1, WorkerExit{.exit_code = 1,
                                  .wall_ms = 700,
                                  .output_tail = "Traceback ...",
                                  .accelerator_error = "E1201 10:00:01.000000 7 tpu.cc:2] TPU chip 1 halted"})});
  EXPECT_EQ(e.kind, CauseKind::kAcceleratorError);
  EXPECT_EQ(e.text,
            "rank 1 on h1 exited with code 1 after an accelerator error: TPU chip 1 halted; rank 0 exited 1 after its "
            "peer died");
  EXPECT_EQ(e.details, "E1201 10:00:01.000000 7 tpu.cc:2] TPU chip 1 halted\nTraceback ...");
}

TEST(ExplainAttempt, AFailedStartAndAnOperatorsMarkAreNamed) {
  EXPECT_EQ(Explain({Rank(0, WorkerExit{.start_failed = true,
                                        .reason = "cannot execute 'nope': No such file or directory (errno 2, ENOENT)",
                                        .wall_ms = 10}),
                     Rank(1, Stopped(20))})
                .text,
            "rank 0 on h0 failed to start: cannot execute 'nope': No such file or directory (errno 2, ENOENT); rank 1 "
            "stopped by torus");
  const Explanation marked = Explain(
      {Rank(0, Code(1, 120)), Rank(1, WorkerExit{.lost = true,
                                                 .reason = "node h1 died: marked dead by an operator",
                                                 .wall_ms = 100,
                                                 .host_loss = HostLoss::kMarkedDead,
                                                 .host_last_seen_ms = 100})});
  EXPECT_EQ(marked.kind, CauseKind::kNodeMarkedDead);
  EXPECT_EQ(marked.text, "host h1 marked dead by an operator; rank 0 exited 1 after its peer died");
}

TEST(ExplainAttempt, AUsersStopIsTheCauseAndRanksStillRunningAreSaid) {
  const Explanation e = Explain({Rank(0, Stopped(10)), Rank(1, Stopped(11)), Rank(2, std::nullopt)}, true);
  EXPECT_EQ(e.kind, CauseKind::kStopRequested);
  EXPECT_EQ(e.text, "stopped by the user; ranks 0, 1 stopped by torus; rank 2 still running");
}

TEST(ExplainAttempt, NothingFailedIsNoCause) {
  EXPECT_EQ(Explain({Rank(0, Code(0, 10)), Rank(1, std::nullopt)}).kind, CauseKind::kNone);
  EXPECT_EQ(Explain({Rank(0, Stopped(10))}).kind, CauseKind::kNone);
}

TEST(ExplainAttempt, RankListsAreCompressed) {
  std::vector<Worker> workers = {Rank(0, HostSilent("h0", 100, 400))};
  for (int r = 1; r <= 5; ++r) workers.push_back(Rank(r, Code(1, 200)));
  workers.push_back(Rank(6, Stopped(300)));
  workers.push_back(Rank(7, Code(1, 200)));
  EXPECT_EQ(Explain(workers).text,
            "host h0 lost (no heartbeat for 3.0 s); ranks 1-5, 7 exited 1 after their peer died; rank 6 stopped by "
            "torus");
}

TEST(ExplainWorker, AJobsWorker) {
  Worker w = Rank(0, Code(2, 10, "usage: x\n"));
  EXPECT_EQ(ExplainWorker(w, false).text, "its process on h0 exited with code 2: usage: x");
  EXPECT_EQ(ExplainWorker(w, true).kind, CauseKind::kStopRequested);
}

TEST(HumanBytes, Units) {
  EXPECT_EQ(HumanBytes(3 << 29), "1.5 GiB");
  EXPECT_EQ(HumanBytes(300 << 20), "300.0 MiB");
  EXPECT_EQ(HumanBytes(900 << 10), "900 KiB");
}

}  // namespace explain_test
}  // namespace torus::head
