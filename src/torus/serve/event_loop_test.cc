#include "torus/serve/event_loop.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/serve/edge_socket.h"

namespace torus::serve {
namespace event_loop_test {

using ::testing::ElementsAre;

std::unique_ptr<EventLoop> NewLoop() {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  EXPECT_TRUE(loop.ok()) << loop.status();
  return *std::move(loop);
}

TEST(EventLoopTest, TimersFireInDeadlineOrder) {
  std::unique_ptr<EventLoop> loop = NewLoop();
  std::vector<std::string> fired;
  const int64_t now = SteadyNowMs();
  Timer late(loop.get(), [&] { fired.push_back("late"); });
  Timer early(loop.get(), [&] { fired.push_back("early"); });
  Timer moved(loop.get(), [&] { fired.push_back("moved"); });
  Timer cancelled(loop.get(), [&] { fired.push_back("cancelled"); });
  Timer last(loop.get(), [&] {
    fired.push_back("last");
    loop->Quit();
  });
  late.Set(now + 30);
  early.Set(now + 10);
  moved.Set(now + 50);
  moved.Set(now + 20);  // earlier now
  cancelled.Set(now + 15);
  cancelled.Cancel();
  last.Set(now + 40);
  EXPECT_TRUE(early.armed());
  EXPECT_FALSE(cancelled.armed());
  loop->Run();
  EXPECT_THAT(fired, ElementsAre("early", "moved", "late", "last"));
  EXPECT_FALSE(early.armed());
  EXPECT_GE(SteadyNowMs(), now + 40);
}

TEST(EventLoopTest, TimerRearmedFromItsCallback) {
  std::unique_ptr<EventLoop> loop = NewLoop();
  int fired = 0;
  std::unique_ptr<Timer> timer;
  timer = std::make_unique<Timer>(loop.get(), [&] {
    if (++fired < 3) {
      timer->Set(SteadyNowMs() + 1);
    } else {
      loop->Quit();
    }
  });
  timer->Set(SteadyNowMs());
  loop->Run();
  EXPECT_EQ(fired, 3);
}

// A timer set for now from its own callback fires again only after the loop has looked for events: a busy
// connection that yields its turn lets the others in.
TEST(EventLoopTest, TimerSetForNowWaitsForTheNextRound) {
  std::unique_ptr<EventLoop> loop = NewLoop();
  int fires = 0;
  int fires_before_task = -1;
  std::unique_ptr<Timer> busy;
  busy = std::make_unique<Timer>(loop.get(), [&] {
    if (++fires == 1) loop->Post([&] { fires_before_task = fires; });
    if (fires_before_task >= 0 || fires > 100000) {
      loop->Quit();
    } else {
      busy->Set(SteadyNowMs());
    }
  });
  busy->Set(SteadyNowMs());
  loop->Run();
  EXPECT_GE(fires_before_task, 1);
  EXPECT_LE(fires_before_task, 2);
}

TEST(EventLoopTest, ManyTimersKeepTheHeapInOrder) {
  std::unique_ptr<EventLoop> loop = NewLoop();
  const int64_t now = SteadyNowMs();
  std::vector<int64_t> order;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < 50; ++i) {
    const int64_t at = now + (i * 37) % 50;  // every offset 0..49 once, shuffled
    timers.push_back(
        std::make_unique<Timer>(loop.get(), [&order, &timers, i] { order.push_back(timers[i]->at_ms()); }));
    timers.back()->Set(at);
  }
  for (int i = 0; i < 50; i += 5) timers[i]->Cancel();
  for (int i = 1; i < 50; i += 5) timers[i]->Set(timers[i]->at_ms() + 100);  // later: fire after the rest
  Timer end(loop.get(), [&] { loop->Quit(); });
  end.Set(now + 200);
  loop->Run();
  ASSERT_EQ(order.size(), 40u);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
}

TEST(EventLoopTest, PostedTasksRunOnTheLoopInOrder) {
  std::unique_ptr<EventLoop> loop = NewLoop();
  std::vector<int> ran;
  std::thread::id loop_thread;
  std::thread runner([&] {
    loop_thread = std::this_thread::get_id();
    loop->Run();
  });
  std::thread::id task_thread;
  for (int i = 0; i < 100; ++i) loop->Post([&ran, i] { ran.push_back(i); });
  loop->Post([&] {
    task_thread = std::this_thread::get_id();
    loop->Quit();
  });
  runner.join();
  ASSERT_EQ(ran.size(), 100u);
  EXPECT_TRUE(std::is_sorted(ran.begin(), ran.end()));
  EXPECT_EQ(task_thread, loop_thread);
}

// A handler that reads what arrives on its socket and counts the events it got.
class Reader : public EventLoop::Handler {
 public:
  explicit Reader(int fd) : socket(fd, true) {}
  void OnEvents(uint32_t events) override {
    ++events_seen;
    socket.OnEvents(events);
    char buf[4];  // small: an event's bytes take several reads
    while (socket.readable()) {
      const ssize_t n = socket.Read(buf, sizeof(buf));
      if (n > 0) {
        got.append(buf, static_cast<size_t>(n));
      } else {
        if (n == 0) eof = true;
        break;
      }
    }
    if (on_read) on_read();
  }
  EdgeSocket socket;
  std::string got;
  bool eof = false;
  int events_seen = 0;
  std::function<void()> on_read;
};

TEST(EventLoopTest, EdgeTriggeredSocketReadsEverythingThenTheEnd) {
  std::unique_ptr<EventLoop> loop = NewLoop();
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  auto reader = std::make_unique<Reader>(fds[0]);
  ASSERT_TRUE(loop->Add(fds[0], EPOLLIN | EPOLLRDHUP | EPOLLET, reader.get()));
  reader->on_read = [&] {
    if (reader->eof) loop->Quit();
  };
  const std::string message = "hello, edge-triggered world";
  ASSERT_EQ(::write(fds[1], message.data(), message.size()), static_cast<ssize_t>(message.size()));
  ::close(fds[1]);  // the end of the stream comes with (or right after) the bytes
  loop->Run();
  EXPECT_EQ(reader->got, message);
  EXPECT_TRUE(reader->eof);
  // Deleted at the end of the round, not at once.
  Reader* raw = reader.get();
  loop->DeleteLater(std::move(reader));
  EXPECT_EQ(raw->got, message);
}

TEST(EdgeSocketTest, WriteReportsFullSocket) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  EdgeSocket writer(fds[0], true);
  const std::string chunk(1 << 16, 'x');
  size_t written = 0;
  while (writer.writable()) {
    const ssize_t n = writer.Write(chunk);
    ASSERT_NE(n, EdgeSocket::kError);
    written += static_cast<size_t>(n);
  }
  EXPECT_GT(written, 0u);
  EXPECT_FALSE(writer.writable());
  // An event says there is room again.
  writer.OnEvents(EPOLLOUT);
  EXPECT_TRUE(writer.writable());
  ::close(fds[1]);
  EXPECT_EQ(writer.Write(chunk), EdgeSocket::kError);  // the peer is gone
}

}  // namespace event_loop_test
}  // namespace torus::serve
